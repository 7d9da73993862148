"""`csv`, written to a file only: one row per matrix cell (kconvert.report.matrix_table)."""
from typing import Any

from kconvert.report.formats import FileOption, Format, owned_text, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.matrix_table import render_csv  # deferred: only when the file is asked for

    return render_csv(doc)


def owns(path) -> bool:
    """An earlier matrix CSV: its header row is exactly kconvert's columns (matrix_table.CSV_FIELDS)."""
    from kconvert.report.matrix_table import CSV_FIELDS  # deferred: only when a CSV destination exists

    return owned_text(path, lambda text: text.split("\n", 1)[0] == ",".join(CSV_FIELDS))


register(Format(name="csv", owns=owns, documents=("matrix",), render=render, extension=".csv",
                files={"matrix": FileOption("--csv", "Also write one CSV row per cell.")}))
