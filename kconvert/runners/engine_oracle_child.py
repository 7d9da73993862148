"""The child interpreter of the vLLM oracle: it imports one vLLM release (the installed one, or a release's Python
files put first on PYTHONPATH) and asks that release's own functions what they do with each draft it is given.

Run as a script by `kconvert.runners.engine_oracle` (never imported with vLLM by kconvert itself: everything that
touches vLLM, torch or transformers is inside `main`). Input on stdin: {"drafts": {key: {"path", "num_layers",
"target_dir", "tensors": {name: [dtype, shape]}}}, "release": {"arch_candidates": [...]} or null}. Output: one JSON
line on stdout: the versions, each function by file and line, the release-wide answers (when asked) and the answers
per draft. An exception is an answer ({"raises": "Type: message"}), never a crash of the child.

Per draft, as vLLM decides it (the functions each release has; a function a release lacks is not answered):
- `hf_config_class`: `transformers_utils/config.py get_config`, then the `EAGLEConfig` wrap of method eagle3.
- `v1`: Model Runner V1 `GPUModelRunner._get_eagle3_aux_layers_from_config` (`v1/worker/gpu_model_runner.py`,
  0.32 and 0.33; 0.34 removed V1), called unbound with a `self` holding only the speculative config, all it reads.
- `v2`: Model Runner V2 `eagle3_utils.get_eagle3_aux_layers_from_config`.
- `default`: `SupportsEagle3.get_eagle3_default_aux_hidden_state_layers` on an object with the target's layers.
- `v1_use_aux_hidden_state` (`v1/spec_decode/llm_base_proposer.py`, 0.32 and 0.33), `v2_requires_aux_hidden_states`
  (0.33 `eagle3_utils.requires_aux_hidden_states`; 0.34 `eagle/config.py Eagle3SpeculatorConfig
  .uses_aux_hidden_states`; 0.32 has neither: its V2 collects aux states for every eagle3 draft).
- `speculative_config` / `v2_unsupported_features`: the method vLLM derives (speculators format: `SpeculatorsConfig
  .extract_vllm_speculative_config`) and the features the runner refuses (0.32/0.33 `config/vllm.py
  _get_v2_model_runner_unsupported_features`, 0.34 `_get_model_runner_unsupported_features`).
- `served`: the target's `ModelConfig` and the draft's `SpeculativeConfig` (the draft's positions as read and after
  `_maybe_override_draft_max_position_embeddings`, its max_model_len, and the served length after
  `VllmConfig._limit_max_model_len_to_draft` per runner the release has).
- `model`: `model_loader/utils.py initialize_model` on the meta device (class, fc shape, aux count, layers,
  parameters, `norm_output`), then the class's own `load_weights` fed meta tensors of the checkpoint's names and
  shapes: which parameter each name reached, the names dropped, the parameters never loaded, or the error.

Release-wide (`release`): which model runners exist, what `platforms/interface.py validate_environ` says to
`VLLM_USE_V2_MODEL_RUNNER=0`, the EAGLE-3 classes each candidate architecture reaches through `EAGLEConfig`'s
prefix and `model_executor/models/registry.py`, the cache-only rope types of `config/speculative.py`, and the
speculators types `transformers_utils/configs/speculators/algos.py` registers.

vLLM 0.34's x86 CPU platform refuses to build a `VllmConfig` without Triton ("requires Triton (triton-cpu)",
`platforms/cpu.py check_and_update_config`); no kernel runs here, so `vllm.triton_utils.HAS_TRITON` is set true
only while that config builds, and the answer says so (`patched`).
"""
from __future__ import annotations

import json
import sys

# The canonical dtypes of safetensors headers (what kconvert's manifest passes) as torch names.
_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn"}


def main() -> None:  # noqa: C901 - one linear script of questions, each guarded by its own try
    import atexit
    import contextlib
    import copy
    import inspect
    import os
    import shutil
    import tempfile
    import time
    from types import SimpleNamespace

    import torch
    import transformers
    import vllm
    from transformers import PreTrainedConfig
    from vllm.config.vllm import VllmConfig
    from vllm.model_executor.models.interfaces import SupportsEagle3
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    from vllm.transformers_utils.configs.speculators import SpeculatorsConfig
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils

    base = os.path.dirname(vllm.__file__)

    def where(fn):
        fn = inspect.unwrap(fn)
        return (os.path.relpath(inspect.getsourcefile(fn), os.path.dirname(base)) + ":"
                + str(inspect.getsourcelines(fn)[1]))

    def err(e):
        # the first line, cut before AutoWeightsLoader's listing of a Python set (its order changes per run)
        msg = (str(e).splitlines()[0] if str(e) else "").split(" The available parameters")[0]
        if type(e).__name__ == "ValidationError" and hasattr(e, "errors"):
            # pydantic's first line only counts the errors; the reason (e.g. an architecture the registry lacks) is
            # the first error's message, whose first line names it
            first = e.errors()[0]
            msg += ": " + str(first.get("msg", "")).splitlines()[0].split(" Supported architectures")[0][:300]
        return {"raises": f"{type(e).__name__}: {msg}"}

    def ids(v):
        return list(v) if isinstance(v, (list, tuple)) else v

    # Model Runner V1 (0.32, 0.33): gone in 0.34 (no v1/worker/gpu_model_runner.py, no llm_base_proposer.py)
    try:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        v1 = GPUModelRunner._get_eagle3_aux_layers_from_config
    except ImportError:
        v1 = None
    try:
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
        v1_use_aux = SpecDecodeBaseProposer._get_eagle3_use_aux_hidden_state_from_config
    except ImportError:
        v1_use_aux = None
    v2 = eagle3_utils.get_eagle3_aux_layers_from_config
    req = getattr(eagle3_utils, "requires_aux_hidden_states", None)
    req_fn = req
    if req is None:
        try:  # 0.34: the speculator's config says whether the target hands over aux states
            from vllm.v1.worker.gpu.spec_decode.eagle.config import Eagle3SpeculatorConfig

            def req(spec):
                return Eagle3SpeculatorConfig(spec).uses_aux_hidden_states
            req_fn = Eagle3SpeculatorConfig.uses_aux_hidden_states.fget
        except ImportError:
            pass
    default = SupportsEagle3.get_eagle3_default_aux_hidden_state_layers
    unsupported = getattr(VllmConfig, "_get_v2_model_runner_unsupported_features", None)
    if unsupported is None:
        unsupported = getattr(VllmConfig, "_get_model_runner_unsupported_features", None)
    funcs = {"v2": where(v2), "default": where(default), "get_config": where(get_config),
             "speculators_speculative_config": where(SpeculatorsConfig.extract_vllm_speculative_config),
             "EAGLEConfig": where(EAGLEConfig.__init__)}
    if v1 is not None:
        funcs["v1"] = where(v1)
    if v1_use_aux is not None:
        funcs["v1_use_aux_hidden_state"] = where(v1_use_aux)
    if unsupported is not None:
        funcs["v2_unsupported_features"] = where(unsupported)
    if req_fn is not None:
        funcs["requires_aux_hidden_states"] = where(req_fn)

    # ---- the draft's positions, the served max_model_len, and the draft class built on the meta device
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.utils.torch_utils import set_default_torch_dtype
    limit = getattr(VllmConfig, "_limit_max_model_len_to_draft", None)
    shares = getattr(SpeculativeConfig, "draft_shares_target_positions", None)
    # 0.34: _limit_max_model_len_to_draft applies whatever the runner (there is one) and reads the speculator's
    # max_model_len; 0.33's reads use_v2_model_runner
    limit_per_runner = limit is not None and "use_v2_model_runner" in inspect.getsource(limit)
    funcs.update({"ModelConfig": where(ModelConfig.__post_init__),
                  "SpeculativeConfig": where(SpeculativeConfig.__post_init__),
                  "draft_max_position_embeddings":
                      where(SpeculativeConfig._maybe_override_draft_max_position_embeddings),
                  "draft_max_model_len": where(SpeculativeConfig._maybe_override_draft_max_model_len),
                  "initialize_model": where(initialize_model)})
    if limit is not None:
        funcs["limit_max_model_len_to_draft"] = where(limit)
    if shares is not None:
        funcs["draft_shares_target_positions"] = where(shares)
    runners = [r for r, fn in (("v1", v1), ("v2", v2)) if fn is not None]
    served_runners = runners if (limit is None or limit_per_runner) else ["v2"]
    dtypes = {k: getattr(torch, v) for k, v in _DTYPES.items() if hasattr(torch, v)}
    dist = {"up": False}
    times = {"target_model_config_s": 0.0, "served_s": 0.0, "model_s": 0.0}
    patched: list[str] = []

    # ModelConfig inspects each architecture's class (model_executor/models/registry.py inspect_model_cls) in a
    # fresh interpreter, "to avoid initializing CUDA", ~8 s each here on a cold modelinfos cache: this child has no
    # CUDA to protect, so the same _ModelInfo.from_model_cls runs in it (the answer is the same object)
    from vllm.model_executor.models import registry as _registry
    _registry._run_in_subprocess = lambda fn: fn()
    targets: dict = {}

    def target(td):
        # no tokenizer, no weights: ModelConfig reads config.json (max_model_len from max_position_embeddings and
        # rope); built once per target and copied for each draft (VllmConfig may adjust the model config it is given)
        if td not in targets:
            targets[td] = ModelConfig(model=td, tokenizer=td, dtype="bfloat16", skip_tokenizer_init=True,
                                      trust_remote_code=False)
        return copy.deepcopy(targets[td])

    @contextlib.contextmanager
    def triton_allowed():
        # 0.34's x86 CPU platform raises in check_and_update_config without Triton; nothing here runs a kernel
        import vllm.triton_utils as tu
        old = tu.HAS_TRITON
        tu.HAS_TRITON = True
        try:
            yield
        finally:
            tu.HAS_TRITON = old

    def vllm_config(tgt, sc):
        try:
            return VllmConfig(model_config=tgt, speculative_config=sc, parallel_config=ParallelConfig())
        except RuntimeError as e:
            if "requires Triton" not in str(e):
                raise
            note = (f"vllm.triton_utils.HAS_TRITON set true while VllmConfig builds ({err(e)['raises']}: "
                    "platforms/cpu.py check_and_update_config)")
            if note not in patched:
                patched.append(note)
            with triton_allowed():
                return VllmConfig(model_config=tgt, speculative_config=sc, parallel_config=ParallelConfig())

    def served_and_model(d, method):
        rec, t0 = {}, time.perf_counter()
        try:
            tgt = target(d["target_dir"])
            times["target_model_config_s"] += time.perf_counter() - t0
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
        for runner in served_runners:
            me = SimpleNamespace(speculative_config=sc, model_config=SimpleNamespace(max_model_len=tgt.max_model_len),
                                 use_v2_model_runner=runner == "v2")
            if limit is not None:
                limit(me)  # lowers me.model_config.max_model_len when the draft's is smaller (0.33: V2 only)
            srv[f"{runner}_max_model_len"] = me.model_config.max_model_len
        rec["served"] = srv
        times["served_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        # the draft class vLLM's loader builds (model_loader/utils.py initialize_model, as base_loader.load_model
        # calls it) on the meta device, then its own load_weights fed meta tensors of the checkpoint's names
        try:
            vc = vllm_config(tgt, sc)
            with set_current_vllm_config(vc):
                if not dist["up"]:
                    rendezvous = tempfile.mkdtemp(prefix="kconvert-vllm-oracle-dist-")
                    atexit.register(shutil.rmtree, rendezvous, True)
                    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                                 distributed_init_method="file://" + os.path.join(rendezvous, "d"))
                    initialize_model_parallel(1, 1)
                    dist["up"] = True
            with set_default_torch_dtype(dc.dtype), torch.device("meta"):
                model = initialize_model(vllm_config=vc, model_config=dc)
        except Exception as e:
            rec["model"] = err(e)
            times["model_s"] += time.perf_counter() - t0
            return rec
        inner = getattr(model, "model", model)
        fc = getattr(inner, "fc", None)
        m = {"class": type(model).__name__,
             "fc_weight_shape": list(fc.weight.shape) if fc is not None else None,
             "num_aux_hidden_states": getattr(inner, "num_aux_hidden_states", None),
             "use_aux_hidden_state": getattr(inner, "use_aux_hidden_state", None),
             "num_layers": len(getattr(inner, "layers", [])),
             "params": sorted(n for n, _ in model.named_parameters())}
        if d.get("norm_output"):
            m["norm_output"] = getattr(inner, "norm_output", None)
        reached: dict = {}
        for pname, prm in model.named_parameters():
            orig = getattr(prm, "weight_loader", default_weight_loader)

            def wrap(param, loaded, *a, _n=pname, _o=orig, **k):
                reached.setdefault(id(loaded), set()).add(_n)
                return _o(param, loaded, *a, **k)
            prm.weight_loader = wrap
        # a dtype torch has no name for here loads as bfloat16: names and shapes are what is recorded
        ckpt = {name: torch.empty(shape, dtype=dtypes.get(dt, torch.bfloat16), device="meta")
                for name, (dt, shape) in d["tensors"].items()}
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
        times["model_s"] += time.perf_counter() - t0
        return rec

    def answer(d):
        rec: dict = {}
        try:
            hf = get_config(d["path"], trust_remote_code=False)
            # config/speculative.py (method eagle3): wrapped unless already an EAGLEConfig / SpeculatorsConfig
            if not isinstance(hf, (EAGLEConfig, SpeculatorsConfig)):
                hf = EAGLEConfig(hf, method="eagle3", model_type="eagle")
            rec["hf_config_class"] = type(hf).__name__
            if d.get("asks"):
                rec["hf_keys"] = {k: getattr(hf, k, None) for k in d["asks"]}
        except Exception as e:
            rec["hf_config"] = err(e)
            return rec
        spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf), method="eagle3")
        calls = [("v2", lambda: v2(spec))]
        if v1 is not None:
            calls.insert(0, ("v1", lambda: v1(SimpleNamespace(speculative_config=spec))))
        for name, call in calls:
            try:
                rec[name] = ids(call())
            except Exception as e:
                rec[name] = err(e)
        if v1_use_aux is not None:
            try:
                rec["v1_use_aux_hidden_state"] = v1_use_aux(SimpleNamespace(
                    method="eagle3", draft_model_config=spec.draft_model_config))
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
        # the features the runner refuses on one process (no PP, no ubatching).
        method = "eagle3"
        try:
            cd, _ = PreTrainedConfig.get_config_dict(d["path"])
            sc = (SpeculatorsConfig.extract_vllm_speculative_config(cd) if cd.get("speculators_config") is not None
                  else {"method": "eagle3"})
            rec["speculative_config"] = {k: sc[k] for k in ("method", "parallel_drafting") if k in sc}
            method = sc["method"]
            me = SimpleNamespace(
                speculative_config=SimpleNamespace(method=sc["method"],
                                                   parallel_drafting=sc.get("parallel_drafting", False),
                                                   use_heterogeneous_vocab=False),
                parallel_config=SimpleNamespace(distributed_executor_backend=None, pipeline_parallel_size=1,
                                                use_ubatching=False, prefill_context_parallel_size=1))
            rec["v2_unsupported_features"] = unsupported(me)
        except Exception as e:
            rec["v2_unsupported_features"] = err(e)
        n = d["num_layers"]
        try:
            rec["default"] = ids(default(SimpleNamespace(model=SimpleNamespace(layers=[None] * n))))
        except Exception as e:
            rec["default"] = err(e)
        rec.update(served_and_model(d, method))
        return rec

    def release_answers(ask):
        out: dict = {"runners": {r: funcs[r] for r in runners}}
        # what VLLM_USE_V2_MODEL_RUNNER=0 does: 0.34's validate_environ raises ("Model Runner V1 has been
        # removed"); 0.32/0.33 know the variable (envs.py) and their use_v2_model_runner reads it
        from vllm import envs
        from vllm.platforms.interface import Platform
        saved = dict(os.environ)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        try:
            Platform.validate_environ(hard_fail=True)
            env_v1 = {"accepted": "VLLM_USE_V2_MODEL_RUNNER" in envs.environment_variables}
        except Exception as e:
            env_v1 = err(e)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        funcs["validate_environ"] = where(Platform.validate_environ)
        if hasattr(VllmConfig, "use_v2_model_runner"):
            funcs["use_v2_model_runner"] = where(VllmConfig.use_v2_model_runner.fget)
        out["env_v2_model_runner_0"] = env_v1
        # which EAGLE-3 class each candidate architecture reaches: EAGLEConfig's prefix (method eagle3), then the
        # registry's speculative-decoding models
        spec_models = getattr(_registry, "_SPECULATIVE_DECODING_MODELS", {})
        with open(_registry.__file__) as fh:  # a dict has no source line of its own: its assignment's line
            line = next((i for i, text in enumerate(fh, 1) if text.startswith("_SPECULATIVE_DECODING_MODELS")), 0)
        funcs["registry"] = os.path.relpath(_registry.__file__, os.path.dirname(base)) + f":{line}"
        archs = {}
        # the registry's names, the same without the Eagle3 prefix EAGLEConfig adds back, and kconvert's candidates
        names = set(ask.get("arch_candidates") or []) | set(spec_models)
        names |= {n[len("Eagle3"):] for n in spec_models if n.startswith("Eagle3")}
        for name in sorted(names):
            direct = spec_models.get(name)
            try:
                wrapped = EAGLEConfig(PreTrainedConfig(architectures=[name], vocab_size=1),
                                      method="eagle3").architectures[0]
            except Exception as e:
                archs[name] = err(e)
                continue
            hit = spec_models.get(wrapped)
            if hit or direct:
                # `class`: what a plain config naming it builds (after the prefix); `direct`: the registry's own
                # entry, which a speculators config's update function names (speculators/algos.py)
                archs[name] = {"as": wrapped, "class": list(hit) if hit else None,
                               "direct": list(direct) if direct else None}
        out["architectures"] = archs
        from vllm.config import speculative as _spec
        rope = getattr(_spec, "_CACHE_ONLY_ROPE_TYPES", None)
        out["cache_only_rope_types"] = sorted(rope) if rope is not None else None
        from vllm.transformers_utils.configs.speculators import algos
        types = getattr(algos, "SUPPORTED_SPECULATORS_TYPES", {})
        out["speculators_types"] = {k: where(v) for k, v in sorted(types.items())}
        return out

    data = json.load(sys.stdin)
    out = {}
    for key, d in data["drafts"].items():
        out[key] = answer(d)
    doc = {"versions": {"vllm": vllm.__version__, "torch": torch.__version__,
                        "transformers": transformers.__version__, "python": sys.version.split()[0]},
           "functions": funcs, "drafts": out, "times": {k: round(v, 1) for k, v in times.items()}}
    if data.get("release") is not None:
        doc["release"] = release_answers(data["release"])
    if patched:
        doc["patched"] = patched
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
