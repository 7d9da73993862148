"""Which parts of a target the engine runs from the target's repository (kconvert/engines/remote_code.py, issue #46
item 5), against vLLM 0.32's own loaders, and what verify says about it.

Replicas of the small files of Kimi-K2.5 and Kimi-K2 (config.json with its auto_map, tokenizer_config.json naming
tokenization_kimi.TikTokenTokenizer) and of a model type vLLM does not know, each beside code files that exit with
a marker if anything imports them, are loaded by vLLM's own `get_config` and `get_tokenizer` (the functions its
ModelConfig and tokenizer setup call) with trust_remote_code false and true, in one child process. kconvert must
name exactly the parts vLLM runs only with the flag.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.engines.remote_code import VLLM_OWN_CONFIG_TYPES, remote_code_parts
from kconvert.errors import EngineError
from kconvert.targets import load_target
from tests.vllm_oracle.releases import RELEASES, package_root

ROOT = Path(__file__).resolve().parents[1]
DRAFT = str(ROOT / "examples" / "tiny" / "drafts" / "mla-torchspec")
TEXT = {"num_hidden_layers": 2, "hidden_size": 64, "vocab_size": 1000, "num_attention_heads": 4, "kv_lora_rank": 16,
        "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 64}
# moonshotai/Kimi-K2.5 and Kimi-K2-Instruct: their auto_map entries (the shapes above are tiny)
KIMI_TOKENIZER = {"auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
                  "tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]"}
REPLICAS = {
    "kimi-k2.5": ({"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                   "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config",
                                "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration"},
                   "text_config": {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], **TEXT},
                   "vision_config": {}}, KIMI_TOKENIZER),
    "kimi-k2": ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                 "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                              "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}, **TEXT},
                KIMI_TOKENIZER),
    "custom-config": ({"architectures": ["LlamaForCausalLM"], "model_type": "kconvert_custom",
                       "auto_map": {"AutoConfig": "configuration_custom.CustomConfig"}, **TEXT}, None),
}
MARKER = "REMOTE CODE RAN"

CHILD = r'''
import json, sys
from vllm.transformers_utils.config import get_config
from vllm.tokenizers import get_tokenizer
out = {}
for folder in json.loads(sys.argv[1]):
    row = {}
    for trust in (False, True):
        for part, load in (("config", get_config), ("tokenizer", get_tokenizer)):
            try:
                load(folder, trust_remote_code=trust)
                row[f"{part}:{trust}"] = "ok"
            except BaseException as e:  # SystemExit: the repository's code ran
                row[f"{part}:{trust}"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    out[folder] = row
print(json.dumps(out))
'''


def _write(folder: Path, config: dict, tokenizer: dict | None) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    for refs in (config.get("auto_map", {}), (tokenizer or {}).get("auto_map", {})):
        for ref in refs.values():
            for r in ref if isinstance(ref, list) else [ref]:
                if r:
                    module = r.split(".")[0]
                    (folder / f"{module}.py").write_text(f"raise SystemExit({MARKER + ' ' + module!r})\n")


def test_kconvert_names_what_vllm_runs_only_with_trust_remote_code(tmp_path):
    folders = {}
    for name, (config, tokenizer) in REPLICAS.items():
        _write(tmp_path / name, config, tokenizer)
        folders[name] = str(tmp_path / name)
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(list(folders.values()))], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    for name, folder in folders.items():
        row = seen[folder]
        config, tokenizer = REPLICAS[name]
        owner = {ref.split(".")[0]: part for part, cfg in (("config", config), ("tokenizer", tokenizer or {}))
                 for refs in cfg.get("auto_map", {}).values() for ref in (refs if isinstance(refs, list) else [refs])
                 if ref}
        # a part needs the flag when a load fails without it and, with it, runs that part's file of the repository
        # (AutoTokenizer reads the config too: a custom config's code runs under the tokenizer's load)
        needs = {owner[row[f"{load}:True"].split(MARKER + " ")[1]] for load in ("config", "tokenizer")
                 if row[f"{load}:False"] != "ok" and MARKER in row[f"{load}:True"]}
        parts = remote_code_parts(load_target(folder))
        named = {part for part in ("config", "tokenizer") if any(p.startswith(f"its {part}") for p in parts)}
        assert named == needs, (name, row, parts)
    # Kimi: the tokenizer, never the config (vLLM registers kimi_k2 / kimi_k25: transformers_utils/config.py)
    assert seen[folders["kimi-k2.5"]]["config:False"] == "ok"


@pytest.mark.parametrize("version", RELEASES)
def test_the_model_types_vllm_configs_itself_are_registered_in_every_release(version):
    tree = ast.parse((package_root(version) / "transformers_utils" / "config.py").read_text(encoding="utf-8"))
    call = next(n.value for n in tree.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) ==
                "_CONFIG_REGISTRY")
    registered = {kw.arg for kw in call.keywords if kw.arg}
    assert VLLM_OWN_CONFIG_TYPES <= registered, sorted(VLLM_OWN_CONFIG_TYPES - registered)


def test_dry_run_on_kimi_warns_and_names_the_flag(capsys):
    from kconvert.cli import main

    capsys.readouterr()
    rc = main(["verify", DRAFT, "--target", "kimi-k2.5", "--dry-run", "--json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == doc["exit_code"]
    assert doc["dry_run"]["engine_args"]["trust_remote_code"] is False
    notes = doc["dry_run"]["remote_code"]
    assert notes and "--trust-remote-code" in notes[0] and "tokenization_kimi.TikTokenTokenizer" in notes[0]
    assert "--trust-remote-code" in out.err
    rc = main(["verify", DRAFT, "--target", "kimi-k2.5", "--dry-run", "--json", "--trust-remote-code"])
    out = capsys.readouterr()
    assert json.loads(out.out)["dry_run"]["remote_code"] == [] and "--trust-remote-code" not in out.err


def test_the_live_runs_error_names_the_flag(monkeypatch, tmp_path):
    """The engine's own error for Kimi's tokenizer without the flag (vLLM 0.32 vllm/tokenizers/hf.py, as the child above
    meets it) gets kconvert's reason beside it."""
    import kconvert.commands.verify.command as command
    from kconvert.commands.verify import VerifySettings, verify

    _write(tmp_path / "kimi", *REPLICAS["kimi-k2.5"])

    def engine_fails(req, progress=None):
        assert req.trust_remote_code is False
        raise EngineError("ValueError: Couldn't instantiate the backend tokenizer from one of: ...")

    monkeypatch.setattr(command, "run_vllm", engine_fails)
    with pytest.raises(EngineError) as e:
        verify(DRAFT, str(tmp_path / "kimi"), settings=VerifySettings(skip_static=True))
    assert "--trust-remote-code" in e.value.hint and "tokenization_kimi.TikTokenTokenizer" in e.value.hint


def test_every_built_in_profile_that_needs_remote_code_is_warned_about(capsys):
    """Enumerated from the package's profiles: a profile that says remote_code (Kimi-K2, K2.5, K2.6 ...) gets the
    warning naming the flag, one that does not gets none."""
    from kconvert.cli import main
    from kconvert.targets import load_profile, profile_names

    for name in profile_names():
        capsys.readouterr()
        main(["verify", DRAFT, "--target", name, "--dry-run", "--json"])
        out = capsys.readouterr()
        notes = json.loads(out.out)["dry_run"]["remote_code"]
        assert bool(notes) is load_profile(name).remote_code, name
        assert all("--trust-remote-code" in n for n in notes)
