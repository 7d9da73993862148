"""`sarif`: SARIF 2.1.0 for GitHub code scanning (kconvert.report.sarif)."""
from typing import Any

from kconvert.report.formats import Failure, FileOption, Format, owned_json, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.sarif import render_sarif  # deferred: loads the rule registry, not for --help

    return render_sarif(doc)


def render_failure(f: Failure) -> str:
    from kconvert.report.sarif import render_sarif_error  # deferred: loads the rule registry, not for --help

    return render_sarif_error(f.message, f.exit_code, f.hint)


def _kconvert_runs(doc: Any) -> bool:
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return isinstance(runs, list) and bool(runs) and all(
        isinstance(r, dict) and isinstance(r.get("tool"), dict) and isinstance(r["tool"].get("driver"), dict)
        and r["tool"]["driver"].get("name") == "kconvert" for r in runs)


def owns(path) -> bool:
    """An earlier SARIF log: every run's `tool.driver.name` is kconvert (SARIF 2.1.0 section 3.19)."""
    return owned_json(path, _kconvert_runs)


register(Format(name="sarif", owns=owns, help="SARIF 2.1.0 for GitHub code scanning",
                documents=("inspect", "fix", "verify", "score"), render=render, render_failure=render_failure,
                extension=".sarif",
                files={"inspect": FileOption("--sarif", "Also write SARIF 2.1.0 to this file (for GitHub code "
                                                        "scanning), whatever --output-format prints."),
                       "verify": FileOption("--sarif", "Write SARIF 2.1.0 here (for GitHub code scanning), "
                                                       "whatever --output-format prints.")}))
