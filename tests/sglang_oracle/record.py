"""Record what SGLang's own code does with every draft kconvert tests: tests/data/sglang_oracle.json.

    .venv/bin/python tests/sglang_oracle/record.py [--venv /tmp/kconvert-sglang-oracle] [--out PATH]

Three phases (README.md beside this file says why each is needed and how long it takes):

1. ``manifest`` (the project's Python, which has kconvert): builds every zoo replica (tests/zoo/*/build.py) in a
   temporary folder and reads, for it, for every example draft (examples/tiny/drafts/*, examples/tiny/broken/*) and
   for every draft the producers' own code wrote (tests/data/producers/*, beside the tiny target its provenance.json
   records), the config, the tensor names/dtypes/shapes (safetensors headers, kconvert's reader) and the target's family and
   layer count. Nothing of SGLang is needed here.
2. ``install``: a venv of its own with ``sglang==0.5.23 --no-deps``, torch 2.13.0 (CPU, from local disk), the
   pure-Python packages its imports ask for (at the versions sglang's own metadata pins where it pins them) and
   triton (import only: ``srt/utils/common.py`` imports it at module level; nothing here runs a kernel).
3. ``run`` (the oracle venv's Python): SGLang's draft class built on CPU, its real ``load_weights`` fed one
   tensor at a time, each target family's real ``set_eagle3_layers_to_capture``, and the speculative keys its
   tokenizer manager writes into a finished request's ``meta_info`` (tests/data/sglang_generate_0_5_23.json).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SGLANG_VERSION = "0.5.23"
TORCH = "torch==2.13.0"
# What `import sglang.srt.models.{llama_eagle3,kimi_k25_eagle3,llama,qwen2,qwen3,deepseek_v2,glm4_moe,
# glm4_moe_lite,minimax_m2,gpt_oss}`, `sglang.srt.managers.tokenizer_manager` and `sglang.test.layer_ut_utils`
# asked for, one ModuleNotFoundError at a time (sglang 0.5.23, Python 3.11). Versions: sglang's own Requires-Dist
# pin where it has one.
PACKAGES = [
    "numpy", "transformers==5.19.0", "tokenizers==0.23.2", "safetensors", "requests", "pydantic", "orjson",
    "psutil", "packaging", "aiohttp", "fastapi", "uvicorn>=0.51", "pyzmq>=25.1.2", "pybase64", "setproctitle",
    "msgspec", "einops", "tqdm", "pillow", "sentencepiece==0.2.1", "partial_json_parser", "openai==2.8.0",
    "python-multipart", "prometheus-client>=0.20.0", "ipython", "dill", "apache-tvm-ffi==0.1.11",
    "compressed-tensors==0.18.0", "gguf", "datasets", "uvloop", "triton",
]

# The two stubs. Each replaces a module that SGLang imports at module level on this CPU-only machine but never
# calls on the paths recorded here; a call would raise, so a stub can never stand in for a result.
STUBS = {
    # PyPI's torchvision wheel does not import beside a +cpu torch ("operator torchvision::nms does not exist");
    # srt/configs/__init__.py reaches it through multimodal/internvl_utils.py (`import torchvision.transforms as
    # T`, `from torchvision.transforms.functional import InterpolationMode`) and configs/deepseek_ocr.py. Only
    # the enum is read at import time.
    "torchvision/__init__.py": '"""Stub (tests/sglang_oracle/record.py): see STUBS there."""\n',
    "torchvision/transforms/__init__.py": (
        '"""Stub: InterpolationMode is read at import time by sglang; everything else raises."""\n'
        "import enum\n\n\nclass InterpolationMode(enum.Enum):\n"
        '    NEAREST = "nearest"\n    BILINEAR = "bilinear"\n    BICUBIC = "bicubic"\n\n\n'
        "def __getattr__(name):\n"
        '    raise AttributeError(f"torchvision stub: transforms.{name} is not available")\n'),
    "torchvision/transforms/functional.py": "from torchvision.transforms import InterpolationMode  # noqa: F401\n",
    # srt/layers/rotary_embedding/base.py imports vllm._custom_ops.rotary_embedding as the fallback kernel for
    # devices that are none of cuda/hip/cpu/xpu/npu/musa/mps; building a module imports it, no load path calls it.
    "vllm/__init__.py": '"""Stub (tests/sglang_oracle/record.py)."""\n',
    "vllm/_custom_ops.py": (
        "def rotary_embedding(*args, **kwargs):\n"
        '    raise RuntimeError("vllm._custom_ops stub: the oracle never runs a rotary kernel")\n'),
}


# --------------------------------------------------------------------------------------------- phase 1


if str(ROOT) not in sys.path:  # run as a script (phase 3 too): tests/shipped.py needs only the standard library
    sys.path.insert(0, str(ROOT))
from tests.shipped import PRODUCERS_TARGET  # noqa: E402  the producers' tiny target, by its recorded config


def manifest(work: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from kconvert.engines.expectations import target_family
    from kconvert.source.safetensors_header import read_header
    from kconvert.source.torch_zip import read_torch_zip

    def read_draft(folder: Path) -> dict:
        cfg = json.loads((folder / "config.json").read_text())
        tensors = {}
        for f in sorted(folder.glob("*.safetensors")):
            for name, info in read_header(f, f.name).tensors.items():
                tensors[name] = {"dtype": info.dtype, "shape": list(info.shape), "file": f.name}
        for f in sorted(folder.glob("*.bin")):  # the EAGLE reference trainer's pytorch_model.bin, read statically
            for name, info in read_torch_zip(f, f.name).tensors.items():
                tensors[name] = {"dtype": info.dtype, "shape": list(info.shape), "file": f.name}
        return {"config": cfg, "tensors": tensors, "path": str(folder)}

    def family(tref: str, t) -> dict:
        types = [x for x in (t.model_type, getattr(t, "text_model_type", None)) if x]
        return {"ref": tref, "num_layers": t.num_hidden_layers, "kconvert_family": target_family(t),
                "model_types": types}

    from kconvert.engines.serve_lines import sglang_next_lines
    from tests import shipped

    # every shipped draft (tests/shipped.py, the one list): the zoo replicas built under `work`, the drafts the
    # producers' own code wrote (tests/data/producers*, issue #20; NeMo Automodel's model/consolidated/ folders, its
    # vLLM helper's exports and kconvert fix's outputs of them) and the example drafts
    targets: dict[str, dict] = {}
    out = {"zoo": {}, "examples": {}, "producers": {}, "automodel": {}}
    for s in shipped.drafts(work):
        if s.method != "eagle3":
            continue  # another method's checkpoint (its record says so): SGLang's EAGLE-3 loaders are not its oracle
        if s.target not in targets:
            targets[s.target] = family(s.target, shipped.load_target(s.target))
        entry = read_draft(s.folder)
        # the zoo's replicas are sparse (their weights are not the published ones); every other draft is as written
        entry.update(target=targets[s.target], sparse_replica=s.group == "zoo")
        out[s.group][s.name] = entry
    # the SGLang launch lines kconvert prints for the shipped drafts (paths relative to the repository root, as a
    # user in the clone would get them), parsed by SGLang's own launcher in phase 3
    out["launch_lines"] = [
        {"draft": f"examples/tiny/drafts/{d}", "target": "examples/tiny/target", "k": k,
         "lines": sglang_next_lines(f"examples/tiny/drafts/{d}", "examples/tiny/target", k=k, tp=1)}
        for d in ("llama-specforge", "mla-torchspec") for k in (3, 5)]
    return out


# --------------------------------------------------------------------------------------------- phase 2


def install(venv: Path) -> float:
    t0 = time.perf_counter()
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    subprocess.run(pip + [TORCH], check=True)
    subprocess.run(pip + ["--no-deps", f"sglang=={SGLANG_VERSION}"], check=True)
    subprocess.run(pip + [TORCH] + PACKAGES, check=True)  # torch named again so nothing replaces the CPU build
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------- phase 3


def _oracle_imports(stub_dir: Path):
    # transformers decides once (lru_cache) whether torchvision exists; asked before the stub is on the path it
    # answers no, so its processors take the no-torchvision path, as on any machine without torchvision.
    from transformers.utils import import_utils

    assert not import_utils.is_torchvision_available()
    for rel, text in STUBS.items():
        p = stub_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    sys.path.insert(0, str(stub_dir))
    import sglang

    from sglang.test.layer_ut_utils import init_single_process_dist

    init_single_process_dist(backend="gloo")
    # every module the run uses is imported before the switch below
    import sglang.srt.models.deepseek_v2, sglang.srt.models.glm4_moe, sglang.srt.models.glm4_moe_lite  # noqa: E401,F401
    import sglang.srt.models.gpt_oss, sglang.srt.models.kimi_k25_eagle3, sglang.srt.models.llama  # noqa: E401,F401
    import sglang.srt.models.llama_eagle3, sglang.srt.models.minimax_m2, sglang.srt.models.qwen2  # noqa: E401,F401
    import sglang.srt.models.qwen3  # noqa: F401
    import sglang.srt.managers.tokenizer_manager  # noqa: F401
    # SGLang's own CPU switch (srt/utils/common.py is_cpu, an lru_cache cleared here), set only now: modules that pick
    # kernels at import time have kept the non-CPU path (the CPU one imports sgl_kernel, absent here), while
    # get_device(), which the MLA draft's DeepseekScalingRotaryEmbedding calls when it is built, answers "cpu".
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    from sglang.srt.utils import common

    common.is_cpu.cache_clear()
    return sglang


def _where(obj) -> str:
    import inspect as ins

    fn = getattr(obj, "__func__", obj)
    src = ins.getsourcefile(fn)
    line = ins.getsourcelines(fn)[1]
    return f"python/sglang/{src.split('/sglang/', 1)[1]}:{line}"


# Config keys that are sizes: divided by the same factor for a sparse replica, so every product and sum between
# them (2H, 3 x target_H, heads x head_dim, kv_lora + rope) holds at the tiny size too. Head counts, layer counts,
# ids, eps and rope settings are kept as they are.
HARNESS_DEFAULTS = {"draft_vocab_size": None, "tie_word_embeddings": False, "model_type": "llama"}
SIZE_KEYS = ("hidden_size", "target_hidden_size", "intermediate_size", "head_dim", "vocab_size", "draft_vocab_size",
             "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "moe_intermediate_size")


def _divisor(cfg: dict, tensors: dict) -> int:
    dims = [cfg[k] for k in SIZE_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0]
    dims += [d for t in tensors.values() for d in t["shape"]]
    for d in (32, 16, 8, 4, 2):
        # a rotary dimension must stay even
        rot = cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or 0
        if all(x % d == 0 for x in dims) and (not rot or (rot // d) % 2 == 0):
            return d
    return 1


def run(manifest_doc: dict, stub_dir: Path) -> dict:
    import copy

    import torch

    sglang = _oracle_imports(stub_dir)
    from sglang.srt.models import deepseek_v2, glm4_moe, glm4_moe_lite, gpt_oss, llama, minimax_m2, qwen2, qwen3
    from sglang.srt.models.kimi_k25_eagle3 import Eagle3DeepseekV2ForCausalLM
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from transformers import PretrainedConfig

    torch.manual_seed(0)
    classes = {"llama": LlamaForCausalLMEagle3, "mla": Eagle3DeepseekV2ForCausalLM}

    def draft_family(cfg: dict) -> str:
        arch = (cfg.get("architectures") or [""])[0]
        return "mla" if ("Deepseek" in arch or "kv_lora_rank" in cfg) else "llama"

    from transformers import AutoConfig

    # SGLang reads a draft's config.json with transformers' AutoConfig (srt/utils/hf_transformers_utils.py
    # get_config), so class defaults apply; a model_type transformers does not know (kimi_k2, none at all) falls
    # back to a bare PretrainedConfig here, with SGLang's own reads of draft_vocab_size / tie_word_embeddings
    # given the defaults below (HARNESS_DEFAULTS, recorded in the JSON).
    def build(family: str, cfg: dict):
        cfg = copy.deepcopy(cfg)
        model_type = cfg.pop("model_type", None)
        try:
            c = AutoConfig.for_model(model_type, **cfg)
        except Exception:  # noqa: BLE001
            # unknown model_type, or the class's own validation refusing a tiny size (hidden 224 over 64 heads:
            # a derived replica, not the draft): the class defaults under the draft's keys, unvalidated
            try:
                base = AutoConfig.for_model(model_type).to_dict()
            except Exception:  # noqa: BLE001
                base = {}
            c = PretrainedConfig(**{**base, **cfg})
            if model_type:
                c.model_type = model_type
        for k, v in HARNESS_DEFAULTS.items():
            if not hasattr(c, k):
                setattr(c, k, v)
        return classes[family](c)

    def observe(model, name: str, tensor, extra=()) -> dict:
        """Feed one tensor to the real load_weights and see what it did."""
        params = dict(model.named_parameters())
        for p in params.values():
            p.data.fill_(float("nan")) if p.is_floating_point() else None
        model.hot_token_id = None
        try:
            model.load_weights([(name, tensor), *extra])
        except Exception as exc:  # noqa: BLE001 - what raises is a result
            return {"outcome": "raises", "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        if model.hot_token_id is not None:
            return {"outcome": "renamed", "into": "hot_token_id"}
        changed = [n for n, p in params.items() if p.is_floating_point() and not torch.isnan(p.data).all()]
        if changed:
            return {"outcome": "loaded", "into": changed}
        return {"outcome": "dropped"}

    def tensor_for(info: dict, div: int, folder: str | None):
        if folder is not None and div == 1:
            from safetensors.torch import load_file

            return load_file(str(Path(folder) / info["file"]))[info["_name"]]
        shape = [max(1, s // div) for s in info["shape"]]
        if info["dtype"] in ("I64", "I32"):
            return torch.zeros(shape, dtype=torch.int64)
        if info["dtype"] == "BOOL":
            return torch.zeros(shape, dtype=torch.bool)
        return torch.randn(shape, dtype=torch.float32)

    def scaled(cfg: dict, div: int) -> dict:
        out = copy.deepcopy(cfg)
        for k in SIZE_KEYS:
            if isinstance(out.get(k), int) and out[k] > 0:
                out[k] //= div
        return out

    results: dict = {"drafts": {}}
    draft_sources = {"llama": _where(LlamaForCausalLMEagle3.load_weights),
                     "mla": _where(Eagle3DeepseekV2ForCausalLM.load_weights)}
    for group in ("zoo", "examples", "producers", "automodel"):
        for key, entry in manifest_doc.get(group, {}).items():
            cfg, tensors = entry["config"], entry["tensors"]
            fam = draft_family(cfg)
            div = _divisor(cfg, tensors) if entry["sparse_replica"] else 1
            rec: dict = {"group": group, "draft_class": classes[fam].__name__, "loader": draft_sources[fam],
                         "tiny_divisor": div, "config_keys": sorted(cfg)}
            try:
                model = build(fam, scaled(cfg, div))
            except Exception as exc:  # noqa: BLE001
                rec["build"] = {"outcome": "raises", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                if "transformer_layer_config" not in cfg:
                    results["drafts"][f"{group}/{key}"] = rec
                    continue
                # speculators' nested config as SGLang cannot read it; the tensor names are recorded on the
                # flat config kconvert fix --engine sglang writes (transformer_layer_config at top level)
                cfg = {**cfg["transformer_layer_config"],
                       **{k: v for k, v in cfg.items() if v is not None
                          and k not in ("transformer_layer_config", "speculators_config")}}
                cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": cfg.get("eagle_aux_hidden_state_layer_ids")}
                rec["tensors_on"] = "flat config (transformer_layer_config at top level)"
                try:
                    model = build(fam, scaled(cfg, div))
                except Exception as exc2:  # noqa: BLE001
                    rec["flat_build"] = {"outcome": "raises", "error": f"{type(exc2).__name__}: {str(exc2)[:300]}"}
                    results["drafts"][f"{group}/{key}"] = rec
                    continue
            rec.setdefault("build", {"outcome": "built"})
            rec["params"] = sorted(n for n, _ in model.named_parameters())
            names = {}
            src = None if entry["sparse_replica"] else entry["path"]
            for name, info in sorted(tensors.items()):
                t = tensor_for({**info, "_name": name}, div, src)
                # kimi_k25_eagle3.load_weights fuses q_a_proj with kv_a_proj_with_mqa once both have arrived:
                # the pair is fed together
                partner = (name.replace("q_a_proj", "kv_a_proj_with_mqa") if "q_a_proj" in name else
                           name.replace("kv_a_proj_with_mqa", "q_a_proj") if "kv_a_proj_with_mqa" in name else None)
                if fam == "mla" and partner in tensors:
                    pt = tensor_for({**tensors[partner], "_name": partner}, div, src)
                    names[name] = {**observe(model, name, t, extra=[(partner, pt)]), "fed_with": partner}
                else:
                    names[name] = observe(model, name, t)
            rec["tensors"] = names
            ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
            if ids is None:
                ids = cfg.get("eagle_aux_hidden_state_layer_ids")
            rec["aux_ids"] = ids
            rec["target"] = entry["target"]
            results["drafts"][f"{group}/{key}"] = rec
            del model

    # Name probes on the shipped tiny drafts (real tensors): the names other producers write, fed to the same
    # loaders. Shapes are those of the draft's own tensor of the same role.
    def probes_for(key: str, extra_cfg: dict | None = None) -> dict:
        entry = manifest_doc["examples"][key]
        cfg = {**entry["config"], **(extra_cfg or {})}
        fam = draft_family(cfg)
        model = build(fam, cfg)
        from safetensors.torch import load_file

        real = {}
        for f in {i["file"] for i in entry["tensors"].values()}:
            real.update(load_file(str(Path(entry["path"]) / f)))
        H = cfg["hidden_size"]
        th = cfg.get("target_hidden_size") or H
        layer = "midlayer." if any(n.startswith("midlayer.") for n in real) else "layers.0."
        out = {}
        out["model.-prefixed"] = {f"model.{n}": observe(model, f"model.{n}", t) for n, t in sorted(real.items())}
        other = "layers.0." if layer == "midlayer." else "midlayer."
        out[f"{other} instead of {layer}"] = {n.replace(layer, other): observe(model, n.replace(layer, other), t)
                                             for n, t in sorted(real.items()) if n.startswith(layer)
                                             and "a_proj" not in n}
        out["extra names"] = {
            "layers.1.input_layernorm.weight": observe(model, "layers.1.input_layernorm.weight", torch.ones(H)),
            "rotary_emb.inv_freq": observe(model, "rotary_emb.inv_freq", torch.ones(4)),
            "unknown.weight": observe(model, "unknown.weight", torch.ones(H)),
            "embed_tokens.weight": observe(model, "embed_tokens.weight",
                                           torch.randn(cfg.get("vocab_size") or 1, H)),
            "fc_norm.0.weight": observe(model, "fc_norm.0.weight", torch.ones(th)),
            "input_norm.weight": observe(model, "input_norm.weight", torch.ones(3 * th)),
        }
        return {"draft": f"examples/{key}", "draft_class": type(model).__name__, "config_overrides": extra_cfg or {},
                "results": out}

    def build_probe(key: str, extra_cfg: dict) -> dict:
        entry = manifest_doc["examples"][key]
        cfg = {**entry["config"], **extra_cfg}
        try:
            model = build(draft_family(cfg), cfg)
        except Exception as exc:  # noqa: BLE001
            return {"config_overrides": extra_cfg, "outcome": "raises", "error": f"{type(exc).__name__}: {exc}"[:300]}
        H = cfg["hidden_size"]
        th = cfg.get("target_hidden_size") or H
        names = {}
        if extra_cfg.get("num_hidden_layers", 1) > 1:
            names["layers.1.input_layernorm.weight"] = observe(model, "layers.1.input_layernorm.weight", torch.ones(H))
        if extra_cfg.get("fc_norm"):
            names.update({f"fc_norm.{i}.weight": observe(model, f"fc_norm.{i}.weight", torch.ones(th))
                          for i in range(3)})
        if (extra_cfg.get("eagle_config") or {}).get("norm_before_fc"):
            names["input_norm.weight"] = observe(model, "input_norm.weight", torch.ones(3 * th))
        return {"config_overrides": extra_cfg, "outcome": "built", "tensors": names}

    llama_key, mla_key = "drafts/llama-specforge", "drafts/mla-torchspec"
    def eagle_cfg(key: str, **kw) -> dict:
        return {"eagle_config": {**(manifest_doc["examples"][key]["config"].get("eagle_config") or {}), **kw}}
    results["name_probes"] = [probes_for(llama_key), probes_for(mla_key)]
    results["config_probes"] = {
        "llama multi-layer": build_probe(llama_key, {"num_hidden_layers": 2}),
        "mla multi-layer": build_probe(mla_key, {"num_hidden_layers": 2}),
        "llama fc_norm": build_probe(llama_key, {"fc_norm": True}),
        "mla fc_norm": build_probe(mla_key, {"fc_norm": True}),
        "llama norm_before_fc": build_probe(llama_key, eagle_cfg(llama_key, norm_before_fc=True)),
        "mla norm_before_fc": build_probe(mla_key, eagle_cfg(mla_key, norm_before_fc=True)),
    }

    # The targets' capture: each family's real set_eagle3_layers_to_capture, called on an object holding only
    # what the method reads (config.num_hidden_layers, pp_group, model), with every draft's ids and probes.
    from types import SimpleNamespace

    families = {
        "llama": llama.LlamaForCausalLM, "qwen2": qwen2.Qwen2ForCausalLM, "qwen3": qwen3.Qwen3ForCausalLM,
        "deepseek_v2": deepseek_v2.DeepseekV2ForCausalLM, "glm4_moe": glm4_moe.Glm4MoeForCausalLM,
        "glm4_moe_lite": glm4_moe_lite.Glm4MoeLiteForCausalLM, "minimax_m2": minimax_m2.MiniMaxM2ForCausalLM,
        "gpt_oss": gpt_oss.GptOssForCausalLM,
    }

    def capture(cls, ids, num_layers):
        obj = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=num_layers),
                              pp_group=SimpleNamespace(is_last_rank=True), model=SimpleNamespace(),
                              capture_aux_hidden_states=False)
        cls.set_eagle3_layers_to_capture(obj, None if ids is None else list(ids))
        return list(obj.model.layers_to_capture)

    probes = [(None, 61), ([1, 29, 57], 61), ([2, 30, 58], 61), ([0, 30, 58], 61), ([3, 30, 58], 61),
              ([24, 30, 36], 36), ([1, 17, 32], 36), ([2, 16, 29], 32), ([1, 15, 28], 32)]
    results["capture"] = {
        fam: {"source": _where(cls.set_eagle3_layers_to_capture),
              "probes": [{"ids": ids, "num_layers": n, "layers_to_capture": capture(cls, ids, n)}
                         for ids, n in probes]}
        for fam, cls in families.items()}
    by_kconvert_family = {"llama": "llama", "deepseek": "deepseek_v2", "gpt_oss": "gpt_oss"}
    for rec in results["drafts"].values():
        t = rec.get("target")
        if not t:
            continue
        fam = by_kconvert_family[t["kconvert_family"]]
        rec["capture"] = {"family": fam, "layers_to_capture": capture(families[fam], rec["aux_ids"], t["num_layers"])}
    import torch as _t

    results["meta_info"] = spec_meta_info()
    results["launch_lines"] = parse_launch_lines(manifest_doc["launch_lines"])
    results["harness_defaults"] = HARNESS_DEFAULTS
    results["versions"] = {"sglang": sglang.__version__, "torch": _t.__version__, "python": sys.version.split()[0]}
    return results


# What a finished request's /generate meta_info carries on a speculative server: SGLang's own
# TokenizerManager._calculate_spec_decoding_metrics, fed the per-request counters its scheduler keeps
# (batch_result_processor.py: per verify step spec_verify_ct += 1, spec_num_correct_drafts += accepted drafts,
# histogram[accepted] += 1; completion tokens = the prefill token + accepted + 1 per step), with
# speculative_num_draft_tokens set through SGLang's own config override (3 steps, topk 1: 4 draft tokens).
META_CASES = [  # the counts of tests/data/sglang_generate_eagle3.json's three answers
    {"completion_tokens": 64, "spec_verify_ct": 20, "spec_num_correct_drafts": 43,
     "spec_correct_drafts_histogram": [2, 3, 5, 10]},
    {"completion_tokens": 40, "spec_verify_ct": 16, "spec_num_correct_drafts": 23,
     "spec_correct_drafts_histogram": [3, 6, 4, 3]},
    {"completion_tokens": 1, "spec_verify_ct": 0, "spec_num_correct_drafts": 0, "spec_correct_drafts_histogram": []},
]


def spec_meta_info() -> dict:
    from types import SimpleNamespace

    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.runtime_context import get_spec

    recv = SimpleNamespace(**{k: [c[k] for c in META_CASES] for k in META_CASES[0]},
                           spec_num_cap_tokens=None, spec_cap_lens_histogram=None)
    out = []
    with get_spec().override(speculative_num_draft_tokens=4):
        for i, case in enumerate(META_CASES):
            meta: dict = {}
            TokenizerManager._calculate_spec_decoding_metrics(SimpleNamespace(), meta, recv, i)
            out.append({"scheduler_counts": case, "meta_info_added": meta})
    return {"source": _where(TokenizerManager._calculate_spec_decoding_metrics), "speculative_num_draft_tokens": 4,
            "requests": out}


LAUNCH_KEYS = ("model_path", "tp_size", "dp_size", "served_model_name", "speculative_algorithm",
               "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens")


def parse_launch_lines(entries: list) -> list:
    """Each launch line kconvert prints, through SGLang's own launcher front end: `sglang.launch_server` calls
    `prepare_server_args(sys.argv[1:])` and `resolve_once()` (launch_server.py); the resolved fields are what
    `/server_info` reports (`build_server_info`, utils/common.py)."""
    import shlex

    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.common import build_server_info

    out = []
    cwd = os.getcwd()
    os.chdir(ROOT)  # the lines carry paths relative to the clone
    try:
        for e in entries:
            launch = e["lines"][0]
            argv = shlex.split(launch)
            rec = {**e, "argv0": argv[:3], "source": _where(prepare_server_args)}
            try:
                sa = prepare_server_args(argv[3:])
                sa.resolve_once()
                info = build_server_info(sa, {})
                rec["server_info"] = {k: info.get(k) for k in LAUNCH_KEYS}
            except BaseException as exc:  # noqa: BLE001 - argparse exits with SystemExit on a bad flag
                rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.append(rec)
    finally:
        os.chdir(cwd)
    return out


def generate_bodies(doc: dict) -> list:
    """tests/data/sglang_generate_0_5_23.json: the three /generate answers of sglang_generate_eagle3.json (their
    constructed text and non-speculative meta_info keys) with the speculative keys SGLang 0.5.23's code wrote."""
    bodies = json.loads((ROOT / "tests" / "data" / "sglang_generate_eagle3.json").read_text())
    for body, rec in zip(bodies, doc["meta_info"]["requests"]):
        meta = {k: v for k, v in body["meta_info"].items() if not k.startswith("spec_")}
        assert meta["completion_tokens"] == rec["scheduler_counts"]["completion_tokens"]
        body["meta_info"] = {**meta, **rec["meta_info_added"]}
    return bodies


# --------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default="/tmp/kconvert-sglang-oracle", help="the oracle's own venv")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "sglang_oracle.json"))
    ap.add_argument("--skip-install", action="store_true", help="the venv is already set up")
    ap.add_argument("--check", action="store_true",
                    help="record into a temporary file and exit 1 if it differs from --out (what CI runs)")
    ap.add_argument("--phase", choices=("all", "run"), default="all", help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    a = ap.parse_args()
    venv = Path(a.venv)
    if a.phase == "run":
        doc = run(json.loads(Path(a.manifest).read_text()), venv / "stubs")
        Path(a.manifest + ".out").write_text(json.dumps(doc))
        return 0
    # the zoo replicas, the manifest and the run's answer: one folder, removed at the end whatever happens
    work = Path(tempfile.mkdtemp(prefix="sglang-oracle-"))
    try:
        return _record(a, venv, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _record(a: argparse.Namespace, venv: Path, work: Path) -> int:
    t0 = time.perf_counter()
    man = manifest(work)
    t_manifest = time.perf_counter() - t0
    t_install = None if a.skip_install else install(venv)
    man_path = work / "manifest.json"
    man_path.write_text(json.dumps(man))
    t1 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1")
    subprocess.run([str(venv / "bin" / "python"), __file__, "--phase", "run", "--manifest", str(man_path),
                    "--venv", str(venv)], check=True, env=env, cwd="/tmp")
    doc = json.loads(Path(str(man_path) + ".out").read_text())
    doc["recorded_by"] = "tests/sglang_oracle/record.py"
    doc["timings_s"] = {"manifest": round(t_manifest, 1), "install": None if t_install is None else round(t_install, 1),
                        "run": round(time.perf_counter() - t1, 1)}
    gen_path = Path(a.out).with_name("sglang_generate_0_5_23.json")
    bodies = generate_bodies(doc)
    # the release's learned file (the SGLang row's facts this recording settles), written from the same answers
    sys.path.insert(0, str(ROOT))
    from kconvert.engines.learned import HERE, comparable, document_sglang, file_name

    learned = document_sglang(doc)
    learned_path = HERE / file_name("sglang", learned["release"])
    if a.check:
        if not learned_path.exists() or comparable(json.loads(learned_path.read_text())) != comparable(learned):
            print(f"{learned_path} is stale: rerun tests/sglang_oracle/record.py", file=sys.stderr)
            return 1
        old = json.loads(Path(a.out).read_text())
        strip = lambda d: {k: v for k, v in d.items() if k != "timings_s"}  # noqa: E731
        if not gen_path.exists() or json.loads(gen_path.read_text()) != bodies:
            print(f"{gen_path} is stale: rerun tests/sglang_oracle/record.py", file=sys.stderr)
            return 1
        if strip(old) != strip(doc):
            keys = sorted(k for k in set(old.get("drafts", {})) | set(doc["drafts"])
                          if old.get("drafts", {}).get(k) != doc["drafts"].get(k))
            print(f"{a.out} is stale: SGLang's code now answers differently for {keys or 'the capture/probes'}; "
                  "rerun tests/sglang_oracle/record.py and review the diff", file=sys.stderr)
            return 1
        print(f"{a.out} matches SGLang {doc['versions']['sglang']}'s code ({len(doc['drafts'])} drafts; "
              f"timings {doc['timings_s']})")
        return 0
    tmp = Path(a.out + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(a.out)
    tmp = gen_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(bodies, indent=2) + "\n")
    tmp.replace(gen_path)
    print(f"wrote {gen_path}")
    learned_path.write_text(json.dumps(learned, indent=1, sort_keys=True) + "\n")
    print(f"wrote {learned_path}")
    print(f"wrote {a.out}: {len(doc['drafts'])} drafts, timings {doc['timings_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
