"""The sarif format: SARIF 2.1.0 (OASIS), what GitHub code scanning (`github/codeql-action/upload-sarif`) reads.

One run; its driver lists the rules the results use (id, summary, what the engine does with the defect, fix
safety, from `kconvert rules`) and each result carries the finding's id, level, message, evidence, fixability
and its location (file relative to the repository root, config line). A verify report adds a result per failed
gate check and the live figures as run properties. Tested against the published schema vendored in
schemas/sarif-schema-2.1.0.json (see schemas/SOURCES.md).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from kconvert._version import PYPI_URL, __version__
from kconvert.report.concise import message_lines
from kconvert.report.gitlab import fingerprint
from kconvert.report.anchors import CONFIG, hub_url, path_in_repository
from kconvert.rules import REGISTRY

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
INFORMATION_URI = PYPI_URL
SRCROOT = "%SRCROOT%"


def _driver(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "kconvert", "version": __version__, "semanticVersion": __version__,
            "informationUri": INFORMATION_URI, "rules": rules}


def _rule(rid: str) -> dict[str, Any]:
    r = REGISTRY.get(rid)
    if r is None:
        return {"id": rid, "shortDescription": {"text": rid}}
    text = f"{r.summary}\n\nWhy it matters: {r.why}\n\nFix: {r.fix}"
    md = f"**{r.id} {r.name}** ({r.category})\n\n{r.summary}\n\n**Why it matters.** {r.why}\n\n**Fix.** {r.fix}"
    return {"id": r.id, "name": r.name, "shortDescription": {"text": r.summary}, "fullDescription": {"text": r.why},
            "help": {"text": text, "markdown": md},
            "defaultConfiguration": {"level": LEVEL.get(r.severity, "warning")},
            "properties": {"category": r.category, "tags": ["eagle3", r.category], "precision": "high"}}


def _gate_rule(name: str) -> dict[str, Any]:
    what = {"lossless": "greedy outputs with the draft equal those of the target alone"}.get(
        name, f"live acceptance meets the gate's {name.replace('_', ' ')}")
    return {"id": f"gate/{name}", "name": f"gate-{name}".replace("_", "-"), "shortDescription": {"text": what},
            "defaultConfiguration": {"level": "error"}, "properties": {"category": "live", "tags": ["eagle3", "live"]}}


def _location(doc: dict[str, Any], file: str | None, line: int | None, root: str | None) -> dict[str, Any]:
    file = file or CONFIG
    rel = path_in_repository(doc, file, root)
    if rel is not None:
        artifact = {"uri": rel, "uriBaseId": SRCROOT}
    else:
        url = hub_url(doc, file)
        if url is not None:
            artifact = {"uri": url}
        else:  # a local file outside the repository: an absolute file URI
            src = Path(str((doc.get("subject") or {}).get("source") or ".")) / file
            artifact = {"uri": Path(os.path.abspath(src)).as_uri()}
    return {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": line or 1}}}


def _message(f: dict[str, Any]) -> str:
    first, *rest = message_lines(f)
    return "\n".join([f"{f['id']} {first}", *rest])


def render_sarif_doc(doc: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    root = env.get("GITHUB_WORKSPACE")
    rule_ids: list[str] = []
    results: list[dict[str, Any]] = []
    for f in doc.get("findings") or []:
        if f["id"] not in rule_ids:
            rule_ids.append(f["id"])
        loc = f.get("location") or {}
        results.append({
            "ruleId": f["id"], "ruleIndex": rule_ids.index(f["id"]), "level": LEVEL.get(f["severity"], "warning"),
            "message": {"text": _message(f)},
            "locations": [_location(doc, loc.get("file"), loc.get("line"), root)],
            "partialFingerprints": {"kconvertFinding/v1": fingerprint(
                f["id"], loc.get("file"), [e.get("where") for e in f.get("evidence") or []])},
            "properties": {"category": f["category"], "severity": f["severity"], "evidence": f.get("evidence") or [],
                           "fixable": bool(f.get("fixable")), "needs_decision": f.get("needs_decision")},
        })
    rules = [_rule(r) for r in rule_ids]
    failed = [(c.get("name"), c.get("message")) for c in (doc.get("thresholds") or {}).get("checks") or []
              if not c.get("passed")]
    ll = (doc.get("live") or {}).get("lossless")
    if ll is not None and not ll.get("identical"):
        failed.append(("lossless", f"greedy outputs differ with the draft: first difference "
                                   f"{json.dumps(ll.get('first_difference'))}"))
    for name, message in failed:
        rules.append(_gate_rule(str(name)))
        results.append({"ruleId": f"gate/{name}", "ruleIndex": len(rules) - 1, "level": "error",
                        "message": {"text": str(message or name)},
                        "locations": [_location(doc, CONFIG, None, root)],
                        "partialFingerprints": {"kconvertFinding/v1": fingerprint("gate", name)}})
    run: dict[str, Any] = {
        "tool": {"driver": _driver(rules)},
        "invocations": [{"executionSuccessful": True, "exitCode": doc.get("exit_code", 0)}],
        "results": results,
        "properties": {"command": doc.get("command"), "verdict": doc.get("verdict"),
                       "source": (doc.get("subject") or {}).get("source"), "summary": doc.get("summary")},
    }
    if root or any(r["locations"][0]["physicalLocation"]["artifactLocation"].get("uriBaseId") for r in results):
        base = Path(os.path.realpath(root) if root else os.getcwd()).as_uri().rstrip("/") + "/"
        run["originalUriBaseIds"] = {SRCROOT: {"uri": base}}
    if doc.get("live"):
        live = doc["live"]
        run["properties"]["live"] = {k: live.get(k) for k in ("engine", "engine_version", "platform", "prompt_set",
                                                             "num_prompts", "num_speculative_tokens", "counters",
                                                             "acceptance", "lossless")}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif(doc: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    return json.dumps(render_sarif_doc(doc, environ), indent=2, ensure_ascii=False, default=str,
                      allow_nan=False) + "\n"


def render_sarif_error(message: str, exit_code: int, hint: str | None = None) -> str:
    """A run that could not judge the draft: no results, `executionSuccessful: false` and the error as a tool
    notification, so an upload step still gets a valid file and code scanning shows the failed run."""
    text = message + (f"\nhint: {hint}" if hint else "")
    run = {"tool": {"driver": _driver([])},
           "invocations": [{"executionSuccessful": False, "exitCode": exit_code,
                            "toolExecutionNotifications": [{"level": "error", "message": {"text": text}}]}],
           "results": []}
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2, ensure_ascii=False) + "\n"
