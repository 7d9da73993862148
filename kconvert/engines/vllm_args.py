"""The arguments of a vLLM engine for a live request: `vllm.LLM` keyword arguments, the environment, and every
setting kconvert chose by itself (so that a report can list them).

The same request serves a tiny model on vLLM's CPU build and Kimi-K2.5 on 8 GPUs; settings that only vLLM's CPU
platform needs are applied here, automatically and only on that platform. Pure: reads no file, imports no vLLM
(`read_model_config` and `patched_draft_folder` are the file-touching helpers the callers use around it).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kconvert.engines.installed import detect_platform
from kconvert.engines.live_run import LiveRequest
from kconvert.errors import UsageError
from kconvert.source.names import CONFIG_NAME
from kconvert.writer.config import deep_merge

# CPU-platform defaults (docs/vllm-cpu.md#engine-settings: the errors without them).
CPU_KVCACHE_SPACE_GIB = "1"  # vLLM's CPU default sizes the KV cache from free RAM, far too much beside a trainer
CPU_GPU_MEMORY_UTILIZATION = 0.5  # 0.92 default: "Available memory on node 0 ... is less than desired ..."
CPU_MAX_MODEL_LEN = 512


def read_model_config(path_or_id: str | None, *, revision: str | None = None) -> dict[str, Any] | None:
    """The ``config.json`` of a local folder or, for a hub id, from the hub cache / hub; ``None`` if unknown."""
    if not path_or_id:
        return None
    p = Path(path_or_id)
    if p.is_dir():
        cfg = p / CONFIG_NAME
        try:
            return json.loads(cfg.read_text(encoding="utf-8")) if cfg.is_file() else None
        except (OSError, json.JSONDecodeError):
            return None
    try:
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(path_or_id, CONFIG_NAME, revision=revision)
        return json.loads(Path(local).read_text(encoding="utf-8"))
    except Exception:
        return None


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
    settings first, then ``req.env``. ``req.engine_args`` are merged last and win. ``auto_settings`` names every
    choice made automatically, for the report. ``draft_path`` replaces ``req.draft`` (a patched temp copy).
    """
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
    auto = _Auto(req, args, os.environ if environ is None else environ)
    if platform == "cpu":
        _cpu_settings(auto, target_config, draft_config, cpu_cores, has_draft=bool(draft))
    _text_only(auto, target_config)
    auto.env.update({str(k): str(v) for k, v in req.env.items()})
    args.update(req.engine_args)
    return args, auto.env, auto.settings


def _speculative_config(req: LiveRequest, draft: str) -> dict[str, Any]:
    spec: dict[str, Any] = dict(req.speculative_extra)
    spec.update({"model": draft, "method": req.method, "num_speculative_tokens": int(req.num_speculative_tokens)})
    if req.draft_tp is not None:
        spec["draft_tensor_parallel_size"] = int(req.draft_tp)
    return spec


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


def _text_only(auto: _Auto, target_config: Mapping[str, Any] | None) -> None:
    """A multimodal target runs text only: kconvert's prompts are text, and the vision tower costs memory."""
    if "limit_mm_per_prompt" in auto.req.engine_args or "language_model_only" in auto.req.engine_args:
        return
    if _is_kimi_k25(target_config):
        auto.arg("limit_mm_per_prompt", {"vision_chunk": 0}, "Kimi-K2.5 target: text-only run")
    elif target_config and target_config.get("vision_config") is not None:
        auto.arg("language_model_only", True, "multimodal target: text-only run")


def patched_draft_folder(draft: str, overrides: Mapping[str, Any], dest: Path) -> Path:
    """A folder that is ``draft`` with ``overrides`` merged into its ``config.json`` (other files symlinked).

    vLLM 0.32's ``SpeculativeConfig`` has no ``hf_overrides`` for the draft: only a *callable* target
    ``hf_overrides`` reaches the draft config, dict overrides stay target-only.
    """
    src = Path(draft)
    if not src.is_dir() or not (src / CONFIG_NAME).is_file():
        raise UsageError(f"draft overrides need a local draft folder with config.json: {draft}")
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name != CONFIG_NAME:
            os.symlink(entry.resolve(), dest / entry.name)
    config = json.loads((src / CONFIG_NAME).read_text(encoding="utf-8"))
    (dest / CONFIG_NAME).write_text(json.dumps(deep_merge(config, overrides), indent=2), encoding="utf-8")
    return dest


@dataclass
class EngineSetup:
    """Everything a vLLM process for one request is started with."""

    platform: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    auto_settings: list[str]
    draft_path: str | None = None  # the patched temporary copy of the draft, when the request overrides its config


def setup_engine(req: LiveRequest, scratch: Path) -> EngineSetup:
    """The engine arguments for `req` on this machine's platform, with the draft's config overrides applied in a
    copy under `scratch` (the caller removes it)."""
    draft_path = None
    if req.draft and req.draft_overrides:
        draft_path = str(patched_draft_folder(req.draft, req.draft_overrides, scratch / "draft"))
    platform = detect_platform()
    draft_config = read_model_config(draft_path or req.draft) if req.draft else None
    engine_args, env, auto = build_engine_args(req, platform=platform, target_config=read_model_config(req.target),
                                               draft_config=draft_config, draft_path=draft_path)
    return EngineSetup(platform, engine_args, env, auto, draft_path)
