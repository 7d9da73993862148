"""`trace(...)`: the one library entry of `kconvert trace`. It takes a request, runs the source it names
(kconvert.trace.sources) or the size estimate, and returns a TraceResult the CLI only renders.

- TraceRequest (kconvert.trace.request): record by running the target, `engine` "hf" (HF transformers) or "vllm";
- DumpRequest (kconvert.trace.from_dump): build the trace from an offline training dump of hidden states;
- EstimateRequest: the bytes the trace would take, from the target's config alone; nothing is recorded.

`for_drafts` (drafts' references) sets a recording's layers to the streams the engine feeds those drafts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kconvert.errors import UsageError
from kconvert.trace.sources import SOURCES, engines, require_torch


@dataclass
class EstimateRequest:
    """`kconvert trace --estimate`: the positions are given, or counted from the prompts (their outputs and
    lookahead, prompt tokens not counted) or from the continuations' tokens."""

    target: str
    layers: list[int] | str | None = None
    aux_ids: list[int] | None = None
    dtype: str = "bfloat16"
    lm_head: bool = False
    shard_size: int | None = None
    positions: int | None = None
    prompts: str = "all"
    max_prompts: int | None = None
    max_tokens: int = 64
    lookahead: int = 8
    continuations: str | None = None  # a .jsonl of {prompt_token_ids, output_token_ids}


@dataclass
class TraceResult:
    source: str  # a name of SOURCES, or "estimate"
    path: Path | None = None  # the trace folder written
    meta: dict[str, Any] | None = None  # its trace.json, as written
    estimate: Any = None  # kconvert.trace.estimate.TraceEstimate
    positions_from: str | None = None  # how the estimate's positions were counted

    def to_dict(self) -> dict[str, Any]:
        """What `kconvert trace --json` prints: trace.json without the target's config (or the estimate)."""
        if self.estimate is not None:
            return self.estimate.to_dict() | {"positions_from": self.positions_from}
        doc = dict(self.meta or {})
        doc["target"] = {k: v for k, v in doc.get("target", {}).items() if k != "config"}
        return doc


def trace(request: Any, *, for_drafts: list[str] | None = None,
          progress: Callable[[str], None] | None = None) -> TraceResult:
    """Record (or estimate) the trace `request` asks for; see the module's docstring. `for_drafts` replaces
    `request.layers` (the request is updated in place); a TraceRequest's `continuations_from` is read into its
    `continuations` when they are not given."""
    if for_drafts:
        from kconvert.trace.estimate import draft_layers

        layers = draft_layers(request.target, for_drafts)
        if hasattr(request, "layers"):
            request.layers = layers
    if isinstance(request, EstimateRequest):
        return _estimate(request)
    name = "dump" if type(request).__name__ == "DumpRequest" else getattr(request, "engine", "hf")
    src = SOURCES.get(name)
    if src is not None and src.needs_torch:
        require_torch(*src.needs_torch)
    if src is None or src.request != type(request).__name__:
        raise UsageError(f"--engine {name!r}: choose {' or '.join(engines())}")
    from kconvert.trace.format import check_trace_destination, request_inputs

    # before a target is loaded or an engine started: the writer checks again when it starts
    check_trace_destination(request.out, force=request.force, inputs=request_inputs(request))
    if name == "hf" and (request.tp != 1 or request.engine_args or getattr(request, "trust_remote_code", False)):
        raise UsageError("--tp, --engine-arg and --trust-remote-code set up vLLM: give them with --engine vllm "
                         "(the hf recorder never runs remote code)")
    if getattr(request, "continuations_from", None) and request.continuations is None:
        from kconvert.prompts import read_continuations

        request.continuations = read_continuations(request.continuations_from)
    out = Path(src.recorder()(request, progress=progress))
    from kconvert.trace.format import META_NAME

    return TraceResult(name, out, json.loads((out / META_NAME).read_text()))


def _estimate(req: EstimateRequest) -> TraceResult:
    from kconvert.trace.estimate import estimate

    if req.continuations:
        from kconvert.prompts import read_continuations

        items = read_continuations(req.continuations)
        n = len(items)
        counted = sum(len(it["prompt_token_ids"]) + len(it["output_token_ids"]) + req.lookahead for it in items)
        how = "the continuations' tokens and lookahead"
    else:
        from kconvert.prompts import load_prompts

        _, texts = load_prompts(req.prompts)
        n = len(texts[:req.max_prompts] if req.max_prompts else texts)
        counted = n * (req.max_tokens + req.lookahead)
        how = f"{n} prompts x (max_tokens {req.max_tokens} + lookahead {req.lookahead}); prompt tokens not counted"
    if req.positions is not None:
        counted, how = req.positions, "given (--positions)"
    est = estimate(req.target, positions=counted, sequences=min(n, counted), layers=req.layers, aux_ids=req.aux_ids,
                   dtype=req.dtype, lm_head=req.lm_head, shard_size=req.shard_size)
    return TraceResult("estimate", estimate=est, positions_from=how)


__all__ = ["EstimateRequest", "TraceResult", "trace"]
