"""`concise`: one line per finding, ruff's concise output (kconvert.report.concise)."""
from typing import Any

from kconvert.report.formats import Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.concise import render_concise  # deferred: the report package, not for --help

    return render_concise(doc)


register(Format(name="concise", help="one line per finding (path:line: ID severity [category] message (evidence) "
                                     "[fixable])",
                documents=("inspect", "fix", "verify", "score"), render=render, extension=".txt", server=True,
                rank=1))
