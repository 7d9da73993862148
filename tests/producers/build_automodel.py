"""Write tiny EAGLE-3 drafts with NVIDIA NeMo Automodel's own training recipe, into tests/data/producers-automodel/.

    python tests/producers/build_automodel.py    # creates /tmp/kconvert-automodel-venv if needed, then builds

Automodel runs in a venv of this script's own (never kconvert's): `nemo-automodel==0.7.0 --no-deps` from PyPI plus the
pure-Python packages its recipe's imports ask for (PINS); torch 2.13 CPU and transformers 5.19 come from kconvert's
venv through a .pth file, so no CUDA wheel is pulled and torch stays (0.7.0 pins transformers==5.18.0; its recipe,
draft classes and checkpointer ran on 5.19). Two things of kconvert's venv Automodel cannot run beside, each bypassed
in the child only and recorded in provenance.json (`environment`):
- triton 3.9 (vLLM's): nemo_automodel/components/_peft/lora_kernel.py decorates a kernel at import with an autotune key
  3.9 rejects; the child hides triton (`sys.modules["triton"] = None`), which Automodel handles (HAVE_TRITON false);
- the target's loader: NeMoAutoModelForCausalLM.from_pretrained builds its parallel infrastructure on
  `cuda:current_device()` (_transformers/auto_model.py); on this CPU build the recipe gets the target from
  transformers' AutoModelForCausalLM.from_pretrained instead. Only the frozen target is loaded that way; the draft, its
  config, the vocabulary selection, training and every file written are Automodel's own code.

Each draft is one run of the recipe, `nemo_automodel.recipes.llm.train_eagle3.main(<yaml>)` (TrainEagle3Recipe: setup,
run_train_validation_loop, and its save_checkpoint at the end of the run), in a child process of its own, on CPU
(gloo, world size 1), with random target weights (the fixture is about names, config keys and ids) and a fixed tiny
chat dataset, seed 0:
- automodel-eagle3/: the tiny Llama target of tests/data/producers/provenance.json (8 layers); no aux_layer_ids,
  so Automodel's default_eagle3_aux_layer_ids(8) = [1, 3, 4] (eagle/target.py);
- automodel-eagle3-ids/: the same with recipe_args.aux_layer_ids [2, 4, 5];
- automodel-eagle3-mla/: a tiny DeepseekV3ForCausalLM target (MLA, 8 layers), so DeepseekV3Eagle3DraftModel
  (eagle/registry.py); defaults [1, 3, 4];
- automodel-eagle3-dcp/: the Llama run with checkpoint.save_consolidated false: only the sharded (DCP) safetensors
  under model/ and consolidate.sh, no model/consolidated/ (Automodel issue #2898's output);
- automodel-vllm-export/ and automodel-mla-vllm-export/: what Automodel's own vLLM helper
  (components/speculative/serve_vllm.py resolve_draft_artifacts) writes for automodel-eagle3 and automodel-eagle3-mla
  (its vllm_export/ folder, moved out of model/consolidated/).
Each run's checkpoint is epoch_1_step_8/ as the recipe wrote it, less optim/ (the optimizer's DCP state, ~0.9 MB) and,
where model/consolidated/ exists, model/shard-*.safetensors (the same tensors in the DCP layout): kconvert reads neither;
provenance.json lists what was left out. What the helper for SGLang answers is recorded, not written (it writes
nothing for the epoch folder). Automodel's offline consolidation (the function tools/offline_hf_consolidation.py calls)
is run on the DCP-only folder in the build, and what it wrote is compared with the inline export.
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

VENV = Path(os.environ.get("KCONVERT_AUTOMODEL_VENV", "/tmp/kconvert-automodel-venv"))
VERSION = "0.7.0"
# What nemo_automodel.recipes.llm.train_eagle3 imports that kconvert's venv lacks, found one ModuleNotFoundError at a
# time (all --no-deps: nothing may replace kconvert's torch); megatron-fsdp pinned as 0.7.0's metadata pins it.
PINS = ["torchao", "datasets", "pyarrow", "xxhash", "multiprocess", "pandas", "python-dateutil", "pytz", "tzdata",
        "torchdata", "megatron-fsdp==0.5.0"]
ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "producers-automodel"
# A fixed build folder: Automodel writes absolute paths into its files (config.json _name_or_path, consolidate.sh,
# config.yaml), so a fixed one keeps a rebuild byte-comparable.
WORK = Path("/tmp/kconvert-automodel-build")
SEED = 0
DRAFT_VOCAB = 128
EXPLICIT_IDS = [2, 4, 5]
STEP_DIR = "epoch_1_step_8"  # 16 rows, micro batch 2, one epoch: the end-of-run checkpoint the recipe names
DEFAULT_IDS_PROBE = (7, 8, 32, 36, 61, 62)  # below 7 the default ids repeat and Automodel refuses
# A tiny DeepSeek-V3 (MLA) target at the Llama target's widths: 8 layers, one dense layer, 4 routed experts.
MLA_TARGET = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 8, "num_attention_heads": 2,
    "num_key_value_heads": 2, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 1,
    "topk_group": 1, "first_k_dense_replace": 1, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": 256, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}
RUNS = {
    # name -> (target, recipe_args added, checkpoint keys changed)
    "automodel-eagle3": ("llama", {}, {}),
    "automodel-eagle3-ids": ("llama", {"aux_layer_ids": EXPLICIT_IDS}, {}),
    "automodel-eagle3-mla": ("deepseek", {}, {}),
    "automodel-eagle3-dcp": ("llama", {}, {"save_consolidated": False}),
}
HELPER_EXPORTS = {"automodel-vllm-export": "automodel-eagle3", "automodel-mla-vllm-export": "automodel-eagle3-mla"}


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        t = time.time()
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", f"nemo-automodel=={VERSION}", *PINS],
                       check=True)
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        import sysconfig
        Path(site, "zz_kconvert_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        print(f"venv {VENV}: installed nemo-automodel=={VERSION} {' '.join(PINS)} in {time.time() - t:.0f} s")
    return py


def llama_target() -> dict:
    return json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())["target"]


def recipe_yaml(name: str, target_dir: Path, data: Path) -> str:
    kind, extra_args, ckpt = RUNS[name]
    out = WORK / "runs" / name
    args = {"target_model_name_or_path": str(target_dir), "train_data_path": str(data), "val_data_path": None,
            "output_dir": str(out), "seq_length": 64, "micro_batch_size": 2, "grad_accumulation_steps": 1,
            "num_workers": 0, "num_epochs": 1, "ttt_steps": 2, "draft_vocab_size": DRAFT_VOCAB,
            "freeze_embeddings": True, "trust_remote_code": False, "shuffle_seed": 42, "log_every_steps": 1,
            "max_grad_norm": 1.0, **extra_args}
    cfg = {"recipe": "TrainEagle3Recipe", "dist_env": {"backend": "gloo", "timeout_minutes": 5},
           "recipe_args": args, "optimizer": {"lr": 1.0e-4, "betas": [0.9, 0.95], "weight_decay": 0.0},
           # the keys of Automodel's examples/speculative/eagle3/llama_eagle3_mvp.yaml
           "checkpoint": {"enabled": True, "checkpoint_dir": str(out / "checkpoints"), "model_save_format": "safetensors",
                          "save_consolidated": True, **ckpt}}
    import yaml

    return yaml.safe_dump(cfg, sort_keys=False)


# --------------------------------------------------------------------------------------------- in the Automodel venv


def _hide_triton() -> None:
    # kconvert's venv has triton 3.9, whose autotuner refuses nemo_automodel/components/_peft/lora_kernel.py's
    # key ["S", "M", "K"] at import; Automodel treats a missing triton as HAVE_TRITON false (LoRA is not used here).
    sys.modules["triton"] = None  # type: ignore[assignment]


def inside_targets() -> None:
    """The two targets (random weights, seed 0), a word-level tokenizer with a chat template, and the dataset."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    vocab = llama_target()["vocab_size"]
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t2", bos_token="t0", eos_token="t1",
                                     pad_token="t1")
    hf_tok.chat_template = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    for kind, cfg in (("llama", llama_target()), ("deepseek", MLA_TARGET)):
        torch.manual_seed(SEED)
        body = {k: v for k, v in cfg.items() if k != "architectures"}
        model = (LlamaForCausalLM(LlamaConfig(**body)) if kind == "llama"
                 else DeepseekV3ForCausalLM(DeepseekV3Config(**body)))
        model.save_pretrained(WORK / "targets" / kind)
        hf_tok.save_pretrained(WORK / "targets" / kind)
    # 16 conversations of words t3..t255; the assistant turns are what the recipe counts for the draft vocabulary
    rows = []
    for r in range(16):
        words = [f"t{3 + (r * 7 + j * j) % (vocab - 3)}" for j in range(40)]
        rows.append({"messages": [{"role": "user", "content": " ".join(words[:10])},
                                  {"role": "assistant", "content": " ".join(words[10:])}]})
    (WORK / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def inside_run(name: str) -> None:
    """One run of Automodel's EAGLE-3 recipe, its own main(), on CPU."""
    _hide_triton()
    import torch
    import transformers
    from nemo_automodel.recipes.llm import train_eagle3

    class CpuTargetLoader:
        """The frozen target only: NeMoAutoModelForCausalLM.from_pretrained builds its infrastructure on
        cuda:current_device() (_transformers/auto_model.py), which a CPU torch cannot name."""

        @staticmethod
        def from_pretrained(path, *, trust_remote_code=False, torch_dtype=None, force_hf=False, **kw):
            return transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                                     dtype=torch_dtype, **kw)

    train_eagle3.NeMoAutoModelForCausalLM = CpuTargetLoader
    torch.manual_seed(SEED)
    kind = RUNS[name][0]
    path = WORK / f"{name}.yaml"
    path.write_text(recipe_yaml(name, WORK / "targets" / kind, WORK / "train.jsonl"))
    sys.argv = [sys.argv[0]]  # parse_args_and_load_config reads overrides from sys.argv[1:]: none
    train_eagle3.main(str(path))


def inside_facts() -> None:
    """What Automodel's code says, asked of the code itself, and what its serve helpers do with the outputs."""
    _hide_triton()
    import inspect
    import re
    from importlib.metadata import version

    import torch
    import yaml
    from safetensors import safe_open

    from nemo_automodel.components.checkpoint import checkpointing
    from nemo_automodel.components.checkpoint._backports.consolidate_hf_safetensors import (
        consolidate_safetensors_files_on_every_rank)
    from nemo_automodel.components.speculative import serve_sglang, serve_vllm
    from nemo_automodel.components.speculative.eagle import draft_deepseek, draft_llama, registry, target
    from nemo_automodel.recipes.llm import train_eagle3

    site = Path(train_eagle3.__file__).parents[3]
    rel = lambda m: str(Path(m.__file__).relative_to(site))  # noqa: E731

    def ckpt(name: str) -> Path:
        return WORK / "runs" / name / "checkpoints" / STEP_DIR

    outputs = {}
    for name in RUNS:
        c = ckpt(name)
        meta = torch.load(c / "eagle_meta.pt", map_location="cpu", weights_only=True)  # the build's own reading
        entry = {"files": sorted(p.relative_to(c).as_posix() for p in c.rglob("*") if p.is_file()),
                 "eagle_meta": {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in meta.items()}}
        cons = c / "model" / "consolidated"
        if cons.is_dir():
            with safe_open(str(cons / "model-00001-of-00001.safetensors"), "pt") as f:
                names = sorted(f.keys())
                d2t = f.get_tensor("d2t") if "d2t" in names else None
            entry["tensors"] = names
            if d2t is not None:
                # LlamaEagle3DraftModel.set_vocab_mapping: d2t[i] = selected_token_ids[i] - i
                entry["d2t_plus_arange_equals_selected_token_ids"] = (
                    (d2t + torch.arange(d2t.numel())).tolist() == meta["selected_token_ids"].tolist())
        outputs[name] = entry

    # the DCP-only run, consolidated offline by the function tools/offline_hf_consolidation.py (which consolidate.sh
    # calls) runs: the same tensor names as the inline export
    dcp = ckpt("automodel-eagle3-dcp") / "model"
    mapping = json.loads((dcp / ".hf_metadata" / "fqn_to_file_index_mapping.json").read_text())
    offline = WORK / "offline-consolidated"
    offline.mkdir()  # tools/offline_hf_consolidation.py makes it before the call
    consolidate_safetensors_files_on_every_rank(str(dcp), str(offline), mapping, num_threads=1)
    with safe_open(str(next(offline.glob("*.safetensors"))), "pt") as f:
        offline_names = sorted(f.keys())
    outputs["automodel-eagle3-dcp"]["offline_consolidation"] = {
        "function": "consolidate_safetensors_files_on_every_rank (" + rel(checkpointing) + " imports it from "
                    "nemo_automodel/components/checkpoint/_backports/consolidate_hf_safetensors.py; "
                    "tools/offline_hf_consolidation.py of an Automodel checkout calls it)",
        "files": sorted(p.name for p in offline.iterdir()),
        "same_tensor_names_as_inline_export": offline_names == outputs["automodel-eagle3"]["tensors"]}

    # Automodel's vLLM helper: the folder it would hand vLLM, and what it writes there (in a copy of each run)
    helpers = {}
    for out_name, src in HELPER_EXPORTS.items():
        copy = WORK / "helper" / src
        shutil.copytree(ckpt(src), copy)
        served, cfg = serve_vllm.resolve_draft_artifacts(str(copy))
        exported = Path(served)
        helpers[out_name] = {
            "call": f"serve_vllm.resolve_draft_artifacts('<copy of {src}/{STEP_DIR}>')",
            "returned": exported.relative_to(copy).as_posix(),
            "config_changes": {k: v for k, v in json.loads((exported / "config.json").read_text()).items()
                               if cfg.get(k) != v}}
        shutil.copytree(exported, WORK / "helper-out" / out_name)
    # Automodel's SGLang helper on the epoch folder: it looks in model/ and the folder itself, never model/consolidated
    copy = WORK / "helper" / "sglang-automodel-eagle3"
    shutil.copytree(ckpt("automodel-eagle3"), copy)
    before = sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))
    draft_path, token_map = serve_sglang.resolve_draft_artifacts(str(copy), "EAGLE3")
    helpers["serve_sglang"] = {
        "call": f"serve_sglang.resolve_draft_artifacts('<copy of automodel-eagle3/{STEP_DIR}>', 'EAGLE3')",
        "returned": [Path(draft_path).relative_to(copy).as_posix() or ".", token_map],
        "wrote_nothing": before == sorted(p.relative_to(copy).as_posix() for p in copy.rglob("*"))}

    prov = {
        "packages": {p: version(p) for p in ("nemo-automodel", "torch", "transformers", "safetensors")},
        "python": sys.version.split()[0],
        "seed": SEED,
        "environment": {
            "device": "cpu (compute dtype float32: train_eagle3.py TrainEagle3Recipe.setup takes bfloat16 only on "
                      "cuda, so these drafts are F32 where a GPU run writes BF16)",
            "triton": "hidden in the runs (sys.modules['triton'] = None): kconvert's triton 3.9 refuses "
                      "nemo_automodel/components/_peft/lora_kernel.py's autotune key at import; Automodel then sets "
                      "HAVE_TRITON false",
            "target_loader": "transformers.AutoModelForCausalLM.from_pretrained in place of "
                             "NeMoAutoModelForCausalLM.from_pretrained, which builds on cuda:current_device(); the "
                             "draft and every file written are Automodel's own code"},
        "targets": {"llama": {"config": llama_target(),
                              "as_saved": json.loads((WORK / "targets" / "llama" / "config.json").read_text()),
                              "note": "tests/data/producers/provenance.json#target, saved by save_pretrained"},
                    "deepseek": {"config": MLA_TARGET,
                                 "as_saved": json.loads((WORK / "targets" / "deepseek" / "config.json").read_text())}},
        "recipes": {name: yaml.safe_load(recipe_yaml(name, WORK / "targets" / RUNS[name][0], WORK / "train.jsonl"))
                    for name in RUNS},
        "runs": {name: {"target": RUNS[name][0], "recipe_args_added": RUNS[name][1], "checkpoint_changed": RUNS[name][2],
                        "call": f"nemo_automodel.recipes.llm.train_eagle3.main('{name}.yaml') after torch.manual_seed(0)"}
                 for name in RUNS},
        "outputs": outputs,
        "helpers": helpers,
        "code": {
            "recipe": rel(train_eagle3) + " TrainEagle3Recipe.setup (draft config), save_checkpoint, "
                      "_save_extra_state (eagle_meta.pt)",
            "draft_llama": rel(draft_llama) + " LlamaEagle3DraftModel (self.model = Eagle3LlamaModel; top-level "
                           "lm_head, d2t, t2d), set_vocab_mapping",
            "draft_mla": rel(draft_deepseek) + " DeepseekV3Eagle3DraftModel",
            "registry": rel(registry) + " EAGLE3_DRAFT_REGISTRY",
            "aux_ids": rel(target) + " default_eagle3_aux_layer_ids, validate_eagle3_aux_layer_ids, "
                       "HFEagle3TargetModel.generate_batch (register_forward_hook on layers[i]: the layer's output)",
            "checkpointer": rel(checkpointing) + " Checkpointer.save_model (model/, model/consolidated/), "
                            "_maybe_write_offline_consolidation_script (model/consolidate.sh), save_config",
            "serve_vllm": rel(serve_vllm) + " resolve_draft_artifacts, _vllm_config_updates, _export_for_vllm",
            "serve_sglang": rel(serve_sglang) + " resolve_draft_artifacts, _maybe_export_training_checkpoint, "
                            "_find_eagle_meta, _regenerate_token_map"},
        "producer_facts": {
            "default_aux_layer_ids": {
                "by_num_layers": {str(n): target.default_eagle3_aux_layer_ids(n) for n in DEFAULT_IDS_PROBE},
                "too_shallow": {str(n): _raises(target.default_eagle3_aux_layer_ids, n) for n in (3, 4, 5, 6)},
                "code": "[1, L // 2 - 1, L - 4], refused unless 3 distinct ids within 0..L-1; "
                        "HFEagle3TargetModel hooks layers[i] and keeps its output"},
            "vllm_backend_shift": "eagle/vllm_runner.py VLLMTargetRunner._build_llm: capture ids = [i + 1 for i in "
                                  "aux_layer_ids] (+ num_hidden_layers): the same streams as the HF backend",
            "draft_architectures": {"recipe": ["LlamaEagle3DraftModel"],
                                    "serve_vllm": serve_vllm._VLLM_DRAFT_ARCHITECTURE,
                                    "serve_sglang": serve_sglang._SGLANG_ARCHITECTURE_FOR_ALGORITHM},
            "draft_classes": {a: s.draft_cls.__name__ for a, s in sorted(registry.EAGLE3_DRAFT_REGISTRY.items())},
            # the line the checkpointer logs at a final checkpoint saved without the consolidated export
            "offline_consolidation_hint": re.search(
                r'"(Final checkpoint was saved[^"]*)"\s*"([^"]*)"',
                inspect.getsource(checkpointing.Checkpointer._maybe_log_final_offline_consolidation_hint)).expand(
                    r"\1\2"),
        },
    }
    (WORK / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=False) + "\n")


def _raises(fn, *a) -> str | None:
    try:
        fn(*a)
    except ValueError as e:
        return f"ValueError: {str(e)[:80]}"
    return None


# --------------------------------------------------------------------------------------------- the build


def kept(src: Path, dest: Path, consolidated: bool) -> list[str]:
    """Copy one run's checkpoint, less what kconvert never reads (returned)."""
    left_out = []

    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder).relative_to(src)
        out = []
        for n in names:
            rel = (here / n).as_posix()
            if rel == "optim" or (consolidated and here.as_posix() == "model" and n.startswith("shard-")):
                out.append(n)
                size = sum(f.stat().st_size for f in (Path(folder) / n).rglob("*") if f.is_file()) \
                    if (Path(folder) / n).is_dir() else (Path(folder) / n).stat().st_size
                # named, not cited as a path: these files are not in the repository
                left_out.append(f"{n} ({size} bytes)" if here.as_posix() == "." else f"{n} in {here}/ ({size} bytes)")
        return out

    shutil.copytree(src, dest, ignore=ignore, symlinks=False)
    return left_out


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--inside":
        {"targets": lambda: inside_targets(), "facts": lambda: inside_facts()}.get(
            sys.argv[2], lambda: inside_run(sys.argv[2]))()
        return
    t0 = time.time()
    py = ensure_venv()
    # KCONVERT_AUTOMODEL_REUSE=1 (while editing this script): keep the build folder and the runs already in it
    reuse = os.environ.get("KCONVERT_AUTOMODEL_REUSE") == "1"
    if WORK.exists() and not reuse:
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True, exist_ok=True)
    for stale in ("helper", "helper-out", "offline-consolidated"):
        shutil.rmtree(WORK / stale, ignore_errors=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": "", "TOKENIZERS_PARALLELISM": "false"}
    timings = {}
    try:
        for step in ("targets", *RUNS, "facts"):
            done = (WORK / "targets" / "deepseek" / "config.json" if step == "targets"
                    else WORK / "runs" / step / "checkpoints" / STEP_DIR / "eagle_meta.pt")
            if reuse and step != "facts" and done.exists():
                continue
            t = time.time()
            subprocess.run([str(py), str(Path(__file__).resolve()), "--inside", step], check=True, env=env,
                           cwd=str(WORK))
            timings[step] = round(time.time() - t, 1)
        prov = json.loads((WORK / "provenance.json").read_text())
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        left_out = {}
        for name in RUNS:
            src = WORK / "runs" / name / "checkpoints" / STEP_DIR
            left_out[name] = kept(src, OUT / name / STEP_DIR, (src / "model" / "consolidated").is_dir())
        for name in HELPER_EXPORTS:
            shutil.copytree(WORK / "helper-out" / name, OUT / name)
        for kind in ("llama", "deepseek"):
            (OUT / "targets" / kind).mkdir(parents=True)
            shutil.copy(WORK / "targets" / kind / "config.json", OUT / "targets" / kind / "config.json")
        prov["left_out"] = left_out
        prov["build_seconds"] = {**timings, "total": round(time.time() - t0, 1)}
        (OUT / "provenance.json").write_text(json.dumps(prov, indent=1) + "\n")
        print("wrote", OUT, sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file()), "bytes", timings)
    finally:
        if not reuse:
            shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
