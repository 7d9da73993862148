"""The trace sources: who produces a trace's tokens and states, one module each, keyed by the name `trace()` takes.

A source is a module of kconvert.trace with one function `(request, progress) -> Path` that writes the trace
folder (through kconvert.trace.format.TraceWriter) and returns its path. `SOURCES` names it, the request type it
takes, and what it needs installed that `trace()` checks before it runs (torch: the command and the extra named in
the message; None: the source checks for itself, as the vLLM recorder does for vLLM). The module is imported only
when its source records. CONTRIBUTING.md "Adding a trace source" says what a new one needs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from kconvert.errors import MissingPackageError


@dataclass(frozen=True)
class Source:
    name: str
    module: str  # kconvert.trace.<module>, imported when the source records
    function: str  # its record function: (request, progress=None) -> Path
    request: str  # the request type it takes: "TraceRequest" (kconvert.trace.request) or "DumpRequest"
    needs_torch: tuple[str, str] | None  # (command, extra) named when torch is missing; None: checked by the source

    def recorder(self) -> Callable[..., Any]:
        return getattr(importlib.import_module(self.module), self.function)


SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("hf", "kconvert.trace.record_hf", "record_trace", "TraceRequest", ("kconvert trace", "trace")),
    # the vLLM recorder checks for vLLM itself (record_vllm.check_recording_vllm: the live extra, which brings torch)
    Source("vllm", "kconvert.trace.record_vllm", "record_trace_vllm", "TraceRequest", None),
    Source("dump", "kconvert.trace.from_dump", "trace_from_dump", "DumpRequest",
           ("kconvert trace --from-dump", "trace")),
)}


def require_torch(step: str = "kconvert score", extra: str = "score") -> None:
    """MissingPackageError (exit 3) naming the command that needs torch and the extra that installs it."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError:
        raise MissingPackageError(step, "torch", extra) from None


def engines() -> list[str]:
    """The sources a TraceRequest's `engine` may name (--engine)."""
    return [n for n, s in SOURCES.items() if s.request == "TraceRequest"]
