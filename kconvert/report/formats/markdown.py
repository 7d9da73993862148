"""`markdown`, written to files only: verify's model-card section (kconvert.report.markdown) and the matrix's table
(kconvert.report.matrix_table), each after a one-line HTML comment that marks the file as kconvert's (invisible
where Markdown is rendered): Markdown has no tool field of its own, and the marker is what lets a later run
replace its own file and refuse anybody else's (a README.md)."""
from typing import Any

from kconvert._version import PYPI_URL
from kconvert.report.formats import FileOption, Format, owned_text, register

MARKER = "<!-- written by kconvert"


def render(document: str, doc: dict[str, Any]) -> str:
    # deferred, each its own: the report package, only when its file is asked for
    if document == "matrix":
        from kconvert.report.matrix_table import render_markdown

        body = render_markdown(doc)
    else:
        from kconvert.report.markdown import render_markdown_section

        body = render_markdown_section(doc)
    return f"{MARKER} {document}: {PYPI_URL} -->\n{body}"


def owns(path) -> bool:
    """An earlier Markdown file of kconvert's: its first line is the marker `render` writes."""
    return owned_text(path, lambda text: text.startswith(MARKER + " "))


register(Format(name="markdown", documents=("verify", "matrix"), render=render, extension=".md", owns=owns,
                files={"verify": FileOption("--markdown", "Write the model-card section here."),
                       "matrix": FileOption("--markdown", "Also write the table as Markdown.")}))
