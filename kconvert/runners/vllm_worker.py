"""The child process of a live vLLM run: ``python -m kconvert.runners.vllm_worker <request.json> <result.json>``.

It receives fully built engine arguments from :mod:`kconvert.runners.vllm_offline` (which also set its
environment), starts ``vllm.LLM``, generates, reads the engine's own counters through ``get_metrics()`` and
writes the result JSON. It prints ``@@kconvert-stage <stage>`` lines that the parent tails for progress.
Everything that can go wrong is left to surface as a non-zero exit and the log; the parent classifies it.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from kconvert.engines.arg_policy import settings_from_config
from kconvert.runners.worker_probe import WORKER_EXTENSION

STAGE_MARKER = "@@kconvert-stage "
ERROR_MARKER = "@@kconvert-error "

SPEC_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _stage(name: str) -> None:
    print(f"{STAGE_MARKER}{name}", flush=True)


def _watch_parent(parent_pid: int) -> None:
    """Kill our whole process group when the parent disappears (e.g. SIGKILLed), so no engine is orphaned."""

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                try:
                    os.killpg(os.getpgrp(), 9)
                finally:
                    os._exit(137)

    threading.Thread(target=watch, name="kconvert-parent-watch", daemon=True).start()


def metrics_to_json(metrics: list[Any]) -> list[dict[str, Any]]:
    """Counters and vectors of ``LLM.get_metrics()`` as plain dicts (gauges and histograms are dropped)."""
    out: list[dict[str, Any]] = []
    for m in metrics:
        kind = type(m).__name__
        if kind == "Counter":
            out.append({"name": m.name, "type": "counter", "labels": dict(m.labels), "value": int(m.value)})
        elif kind == "Vector":
            out.append(
                {"name": m.name, "type": "vector", "labels": dict(m.labels), "values": [int(v) for v in m.values]}
            )
    return out


def spec_counters(raw: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum the spec-decode counters over all label sets (one per engine / model name)."""
    drafts = sum(m["value"] for m in raw if m["name"] == SPEC_DRAFTS and m["type"] == "counter")
    draft_tokens = sum(m["value"] for m in raw if m["name"] == SPEC_DRAFT_TOKENS and m["type"] == "counter")
    accepted = sum(m["value"] for m in raw if m["name"] == SPEC_ACCEPTED and m["type"] == "counter")
    per_pos: list[int] = []
    for m in raw:
        if m["name"] == SPEC_ACCEPTED_PER_POS and m["type"] == "vector":
            vals = m["values"]
            per_pos += [0] * (len(vals) - len(per_pos))
            for i, v in enumerate(vals):
                per_pos[i] += int(v)
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted, "accepted_per_pos": per_pos}


def render_prompts(tokenizer: Any, prompts: list[str], chat_template: bool | None) -> tuple[list[list[int]], bool]:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template is True and not has_template:
        raise ValueError("the target tokenizer has no chat template (chat_template=True was requested)")
    use_template = has_template if chat_template is None else chat_template
    token_ids: list[list[int]] = []
    for p in prompts:
        if use_template:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            # The template already carries BOS etc.; encoding it with special tokens would double them.
            token_ids.append(list(tokenizer.encode(text, add_special_tokens=False)))
        else:
            token_ids.append(list(tokenizer.encode(p, add_special_tokens=True)))
    return token_ids, use_template


def _spec_metrics(output: Any) -> dict[str, Any] | None:
    m = getattr(output.outputs[0], "spec_decode_metrics", None)
    return m.to_dict() if m is not None and hasattr(m, "to_dict") else None


def _attention_backends(llm: Any) -> dict[str, list[str]] | None:
    """Rank 0's answer (every rank builds the same layers); None where the engine cannot be asked."""
    try:
        answers = llm.collective_rpc("kconvert_attention_backends")
    except Exception as exc:  # the run itself is unaffected
        print(f"kconvert: warning: could not read the attention backends: {type(exc).__name__}: {exc}", flush=True)
        return None
    return answers[0] if answers else None


def config_dump(llm: Any) -> dict[str, Any] | None:
    """The engine's resolved VllmConfig as vLLM's own /server_info?config_format=json dumps it
    (vllm/entrypoints/serve/dev/server_info/api_router.py), so one reader (kconvert.engines.arg_policy
    settings_from_config) takes the measurement's identity from a live run and from a server alike."""
    try:
        import pydantic
        from vllm.config import VllmConfig

        return pydantic.TypeAdapter(VllmConfig).dump_python(llm.llm_engine.vllm_config, mode="json", fallback=str)
    except Exception as exc:  # the run itself is unaffected; the report then shows the settings as given
        print(f"kconvert: warning: could not read the engine's config: {type(exc).__name__}: {exc}", flush=True)
        return None


def run(spec: dict[str, Any]) -> dict[str, Any]:
    t_total = time.perf_counter()
    _stage("starting engine")
    # deferred: the parent imports this module for its request shape and must not load vLLM (seconds) itself
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.platforms import current_platform

    platform = "cpu" if current_platform.is_cpu() else str(getattr(current_platform, "device_type", "gpu"))
    if spec.get("platform") and spec["platform"] != platform:
        print(
            f"kconvert: warning: engine args were built for platform {spec['platform']!r} "
            f"but vLLM runs on {platform!r}",
            flush=True,
        )
    engine_args = dict(spec["engine_args"])
    probe = "worker_extension_cls" not in engine_args  # a user's own extension stands; the report then names none
    if probe:
        # reads the attention backend each model really runs on (kconvert/runners/worker_probe.py); adds no kernel
        engine_args["worker_extension_cls"] = WORKER_EXTENSION
    t0 = time.perf_counter()
    llm = LLM(**engine_args)
    engine_start_s = time.perf_counter() - t0
    _stage("engine ready")
    attention_backends = _attention_backends(llm) if probe else None
    # what the engine resolved for every recorded key (sampling methods, dtype, backends ...), and the recorded
    # variables of the environment the engine processes inherit from this one
    engine_settings = settings_from_config(config_dump(llm), spec["engine_args"], os.environ)

    tokenizer = llm.get_tokenizer()
    token_ids, applied = render_prompts(tokenizer, spec["prompts"], spec.get("chat_template"))
    sampling = SamplingParams(**spec["sampling"])
    _stage("generating")
    t1 = time.perf_counter()
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in token_ids], sampling, use_tqdm=False)
    generate_s = time.perf_counter() - t1
    raw = metrics_to_json(llm.get_metrics())
    result = {
        "engine": "vllm",
        "engine_version": vllm.__version__,
        "platform": platform,
        "counters": spec_counters(raw),
        "output_token_ids": [list(o.outputs[0].token_ids) for o in outputs],
        "output_texts": [o.outputs[0].text for o in outputs],
        "prompt_token_counts": [len(ids) for ids in token_ids],
        "prompt_token_ids": [list(ids) for ids in token_ids],
        "spec_decode_per_request": [_spec_metrics(o) for o in outputs],
        "hidden_states_paths": [(getattr(o, "kv_transfer_params", None) or {}).get("hidden_states_path")
                                for o in outputs],
        "chat_template_applied": applied,
        "attention_backends": attention_backends,
        "engine_settings": engine_settings,
        "raw_metrics": raw,
        "timings": {"engine_start_s": engine_start_s, "generate_s": generate_s,
                    "total_s": time.perf_counter() - t_total},
    }
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # the parent sweeps the process group anyway
        pass
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m kconvert.runners.vllm_worker <request.json> <result.json>", file=sys.stderr)
        return 2
    request_path, result_path = argv
    with open(request_path, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("parent_pid"):
        _watch_parent(int(spec["parent_pid"]))
    try:
        result = run(spec)
    except BaseException as exc:
        # One parseable line for the parent; the traceback above it stays in the log for last_lines.
        import traceback

        traceback.print_exc()
        line = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        print(f"{ERROR_MARKER}{line}", flush=True)
        return 1
    tmp = result_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    _stage("done")
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: vLLM's atexit hooks can hang on a half-dead engine; the parent reaps the rest.
    os._exit(code)
