"""The one JSON report shape shared by inspect, fix, verify and score (schemas/report.schema.json): the data every
renderer in `kconvert.report` reads, built from the result, never from the files again."""
from __future__ import annotations

from typing import Any

from kconvert._version import __version__
from kconvert.engines.expectations import engine_info

from kconvert.results.inspection import Inspection
from kconvert.results.locations import finding_locations
from kconvert.results.next_steps import next_steps

SCHEMA_VERSION = 1


def subject(result: Inspection, *, hashes: bool = False) -> dict[str, Any]:
    ck = result.checkpoint
    files = []
    for name, entry in sorted(ck.files.items()):
        sha = entry.sha256
        if hashes and sha is None and ck.local_path(name) is not None:
            sha = ck.sha256(name)
        files.append({"name": name, "size": entry.size, "sha256": sha})
    return {"source": ck.ref, "kind": ck.kind, "repo_id": ck.repo_id, "revision": ck.revision, "commit": ck.commit,
            "files": files}


def findings(result: Inspection) -> list[dict[str, Any]]:
    """The findings as the report holds them, each with the checkpoint file (and config line) it points at."""
    out = []
    for f, loc in zip(result.findings, finding_locations(result)):
        d = f.to_dict()
        d["location"] = loc
        out.append(d)
    return out


def build_report(result: Inspection, *, command: str, hashes: bool = False,
                 live: dict[str, Any] | None = None, thresholds: dict[str, Any] | None = None,
                 verdict: str | None = None, exit_code: int | None = None,
                 extra: dict[str, Any] | None = None, written: str | None = None,
                 left_as_is: list[Any] | None = None, noop: bool = False) -> dict[str, Any]:
    counts = result.counts()
    code = result.exit_code if exit_code is None else exit_code
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "kconvert", "version": __version__},
        "command": command,
        "created": result.created,
        "subject": subject(result, hashes=hashes),
        "format": {"producer": result.draft.format.producer, "confidence": result.draft.format.confidence,
                   "evidence": result.draft.format.evidence, "converted_by": result.draft.format.converted_by},
        "draft": result.draft.summary(),
        "target": result.target.summary() if result.target else None,
        "engine": engine_info(result.engine),
        "findings": findings(result),
        "fail_on": result.fail_on,
        # what --select/--ignore/[tool.kconvert] set aside, and why (None: every rule, nothing ignored)
        "rule_selection": None if result.selection.is_default else result.selection.to_dict(result.set_aside),
        "summary": {"errors": counts["error"], "warnings": counts["warning"], "info": counts["info"],
                    "fixable": counts["fixable"], "needs_decision": counts["needs_decision"]},
        "live": live,
        "thresholds": thresholds,
        "verdict": verdict or ("fail" if code else "pass"),
        "exit_code": code,
        **next_steps(result, command=command, written=written, live=live is not None, left_as_is=left_as_is,
                     noop=noop),
    }
    if result.oracle is not None:
        doc["oracle"] = oracle_block(result.oracle, result.engine)
    if extra:
        doc.update(extra)
    return doc


def oracle_block(o: dict[str, Any], row: Any) -> dict[str, Any]:
    """The report's `oracle`: which release's code was asked and what it answered about this draft (the full answer
    holds every parameter name; the report keeps what a reader compares with the findings)."""
    a = o.get("answer") or {}
    m = a.get("model") if isinstance(a.get("model"), dict) else {}
    runner = o.get("runner") or row.runner
    served = a.get("served") if isinstance(a.get("served"), dict) else {}
    raised = next((x["raises"] for x in (a.get("hf_config"), a.get("served"), a.get("model"), m.get("load_weights"))
                   if isinstance(x, dict) and "raises" in x), None)
    fed = a.get(runner)
    return {"engine": o.get("engine"), "release": o.get("release"), "asked": o.get("why"),
            "learned_from": o.get("learned_from"), "runner": runner, "seconds": o.get("seconds"),
            "functions": o.get("functions"), "patched": o.get("patched") or [],
            "answers": {"raises": raised,
                        "ids_read": fed if isinstance(fed, list) else None,
                        "ids_fed": sorted(set(fed if isinstance(fed, list) and fed else (a.get("default") or []))),
                        "draft_class": m.get("class"), "fc_weight_shape": m.get("fc_weight_shape"),
                        "num_aux_hidden_states": m.get("num_aux_hidden_states"), "num_layers": m.get("num_layers"),
                        "dropped": m.get("dropped"), "params_not_loaded": m.get("params_not_loaded"),
                        "target_max_model_len": served.get("target_max_model_len"),
                        "draft_max_position_embeddings": served.get("draft_max_position_embeddings"),
                        "served_max_model_len": served.get(f"{runner}_max_model_len",
                                                           served.get("target_max_model_len"))}}
