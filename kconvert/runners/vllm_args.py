"""The arguments of a vLLM engine for a live request: `vllm.LLM` keyword arguments, the environment, and every
setting kconvert chose by itself (so that a report can list them).

The same request serves a tiny model on vLLM's CPU build and Kimi-K2.5 on 8 GPUs; settings that only vLLM's CPU
platform needs are applied here, automatically and only on that platform. Pure: reads no file, imports no vLLM,
takes the configs as values (`kconvert.runners.engine_setup` reads them and patches a draft's copy).
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

from kconvert.engines.arg_policy import (Refusal, engine_arg_refusals, env_refusals, normalize_keys, refuse,
                                         speculative_refusals)
from kconvert.engines.live_messages import LiveRequest
from kconvert.errors import UsageError

# CPU-platform defaults (docs/vllm-cpu.md#engine-settings: the errors without them).
CPU_KVCACHE_SPACE_GIB = "1"  # vLLM's CPU default sizes the KV cache from free RAM, far too much beside a trainer
CPU_GPU_MEMORY_UTILIZATION = 0.5  # 0.92 default: "Available memory on node 0 ... is less than desired ..."
CPU_MAX_MODEL_LEN = 512


def parse_engine_args(items: Iterable[str] | None, flag: str = "--engine-arg") -> dict[str, Any]:
    """`--engine-arg KEY=VALUE` items (verify, trace, matrix --live) as `vllm.LLM` keyword arguments: the key as
    EngineArgs names it (`max-model-len` and `--max-model-len` become `max_model_len`), the value as JSON when it
    parses (`4096`, `true`, `{"backend": "FLASH_ATTN"}`), else the string (`float32`). A later item wins."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: use KEY=VALUE (VALUE as JSON when it parses, else a string)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _is_mla(config: Mapping[str, Any] | None) -> bool:
    if not config:
        return False
    text = config.get("text_config") or {}
    return config.get("kv_lora_rank") is not None or (isinstance(text, dict) and text.get("kv_lora_rank") is not None)


def _is_kimi_k25(config: Mapping[str, Any] | None) -> bool:
    if not config:
        return False
    archs = " ".join(config.get("architectures") or [])
    return config.get("model_type") == "kimi_k25" or "KimiK25" in archs


def _cpu_core_list() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def build_engine_args(
    req: LiveRequest,
    *,
    platform: str,
    target_config: Mapping[str, Any] | None = None,
    draft_config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    cpu_cores: list[int] | None = None,
    draft_path: str | None = None,
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Return ``(engine_args, env, auto_settings)`` for ``vllm.LLM`` (pure: reads nothing, imports no vLLM).

    ``env`` holds only what kconvert sets on top of ``environ`` (the caller's environment): automatic
    settings first, then ``req.env``. ``req.engine_args`` are merged last and win, except a ``speculative_config``
    given there, whose keys are merged into kconvert's own (the draft, the method and k stay kconvert's).
    ``auto_settings`` names every choice made automatically, for the report. ``draft_path`` replaces ``req.draft``
    (a patched temp copy).

    Every path to an engine builds its arguments here, so the engine-argument policy
    (kconvert.engines.arg_policy) is checked here: a refused key raises UsageError (exit 2) and nothing starts.
    """
    check_live_request(req)
    user_args = normalize_keys(req.engine_args)
    user_spec = user_args.pop("speculative_config", None)
    args: dict[str, Any] = {
        "model": req.target,
        "tensor_parallel_size": int(req.tp),
        "trust_remote_code": bool(req.trust_remote_code),
        "disable_log_stats": False,  # get_metrics() is empty without stats
        "seed": 0,
    }
    draft = draft_path or req.draft
    if draft:
        args["speculative_config"] = _speculative_config(req, draft)
    elif req.record_layers is not None:
        args.update(recording_args(req.record_layers, req.record_dir))
    auto = _Auto(req, args, os.environ if environ is None else environ)
    if platform == "cpu":
        _cpu_settings(auto, target_config, draft_config, cpu_cores, has_draft=bool(draft))
    _text_only(auto, target_config)
    auto.env.update({str(k): str(v) for k, v in req.env.items()})
    args.update(user_args)
    if draft and isinstance(user_spec, dict):
        # the draft, method and k were refused above; the other keys join kconvert's config (a run without a draft,
        # the lossless baseline, takes none: it measures the target alone)
        args["speculative_config"].update(normalize_keys(user_spec))
    return args, auto.env, auto.settings


def check_live_request(req: LiveRequest) -> None:
    """The engine-argument policy on everything of `req` that reaches the engine: its engine arguments (with a
    speculative_config given there), a replayed line's further speculative_config keys, the environment it passes.
    A recording run's speculative_config and KV connector are kconvert's own."""
    found = engine_arg_refusals(req.engine_args)
    found += speculative_refusals(req.speculative_extra, origin="replay")
    found += env_refusals(req.env, where="env")
    if req.record_layers is not None and "speculative_config" in normalize_keys(req.engine_args):
        found.append(Refusal("--engine-arg", "speculative_config", req.engine_args.get("speculative_config"),
                             "a recording run's speculative_config is kconvert's (method extract_hidden_states)"))
    refuse(found)


def _speculative_config(req: LiveRequest, draft: str) -> dict[str, Any]:
    spec: dict[str, Any] = dict(req.speculative_extra)
    spec.update({"model": draft, "method": req.method, "num_speculative_tokens": int(req.num_speculative_tokens)})
    if req.draft_tp is not None:
        spec["draft_tensor_parallel_size"] = int(req.draft_tp)
    return spec


# vLLM's hidden-states recording (PR #33736): the extract_hidden_states method caches the aux hidden states of every
# scheduled token in a cache-only layer; its connector writes each finished request to <storage>/<req_id>.safetensors.
# kconvert's subclass of vLLM's ExampleHiddenStatesConnector also writes on vLLM's CPU platform (the module says why).
RECORD_CONNECTOR = "CPUCapableHiddenStatesConnector"
RECORD_CONNECTOR_MODULE = "kconvert.runners.hidden_states_connector"


def recording_args(layers: list[int], storage: str | None) -> dict[str, Any]:
    """`speculative_config` and `kv_transfer_config` of a recording run: the streams entering `layers`
    (vLLM's aux ids, input-of-layer numbering; k = L is the stream after the last layer), written to `storage`.
    extract_hidden_states takes exactly one speculative token (vllm/v1/spec_decode/extract_hidden_states.py), and
    reads the ids from the draft config it builds over the target's (`draft_model_config.hf_config`)."""
    if storage is None:
        raise ValueError("a recording run needs record_dir")
    return {
        "speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                               "draft_model_config": {"hf_config": {
                                   "eagle_aux_hidden_state_layer_ids": [int(k) for k in layers]}}},
        "kv_transfer_config": {"kv_connector": RECORD_CONNECTOR, "kv_connector_module_path": RECORD_CONNECTOR_MODULE,
                               "kv_role": "kv_producer",
                               "kv_connector_extra_config": {"shared_storage_path": storage}},
    }


class _Auto:
    """The settings kconvert chooses by itself: each only where the user set nothing, each named for the report."""

    def __init__(self, req: LiveRequest, args: dict[str, Any], environ: Mapping[str, str]):
        self.req, self.args, self.environ = req, args, environ
        self.env: dict[str, str] = {}
        self.settings: list[str] = []

    def arg(self, key: str, value: Any, why: str) -> None:
        if key not in self.req.engine_args:
            self.args[key] = value
            self.settings.append(f"{key}={value} ({why})")

    def effective_env(self, key: str) -> str | None:
        """The value the engine process sees: the request's env wins (merged last by build_engine_args), then what
        kconvert set, then the caller's environment (processes.child_env: os.environ with the returned env on
        top). kconvert sets a variable only where the caller's is unset or empty (env_var)."""
        if key in self.req.env:
            return str(self.req.env[key])
        if key in self.env:
            return self.env[key]
        return self.environ.get(key)

    def env_var(self, key: str, value: str, why: str) -> None:
        if key not in self.req.env and not self.environ.get(key):
            self.env[key] = value
            self.settings.append(f"{key}={value} ({why})")


def _cpu_settings(auto: _Auto, target_config: Mapping[str, Any] | None, draft_config: Mapping[str, Any] | None,
                  cpu_cores: list[int] | None, *, has_draft: bool) -> None:
    req = auto.req
    auto.env_var("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_SPACE_GIB, "GiB of KV cache on vLLM's CPU platform")
    auto.arg("gpu_memory_utilization", CPU_GPU_MEMORY_UTILIZATION, "CPU platform")
    auto.arg("enforce_eager", True, "CPU platform: no graph compilation")
    mml = max(CPU_MAX_MODEL_LEN, int(req.max_tokens) + CPU_MAX_MODEL_LEN - 64)
    text = (target_config or {}).get("text_config") or target_config or {}
    cap = text.get("max_position_embeddings") if isinstance(text, dict) else None
    if isinstance(cap, int) and 0 < cap < mml:
        mml = cap
    auto.arg("max_model_len", mml, "CPU platform: small KV cache")
    if int(req.tp) > 1:
        cores = cpu_cores if cpu_cores is not None else _cpu_core_list()
        bind = "|".join(str(cores[i % len(cores)]) for i in range(int(req.tp)))
        auto.env_var("VLLM_CPU_OMP_THREADS_BIND", bind, "one core per CPU worker")
    draft_archs = " ".join((draft_config or {}).get("architectures") or [])
    if has_draft and _is_mla(target_config) and "deepseek" not in draft_archs.lower():
        auto.env_var("VLLM_MLA_DISABLE", "1", "Llama-layer draft beside an MLA target on CPU: "
                                              "'No common block size for 16 (CPU_MLA ...; CPU_ATTN ...)'")
    # What the engine will see, not what kconvert tried to set: a VLLM_MLA_DISABLE=0 of the caller's (or the
    # request's) wins over kconvert's 1, and MLA then runs (vllm/envs.py reads VLLM_MLA_DISABLE as bool(int(value))).
    mla_disabled = (auto.effective_env("VLLM_MLA_DISABLE") or "0").strip().lower() not in ("0", "false", "")
    if not mla_disabled:
        _cpu_mla_backend(auto, target_config, draft_config, has_draft=has_draft)


# vLLM's CPU platform runs an MLA model on AMX_MLA whenever the CPU has AMX tiles, unless CPU_MLA is asked for
# (vllm/platforms/cpu.py get_attn_backend_cls: `torch.cpu._is_amx_tile_supported()`; check_and_update_config
# sizes the KV blocks by the same test). AMX_MLA takes no float32: its class lists only bfloat16
# (vllm/v1/attention/backends/mla/amx_mla.py supported_dtypes) and convert_weight_packed refuses float32 at load
# ("expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8"). So a float32 MLA model asks for CPU_MLA.
# Set on every x86 CPU, not only where AMX is present: without AMX vLLM picks CPU_MLA itself (the same branch),
# so the setting changes nothing there, and the engine arguments (and a report's serve line) stay the same on every
# CPU, built without importing torch. The draft gets its own key: it never inherits the target's backend
# (vllm/config/speculative.py _DRAFT_VLLM_CONFIG_OVERRIDES, SpeculativeConfig.attention_backend: None = selected
# anew; v1/spec_decode/llm_base_proposer.py _create_draft_vllm_config). Same in vLLM 0.33.
CPU_MLA_BACKEND = "CPU_MLA"
_CPU_MLA_WHY = ("float32 MLA {who} on vLLM's CPU platform: an AMX CPU would pick AMX_MLA, which takes no float32 "
                "(vllm/v1/attention/backends/mla/amx_mla.py convert_weight_packed); vLLM's own pick elsewhere")


def _float32_requested(req: LiveRequest) -> bool:
    """Whether the engine will run float32: the `dtype` engine arg, or with "auto" (vLLM's default) the target
    config's dtype, which vLLM's CPU platform downcasts from float32 to bfloat16 on x86
    (vllm/config/model.py _resolve_auto_dtype: "Downcast for float32 models" to supported_dtypes[0]). The draft
    runs in the target's dtype (vllm/config/speculative.py: the draft ModelConfig takes
    dtype=self.target_model_config.dtype)."""
    dtype = req.engine_args.get("dtype", "auto")
    dtype = str(dtype).lower().removeprefix("torch.")
    return dtype in ("float32", "float")


def _user_attention_backend(engine_args: Mapping[str, Any]) -> bool:
    """The user named a backend (any value, "auto" too): theirs stands."""
    att = engine_args.get("attention_config")
    return "attention_backend" in engine_args or (isinstance(att, Mapping) and "backend" in att)


def _cpu_mla_backend(auto: _Auto, target_config: Mapping[str, Any] | None, draft_config: Mapping[str, Any] | None,
                     *, has_draft: bool) -> None:
    req = auto.req
    if not _float32_requested(req):
        return  # bf16 (and float16) keep whatever vLLM picks
    if _is_mla(target_config) and not _user_attention_backend(req.engine_args):
        auto.arg("attention_backend", CPU_MLA_BACKEND, _CPU_MLA_WHY.format(who="target"))
    spec = auto.args.get("speculative_config")
    if (has_draft and isinstance(spec, dict) and _is_mla(draft_config) and "speculative_config" not in req.engine_args
            and "attention_backend" not in spec):
        spec["attention_backend"] = CPU_MLA_BACKEND
        auto.settings.append(f"speculative_config.attention_backend={CPU_MLA_BACKEND} "
                             f"({_CPU_MLA_WHY.format(who='draft')}; the draft does not inherit the target's backend: "
                             "vllm/config/speculative.py _DRAFT_VLLM_CONFIG_OVERRIDES)")


def _text_only(auto: _Auto, target_config: Mapping[str, Any] | None) -> None:
    """A multimodal target runs text only: kconvert's prompts are text, and the vision tower costs memory."""
    if "limit_mm_per_prompt" in auto.req.engine_args or "language_model_only" in auto.req.engine_args:
        return
    if _is_kimi_k25(target_config):
        auto.arg("limit_mm_per_prompt", {"vision_chunk": 0}, "Kimi-K2.5 target: text-only run")
    elif target_config and target_config.get("vision_config") is not None:
        auto.arg("language_model_only", True, "multimodal target: text-only run")
