"""Write tiny EAGLE-3 drafts with NVIDIA ModelOpt's own code, into tests/data/producers-modelopt/.

    python tests/producers/build_modelopt.py     # creates /tmp/kconvert-modelopt-venv if needed, then builds

ModelOpt runs in a venv of this script's own (never kconvert's): `nvidia-modelopt==0.47.0 --no-deps` from PyPI plus
the three core deps the running code imports that kconvert's venv lacks (nvidia-ml-py, omegaconf, pulp); torch 2.13
CPU and transformers come from kconvert's venv through a .pth file, so no CUDA wheel is pulled and torch stays.
(ModelOpt 0.47.0 pins transformers<5.15 in its [hf] extra and warns that 5.19 is untested; convert and export ran.)

The path is the one ModelOpt's examples/speculative_decoding takes, without training (random weights; the fixture is
about names, config keys and ids):
  1. a tiny HF LlamaForCausalLM target, the same config as tests/data/producers/provenance.json `target`, seed 0;
  2. `mtsp.convert(model, [("eagle", cfg)])` with cfg = the `eagle:` section of ModelOpt's own EAGLE-3 recipe
     (modelopt_recipes/general/speculative_decoding/eagle3.yaml) and eagle_architecture_config =
     modelopt.torch.speculative.config.eagle3_default_config (EAGLE3_DEFAULT_CFG) at tiny sizes;
  3. the draft vocab from `modelopt.torch.speculative.utils.calibrate_frequent_vocab` (what the example's
     scripts/calibrate_draft_vocab.py calls), loaded with `HFEagleModel.load_draft_vocab_cache`;
  4. `modelopt.torch.export.export_speculative_decoding(model, export_dir=...)`, the function the example's
     scripts/export_hf_checkpoint.py calls (EagleExporter.export in modelopt/torch/export/plugins/hf_spec_export.py).
Outputs:
- modelopt-eagle3/: no ids given, so ModelOpt's default_eagle_aux_layer_ids(8) = [1, 3, 4] (hf_eagle.py)
- modelopt-eagle3-ids/: eagle_aux_hidden_state_layer_ids [2, 4, 5] given in eagle_architecture_config
provenance.json beside them records versions, seed, the calls, and the facts read from ModelOpt's code here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VENV = Path(os.environ.get("KCONVERT_MODELOPT_VENV", "/tmp/kconvert-modelopt-venv"))
PINS = ["nvidia-ml-py", "omegaconf", "pulp"]
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "producers-modelopt"
SEED = 0
DRAFT_VOCAB = 128
EXPLICIT_IDS = [2, 4, 5]
# target depths whose default ids the build asks ModelOpt's own function for (small ones where the set dedupes; the
# zoo's 32, 36, 61 and 62-layer targets)
DEFAULT_IDS_PROBE = (2, 3, 4, 5, 6, 8, 32, 36, 61, 62)


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        t = time.time()
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "nvidia-modelopt==0.47.0"], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        import sysconfig
        Path(site, "zz_kconvert_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        print(f"venv {VENV}: installed nvidia-modelopt==0.47.0 {' '.join(PINS)} in {time.time() - t:.0f} s")
    return py


def target_config() -> dict:
    return json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())["target"]


def tiny_arch(cfg: dict, ids: list[int] | None) -> dict:
    """eagle3_default_config at the target's tiny sizes (the recipe's eagle_architecture_config overrides)."""
    arch = {**cfg, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
            "draft_vocab_size": DRAFT_VOCAB}
    if ids is not None:
        arch["eagle_aux_hidden_state_layer_ids"] = list(ids)
    return arch


def inside(work: Path) -> None:
    """Runs in the ModelOpt venv."""
    from importlib.metadata import version

    import modelopt.torch.speculative as mtsp
    import torch
    from modelopt.torch.export import export_speculative_decoding
    from modelopt.torch.export.plugins import hf_spec_configs, hf_spec_export
    from modelopt.torch.speculative.config import eagle3_default_config
    from modelopt.torch.speculative.plugins import hf_eagle
    from modelopt.torch.speculative.utils import calibrate_frequent_vocab
    from omegaconf import OmegaConf
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    import modelopt_recipes

    tcfg = target_config()
    recipe_path = Path(modelopt_recipes.__file__).parent / "general" / "speculative_decoding" / "eagle3.yaml"
    recipe_eagle = OmegaConf.to_container(OmegaConf.load(recipe_path)["eagle"])
    vocab = tcfg["vocab_size"]

    # a word-level tokenizer over the target's vocab, and a fixed calibration text: token t appears
    # (vocab - t) % 97 + 1 times, so the frequent ids are ModelOpt's to pick (calibrate_frequent_vocab)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0")
    hf_tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    words = [f"t{t}" for t in range(vocab) for _ in range((vocab - t) % 97 + 1)]
    conversation = [{"role": "user", "content": " ".join(words)}]
    d2t = calibrate_frequent_vocab(hf_tok, conversation, DRAFT_VOCAB)
    torch.save(d2t, work / "d2t.pt")
    used = [int(d2t[i]) + i for i in range(DRAFT_VOCAB)]

    made = {}
    for name, ids in (("modelopt-eagle3", None), ("modelopt-eagle3-ids", EXPLICIT_IDS)):
        torch.manual_seed(SEED)
        target = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in tcfg.items() if k != "architectures"}))
        target = target.to(torch.bfloat16)
        arch = tiny_arch(dict(eagle3_default_config), ids)
        cfg = {**recipe_eagle, "eagle_architecture_config": arch}
        t = time.time()
        mtsp.convert(target, [("eagle", cfg)])
        hf_eagle.HFEagleModel.load_draft_vocab_cache(target, str(work / "d2t.pt"))
        target.eval()
        with torch.inference_mode():
            export_speculative_decoding(target, export_dir=work / name)
        made[name] = {
            "calls": [
                "LlamaForCausalLM(LlamaConfig(**target)).to(torch.bfloat16) after torch.manual_seed(0)",
                "mtsp.convert(model, [('eagle', {**eagle3.yaml['eagle'], 'eagle_architecture_config': "
                "{**eagle3_default_config, **overrides}})])  # overrides: eagle_architecture_config_overrides"
                + (f" + ids {ids}" if ids else ""),
                "HFEagleModel.load_draft_vocab_cache(model, 'd2t.pt')  # d2t from calibrate_frequent_vocab",
                f"export_speculative_decoding(model, export_dir='{name}')"],
            "ids_given": ids,
            "ids_modelopt_chose": list(target.eagle_config.eagle_aux_hidden_state_layer_ids),
            "seconds": round(time.time() - t, 1)}

    site = Path(hf_eagle.__file__).parents[4]
    rel = lambda m: str(Path(m.__file__).relative_to(site))  # noqa: E731
    L = tcfg["num_hidden_layers"]
    prov = {
        "packages": {p: version(p) for p in ("nvidia-modelopt", "torch", "transformers", "safetensors")},
        "python": sys.version.split()[0],
        "seed": SEED,
        "target": "tests/data/producers/provenance.json#target (the other producers' tiny target)",
        "recipe": {"file": str(recipe_path.relative_to(site)), "eagle": recipe_eagle},
        "eagle_architecture_config_overrides": tiny_arch({}, None),
        "explicit_ids_variant": EXPLICIT_IDS,
        "outputs": made,
        "code": {
            "convert": "modelopt.torch.speculative.convert -> HFEagleModel.modify (" + rel(hf_eagle) + ")",
            "export": "modelopt.torch.export.export_speculative_decoding -> EagleExporter.export, "
                      "_extract_state_dict, _export_config (" + rel(hf_spec_export) + ")",
            "config template": "llama_eagle_template_config (" + rel(hf_spec_configs) + ")",
            "default ids": "default_eagle_aux_layer_ids (" + rel(hf_eagle) + ")",
            "d2t": "modelopt.torch.speculative.utils.calibrate_frequent_vocab (mapping[i] = idx - i)",
        },
        "producer_facts": {
            "modelopt_default_aux_layer_ids": {
                "value": hf_eagle.default_eagle_aux_layer_ids(L), "target_num_hidden_layers": L,
                "by_num_layers": {str(n): hf_eagle.default_eagle_aux_layer_ids(n) for n in DEFAULT_IDS_PROBE},
                "code": "sorted({1, max(0, L // 2 - 1), max(0, L - 4)}) when eagle_aux_hidden_state_layer_ids is "
                        "empty (HFEagleModel._set_default_aux_hidden_state_layers); modify() registers "
                        "_collect_aux_hidden_states_forward_hook on base_model.layers[i] for each id i, and the "
                        "hook keeps the layer's output"},
            "modelopt_export_names": {
                "required": sorted(hf_spec_export.LLAMA_EAGLE_SINGLE_LAYER["required"]),
                "optional": sorted(hf_spec_export.LLAMA_EAGLE_SINGLE_LAYER["optional"]),
                "code": "_extract_state_dict strips 'eagle_module.' from the state dict (EagleModule.layers -> "
                        "layers.N.*), adds the base lm_head if the draft has none; _check_valid_sd checks the names"},
            "modelopt_export_config": {
                "architectures": hf_spec_configs.llama_eagle_template_config["architectures"],
                "eagle_config_keys": sorted(hf_spec_configs.llama_eagle_template_config["eagle_config"]),
                "code": "_export_config fills llama_eagle_template_config; the ids go to "
                        "eagle_config.eagle_aux_hidden_state_layer_ids, unchanged"},
            "modelopt_d2t": {"draft_ids_to_target_ids": used,
                             "code": "calibrate_frequent_vocab: mapping[i] = most_common[i] - i (offsets)"},
        },
    }
    (work / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--inside":
        inside(Path(sys.argv[2]))
        return
    py = ensure_venv()
    work = Path(tempfile.mkdtemp(prefix="kconvert-modelopt-"))
    try:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
        subprocess.run([str(py), str(Path(__file__).resolve()), "--inside", str(work)], check=True, env=env,
                       cwd=str(work))
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        shutil.copy(work / "provenance.json", OUT / "provenance.json")
        for name in ("modelopt-eagle3", "modelopt-eagle3-ids"):
            shutil.copytree(work / name, OUT / name)
        print("wrote", OUT, sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file()), "bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
