"""`kconvert trace`: record what a target produces on a prompt set (a trace), once, so that drafts can be scored
without it (kconvert.score reads traces; nothing here imports kconvert.score).

- format: the trace folder's reader and writer (trace.json + safetensors; `open_trace`, `TraceWriter`, `TraceMeta`);
- api: `trace(request)`, the one entry the CLI calls, and its result; sources: the producers it dispatches to by
  name (record_hf: HF transformers, record_vllm: inside vLLM, from_dump: an offline training dump);
- request (what to record), hf_target (the target in transformers), prompt_ids (the token ids recorded from),
  capture (the residual streams' hooks), device (torch's device and threads, shared with score);
- estimate (a trace's bytes from the config alone, the layers drafts need), publish (`push-trace`).

The names below are imported on first use: `import kconvert.trace.format` (numpy) or a recorder (torch) is paid
only by the code that needs it, and `kconvert.score` importing `kconvert.trace.sources` loads neither.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "trace": "kconvert.trace.api", "TraceResult": "kconvert.trace.api", "EstimateRequest": "kconvert.trace.api",
    "TraceRequest": "kconvert.trace.request", "DumpRequest": "kconvert.trace.from_dump",
    "SOURCES": "kconvert.trace.sources", "open_trace": "kconvert.trace.format", "TraceMeta": "kconvert.trace.format",
    "TraceWriter": "kconvert.trace.format", "push_trace": "kconvert.trace.publish",
}


def __getattr__(name: str) -> Any:
    # deferred: the format loads numpy and the recorders torch; a caller pays only for the names it uses
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kconvert.trace' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)
