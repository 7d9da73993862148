"""`html`, written to a file only: the matrix as one self-contained page (kconvert.report.matrix_page)."""
import re
from typing import Any

from kconvert.report.formats import FileOption, Format, owned_text, register

# an HTML document with the page's own title (kconvert.report.matrix_page) in its first 64 KB
_TITLE = re.compile(r"\s*<!DOCTYPE html>.*?<title>kconvert matrix", re.S | re.I)


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.matrix_page import render_html  # deferred: only when the page is asked for

    return render_html(doc)


def owns(path) -> bool:
    """An earlier matrix page: an HTML document whose head's title is kconvert's ("kconvert matrix: ...")."""
    return owned_text(path, lambda text: _TITLE.match(text[:65536]) is not None)


register(Format(name="html", owns=owns, documents=("matrix",), render=render, extension=".html",
                files={"matrix": FileOption("--html", "Also write one self-contained HTML page.")}))
