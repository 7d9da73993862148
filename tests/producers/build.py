"""Write tiny EAGLE-3 drafts with the producers' own code, into tests/data/producers/.

    python tests/producers/build.py            # creates /tmp/kconvert-producers-venv if needed, then builds

The producers run in a venv of this script's own (never kconvert's): specforge 0.2.0 and speculators 0.9.0 from
PyPI. What comes out (small safetensors + config.json) is shipped, with `provenance.json`: package versions, the
producer functions and commands each file came from, and the facts the producers' code states about them (read from
that code here, not from kconvert), which tests/test_producers.py checks kconvert against.

Outputs (fixed seeds, tiny shapes: hidden 64, 2 heads of 32, target 8 layers, vocab 256, draft vocab 128):
- specforge-sglang/: `specforge export --to sglang` of a SpecForge training state (LlamaForCausalLMEagle3 built by
  specforge.modeling.auto.AutoDraftModel, vocab mapping by specforge.data.preprocessing.process_token_dict_to_mappings)
- specforge-hf/: `specforge export --to hf` of the same state (embedding from the tiny target)
- speculators-from-specforge/: `speculators convert specforge-sglang --algorithm eagle3 --verifier <target>`
- specforge-sglang-ids/ and speculators-from-specforge-ids/: the same with explicit ids [2, 4, 5] in the draft
  config's eagle_config (SpecForge's configs/*-eagle3.json form), to see what the converter does with them
- speculators-from-specforge-kwargs/: that conversion with the ids passed as
  `--algorithm-kwargs '{"eagle_aux_hidden_state_layer_ids": [2, 4, 5]}'` (the converter's own way to take them)
- speculators-from-specforge-defaults/: that conversion of specforge-sglang given SpecForge's own capture defaults
  for the 8-layer target, [1, 3, 4] (resolve_eagle_capture_layers; output convention), as a user copies them from
  the training run: the converter writes them unshifted, so only the conversion's habits tell the two readings apart
(speculators writes the verifier's path into its config: a temporary folder of the build, so it differs per build.)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VENV = Path(os.environ.get("KCONVERT_PRODUCERS_VENV", "/tmp/kconvert-producers-venv"))
PINS = ["specforge==0.2.0", "speculators==0.9.0"]
OUT = Path(__file__).resolve().parents[1] / "data" / "producers"
SEED = 0
H, HEADS, HD, INTER, VOCAB, DRAFT_VOCAB, TARGET_LAYERS = 64, 2, 32, 128, 256, 128, 8


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        t = time.time()
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
        print(f"venv {VENV}: installed {' '.join(PINS)} in {time.time() - t:.0f} s")
    return py


def target_config() -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": INTER, "num_hidden_layers": TARGET_LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": HD, "vocab_size": VOCAB, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1}


def draft_config() -> dict:
    # SpecForge's own draft-config shape (its configs/llama3-8B-eagle3.json), at tiny sizes, no explicit ids
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
            "num_key_value_heads": HEADS, "head_dim": HD, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
            "pretraining_tp": 1}


EXPLICIT_IDS = [2, 4, 5]
# SpecForge 0.2.0's capture defaults for the 8-layer target, [1, L//2-1, L-4] (resolve_eagle_capture_layers; the
# build checks its code still returns them)
SPECFORGE_DEFAULT_IDS = [1, TARGET_LAYERS // 2 - 1, TARGET_LAYERS - 4]


def inside(work: Path) -> None:
    """Runs in the producers' venv."""
    from collections import Counter
    from importlib.metadata import version

    import torch
    from safetensors.torch import save_file
    from specforge.algorithms.model_providers import resolve_eagle_capture_layers
    from specforge.data.preprocessing import process_token_dict_to_mappings
    from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig
    from transformers import LlamaConfig

    torch.manual_seed(SEED)
    target = work / "target"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps(target_config(), indent=2))
    g = torch.Generator().manual_seed(SEED)
    save_file({"model.embed_tokens.weight": torch.randn(VOCAB, H, generator=g).to(torch.bfloat16)},
              str(target / "model.safetensors"), metadata={"format": "pt"})
    (work / "draft_config.json").write_text(json.dumps(draft_config(), indent=2))
    (work / "draft_config_ids.json").write_text(json.dumps({**draft_config(), "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": EXPLICIT_IDS, "use_aux_hidden_state": True}}, indent=2))

    # the vocabulary mapping the way SpecForge's preprocessing writes it, from a fixed token count
    counts = Counter({t: (VOCAB - t) * 3 + (t * 7919) % 13 for t in range(VOCAB)})
    d2t, t2d = process_token_dict_to_mappings(counts, DRAFT_VOCAB, VOCAB)
    torch.save({"d2t": d2t, "t2d": t2d}, work / "vocab_mapping.pt")
    used = sorted(t for t, _ in counts.most_common(DRAFT_VOCAB))

    cfg = AutoDraftModelConfig.from_file(str(work / "draft_config.json"))
    model = AutoDraftModel.from_config(cfg, torch_dtype=torch.bfloat16)
    model.load_vocab_mapping(str(work / "vocab_mapping.pt"))
    sd = {k: v for k, v in model.state_dict().items() if "embed" not in k.lower()}  # as SpecForge's trainer saves
    torch.save({"strategy": "eagle3", "draft_state_dict": sd}, work / "training_state.pt")

    bin_dir = Path(sys.executable).parent
    cmds = {
        "specforge-sglang": [str(bin_dir / "specforge"), "export", "--to", "sglang", "--checkpoint",
                             str(work / "training_state.pt"), "--draft-config", str(work / "draft_config.json"),
                             "--output-dir", str(work / "specforge-sglang")],
        "specforge-hf": [str(bin_dir / "specforge"), "export", "--to", "hf", "--checkpoint",
                         str(work / "training_state.pt"), "--draft-config", str(work / "draft_config.json"),
                         "--output-dir", str(work / "specforge-hf"), "--embedding-source", str(target)],
        "speculators-from-specforge": [str(bin_dir / "speculators"), "convert", str(work / "specforge-sglang"),
                                       "--algorithm", "eagle3", "--verifier", str(target), "--output-path",
                                       str(work / "speculators-from-specforge")],
        "specforge-sglang-ids": [str(bin_dir / "specforge"), "export", "--to", "sglang", "--checkpoint",
                                 str(work / "training_state.pt"), "--draft-config",
                                 str(work / "draft_config_ids.json"), "--output-dir",
                                 str(work / "specforge-sglang-ids")],
        "speculators-from-specforge-ids": [str(bin_dir / "speculators"), "convert",
                                           str(work / "specforge-sglang-ids"), "--algorithm", "eagle3",
                                           "--verifier", str(target), "--output-path",
                                           str(work / "speculators-from-specforge-ids")],
        "speculators-from-specforge-defaults": [str(bin_dir / "speculators"), "convert",
                                                str(work / "specforge-sglang"), "--algorithm", "eagle3",
                                                "--verifier", str(target), "--algorithm-kwargs",
                                                json.dumps({"eagle_aux_hidden_state_layer_ids": SPECFORGE_DEFAULT_IDS}),
                                                "--output-path", str(work / "speculators-from-specforge-defaults")],
        "speculators-from-specforge-kwargs": [str(bin_dir / "speculators"), "convert",
                                              str(work / "specforge-sglang-ids"), "--algorithm", "eagle3",
                                              "--verifier", str(target), "--algorithm-kwargs",
                                              json.dumps({"eagle_aux_hidden_state_layer_ids": EXPLICIT_IDS}),
                                              "--output-path", str(work / "speculators-from-specforge-kwargs")],
    }
    ran = {}
    for name, cmd in cmds.items():
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        ran[name] = {"command": " ".join(c.replace(str(work), "$WORK") for c in cmd), "returncode": p.returncode,
                     "seconds": round(time.time() - t, 1),
                     "stderr_tail": p.stderr.strip().splitlines()[-5:] if p.returncode else []}
        print(name, p.returncode, p.stderr[-2000:] if p.returncode else "")

    tcfg = LlamaConfig(**{k: v for k, v in target_config().items() if k != "architectures"})
    default_layers = resolve_eagle_capture_layers(type("Cfg", (), {"model": type("M", (), {
        "aux_hidden_state_layer_ids": None})()})(), draft_config(), tcfg)
    assert list(default_layers) == SPECFORGE_DEFAULT_IDS, default_layers
    import specforge.algorithms.model_providers as mp
    import specforge.data.preprocessing as pre
    import specforge.export.to_hf as to_hf
    import specforge.export.to_sglang as to_sglang

    site = Path(mp.__file__).parents[2]
    rel = lambda m: str(Path(m.__file__).relative_to(site))  # noqa: E731
    prov = {
        "packages": {p: version(p) for p in ("specforge", "speculators", "torch", "transformers", "safetensors")},
        "python": sys.version.split()[0],
        "seed": SEED,
        "target": target_config(),
        "draft_config_given_to_specforge": draft_config(),
        "explicit_ids_variant": EXPLICIT_IDS,
        "outputs": ran,
        "code": {
            "draft model": "specforge.modeling.auto.AutoDraftModel.from_config (" + rel(sys.modules[
                "specforge.modeling.auto"]) + ")",
            "vocab mapping": f"specforge.data.preprocessing.process_token_dict_to_mappings ({rel(pre)})",
            "export --to sglang": f"specforge.export.to_sglang.export_to_sglang ({rel(to_sglang)})",
            "export --to hf": f"specforge.export.to_hf.export_to_hf ({rel(to_hf)})",
            "default capture layers": f"specforge.algorithms.model_providers.resolve_eagle_capture_layers ({rel(mp)})",
        },
        "producer_facts": {
            "specforge_default_capture_layers": {
                "value": default_layers, "target_num_hidden_layers": TARGET_LAYERS,
                "code": "layers = [1, num_layers // 2 - 1, num_layers - 4] when neither the run nor the draft "
                        "config names them (resolve_eagle_capture_layers)"},
            "specforge_d2t": {"draft_ids_to_target_ids": used,
                              "code": "d2t = [used_tokens[i] - i ...] (offsets), t2d = [i in used_tokens ...] "
                                      "(process_token_dict_to_mappings)"},
            "speculators_convert_ids": {
                "code": "Eagle3Converter.convert(..., eagle_aux_hidden_state_layer_ids=None) writes the ids it is "
                        "given (--algorithm-kwargs) into the speculator config unchanged; the checkpoint's "
                        "eagle_config is not read for them (speculators/convert/eagle/eagle3_converter.py)"},
            "speculators_convert_habits": {
                "architectures": ["Eagle3Speculator"], "specforge_default_ids_passed": SPECFORGE_DEFAULT_IDS,
                "code": 'Eagle3Converter._save_converted_checkpoint builds '
                        'speculators.convert.eagle.eagle3_legacy_model.Eagle3Speculator (eagle3_converter.py:12, :195; the '
                        "class of eagle3_legacy_model.py:235), whose class name transformers' save_pretrained writes as "
                        "architectures; speculators' own trainer builds speculators.models.eagle3.core.Eagle3DraftModel. The "
                        'weights dtype is transformer_layer_config.torch_dtype (eagle3_converter.py:223-225), set from the '
                        "source's torch_dtype only (:184), so a source naming `dtype` (transformers 5) is written float32. "
                        'The ids are the --algorithm-kwargs value, unchanged (:146).'},
            "specforge_sglang_serving_keys": {"value": list(to_sglang._REQUIRED_SERVING_KEYS),
                                              "code": "_REQUIRED_SERVING_KEYS; embeddings dropped "
                                                      "('embed' not in k) in export_to_sglang"},
        },
    }
    (work / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")


def main() -> int:
    if "--inside" in sys.argv:
        inside(Path(sys.argv[sys.argv.index("--inside") + 1]))
        return 0
    py = ensure_venv()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kconvert-producers-") as tmp:
        work = Path(tmp)
        subprocess.run([str(py), __file__, "--inside", str(work)], check=True)
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        shutil.copy(work / "provenance.json", OUT / "provenance.json")
        for name in ("specforge-sglang", "specforge-hf", "speculators-from-specforge", "specforge-sglang-ids",
                     "speculators-from-specforge-ids", "speculators-from-specforge-kwargs",
                     "speculators-from-specforge-defaults"):
            if (work / name).is_dir():
                # speculators also writes config.py, a copy of its own Eagle3SpeculatorConfig source that auto_map
                # points at: library code, not draft data, so it is not shipped (auto_map stays in config.json)
                shutil.copytree(work / name, OUT / name, ignore=shutil.ignore_patterns("*.py"))
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
