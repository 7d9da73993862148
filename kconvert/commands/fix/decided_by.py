"""Decisions backed by a measurement: `kconvert fix --decided-by SCORE.json`.

A `kconvert score --diagnose` report names the reading of the draft's files that accepts best on a recorded
trace, and the fix flags that make the engine read them that way. `fix --decided-by` takes those flags from
the report (or checks that the flags given agree with it) and records in kconvert.json which trace decided,
with the acceptance lengths measured: "decided by trace <sha256>, AL a (as loaded) vs b (chosen)".

Needs no torch: it reads a JSON report, validated against schemas/report.schema.json.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, UsageError
from kconvert.guard.paths import loads_json, read_bytes
from kconvert.schemas import validate

MAX_REPORT_BYTES = 64 * 1024 * 1024


def load_score_report(path: str) -> tuple[dict[str, Any], str]:
    p = Path(path)
    # the read guard: a regular file (a FIFO or device is refused unopened), bounded, then strict JSON (no duplicate
    # key, no NaN or Infinity, nested at most 64 levels, checked before parsing)
    raw = read_bytes(p, f"--decided-by {p}", max_bytes=MAX_REPORT_BYTES, noun="report")
    try:
        doc = loads_json(raw, "")
    except ValueError as e:
        raise InputError(f"--decided-by {p}: {e}") from None
    validate(doc, "report", what=str(p))
    if doc.get("command") != "score" or not isinstance(doc.get("diagnosis"), dict) or not doc["diagnosis"].get("ran"):
        raise InputError(f"--decided-by {p}: not a `kconvert score --diagnose` report")
    return doc, hashlib.sha256(raw).hexdigest()


def _flags(args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    it = iter(args)
    for a in it:
        if a.startswith("--"):
            out[a] = next(it, "")
    return out


def decision(report_path: str, ckpt: Any, options: Any) -> tuple[dict[str, Any], Any]:
    """(provenance record, options completed from the report). Refuses a report about other files, and flags
    that contradict the reading the report chose."""
    doc, sha = load_score_report(report_path)
    mine = {}
    for name in ckpt.files:
        if ckpt.local_path(name) is not None:
            mine[name] = ckpt.sha256(name)
    theirs = {f["name"]: f["sha256"] for f in doc["subject"]["files"]}
    if any(theirs.get(n) != h for n, h in mine.items()) or set(theirs) - set(mine):
        raise UsageError(f"--decided-by {report_path}: the report scored other files than {ckpt.ref} (sha256 differ)")
    diag = doc["diagnosis"]
    best = next((c for c in diag["candidates"] if c["candidate"] == diag.get("best")), None)
    base_al = diag["baseline"].get("mean_acceptance_length")
    record: dict[str, Any] = {
        "report": str(report_path), "report_sha256": sha, "trace": diag.get("trace"),
        "as_loaded": {"mean_acceptance_length": base_al, "error": diag["baseline"].get("error")},
        "chosen": None,
        "alternatives": [{"candidate": c["candidate"], "mean_acceptance_length": c["mean_acceptance_length"],
                          "error": c.get("error")} for c in diag["candidates"]],
    }
    opts = dataclasses.replace(options)
    if best is None:
        record["summary"] = (f"decided by trace {str((diag.get('trace') or {}).get('sha256'))[:16]}: no reading beat "
                             f"the files as loaded (AL {_fmt(base_al)})")
        return record, opts
    args = best.get("fix_args")
    if args is None:
        raise UsageError(f"--decided-by {report_path}: the reading it chose ({best['candidate']}) has no fix flag")
    flags = _flags(args)
    for flag, value in flags.items():
        if flag == "--aux-ids":
            want = [int(x) for x in value.split(",")]
            if opts.aux_ids is None:
                opts.aux_ids = want
            elif list(opts.aux_ids) != want:
                raise UsageError(f"--aux-ids {opts.aux_ids} contradicts the score report, which measured {want} best")
        elif flag == "--d2t":
            if opts.d2t_kind is None:
                opts.d2t_kind = value
            elif opts.d2t_kind != value:
                raise UsageError(f"--d2t {opts.d2t_kind} contradicts the score report, which measured {value} best")
        elif flag == "--lm-head-from":
            if opts.lm_head_source is None:
                opts.lm_head_source = value
            elif Path(opts.lm_head_source).resolve() != Path(value).resolve():
                raise UsageError(f"--lm-head-from {opts.lm_head_source} is not the head the score report measured "
                                 f"({value})")
    record["chosen"] = {"candidate": best["candidate"], "mean_acceptance_length": best["mean_acceptance_length"],
                        "fix_args": args, "reading": best.get("reading")}
    record["summary"] = (f"decided by trace {str((diag.get('trace') or {}).get('sha256'))[:16]}: "
                         f"{best['candidate']}, AL {_fmt(base_al)} as loaded vs {_fmt(best['mean_acceptance_length'])}")
    return record, opts


def _fmt(v: Any) -> str:
    return "n/a (does not run)" if v is None else f"{v:.3f}"
