"""One matrix run: gather the drafts, plan a cell per draft x engine row (plus a score per draft with a trace and
live cells on the installed vLLM), take what the cache holds, run the rest on an executor, assemble one document
(schemas/matrix.schema.json).

    from kconvert.matrix import MatrixRequest, run_matrix
    doc = run_matrix(MatrixRequest(drafts=["runs/*/epoch_*"], target="kimi-k2.5", trace="./trace"))
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert._version import __version__
from kconvert.errors import EXIT_ENGINE, EXIT_INTERNAL, UsageError, did_you_mean
from kconvert.matrix.cache import CellCache
from kconvert.matrix.cells import CELL_FUNCTIONS
from kconvert.matrix.executors import Resources, Task
from kconvert.matrix.fixes import draft_fixes, row_of
from kconvert.matrix.gather import DraftEntry, gather
from kconvert.matrix.spec import CellSpec, settings_tuple


@dataclass
class MatrixRequest:
    drafts: list[str] = field(default_factory=list)
    from_file: str | None = None
    hub_search: str | None = None
    hub_author: str | None = None
    hub_limit: int = 200
    target: str | None = None
    engines: str | None = "all"
    trace: str | None = None
    live: bool = False
    k: int = 3
    # score: torch threads per cell, only the first N sequences of the trace
    score_threads: int | None = None
    max_sequences: int | None = None
    # live: what `kconvert verify` takes
    prompts: str = "all"
    max_prompts: int | None = None
    max_tokens: int = 64
    engine_args: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 1200.0
    trust_remote_code: bool = False
    refresh: bool = False
    # --oracle: each static cell of a learnable engine's row also asks that release's own code about the draft
    # (kconvert inspect --oracle; K107 where it disagrees with the row)
    oracle: bool = False
    # the gate of every static cell, as inspect's (kconvert.rules.selection.Selection or None; "error"/"warning")
    selection: Any = None
    fail_on: str = "error"


def engine_rows(value: str | None) -> list[Any]:
    """`all` (every known row), or `vllm:0.32,sglang:post-32334,...`; `vllm` alone is every vLLM row."""
    from kconvert.engines.expectations import ALL_ROWS, KNOWN, engine_rules

    known = [f"{r.engine}:{r.version}" for r in ALL_ROWS]
    if value is None or value.strip() in ("", "all"):
        return list(ALL_ROWS)
    out: list[Any] = []
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        engine, _, version = item.partition(":")
        if engine not in KNOWN:
            raise UsageError(f"--engines {item!r}: no engine {engine!r}{did_you_mean(engine, list(KNOWN))}; "
                             f"known rows: {', '.join(known)}")
        if not version:
            rows = list(KNOWN[engine].values())
        else:
            try:
                rows = [engine_rules(engine, version)]
            except UsageError:
                raise UsageError(f"--engines {item!r}: no such engine row{did_you_mean(item, known)}; known rows: "
                                 f"{', '.join(known)}") from None
        out += [r for r in rows if r not in out]
    if not out:
        raise UsageError(f"--engines {value!r}: no engine row named; known rows: {', '.join(known)}")
    return out


def installed_row(engine: str = "vllm") -> Any:
    """The row of the installed engine for the model runner it runs here (live cells run on it; score models vLLM):
    the CPU build runs Model Runner V1, so its row is `0.32/v1` (config/vllm.py use_v2_model_runner), or None when
    it has none."""
    from kconvert.engines.expectations import row_for, default_runner, other_runner
    from kconvert.engines.installed import installed_version

    inst = installed_version(engine)
    row = row_for(engine, inst) if inst else None
    if row is not None and row.runner is not None and row.runner != default_runner():
        row = other_runner(row) or row
    return row


def trace_digest(trace: str) -> str:
    """sha256 of the trace's trace.json, which records its data file's sha256 and size."""
    from kconvert.guard.paths import read_bytes
    from kconvert.trace.format import MAX_META_BYTES, META_NAME

    meta = Path(trace).expanduser() / META_NAME
    if not os.path.lexists(meta):  # a FIFO or a folder of that name is refused by the read guard, by name
        raise UsageError(f"--trace {trace}: not a trace folder (no trace.json; record one with `kconvert trace`)")
    return "sha256:" + hashlib.sha256(read_bytes(meta, f"--trace {trace}: {META_NAME}",
                                                 max_bytes=MAX_META_BYTES)).hexdigest()


def _rules_text(ids: set[str]) -> dict[str, Any]:
    from kconvert.rules import REGISTRY

    out = {}
    for rid in sorted(ids):
        r = REGISTRY.get(rid)
        if r is not None:
            out[rid] = {"name": r.name, "category": r.category, "severity": r.severity, "summary": r.summary,
                        "why": r.why, "fix": r.fix}
    return out


def _error_cell(spec: CellSpec, message: str) -> dict[str, Any]:
    code = EXIT_ENGINE if spec.kind == "live" else EXIT_INTERNAL
    return {**spec.base_cell(), "state": "error", "finding_ids": [], "message": message, "exit_code": code,
            **({"kind": "score"} if spec.kind == "score" else {})}


def exit_code(cells: list[dict[str, Any]], scores: list[dict[str, Any]]) -> int:
    """3 when a live cell's engine could not run; else 1 when any cell (or score) fails; else 2 when a draft was
    unreadable (an error cell); else 0."""
    if any(c.get("kind") == "live" and c["state"] == "error" for c in cells):
        return 3
    if any(c["state"] == "fail" for c in [*cells, *scores]):
        return 1
    if any(c["state"] == "error" for c in [*cells, *scores]):
        return 2
    return 0


def plan(entries: list[DraftEntry], rows: list[Any], req: MatrixRequest, *, digest: str | None,
         live_row: Any, score_row: Any) -> list[CellSpec]:
    from kconvert.engines.learned import LEARNABLE

    specs: list[CellSpec] = []
    for e in entries:
        tid = e.target["id"]
        for r in rows:
            ask = req.oracle and r.engine in LEARNABLE and tid is not None
            specs.append(CellSpec(draft=e.draft, engine=r.engine, engine_version=r.version, kind="static",
                                  target=tid, revision=e.revision, source=e.source, selection=req.selection,
                                  fail_on=req.fail_on, settings=settings_tuple(oracle=True if ask else None)))
        if req.trace:
            # the trace records its target: score judges the draft against that one
            specs.append(CellSpec(draft=e.draft, engine=score_row.engine, engine_version=score_row.version,
                                  kind="score", target=None, revision=e.revision, source=e.source, trace=req.trace,
                                  trace_digest=digest,
                                  settings=settings_tuple(k=req.k, threads=req.score_threads,
                                                          max_sequences=req.max_sequences)))
        if req.live:
            specs.append(CellSpec(draft=e.draft, engine="vllm", engine_version=live_row.version, kind="live",
                                  target=tid, revision=e.revision, source=e.source,
                                  settings=settings_tuple(k=req.k, prompts=req.prompts, max_prompts=req.max_prompts,
                                                          max_tokens=req.max_tokens,
                                                          engine_args=tuple(sorted(req.engine_args.items())),
                                                          timeout_s=req.timeout_s,
                                                          trust_remote_code=req.trust_remote_code or None)))
    return specs


def _resources(spec: CellSpec) -> Resources:
    if spec.kind == "live":
        return Resources(kind="live", num_cpus=1.0, tp=1)
    return Resources(kind=spec.kind, num_cpus=1.0)


def rank(drafts: list[dict[str, Any]]) -> list[str]:
    """Drafts with a score, best acceptance length first (ties keep row order); a draft whose score was refused
    (static errors, or it does not run as read) has no score and is never ranked."""
    scored = [d for d in drafts if d.get("score")]
    scored.sort(key=lambda d: -d["score"]["acceptance_length"])
    prev, place = None, 0
    for i, d in enumerate(scored, 1):
        if d["score"]["acceptance_length"] != prev:
            place, prev = i, d["score"]["acceptance_length"]
        d["rank"] = place
    return [d["draft"] for d in scored]


def run_matrix(req: MatrixRequest, *, executor: Any = None, cache: CellCache | None = None, api: Any = None,
               on_cell: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The matrix document for `req`. `executor`: a `kconvert.matrix.executors` executor (default: one
    in-process worker); `cache`: a `CellCache` (default: none); `api`: an `HfApi` for --hub-search/--hub-author.
    On KeyboardInterrupt the document holds every cell finished so far, the others as errors, and
    `interrupted: true`; the caller writes it and exits 130."""
    from kconvert.matrix.executors.local import LocalExecutor

    t0 = time.perf_counter()
    rows = engine_rows(req.engines)
    live_row = installed_row("vllm")
    if req.live and live_row is None:
        from kconvert.errors import MissingPackageError

        raise MissingPackageError("kconvert matrix --live", "vllm", "live")
    from kconvert.engines.expectations import engine_rules

    score_row = engine_rules("vllm", None)
    digest = trace_digest(req.trace) if req.trace else None
    entries = gather(req.drafts, from_file=req.from_file, search=req.hub_search, author=req.hub_author,
                     target=req.target, hub_limit=req.hub_limit, api=api)
    t_gather = time.perf_counter()
    specs = plan(entries, rows, req, digest=digest, live_row=live_row, score_row=score_row)
    cache = cache if cache is not None else CellCache(None)  # (an empty cache is falsy: it has a len)
    results: dict[str, dict[str, Any]] = {}
    by_key = {s.key(): s for s in specs}
    todo = []
    for key, s in by_key.items():
        hit = None if req.refresh else cache.get(key)
        if hit is not None:
            results[key] = {**hit, "cached": True}
            if on_cell:
                on_cell(results[key])
        else:
            # a draft's static cells in one worker: the first reads the draft, the other rows reuse what it read
            group = f"static:{s.draft}" if s.kind == "static" else None
            todo.append(Task(key=key, fn=CELL_FUNCTIONS[s.kind], arg=s, resources=_resources(s), group=group))

    def got(key: str, value: dict[str, Any]) -> None:
        value = {**value, "cached": False}
        results[key] = value
        cache.put(key, {k: v for k, v in value.items() if k not in ("cached", "seconds")})
        if on_cell:
            on_cell(value)

    def failed(key: str, message: str) -> None:
        got(key, _error_cell(by_key[key], message))

    interrupted = False
    try:
        (executor or LocalExecutor(1)).run(todo, on_result=got, on_error=failed)
    except KeyboardInterrupt:
        interrupted = True
    for key, s in by_key.items():
        if key not in results:
            results[key] = {**_error_cell(s, "interrupted before this cell finished"), "cached": False}
    t_cells = time.perf_counter()
    doc = assemble(entries, rows, specs, results, req, live_row=live_row, score_row=score_row)
    doc["timings"] = {"gather_s": round(t_gather - t0, 4), "cells_s": round(t_cells - t_gather, 4),
                      "total_s": round(time.perf_counter() - t0, 4),
                      "computed": sum(1 for r in results.values() if not r.get("cached")),
                      "from_cache": sum(1 for r in results.values() if r.get("cached")),
                      "executor": getattr(executor, "name", "local")}
    if interrupted:
        doc["interrupted"] = True
    return doc


def assemble(entries: list[DraftEntry], rows: list[Any], specs: list[CellSpec], results: dict[str, dict[str, Any]],
             req: MatrixRequest, *, live_row: Any, score_row: Any) -> dict[str, Any]:
    cells: list[dict[str, Any]] = []
    live_cells: list[dict[str, Any]] = []
    scores: dict[str, dict[str, Any]] = {}
    static_by: dict[tuple[str, str], dict[str, Any]] = {}
    for s in specs:
        c = results[s.key()]
        if s.kind == "score":
            scores[s.draft] = c
        elif s.kind == "live":
            live_cells.append(c)
        else:
            cells.append(c)
            static_by[(s.draft, s.row)] = c
    inst = f"{live_row.engine}:{live_row.version}" if live_row is not None else None
    drafts = []
    for e in entries:
        d = e.to_dict()
        mine = [c for c in cells if c["draft"] == e.draft]
        d["producer"] = next((c.get("producer") for c in mine if c.get("producer")), None)
        d["method"] = next((c.get("method") for c in mine if c.get("method")), None)
        # one command per distinct output (kconvert.matrix.fixes); each cell names the one that serves its row
        d["fixes"] = draft_fixes(mine, inst)
        d["fix_command"] = d["fixes"][0]["command"] if d["fixes"] else None
        for g in d["fixes"]:
            for c in mine:
                if row_of(c) in g["rows"]:
                    c["fix"] = {**c["fix"], "command": g["command"]}
        sc = scores.get(e.draft)
        d["score"] = sc.get("score") if sc else None
        d["rank"] = None
        if sc is not None and sc["state"] != "pass" and not d["error"]:
            d["error"] = f"score: {sc.get('message')}"
        if d["error"] is None:
            errs = [c["message"] for c in mine if c["state"] == "error"]
            d["error"] = errs[0] if errs else None
        drafts.append(d)
        if sc is not None and sc.get("score"):
            c = static_by.get((e.draft, f"{score_row.engine}:{score_row.version}"))
            if c is not None:
                c["score"] = sc["score"]
    all_cells = cells + live_cells
    ids = {i for c in all_cells for i in c.get("finding_ids", [])}
    summary = {"cells": len(all_cells), **{k: sum(1 for c in all_cells if c["state"] == k)
                                           for k in ("pass", "warn", "fail", "error", "skipped")}}
    ranking = None
    if req.trace:
        order = rank(drafts)
        ranking = {"trace": req.trace, "order": order, "best": order[0] if order else None}
    return {
        "schema_version": 1, "kind": "matrix", "tool": {"name": "kconvert", "version": __version__},
        "engines": [{"row": f"{r.engine}:{r.version}", "engine": r.engine, "engine_version": r.version,
                     "installed": f"{r.engine}:{r.version}" == inst} for r in rows],
        "drafts": drafts, "cells": all_cells, "rules": _rules_text(ids), "ranking": ranking, "summary": summary,
        "exit_code": exit_code(all_cells, list(scores.values())),
    }


__all__ = ["MatrixRequest", "assemble", "engine_rows", "exit_code", "installed_row", "plan", "rank", "run_matrix",
           "trace_digest"]
