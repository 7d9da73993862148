"""`junit`: JUnit XML, one testcase per rule and per gate check (kconvert.report.junit)."""
from typing import Any

from kconvert.report.formats import Failure, FileOption, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.junit import render_junit  # deferred: loads the rule registry, not for --help

    return render_junit(doc)


def render_failure(f: Failure) -> str:
    from kconvert.report.junit import render_junit_error  # deferred: loads the rule registry, not for --help

    return render_junit_error(f.command or "kconvert", f.kind, f.message, f.hint)


register(Format(name="junit", help="JUnit XML", documents=("inspect", "fix", "verify", "score"), render=render,
                render_failure=render_failure, extension=".xml",
                files={"verify": FileOption("--junit", "Write JUnit XML here.")}))
