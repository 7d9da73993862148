"""Record what vLLM's own code answers for every draft kconvert ships (aux ids, served context, the draft class and
its load_weights): tests/data/vllm_oracle.json.

    .venv/bin/python tests/vllm_oracle/record.py [--out PATH] [--check]

1. ``manifest`` (the project's Python, which has kconvert): the same drafts the SGLang oracle records
   (tests/sglang_oracle/record.py ``manifest``: every EAGLE-3 zoo replica built by its tests/zoo/*/build.py in a
   temporary folder, tests/data/producers/*, examples/tiny/drafts/* and examples/tiny/broken/*), each with its
   target's layer count.
2. ``run``, once per vLLM release, each in a child interpreter: vLLM 0.32.0 as installed in this venv (the CPU
   build), and vLLM 0.33.0's Python files (the PyPI wheel's ``vllm/*`` minus ``*.so``; fetched into
   ``.vllm-oracle/`` with pip if missing) put first on the child's PYTHONPATH. For each draft the child builds the
   hf_config as vLLM does (``vllm.transformers_utils.config.get_config``, then config/speculative.py's wrap into
   ``EAGLEConfig`` unless it is already an EAGLEConfig or a SpeculatorsConfig), then calls vLLM's real functions:
   Model Runner V1 ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (unbound, with a ``self`` holding only
   ``speculative_config.draft_model_config.hf_config``, all it reads) and
   ``SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config`` (``self``: method and
   draft_model_config), Model Runner V2 ``eagle3_utils.get_eagle3_aux_layers_from_config`` and (0.33 only: 0.32's
   v1/worker/gpu/model_runner.py sets use_aux_hidden_state_outputs true for method eagle3 inline, no function)
   ``requires_aux_hidden_states``, and, for the
   target, ``SupportsEagle3.get_eagle3_default_aux_hidden_state_layers`` on an object holding ``num_layers``
   layers (no target family kconvert ships overrides it: only transformers/base.py and mllama4.py do).
   No engine is started, no weight is read.
3. In the same child, per draft (``served_and_model``): the target's real ``ModelConfig`` (once per target; the
   zoo's from kconvert's profiles, ``target_folder``) and the draft's ``SpeculativeConfig``: the draft's
   max_position_embeddings as read and after ``_maybe_override_draft_max_position_embeddings``, the draft's
   max_model_len, and the served max_model_len after 0.33's ``VllmConfig._limit_max_model_len_to_draft`` for V1
   and V2; then ``initialize_model`` on the meta device (fc weight shape, num_aux_hidden_states, parameters) and
   the class's own ``load_weights`` fed meta tensors of the checkpoint's names and shapes (which parameter each
   name reached, the names dropped, the parameters never loaded, or the error). Both children run under
   ``VLLM_TARGET_DEVICE=cpu`` (the 0.33.0 wheel is the CUDA build) with a modelinfos cache per release in
   ``.vllm-oracle-cache/``.

``--check`` re-records and exits 1 if the answers differ from the committed JSON (timings are not compared).
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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "vllm_oracle.json"
CACHE = ROOT / ".vllm-oracle"
V033 = "0.33.0"

CHILD = r'''
import inspect, json, os, sys, traceback
from types import SimpleNamespace
import torch, transformers, vllm
from vllm.transformers_utils.config import get_config
from vllm.transformers_utils.configs.eagle import EAGLEConfig
from vllm.transformers_utils.configs.speculators import SpeculatorsConfig
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils
from vllm.model_executor.models.interfaces import SupportsEagle3
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
from vllm.config.vllm import VllmConfig
from transformers import PreTrainedConfig

base = os.path.dirname(vllm.__file__)
def where(fn):
    fn = inspect.unwrap(fn)
    return os.path.relpath(inspect.getsourcefile(fn), os.path.dirname(base)) + ":" + str(inspect.getsourcelines(fn)[1])

def err(e):
    # the first line, cut before AutoWeightsLoader's listing of a Python set (its order changes per run)
    msg = (str(e).splitlines()[0] if str(e) else '').split(" The available parameters")[0]
    if type(e).__name__ == "ValidationError" and hasattr(e, "errors"):
        # pydantic's first line only counts the errors; the reason (e.g. an architecture the registry lacks) is the
        # first error's message, whose first line names it
        first = e.errors()[0]
        msg += ": " + str(first.get("msg", "")).splitlines()[0].split(" Supported architectures")[0][:300]
    return {"raises": f"{type(e).__name__}: {msg}"}

def ids(v):
    return list(v) if isinstance(v, (list, tuple)) else v

v1 = GPUModelRunner._get_eagle3_aux_layers_from_config
v2 = eagle3_utils.get_eagle3_aux_layers_from_config
req = getattr(eagle3_utils, "requires_aux_hidden_states", None)
default = SupportsEagle3.get_eagle3_default_aux_hidden_state_layers
v1_use_aux = SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config
funcs = {"v1": where(v1), "v2": where(v2), "default": where(default), "get_config": where(get_config),
         "v1_use_aux_hidden_state": where(v1_use_aux),
         "speculators_speculative_config": where(SpeculatorsConfig.extract_vllm_speculative_config),
         "v2_unsupported_features": where(VllmConfig._get_v2_model_runner_unsupported_features),
         "EAGLEConfig": where(EAGLEConfig.__init__)}
if req is not None:
    funcs["requires_aux_hidden_states"] = where(req)

# ---- the draft's positions, the served max_model_len, and the draft class built on the meta device
import atexit, copy, shutil, tempfile, time
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
from vllm.model_executor.model_loader.utils import initialize_model
from vllm.utils.torch_utils import set_default_torch_dtype
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
limit = getattr(VllmConfig, "_limit_max_model_len_to_draft", None)
shares = getattr(SpeculativeConfig, "draft_shares_target_positions", None)
funcs.update({"ModelConfig": where(ModelConfig.__post_init__), "SpeculativeConfig": where(SpeculativeConfig.__post_init__),
              "draft_max_position_embeddings": where(SpeculativeConfig._maybe_override_draft_max_position_embeddings),
              "draft_max_model_len": where(SpeculativeConfig._maybe_override_draft_max_model_len),
              "initialize_model": where(initialize_model)})
if limit is not None:
    funcs["limit_max_model_len_to_draft"] = where(limit)
if shares is not None:
    funcs["draft_shares_target_positions"] = where(shares)
DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn}
_dist = {"up": False}
TIMES = {"target_model_config_s": 0.0, "served_s": 0.0, "model_s": 0.0}

# ModelConfig inspects each architecture's class (model_executor/models/registry.py inspect_model_cls) in a fresh
# interpreter, "to avoid initializing CUDA", ~8 s each here on a cold modelinfos cache: this child has no CUDA to
# protect, so the same _ModelInfo.from_model_cls runs in it (the answer is the same object, unpickled there)
from vllm.model_executor.models import registry as _registry
_registry._run_in_subprocess = lambda fn: fn()
_targets = {}

def _target(td):
    # no tokenizer, no weights: ModelConfig reads config.json (max_model_len from max_position_embeddings and rope);
    # built once per target and copied for each draft (VllmConfig may adjust the model config it is given)
    if td not in _targets:
        _targets[td] = ModelConfig(model=td, tokenizer=td, dtype="bfloat16", skip_tokenizer_init=True,
                                   trust_remote_code=False)
    return copy.deepcopy(_targets[td])

def served_and_model(d, method):
    rec, t0 = {}, time.perf_counter()
    try:
        tgt = _target(d["target_dir"])
        TIMES["target_model_config_s"] += time.perf_counter() - t0
        hf0 = get_config(d["path"], trust_remote_code=False)
        draft_mpe = getattr(getattr(hf0, "text_config", hf0), "max_position_embeddings", None)
        sc = SpeculativeConfig(model=d["path"], method=method, num_speculative_tokens=3, target_model_config=tgt,
                               target_parallel_config=ParallelConfig())
    except Exception as e:
        rec["served"] = err(e)
        return rec
    dc = sc.draft_model_config
    dhf = dc.hf_config
    srv = {"target_max_model_len": tgt.max_model_len, "draft_max_position_embeddings_read": draft_mpe,
           "draft_max_position_embeddings": getattr(dhf, "max_position_embeddings", None),
           "draft_max_model_len": dc.max_model_len}
    if shares is not None:
        srv["draft_shares_target_positions"] = shares(sc)
    for runner, v2 in (("v1", False), ("v2", True)):
        me = SimpleNamespace(speculative_config=sc, model_config=SimpleNamespace(max_model_len=tgt.max_model_len),
                             use_v2_model_runner=v2)
        if limit is not None:
            limit(me)  # lowers me.model_config.max_model_len (V2 only) when the draft's is smaller
        srv[f"{runner}_max_model_len"] = me.model_config.max_model_len
    rec["served"] = srv
    TIMES["served_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    # the draft class vLLM's loader builds (model_loader/utils.py initialize_model, as base_loader.load_model calls
    # it) on the meta device, then its own load_weights fed meta tensors of the checkpoint's names and shapes
    try:
        vc = VllmConfig(model_config=tgt, speculative_config=sc, parallel_config=ParallelConfig())
        with set_current_vllm_config(vc):
            if not _dist["up"]:
                rendezvous = tempfile.mkdtemp(prefix="kconvert-vllm-oracle-dist-")
                atexit.register(shutil.rmtree, rendezvous, True)
                init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                             distributed_init_method="file://" + os.path.join(rendezvous, "d"))
                initialize_model_parallel(1, 1)
                _dist["up"] = True
        with set_default_torch_dtype(dc.dtype), torch.device("meta"):
            model = initialize_model(vllm_config=vc, model_config=dc)
    except Exception as e:
        rec["model"] = err(e)
        TIMES["model_s"] += time.perf_counter() - t0
        return rec
    inner = getattr(model, "model", model)
    fc = getattr(inner, "fc", None)
    m = {"class": type(model).__name__,
         "fc_weight_shape": list(fc.weight.shape) if fc is not None else None,
         "num_aux_hidden_states": getattr(inner, "num_aux_hidden_states", None),
         "use_aux_hidden_state": getattr(inner, "use_aux_hidden_state", None),
         "num_layers": len(getattr(inner, "layers", [])),
         "params": sorted(n for n, _ in model.named_parameters())}
    reached = {}
    for pname, prm in model.named_parameters():
        orig = getattr(prm, "weight_loader", default_weight_loader)
        def wrap(param, loaded, *a, _n=pname, _o=orig, **k):
            reached.setdefault(id(loaded), set()).add(_n)
            return _o(param, loaded, *a, **k)
        prm.weight_loader = wrap
    ckpt = {name: torch.empty(shape, dtype=DTYPES[dt], device="meta") for name, (dt, shape) in d["tensors"].items()}
    try:
        with set_current_vllm_config(vc):
            model.load_weights(iter(sorted(ckpt.items())))
        m["loaded"] = {name: sorted(reached[id(t)]) for name, t in sorted(ckpt.items()) if id(t) in reached}
        m["dropped"] = sorted(name for name, t in ckpt.items() if id(t) not in reached)
        hit = set().union(*reached.values()) if reached else set()
        m["params_not_loaded"] = sorted(set(m["params"]) - hit)
    except Exception as e:
        m["load_weights"] = err(e)
    rec["model"] = m
    TIMES["model_s"] += time.perf_counter() - t0
    return rec

drafts = json.load(sys.stdin)
out = {}
for key, d in drafts.items():
    rec = {}
    try:
        hf = get_config(d["path"], trust_remote_code=False)
        # config/speculative.py (method eagle3): wrapped unless already an EAGLEConfig / SpeculatorsConfig
        if not isinstance(hf, (EAGLEConfig, SpeculatorsConfig)):
            hf = EAGLEConfig(hf, method="eagle3", model_type="eagle")
        rec["hf_config_class"] = type(hf).__name__
    except Exception as e:
        rec["hf_config"] = err(e)
        out[key] = rec
        continue
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf), method="eagle3")
    for name, call in (("v1", lambda: v1(SimpleNamespace(speculative_config=spec))), ("v2", lambda: v2(spec))):
        try:
            rec[name] = ids(call())
        except Exception as e:
            rec[name] = err(e)
    try:
        rec["v1_use_aux_hidden_state"] = v1_use_aux(SimpleNamespace(method="eagle3",
                                                                    draft_model_config=spec.draft_model_config))
    except Exception as e:
        rec["v1_use_aux_hidden_state"] = err(e)
    if req is not None:
        try:
            rec["v2_requires_aux_hidden_states"] = req(spec)
        except Exception as e:
            rec["v2_requires_aux_hidden_states"] = err(e)
    # Which runner: the speculative config vLLM derives (engine/arg_utils.py -> transformers_utils/config.py
    # maybe_override_with_speculators for a speculators-format draft; else what kconvert's serve line passes,
    # method eagle3 and the SpeculativeConfig defaults parallel_drafting / use_heterogeneous_vocab False), then
    # config/vllm.py _get_v2_model_runner_unsupported_features on one process (no PP, no ubatching).
    try:
        cd, _ = PreTrainedConfig.get_config_dict(d["path"])
        sc = (SpeculatorsConfig.extract_vllm_speculative_config(cd) if cd.get("speculators_config") is not None
              else {"method": "eagle3"})
        rec["speculative_config"] = {k: sc[k] for k in ("method", "parallel_drafting") if k in sc}
        me = SimpleNamespace(
            speculative_config=SimpleNamespace(method=sc["method"], parallel_drafting=sc.get("parallel_drafting", False),
                                               use_heterogeneous_vocab=False),
            parallel_config=SimpleNamespace(distributed_executor_backend=None, pipeline_parallel_size=1,
                                            use_ubatching=False, prefill_context_parallel_size=1))
        rec["v2_unsupported_features"] = VllmConfig._get_v2_model_runner_unsupported_features(me)
    except Exception as e:
        rec["v2_unsupported_features"] = err(e)
    n = d["num_layers"]
    try:
        rec["default"] = ids(default(SimpleNamespace(model=SimpleNamespace(layers=[None] * n))))
    except Exception as e:
        rec["default"] = err(e)
    rec.update(served_and_model(d, rec.get("speculative_config", {}).get("method", "eagle3")))
    out[key] = rec
print(json.dumps({"versions": {"vllm": vllm.__version__, "torch": torch.__version__,
                               "transformers": transformers.__version__, "python": sys.version.split()[0]},
                  "functions": funcs, "drafts": out, "times": {k: round(v, 1) for k, v in TIMES.items()}}))
'''


def vllm_033() -> Path:
    """vLLM 0.33.0's Python files (no compiled module: nothing recorded here runs a kernel)."""
    dest = CACHE / f"vllm-{V033}"
    if not (dest / "vllm" / "__init__.py").exists():
        CACHE.mkdir(exist_ok=True)
        wheels = list(CACHE.glob(f"vllm-{V033}-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                            f"vllm=={V033}", "-d", str(CACHE)], check=True)
            wheels = list(CACHE.glob(f"vllm-{V033}-*.whl"))
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                if n.startswith("vllm/") and not n.endswith(".so"):
                    z.extract(n, dest)
        for w in wheels:  # 336 MB; the extracted Python files (179 MB) are all that is read
            w.unlink()
    return dest


def run(drafts: dict, extra_path: Path | None) -> dict:
    env = dict(os.environ)
    parts = ([str(extra_path)] if extra_path else []) + [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # vLLM's CPU platform for both releases: 0.32.0 is the CPU build; the 0.33.0 wheel is the CUDA build, whose
    # platforms/__init__.py cpu_platform_plugin picks the CPU platform only when asked (without it DeviceConfig
    # raises "Failed to infer device type" and no VllmConfig builds)
    env["VLLM_TARGET_DEVICE"] = "cpu"
    # ModelConfig inspects each architecture's class in a subprocess (~8 s each) unless vLLM's modelinfos cache
    # (model_executor/models/registry.py, keyed by the model file's hash, not by release) has it: one cache per
    # release, or the two releases overwrite each other's entries on every run
    env["VLLM_CACHE_ROOT"] = str(ROOT / ".vllm-oracle-cache" / (extra_path.name if extra_path else "installed"))
    p = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(drafts), capture_output=True, text=True,
                       env=env, cwd=str(ROOT), timeout=600)
    if p.returncode:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"vLLM child ({extra_path or 'installed'}) failed: rc {p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# name -> config keys set on a copy of examples/tiny/drafts/llama-specforge (eagle_config merged)
ON_DISK_BASE = "examples/tiny/drafts/llama-specforge"
PROBES = {
    "ids-4-fc-3": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4, 6]}},
    "num-aux-4": {"num_aux_hidden_states": 4},
    "num-aux-3-ids-4": {"num_aux_hidden_states": 3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4, 6]}},
}


def target_folder(ref: str, work: Path, sg) -> str:
    """A folder holding the target's config.json, for vLLM's ModelConfig: the shipped tiny target as it is; the
    producers' target from the config tests/data/producers/provenance.json records; a built-in profile
    (kconvert/targets/profiles/*.json, the zoo's targets) written as its text model's config.json with the fields the
    profile copies from the public config (layers, widths, vocabulary, heads, max_position_embeddings, rope_theta,
    rope_scaling, the MLA ranks); every other field is the config class's default."""
    if (ROOT / ref / "config.json").is_file():
        return str(ROOT / ref)
    dest = work / "targets" / ref.replace("/", "_").replace("#", "_")
    if not (dest / "config.json").exists():
        if ref == sg.PRODUCERS_TARGET:
            cfg = json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())["target"]
        else:
            p = json.loads((ROOT / "kconvert" / "targets" / "profiles" / f"{ref}.json").read_text())
            keys = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
                    "head_dim", "max_position_embeddings", "rms_norm_eps", "torch_dtype", "rope_theta", "rope_scaling",
                    "first_k_dense_replace")
            cfg = {k: p[k] for k in keys if p.get(k) is not None}
            cfg.update(p.get("mla") or {})
            if p.get("text_model_type") and p["text_model_type"] != p["model_type"]:
                # a multimodal wrapper (Kimi-K2.5): its text model, which sets the context vLLM serves
                cfg.update(architectures=["DeepseekV3ForCausalLM"] if p.get("mla") else p["architectures"],
                           model_type=p["text_model_type"])
            else:
                cfg.update(architectures=p["architectures"], model_type=p["model_type"])
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "config.json").write_text(json.dumps(cfg))
    return str(dest)


def record() -> dict:
    sys.path.insert(0, str(ROOT))
    import importlib.util

    # the SGLang oracle's draft set, built the same way (its phase 1 needs no SGLang)
    spec = importlib.util.spec_from_file_location("sglang_oracle_record",
                                                  ROOT / "tests" / "sglang_oracle" / "record.py")
    sg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sg)
    manifest = sg.manifest

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kconvert-vllm-oracle-") as work:
        m = manifest(Path(work))
        drafts, configs = {}, {}
        for group in ("zoo", "producers", "examples", "automodel"):
            for name, e in m[group].items():
                drafts[f"{group}/{name}"] = {"path": e["path"], "num_layers": e["target"]["num_layers"],
                                             "target_dir": target_folder(e["target"]["ref"], Path(work), sg),
                                             "tensors": {n: [t["dtype"], t["shape"]] for n, t in e["tensors"].items()}}
                configs[f"{group}/{name}"] = {"config": e["config"], "num_layers": e["target"]["num_layers"],
                                              "target": e["target"]["ref"]}
        # config probes (no shipped draft sets num_aux_hidden_states or other than 3 ids): copies of one shipped
        # draft with its config changed, its tensors unchanged (fc stays 3 x hidden)
        base_key = "examples/drafts/llama-specforge"
        base = m["examples"]["drafts/llama-specforge"]
        for name, change in PROBES.items():
            folder = Path(work) / "probes" / name
            shutil.copytree(base["path"], folder)
            cfg = json.loads(json.dumps(base["config"]))
            for k, v in change.items():
                cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
            (folder / "config.json").write_text(json.dumps(cfg, indent=1))
            drafts[f"probes/{name}"] = {**drafts[base_key], "path": str(folder)}
            configs[f"probes/{name}"] = {**configs[base_key], "config": cfg, "probe_of": ON_DISK_BASE}
        t_manifest = time.perf_counter() - t0
        results, timings = {}, {"manifest_s": round(t_manifest, 1)}
        for label, extra in (("0.32", None), ("0.33", vllm_033())):
            t = time.perf_counter()
            results[label] = run(drafts, extra)
            timings[f"vllm_{label}_s"] = round(time.perf_counter() - t, 1)
            timings[f"vllm_{label}_parts"] = results[label].pop("times")
    out = {"about": "vLLM's own aux-layer functions over every draft kconvert ships; tests/vllm_oracle/README.md",
           "releases": {}, "drafts": {}}
    for label, r in results.items():
        out["releases"][label] = {"versions": r["versions"], "functions": r["functions"]}
    for key, c in configs.items():
        out["drafts"][key] = {**c, "answers": {label: results[label]["drafts"][key] for label in results}}
    out["timings"] = timings
    return out


def answers(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "timings"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the recording differs from --out")
    a = ap.parse_args()
    t0 = time.perf_counter()
    new = record()
    took = time.perf_counter() - t0
    if a.check:
        old = json.loads(a.out.read_text())
        # drafts' temporary paths are not in the JSON; the zoo build folders differ per run
        if answers(old) != answers(new):
            for k in sorted(set(old["drafts"]) | set(new["drafts"])):
                if old["drafts"].get(k) != new["drafts"].get(k):
                    print(f"differs: {k}\n  recorded {old['drafts'].get(k)}\n  now      {new['drafts'].get(k)}")
            if old["releases"] != new["releases"]:
                print("differs: releases", old["releases"], new["releases"])
            print(f"{a.out} is stale: re-run tests/vllm_oracle/record.py")
            return 1
        print(f"vllm oracle: {len(new['drafts'])} drafts x 2 releases agree with {a.out} ({took:.0f} s)")
        return 0
    a.out.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}: {len(new['drafts'])} drafts ({took:.0f} s; {new['timings']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
