"""`gitlab`: GitLab Code Quality JSON (kconvert.report.gitlab)."""
from typing import Any

from kconvert.report.formats import Failure, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.gitlab import render_gitlab  # deferred: the report package, not for --help

    return render_gitlab(doc)


def render_failure(f: Failure) -> str:
    from kconvert.report.gitlab import render_gitlab_error  # deferred: the report package, not for --help

    return render_gitlab_error(f.source, f.message)


register(Format(name="gitlab", help="GitLab Code Quality JSON", documents=("inspect", "fix", "verify", "score"),
                render=render, render_failure=render_failure, extension=".json"))
