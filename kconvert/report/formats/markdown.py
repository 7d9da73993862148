"""`markdown`, written to files only: verify's model-card section (kconvert.report.markdown) and the matrix's table
(kconvert.report.matrix_table)."""
from typing import Any

from kconvert.report.formats import FileOption, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    # deferred, each its own: the report package, only when its file is asked for
    if document == "matrix":
        from kconvert.report.matrix_table import render_markdown

        return render_markdown(doc)
    from kconvert.report.markdown import render_markdown_section

    return render_markdown_section(doc)


register(Format(name="markdown", documents=("verify", "matrix"), render=render, extension=".md",
                files={"verify": FileOption("--markdown", "Write the model-card section here."),
                       "matrix": FileOption("--markdown", "Also write the table as Markdown.")}))
