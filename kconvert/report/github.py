"""The github format: GitHub Actions workflow commands, which GitHub turns into pull-request annotations.

    ::error file=draft/config.json,line=12,title=kconvert K404 aux-ids-convention::aux ids [1, 4, 6] ...

One command per finding (error → `::error`, warning → `::warning`, info → `::notice`) anchored at the file and
config line its evidence names, one per failed gate check, and a `::notice` with the live figures; then the
concise summary and next-step lines as plain log text. Escaping follows the Actions toolkit (`command.ts`:
`%`, CR and LF in the message; also `:` and `,` in properties). Paths are relative to `GITHUB_WORKSPACE` (the
repository root the annotations resolve against) when the file lies inside it; a file outside the repository
(a Hub draft) gets an annotation without a file.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from kconvert.report.concise import (fix_lines, live_lines, message_lines, next_lines, refused_lines, summary_line,
                                     value)
from kconvert.report.anchors import CONFIG, path_in_repository

LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **props: Any) -> str:
    items = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level}{' ' + items if items else ''}::{escape_data(message)}"


def repo_path(doc: dict[str, Any], file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return path_in_repository(doc, file, env.get("GITHUB_WORKSPACE"))


def finding_command(doc: dict[str, Any], f: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    loc = f.get("location") or {}
    path = repo_path(doc, loc.get("file"), environ)
    lines = message_lines(f)
    if path is None:
        lines.append(f"in {(doc.get('subject') or {}).get('source')}"
                     + (f" ({loc['file']})" if loc.get("file") else ""))
    title = f"kconvert {f['id']} {f.get('name') or f['category']}"
    return command(LEVEL.get(f["severity"], "warning"), "\n".join(lines), file=path,
                   line=loc.get("line") if path else None, title=title)


def render_github(doc: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    out = [finding_command(doc, f, environ) for f in doc.get("findings") or []]
    config = repo_path(doc, CONFIG, environ)
    for chk in (doc.get("thresholds") or {}).get("checks") or []:
        if not chk.get("passed"):
            out.append(command("error", str(chk.get("message") or chk.get("name")), file=config,
                               title=f"kconvert gate {chk.get('name')}"))
    live = doc.get("live")
    if live:
        ll = live.get("lossless")
        if ll is not None and not ll.get("identical"):
            out.append(command("error", f"greedy outputs differ with the draft: first difference "
                                        f"{value(ll.get('first_difference'))}", file=config,
                               title="kconvert gate lossless"))
        figures = [line for line in live_lines(doc) if line.startswith("live:")]
        out.append(command("notice", "\n".join(figures), title=f"kconvert verify: {str(doc.get('verdict')).upper()}"))
    out += refused_lines(doc) + fix_lines(doc)
    out += [line for line in live_lines(doc) if not line.startswith("live:")]
    out.append(summary_line(doc))
    out += next_lines(doc)
    return "\n".join(out) + "\n"
