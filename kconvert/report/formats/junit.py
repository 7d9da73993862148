"""`junit`: JUnit XML, one testcase per rule and per gate check (kconvert.report.junit)."""
import re
from typing import Any

from kconvert.report.formats import Failure, FileOption, Format, owned_text, register

# kconvert's JUnit XML: an XML declaration (ElementTree writes one), then the root <testsuites name="kconvert" ...>
_ROOT = re.compile(r'\s*(<\?xml[^>]*\?>\s*)?<testsuites name="kconvert"[ >]')


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.junit import render_junit  # deferred: loads the rule registry, not for --help

    return render_junit(doc)


def render_failure(f: Failure) -> str:
    from kconvert.report.junit import render_junit_error  # deferred: loads the rule registry, not for --help

    return render_junit_error(f.command or "kconvert", f.kind, f.message, f.hint)


def owns(path) -> bool:
    """An earlier JUnit file: its root element is kconvert's `<testsuites name="kconvert">`."""
    return owned_text(path, lambda text: _ROOT.match(text) is not None)


register(Format(name="junit", owns=owns, help="JUnit XML", documents=("inspect", "fix", "verify", "score"),
                render=render, render_failure=render_failure, extension=".xml",
                files={"verify": FileOption("--junit", "Write JUnit XML here.")}))
