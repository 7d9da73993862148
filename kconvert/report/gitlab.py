"""The gitlab format: a GitLab Code Quality report (`artifacts: reports: codequality`).

GitLab reads a JSON array of issues with the documented fields `description`, `check_name`, `fingerprint`,
`severity` (info, minor, major, critical, blocker) and `location.path` + `location.lines.begin`
(docs.gitlab.com/ci/testing/code_quality, "Code Quality report format"). kconvert fills exactly those; the
merge-request widget compares issues across pipelines by fingerprint, so the fingerprint hashes what identifies a
defect (rule, file, evidence keys) and not its wording or line. Paths are relative to `CI_PROJECT_DIR` (the
repository root) when the file lies inside it.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping

from kconvert.report.concise import evidence_text, fix_tag
from kconvert.report.anchors import CONFIG, display_path, path_in_repository

SEVERITY = {"error": "critical", "warning": "major", "info": "info"}


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode("utf-8")).hexdigest()


def _path(doc: dict[str, Any], file: str | None, root: str | None) -> str:
    return path_in_repository(doc, file, root) or display_path(doc, file)


def issue(doc: dict[str, Any], f: dict[str, Any], root: str | None) -> dict[str, Any]:
    loc = f.get("location") or {}
    path = _path(doc, loc.get("file") or CONFIG, root)
    ev = "; ".join(evidence_text(e) for e in f.get("evidence") or [])
    tag = fix_tag(f)
    description = f"{f['id']} {f['message']}" + (f" ({ev})" if ev else "") + (f" {tag}" if tag else "")
    return {
        "description": description,
        "check_name": f"kconvert/{f['id']}",
        "fingerprint": fingerprint(f["id"], path, [e.get("where") for e in f.get("evidence") or []]),
        "severity": SEVERITY.get(f["severity"], "minor"),
        "location": {"path": path, "lines": {"begin": loc.get("line") or 1}},
    }


def issues(doc: dict[str, Any], environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    env = os.environ if environ is None else environ
    root = env.get("CI_PROJECT_DIR")
    out = [issue(doc, f, root) for f in doc.get("findings") or []]
    config = _path(doc, CONFIG, root)
    for chk in (doc.get("thresholds") or {}).get("checks") or []:
        if not chk.get("passed"):
            out.append({"description": str(chk.get("message") or chk.get("name")),
                        "check_name": f"kconvert/gate/{chk.get('name')}",
                        "fingerprint": fingerprint("gate", chk.get("name"), config),
                        "severity": "critical", "location": {"path": config, "lines": {"begin": 1}}})
    ll = (doc.get("live") or {}).get("lossless")
    if ll is not None and not ll.get("identical"):
        out.append({"description": f"greedy outputs differ with the draft: first difference "
                                   f"{json.dumps(ll.get('first_difference'))}",
                    "check_name": "kconvert/gate/lossless", "fingerprint": fingerprint("gate", "lossless", config),
                    "severity": "critical", "location": {"path": config, "lines": {"begin": 1}}})
    return out


def render_gitlab(doc: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    return json.dumps(issues(doc, environ), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_gitlab_error(source: str | None, message: str, environ: Mapping[str, str] | None = None) -> str:
    """A run that could not judge the draft (unreadable input, engine failure) as one blocker issue, so the
    merge-request widget shows the failure instead of a clean report."""
    env = os.environ if environ is None else environ
    path = "."
    if source:
        doc = {"subject": {"source": source, "kind": "local"}}
        path = path_in_repository(doc, CONFIG, env.get("CI_PROJECT_DIR")) or source
    return json.dumps([{"description": message, "check_name": "kconvert/error",
                        "fingerprint": fingerprint("error", path, message), "severity": "blocker",
                        "location": {"path": path, "lines": {"begin": 1}}}], indent=2, ensure_ascii=False) + "\n"
