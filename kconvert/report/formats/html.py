"""`html`, written to a file only: the matrix as one self-contained page (kconvert.report.matrix_page)."""
from typing import Any

from kconvert.report.formats import FileOption, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.matrix_page import render_html  # deferred: only when the page is asked for

    return render_html(doc)


register(Format(name="html", documents=("matrix",), render=render, extension=".html",
                files={"matrix": FileOption("--html", "Also write one self-contained HTML page.")}))
