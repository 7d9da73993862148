"""Record what tokenspeed's own code does with every draft kconvert tests: tests/data/tokenspeed_oracle.json.

    .venv/bin/python tests/tokenspeed_oracle/record.py [--venv /tmp/kconvert-tokenspeed-oracle] [--check]

tokenspeed (lightseekorg's engine) serves on CUDA or Ascend NPU only, but the code that decides what happens to a
draft's files does not run a kernel: the draft config reader, the draft class's constructor and `load_weights`,
`set_embed_and_head`, the draft's aux-id reader and each target's `set_eagle3_layers_to_capture`. Three phases
(README.md beside this file says why each is needed, which stubs there are and how long it takes):

1. ``manifest`` (the project's Python): every shipped draft, read by tests/sglang_oracle/record.py's own
   ``manifest`` (zoo replicas, producer-written drafts, examples), plus the tokenspeed serve lines kconvert prints.
2. ``install``: a venv of its own with ``tokenspeed==0.1.1``, its kernel package's Python layer, its scheduler
   binding, torch 2.13 (CPU) and the pure-Python packages its imports ask for, all ``--no-deps`` where the wheel
   pins CUDA builds (tokenspeed-kernel pins torch 2.14 and CUDA libraries none of the recorded paths call).
3. ``run`` (the oracle venv's Python): tokenspeed's code on CPU (``TS_RUN`` below).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "tokenspeed_oracle.json"
TOKENSPEED_VERSION = "0.1.1"
TORCH = "torch==2.13.0"  # the CPU build this machine keeps on disk; tokenspeed's own wheel does not pin torch
# Installed --no-deps: each pins CUDA builds (tokenspeed-kernel: torch==2.14.0, flashinfer, cutlass-dsl, ...) that
# neither install nor run here. The kernel package's Python layer falls back to `error_fn` for every kernel whose
# vendor package is absent (tokenspeed_kernel/registry.py), so importing it loads no kernel.
NO_DEPS = [
    f"tokenspeed=={TOKENSPEED_VERSION}",
    "tokenspeed-kernel==0.1.4",            # tokenspeed 0.1.1 Requires-Dist: tokenspeed-kernel>=0.1.4
    "tokenspeed-triton==3.9.10.post20261028", "tokenspeed-proton==3.9.10.post20261008",  # kernel: >=3.8.10
    # tokenspeed 0.1.1 imports CacheGroupFamily from the scheduler binding (engine/scheduler_utils.py); 0.1.36 is
    # the newest release that has it (0.1.37 .. 0.1.42 dropped it), and the binding imports on a CPU-only host
    "tokenspeed-scheduler==0.1.36",
]
# What `import tokenspeed.runtime.models.*`, `execution.factory`, `utils.server_args`, `cli._argsplit` and
# `metrics.collector` asked for, one ModuleNotFoundError at a time (Python 3.11); transformers at tokenspeed's pin,
# apache-tvm-ffi at tokenspeed-kernel's.
PACKAGES = ["transformers==5.12.0", "apache-tvm-ffi==0.1.13.post3", "numpy", "safetensors", "psutil", "pybase64",
            "requests", "pyzmq", "pillow", "starlette", "compressed-tensors", "einops", "msgspec",
            "prometheus-client", "fastapi", "httpx"]


# --------------------------------------------------------------------------------------------- phase 1


def manifest(work: Path) -> dict:
    """tests/sglang_oracle/record.py's manifest (one list of shipped drafts for every oracle), and the tokenspeed
    serve lines kconvert prints for the two tiny example drafts."""
    spec = importlib.util.spec_from_file_location("sglang_oracle_record", ROOT / "tests" / "sglang_oracle" / "record.py")
    sg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sg)
    man = sg.manifest(work)
    # and what `kconvert fix --engine tokenspeed` writes from NeMo Automodel's epoch folders (the other engines'
    # fixed outputs are in the manifest already, tests/producers/automodel_drafts.py)
    from kconvert.commands.fix import fix
    from tests.producers import automodel_drafts as am

    for name in am.FIXED_FROM:
        out = work / "fixed-tokenspeed" / name
        folder = am.DATA / am.WRITTEN[name][0].split("/model/")[0]
        tref = am.TARGETS[am.WRITTEN[name][1]]
        fix(str(folder), out, target=str(ROOT / tref), engine="tokenspeed", engine_version="0.1.1", durable=False)
        entry = sg_read(sg, out)
        entry.update(target=man["automodel"][name]["target"], sparse_replica=False)
        man["automodel"][f"fixed-tokenspeed/{name}"] = entry
    from kconvert.engines.serve_lines import tokenspeed_next_lines

    man["launch_lines"] = [
        {"draft": f"examples/tiny/drafts/{d}", "target": "examples/tiny/target", "k": k,
         "lines": tokenspeed_next_lines(f"examples/tiny/drafts/{d}", "examples/tiny/target", k=k, tp=1)}
        for d in ("llama-specforge", "mla-torchspec") for k in (3, 5)]
    return man


def sg_read(sg, folder: Path) -> dict:
    """A draft folder as the SGLang recorder's manifest reads it (config, tensor names/dtypes/shapes, path)."""
    cfg = json.loads((folder / "config.json").read_text())
    from kconvert.source.safetensors_header import read_header

    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        for name, info in read_header(f, f.name).tensors.items():
            tensors[name] = {"dtype": info.dtype, "shape": list(info.shape), "file": f.name}
    return {"config": cfg, "tensors": tensors, "path": str(folder)}


# --------------------------------------------------------------------------------------------- phase 2


def install(venv: Path) -> float:
    t0 = time.perf_counter()
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    subprocess.run(pip + [TORCH], check=True)
    subprocess.run(pip + ["--no-deps"] + NO_DEPS, check=True)
    subprocess.run(pip + [TORCH] + PACKAGES, check=True)  # torch named again so nothing replaces the CPU build
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------- phase 3


def _stubs():
    """The stubs tokenspeed's imports need on a host without a GPU. Neither can stand in for a result: each
    raises if a recorded path reached what it replaces.

    - The platform: ``tokenspeed_kernel.platform.current_platform()`` raises "requires an NVIDIA CUDA, AMD ROCm,
      or Ascend NPU device" (``_detect_platform``) and is called at import time by the kernel modules. The
      package's own test hook ``Platform.override`` (platform.py: "for testing/debugging") is given a platform
      of vendor ``cpu``: every ``is_nvidia`` / ``is_amd`` / ``is_npu`` branch is skipped, so no vendor library
      is imported and each kernel stays the registry's ``error_fn``. platform.py is loaded by file before the
      package, whose ``__init__`` reaches the detection first.
    - Triton's active driver: ``ops/attention/gdn/_triton/utils.py`` asks
      ``triton.runtime.driver.active.get_current_target()`` at import time (0 active drivers here). The stub
      answers a CUDA target for that one question and raises on anything else.
    """
    import site

    sp = Path(site.getsitepackages()[0])
    spec = importlib.util.spec_from_file_location("tokenspeed_kernel.platform", sp / "tokenspeed_kernel" / "platform.py")
    plat = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = plat
    spec.loader.exec_module(plat)
    plat.Platform.override(plat.PlatformInfo(
        vendor="cpu", arch_version=plat.ArchVersion(0, 0), device_name="cpu (kconvert oracle)", device_count=1,
        total_memory=0, memory_bandwidth=0.0, sm_count=0, max_threads_per_sm=0, max_shared_memory_per_sm=0))
    import tokenspeed_triton.runtime as triton_runtime
    from tokenspeed_triton.backends.compiler import GPUTarget

    class ImportTimeDriver:
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def __getattr__(self, name):
            raise RuntimeError(f"kconvert oracle: no Triton driver on this CPU ({name})")

    triton_runtime.driver.set_active(ImportTimeDriver())
    # set_embed_and_head ends with torch.cuda.empty_cache() / synchronize() after the weights are bound; the CPU
    # build raises there ("Torch not compiled with CUDA enabled"). Recorded after the binding, so these two are
    # no-ops for the call (nothing else here touches CUDA).
    import torch

    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    # The MLA draft's yarn rope (layers/rotary_embedding.py DeepseekScalingRotaryEmbedding) builds its cos/sin table
    # on `device`, default "cuda", which get_rope does not pass; its ramp runs on --yarn-ramp-mask-device (default
    # "cuda", tokenspeed's own choice "cpu" exists). Both are given "cpu": the table is built, never read here.
    import functools

    from tokenspeed.runtime.layers import rotary_embedding
    from tokenspeed.runtime.utils.env import global_server_args_dict

    global_server_args_dict["yarn_ramp_mask_device"] = "cpu"
    cls = rotary_embedding.DeepseekScalingRotaryEmbedding
    cls.__init__ = functools.partialmethod(cls.__init__, device="cpu")


def _where(obj) -> str:
    import inspect as ins

    fn = ins.unwrap(getattr(obj, "__func__", obj))
    src = ins.getsourcefile(fn)
    line = ins.getsourcelines(fn)[1]
    return f"{src.split('/site-packages/', 1)[-1]}:{line}"


SIZE_KEYS = ("hidden_size", "target_hidden_size", "intermediate_size", "head_dim", "vocab_size", "draft_vocab_size",
             "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
             "moe_intermediate_size")
HEAD_COUNTS = ("num_attention_heads", "num_key_value_heads")


def _mla(cfg: dict) -> bool:
    return "kv_lora_rank" in cfg


def _divisor(cfg: dict, tensors: dict) -> int:
    """One factor that divides every size key and tensor dimension of a sparse replica (tests/sglang_oracle's
    rule). tokenspeed reads the config through transformers' own class, which refuses a hidden size that is not a
    multiple of the head count (LlamaConfig validate_architecture): a Llama-layer replica is therefore shrunk by
    dividing its head counts and keeping its head_dim (every projection's rows shrink by the same factor), so the
    factor must divide the head counts too. An MLA replica keeps its heads and shrinks its per-head sizes."""
    dims = [cfg[k] for k in SIZE_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0
            and (_mla(cfg) or k != "head_dim")]
    dims += [d for t in tensors.values() for d in t["shape"]]
    if not _mla(cfg):
        dims += [cfg[k] for k in HEAD_COUNTS if isinstance(cfg.get(k), int)]
    for d in (32, 16, 8, 4, 2):
        rot = (cfg.get("qk_rope_head_dim") or 0) if _mla(cfg) else 0
        if all(x % d == 0 for x in dims) and (not rot or (rot // d) % 2 == 0):
            return d
    return 1


def scaled(cfg: dict, div: int) -> dict:
    import copy

    out = copy.deepcopy(cfg)
    if div == 1:
        return out
    if not _mla(out):
        if not out.get("head_dim") and out.get("num_attention_heads"):
            out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
        for k in HEAD_COUNTS:
            if isinstance(out.get(k), int):
                out[k] //= div
    for k in SIZE_KEYS:
        if isinstance(out.get(k), int) and out[k] > 0 and (_mla(out) or k != "head_dim"):
            out[k] //= div
    return out


# Configs given to tokenspeed's aux-id reader (execution/factory.py _eagle_aux_layer_ids): which key wins.
AUX_PROBE_CONFIGS = {
    "top level only": {"eagle_aux_hidden_state_layer_ids": [1, 5, 9]},
    "eagle_config only": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 6, 10]}},
    "both": {"eagle_aux_hidden_state_layer_ids": [1, 5, 9], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 6, 10]}},
    "eagle_config without ids, top-level ids": {"eagle_aux_hidden_state_layer_ids": [1, 5, 9],
                                                "eagle_config": {"use_aux_hidden_state": True}},
    "neither": {},
    "text_config eagle_config": {"text_config": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 7, 11]}}},
}

ERR_TMP = re.compile(r"/tmp/ts-oracle-[^/\s]+/cfg")


def _err(exc: BaseException) -> str:
    # the config folder this run wrote is named for what it stands for
    return f"{type(exc).__name__}: {ERR_TMP.sub('<draft folder>', str(exc))[:300]}"


def run(man: dict) -> dict:  # noqa: C901 - one recording, read top to bottom
    import copy
    import inspect
    import logging

    logging.disable(logging.WARNING)
    _stubs()
    import torch

    import tokenspeed
    from tokenspeed.runtime.distributed.mapping import Mapping
    from tokenspeed.runtime.execution import factory
    from tokenspeed.runtime.models.registry import ModelRegistry
    from tokenspeed.runtime.utils.hf_transformers_utils import get_config
    from tokenspeed.runtime.models.llama_eagle3 import LlamaForCausalLMEagle3
    from tokenspeed.runtime.models.deepseek_v3 import Eagle3DeepseekV2ForCausalLM

    torch.manual_seed(0)
    results: dict = {"drafts": {}}
    eagle3_classes = {"LlamaForCausalLMEagle3": LlamaForCausalLMEagle3,
                      "Eagle3DeepseekV2ForCausalLM": Eagle3DeepseekV2ForCausalLM}
    results["draft_classes"] = {name: {"loader": _where(cls.load_weights), "init": _where(cls.__init__),
                                       "set_embed_and_head": _where(cls.set_embed_and_head)}
                                for name, cls in eagle3_classes.items()}
    results["sources"] = {"get_config": _where(get_config), "aux_ids": _where(factory._eagle_aux_layer_ids),
                          "share_embed": _where(factory._share_target_embed_and_head),
                          "configure_draft_target": _where(factory.configure_draft_target)}
    tmp = Path(tempfile.mkdtemp(prefix="ts-oracle-"))

    def draft_config(cfg: dict):
        """tokenspeed's own reading of a draft's config.json (hf_transformers_utils.get_config, as the draft
        worker calls it with --speculative-algorithm EAGLE3): transformers' class for its model_type, then the
        draft-worker rename of architectures[0] (a name without Eagle/NextN/MTP/DFlash/DSpark gets NextN)."""
        folder = tmp / "cfg"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
        return get_config(str(folder), trust_remote_code=False, is_draft_worker=True, speculative_algorithm="EAGLE3")

    def observe(model, name: str, tensor, extra=()) -> dict:
        params = dict(model.named_parameters())
        for p in params.values():
            if p.is_floating_point():
                p.data.fill_(float("nan"))
        model.hot_token_id = None
        before = getattr(model, "load_lm_head_from_target", None)
        try:
            model.load_weights([(name, tensor), *extra])
        except Exception as exc:  # noqa: BLE001 - what raises is a result
            return {"outcome": "raises", "error": _err(exc)}
        out: dict
        if model.hot_token_id is not None:
            out = {"outcome": "renamed", "into": "hot_token_id",
                   "hot_token_id_is_index_plus_value": bool(torch.equal(
                       model.hot_token_id, tensor + torch.arange(tensor.shape[0])))}
        else:
            changed = sorted(n for n, p in params.items() if p.is_floating_point() and not torch.isnan(p.data).all())
            out = {"outcome": "loaded", "into": changed} if changed else {"outcome": "dropped"}
        after = getattr(model, "load_lm_head_from_target", None)
        if before is not None and after != before:
            out["load_lm_head_from_target"] = after
            model.load_lm_head_from_target = before
        return out

    def tensor_for(info: dict, div: int, folder: str | None):
        if folder is not None and div == 1:
            from safetensors.torch import load_file

            if info["file"].endswith(".safetensors"):
                return load_file(str(Path(folder) / info["file"]))[info["_name"]]
        shape = [max(1, s // div) for s in info["shape"]]
        if info["dtype"] in ("I64", "I32"):
            return torch.zeros(shape, dtype=torch.int64)
        if info["dtype"] == "BOOL":
            return torch.zeros(shape, dtype=torch.bool)
        return torch.randn(shape, dtype=torch.float32)

    def embed_sharing(model, hf, target_vocab: int) -> dict:
        """factory._share_target_embed_and_head's last step, the draft's own set_embed_and_head, given a target
        embedding and head of the draft's width (the target's vocabulary, as a real target has)."""
        own = model.model.embed_tokens.weight
        # a target of the draft's vocabulary and width builds the same (padded) embedding as the draft
        embed = torch.full(tuple(own.shape), 7.0)
        head = torch.full(tuple(model.lm_head.weight.shape if target_vocab is None else own.shape), 9.0)
        try:
            model.set_embed_and_head(embed, head)
        except Exception as exc:  # noqa: BLE001
            return {"outcome": "raises", "error": _err(exc)}
        return {"embed": "target" if model.model.embed_tokens.weight is embed else
                "draft" if model.model.embed_tokens.weight is own else "other",
                "lm_head": "target" if model.lm_head.weight is head else "draft"}

    for group in ("zoo", "examples", "producers", "automodel"):
        for key, entry in man.get(group, {}).items():
            cfg, tensors = entry["config"], entry["tensors"]
            div = _divisor(cfg, tensors) if entry["sparse_replica"] else 1
            rec: dict = {"group": group, "tiny_divisor": div, "config_keys": sorted(cfg), "target": entry["target"],
                         "aux_config": {k: cfg[k] for k in ("eagle_config", "eagle_aux_hidden_state_layer_ids")
                                        if k in cfg}}
            results["drafts"][f"{group}/{key}"] = rec
            try:
                hf = draft_config(scaled(cfg, div))
            except Exception as exc:  # noqa: BLE001
                rec["config"] = {"outcome": "raises", "error": _err(exc)}
                continue
            rec["architectures"] = list(hf.architectures or [])
            # the ids the target is told to capture (factory.configure_draft_target, no --eagle3-layers-to-capture)
            rec["aux_ids"] = factory._eagle_aux_layer_ids(hf)
            try:
                cls, arch = ModelRegistry.resolve_model_cls(hf.architectures)
            except Exception as exc:  # noqa: BLE001
                rec["resolve"] = {"outcome": "raises", "error": _err(exc)}
                continue
            rec["draft_class"] = cls.__name__
            if cls.__name__ not in eagle3_classes:
                rec["resolve"] = {"outcome": "not an EAGLE-3 draft class", "class": cls.__name__}
                continue
            try:
                model = cls(hf, Mapping(rank=0, world_size=1))
            except Exception as exc:  # noqa: BLE001
                rec["build"] = {"outcome": "raises", "error": _err(exc)}
                continue
            rec["build"] = {"outcome": "built", "num_fc_input_dim": model.model.num_fc_input_dim,
                            "fc_in_features": int(model.model.fc.weight.shape[1]),
                            "load_lm_head_from_target": bool(model.load_lm_head_from_target)}
            rec["params"] = sorted(n for n, _ in model.named_parameters())
            names = {}
            src = None if entry["sparse_replica"] else entry["path"]
            for name, info in sorted(tensors.items()):
                t = tensor_for({**info, "_name": name}, div, src)
                names[name] = observe(model, name, t)
                if names[name]["outcome"] == "raises":
                    continue
            rec["tensors"] = names
            rec["embed_sharing"] = embed_sharing(model, hf, hf.vocab_size)
            del model

    # Name and config probes on the two tiny example drafts (real tensors).
    def probes_for(key: str, overrides: dict) -> dict:
        entry = man["examples"][key]
        hf = draft_config({**entry["config"], **overrides})
        cls, _ = ModelRegistry.resolve_model_cls(hf.architectures)
        model = cls(hf, Mapping(rank=0, world_size=1))
        from safetensors.torch import load_file

        real = {}
        for f in {i["file"] for i in entry["tensors"].values()}:
            real.update(load_file(str(Path(entry["path"]) / f)))
        H = hf.hidden_size
        layer = "midlayer." if any(n.startswith("midlayer.") for n in real) else "layers.0."
        other = "layers.0." if layer == "midlayer." else "midlayer."
        out = {"model.-prefixed": {f"model.{n}": observe(model, f"model.{n}", t) for n, t in sorted(real.items())},
               f"{other} instead of {layer}": {n.replace(layer, other): observe(model, n.replace(layer, other), t)
                                               for n, t in sorted(real.items()) if n.startswith(layer)},
               "extra names": {
                   "layers.1.input_layernorm.weight": observe(model, "layers.1.input_layernorm.weight", torch.ones(H)),
                   "rotary_emb.inv_freq": observe(model, "rotary_emb.inv_freq", torch.ones(4)),
                   "unknown.weight": observe(model, "unknown.weight", torch.ones(H)),
                   "fc_norm.0.weight": observe(model, "fc_norm.0.weight", torch.ones(H)),
                   "input_norm.weight": observe(model, "input_norm.weight", torch.ones(3 * H))}}
        return {"draft": f"examples/{key}", "draft_class": cls.__name__, "config_overrides": overrides,
                "results": out}

    def build_probe(key: str, overrides: dict) -> dict:
        cfg = {**man["examples"][key]["config"], **FAMILY_ARCH.get(key, {}), **overrides}
        try:
            hf = draft_config(cfg)
            cls, _ = ModelRegistry.resolve_model_cls(hf.architectures)
            model = cls(hf, Mapping(rank=0, world_size=1))
        except Exception as exc:  # noqa: BLE001
            return {"config_overrides": overrides, "outcome": "raises", "error": _err(exc)}
        H = hf.hidden_size
        n_aux = model.model.num_fc_input_dim
        names = {}
        if overrides.get("fc_norm"):
            names.update({f"fc_norm.{i}.weight": observe(model, f"fc_norm.{i}.weight", torch.ones(H))
                          for i in range(n_aux)})
        if overrides.get("norm_before_fc") or (overrides.get("eagle_config") or {}).get("norm_before_fc"):
            names["input_norm.weight"] = observe(model, "input_norm.weight", torch.ones(n_aux * H))
        return {"config_overrides": overrides, "outcome": "built", "draft_class": cls.__name__,
                "num_fc_input_dim": n_aux, "fc_in_features": int(model.model.fc.weight.shape[1]),
                "norm_output": bool(getattr(model.model, "norm_output", False)),
                "load_lm_head_from_target": bool(model.load_lm_head_from_target), "tensors": names}

    llama_key, mla_key = "drafts/llama-specforge", "drafts/mla-torchspec"
    # mla-torchspec writes Eagle3DeepseekV3ForCausalLM, which tokenspeed does not register (recorded under
    # drafts/ and by the architecture probes); its probes run on the MLA class tokenspeed does register
    FAMILY_ARCH = {mla_key: {"architectures": ["Eagle3DeepseekV2ForCausalLM"]}}

    def eagle_cfg(key: str, **kw) -> dict:
        return {"eagle_config": {**(man["examples"][key]["config"].get("eagle_config") or {}), **kw}}

    results["name_probes"] = [probes_for(llama_key, {}), probes_for(mla_key, FAMILY_ARCH[mla_key])]
    cp = {}
    for fam, key in (("llama", llama_key), ("mla", mla_key)):
        ids = (man["examples"][key]["config"].get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        cp.update({
            f"{fam} multi-layer": build_probe(key, {"num_hidden_layers": 2}),
            f"{fam} fc_norm": build_probe(key, {"fc_norm": True}),
            f"{fam} norm_before_fc": build_probe(key, {"norm_before_fc": True}),
            f"{fam} norm_output": build_probe(key, {"norm_output": True}),
            f"{fam} four ids in eagle_config": build_probe(key, eagle_cfg(key, eagle_aux_hidden_state_layer_ids=[1, 2, 3, 4])),
            f"{fam} four ids at top level": build_probe(key, {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4]}),
            f"{fam} no draft_vocab_size": build_probe(key, {"draft_vocab_size": None}),
            f"{fam} tied embeddings": build_probe(key, {"tie_word_embeddings": True}),
            f"{fam} architecture Eagle3LlamaForCausalLM": build_probe(key, {"architectures": ["Eagle3LlamaForCausalLM"]}),
            f"{fam} architecture LlamaForCausalLM": build_probe(key, {"architectures": ["LlamaForCausalLM"]}),
            f"{fam} architecture Eagle3DeepseekV3ForCausalLM": build_probe(key, {"architectures": ["Eagle3DeepseekV3ForCausalLM"]}),
        })
        del ids
    results["config_probes"] = cp
    # which key the aux-id reader takes (factory._eagle_aux_layer_ids): probes of the two keys
    results["aux_id_probes"] = {k: factory._eagle_aux_layer_ids(v) for k, v in AUX_PROBE_CONFIGS.items()}

    # The targets' capture: each family's real set_eagle3_layers_to_capture on an object holding what it reads,
    # and whether the family's model forward collects layers_to_capture at all (its source, read here).
    from types import SimpleNamespace

    from tokenspeed.runtime.models import (deepseek_v3, deepseek_v41, glm53_flash, gpt_oss, kimi_k3, llama,
                                           minimax_m3, qwen2, qwen3, qwen3_moe)
    from tokenspeed.runtime.models.base import transformer_model

    families = {"llama": llama.LlamaForCausalLM, "qwen2": qwen2.Qwen2ForCausalLM, "qwen3": qwen3.Qwen3ForCausalLM,
                "qwen3_moe": qwen3_moe.Qwen3MoeForCausalLM, "gpt_oss": gpt_oss.GptOssForCausalLM,
                "minimax_m3": minimax_m3.MiniMaxM3SparseForCausalLM, "deepseek_v3": deepseek_v3.DeepseekV3ForCausalLM,
                "kimi_k3": kimi_k3.KimiLinearForCausalLM,
                # the target families kconvert/targets/families.py says an EAGLE-3 draft cannot serve as written
                "glm53_flash": glm53_flash.Glm53FlashForCausalLM, "deepseek_v41": deepseek_v41.DeepseekV41ForCausalLM}

    def capture(cls, ids, num_layers):
        layers = [None] * num_layers
        obj = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=num_layers),
                              model=SimpleNamespace(layers=layers), capture_aux_hidden_states=False)
        try:
            cls.set_eagle3_layers_to_capture(obj, None if ids is None else list(ids))
        except Exception as exc:  # noqa: BLE001
            return {"raises": _err(exc)}
        m = obj.model
        sel = getattr(m, "eagle3_layers_to_capture", None)
        if sel is not None:
            return {"eagle3_layers_to_capture": list(sel)}
        return {"layers_to_capture": sorted(m.layers_to_capture)}

    def forward_facts(cls) -> dict:
        model_cls = getattr(cls, "model_cls", None) or getattr(cls, "_model_cls", None)
        if cls is kimi_k3.KimiLinearForCausalLM:
            model_cls = kimi_k3.KimiLinearModel
        fwd = model_cls.forward
        src = inspect.getsource(fwd)
        return {"model_forward": _where(fwd),
                "collects_layers_to_capture": "layers_to_capture" in src,
                # BaseTransformerModel.forward: an index of len(layers) + 1 selects the final norm's residual
                "final_residual_index": "len(self.layers) + 1 in self.layers_to_capture" in src}

    probes = [(None, 61), ([1, 29, 57], 61), ([2, 30, 58], 61), ([0, 30, 58], 61), ([1, 30, 59], 61),
              ([1, 30, 60], 61), ([1, 30, 61], 61), ([24, 30, 35], 36), ([1, 17, 33], 36), ([2, 16, 29], 32),
              ([1, 15, 31], 32), ([1, 15, 32], 32), ([3, 2, 1], 32)]
    results["capture"] = {
        fam: {"source": _where(cls.set_eagle3_layers_to_capture), **forward_facts(cls),
              "probes": [{"ids": ids, "num_layers": n, **capture(cls, ids, n)} for ids, n in probes]}
        for fam, cls in families.items()}
    results["capture_sources"] = {"base_transformer_forward": _where(transformer_model.BaseTransformerModel.forward)}
    by_kconvert_family = {"llama": "llama", "deepseek": "deepseek_v3", "gpt_oss": "gpt_oss"}
    for rec in results["drafts"].values():
        t = rec.get("target")
        if not t or "aux_ids" not in rec:
            continue
        fam = by_kconvert_family[t["kconvert_family"]]
        rec["capture"] = {"family": fam, **capture(families[fam], rec["aux_ids"], t["num_layers"])}

    results["metrics"] = metrics_exposition()
    results["launch_lines"] = parse_launch_lines(man["launch_lines"])
    results["versions"] = {"tokenspeed": tokenspeed.__version__ if hasattr(tokenspeed, "__version__") else
                           _dist_version("tokenspeed"), "torch": torch.__version__,
                           "transformers": _dist_version("transformers"), "python": sys.version.split()[0]}
    shutil.rmtree(tmp, ignore_errors=True)
    return results


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


# The verify steps whose counters the exposition carries: (decode slots in the step, output tokens per slot). Each
# slot's output is its accepted draft tokens plus the bonus token, as the verify kernel reports
# (model_execution_results.output_lengths); k = 3 draft tokens, speculative_num_draft_tokens 4.
METRIC_STEPS = [[4, 1, 3], [2, 2], [1, 4, 4, 3], [3]]
METRIC_NUM_DRAFT_TOKENS = 4
METRIC_SCRAPE_BEFORE = 2  # also scraped after the first two steps


def metrics_exposition() -> dict:
    """The /metrics text a tokenspeed engine serves, from its own code: EngineMetrics (metrics/collector.py) with the
    labels event_loop.py gives it, fed through OutputProcesser._aggregate_spec_decode_step (the per-step
    sum of output_length - 1 over decode slots), exposed by utils/common.py add_prometheus_middleware (prometheus
    multiprocess mode: MultiProcessCollector behind make_asgi_app at /metrics) and read back over HTTP with
    starlette's TestClient."""
    from types import SimpleNamespace

    mp = tempfile.mkdtemp(prefix="ts-prom-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = mp  # utils/common.py set_prometheus_multiproc_dir sets the same
    try:
        import torch
        from fastapi import FastAPI
        from starlette.testclient import TestClient

        from tokenspeed.runtime.engine.generation_output_processor import OutputProcesser
        from tokenspeed.runtime.metrics.collector import EngineMetrics
        from tokenspeed.runtime.utils.common import add_prometheus_middleware

        labels = {"model_name": "examples/tiny/target", "app_key": "", "dp_rank": "0"}  # event_loop.py EngineMetrics(...)
        metrics = EngineMetrics(labels, enabled=True)
        app = FastAPI()
        add_prometheus_middleware(app)
        client = TestClient(app)

        def spec_text() -> str:
            text = client.get("/metrics").text
            return "\n".join(line for line in text.splitlines() if "spec_decode" in line) + "\n"

        steps, scrapes = [], []
        for n, lengths in enumerate(METRIC_STEPS):
            if n == METRIC_SCRAPE_BEFORE:  # a scrape between the steps: the "before" of a two-scrape measurement
                scrapes.append({"after_steps": n, "text": spec_text()})
            rids = [f"r{i}" for i in range(len(lengths))]
            op = SimpleNamespace(num_extends=lambda: 0, request_ids=rids)
            states = {r: SimpleNamespace(prefill_finished=True) for r in rids}
            slots, accepted = OutputProcesser._aggregate_spec_decode_step(
                forward_op=op, output_lengths=torch.tensor(lengths), rid_to_state=states)
            metrics.record_spec_decode_step(num_decode_slots=slots, accepted_draft_tokens=accepted,
                                            draft_width=METRIC_NUM_DRAFT_TOKENS - 1)
            steps.append({"output_lengths": lengths, "num_decode_slots": slots, "accepted_draft_tokens": accepted})
        spec = spec_text()
        scrapes.append({"after_steps": len(METRIC_STEPS), "text": spec})
        return {"source": {"metrics": _where(EngineMetrics._init_prometheus),
                           "record": _where(EngineMetrics.record_spec_decode_step),
                           "aggregate": _where(OutputProcesser._aggregate_spec_decode_step),
                           "exposition": _where(add_prometheus_middleware)},
                "labels": labels, "speculative_num_draft_tokens": METRIC_NUM_DRAFT_TOKENS, "steps": steps,
                "text": spec, "scrapes": scrapes}
    finally:
        shutil.rmtree(mp, ignore_errors=True)
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)


LAUNCH_KEYS = ("model", "attn_tp_size", "speculative_algorithm", "speculative_draft_model_path",
               "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "enable_metrics",
               "eagle3_layers_to_capture")


def parse_launch_lines(entries: list) -> list:
    """Each serve line kconvert prints, through tokenspeed's own front end: `tokenspeed serve` (cli/__main__.py)
    hands argv to cli/_argsplit.py split_argv (engine / gateway / orchestrator flags), and the engine's flags go to
    utils/server_args.py prepare_server_args, whose __post_init__ validates the speculative settings."""
    import shlex

    from tokenspeed.cli._argsplit import split_argv
    from tokenspeed.runtime.utils.server_args import prepare_server_args

    out = []
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for e in entries:
            argv = shlex.split(e["lines"][0])
            rec = {**e, "argv0": argv[:2], "source": _where(prepare_server_args), "split": _where(split_argv)}
            try:
                split = split_argv(argv[2:])
                sa = prepare_server_args(split.engine)
                rec["engine_argv"] = split.engine
                rec["gateway_argv"] = split.gateway
                rec["server_args"] = {k: getattr(sa, k, None) for k in LAUNCH_KEYS}
            except BaseException as exc:  # noqa: BLE001 - argparse exits with SystemExit on a bad flag
                rec["error"] = _err(exc)
            out.append(rec)
    finally:
        os.chdir(cwd)
    return out


# --------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", default="/tmp/kconvert-tokenspeed-oracle", help="the oracle's own venv")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--skip-install", action="store_true", help="the venv is already set up")
    ap.add_argument("--check", action="store_true",
                    help="record into a temporary file and exit 1 if it differs from --out (what CI runs)")
    ap.add_argument("--phase", choices=("all", "run"), default="all", help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    a = ap.parse_args()
    venv = Path(a.venv)
    if a.phase == "run":
        doc = run(json.loads(Path(a.manifest).read_text()))
        Path(a.manifest + ".out").write_text(json.dumps(doc))
        return 0
    work = Path(tempfile.mkdtemp(prefix="tokenspeed-oracle-"))
    try:
        return _record(a, venv, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _record(a: argparse.Namespace, venv: Path, work: Path) -> int:
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    man = manifest(work)
    t_manifest = time.perf_counter() - t0
    t_install = None if a.skip_install else install(venv)
    man_path = work / "manifest.json"
    man_path.write_text(json.dumps(man))
    t1 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # PYTHONHASHSEED: tokenspeed's registry names its supported architectures as a set in its error message
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    subprocess.run([str(venv / "bin" / "python"), __file__, "--phase", "run", "--manifest", str(man_path),
                    "--venv", str(venv)], check=True, env=env, cwd="/tmp")
    doc = json.loads(Path(str(man_path) + ".out").read_text())
    doc["recorded_by"] = "tests/tokenspeed_oracle/record.py"
    doc["timings_s"] = {"manifest": round(t_manifest, 1), "install": None if t_install is None else round(t_install, 1),
                        "run": round(time.perf_counter() - t1, 1)}
    if a.check:
        old = json.loads(Path(a.out).read_text())
        strip = lambda d: {k: v for k, v in d.items() if k != "timings_s"}  # noqa: E731
        if strip(old) != strip(json.loads(json.dumps(doc))):
            keys = sorted(k for k in set(old.get("drafts", {})) | set(doc["drafts"])
                          if old.get("drafts", {}).get(k) != doc["drafts"].get(k))
            print(f"{a.out} is stale: tokenspeed's code now answers differently for {keys or 'the capture/probes'}; "
                  "rerun tests/tokenspeed_oracle/record.py and review the diff", file=sys.stderr)
            return 1
        print(f"{a.out} matches tokenspeed {doc['versions']['tokenspeed']}'s code ({len(doc['drafts'])} drafts; "
              f"timings {doc['timings_s']})")
        return 0
    tmp = Path(a.out + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(a.out)
    print(f"wrote {a.out}: {len(doc['drafts'])} drafts, timings {doc['timings_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
