"""`csv`, written to a file only: one row per matrix cell (kconvert.report.matrix_table)."""
from typing import Any

from kconvert.report.formats import FileOption, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.matrix_table import render_csv  # deferred: only when the file is asked for

    return render_csv(doc)


register(Format(name="csv", documents=("matrix",), render=render, extension=".csv",
                files={"matrix": FileOption("--csv", "Also write one CSV row per cell.")}))
