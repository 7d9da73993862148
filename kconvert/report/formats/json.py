"""`json`: the document itself (schemas/report.schema.json, schemas/matrix.schema.json); `--report PATH` writes it."""
import json
from typing import Any

from kconvert._version import __version__
from kconvert.report.formats import Failure, FileOption, Format, kconvert_tool, owned_json, register


def render(document: str, doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str, allow_nan=False) + "\n"  # the door made NaN null (guard/text.py)


def error_document(kind: str, message: str, exit_code: int, *, hint: str | None = None,
                   command: str | None = None, last_lines: list[str] | None = None) -> dict[str, Any]:
    """The JSON error object (schemas/error.schema.json) printed on stdout when a `--json` run fails."""
    err: dict[str, Any] = {"type": kind, "message": message, "hint": hint}
    if last_lines:
        err["engine_last_lines"] = list(last_lines)
    return {"schema_version": 1, "tool": {"name": "kconvert", "version": __version__}, "command": command,
            "verdict": "error", "exit_code": exit_code, "error": err}


def render_failure(f: Failure) -> str:
    return render("error", error_document(f.kind, f.message, f.exit_code, hint=f.hint, command=f.command,
                                          last_lines=f.last_lines))


def owns(path) -> bool:
    """An earlier JSON report: a JSON object whose `tool.name` is kconvert."""
    return owned_json(path, kconvert_tool)


register(Format(name="json", help="the report (schemas/report.schema.json)",
                documents=("inspect", "fix", "verify", "score", "matrix"), render=render, owns=owns,
                render_failure=render_failure, extension=".json", server=True,
                files={"inspect": FileOption("--report", "Also write the JSON report to this file."),
                       "verify": FileOption("--report", "Write the JSON report here."),
                       "score": FileOption("--report", "Write the JSON report here."),
                       "matrix": FileOption("--report", "Also write the JSON document here.")}))
