"""`github`: GitHub Actions workflow commands, shown as pull-request annotations (kconvert.report.github)."""
from typing import Any

from kconvert.report.formats import Failure, Format, register


def render(document: str, doc: dict[str, Any]) -> str:
    from kconvert.report.github import render_github  # deferred: the report package, not for --help

    return render_github(doc)


def render_failure(f: Failure) -> str:
    from kconvert.report.github import command  # deferred: the report package, not for --help

    return command("error", f.message + (f"\nhint: {f.hint}" if f.hint else ""),
                   title=f"kconvert {f.command or ''}".strip() + f" (exit {f.exit_code})") + "\n"


register(Format(name="github", help="workflow commands that GitHub shows as pull-request annotations",
                documents=("inspect", "fix", "verify", "score"), render=render, render_failure=render_failure,
                extension=".txt", server=True))
