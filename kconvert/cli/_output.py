"""All output goes through here: the full view (rich), the CI formats (concise, github, gitlab, junit, sarif) and
JSON. Commands never print directly.

A command records the output format it was asked for (`begin`) before it does any work, so that a failure
(`KConvertError`, a usage error, a bug) is answered in that format too: under `--json` a JSON error object on
stdout, under `sarif` a run with `executionSuccessful: false`, and so on, always with the same exit code and the
one-line error on stderr.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from enum import Enum
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

from rich.console import Console
from rich.markup import escape

from kconvert._version import __version__
from kconvert.errors import UsageError


console = Console()
err_console = Console(stderr=True)

ENV_FORMAT = "KCONVERT_OUTPUT_FORMAT"


class OutputFormat(str, Enum):
    full = "full"
    concise = "concise"
    github = "github"
    gitlab = "gitlab"
    json = "json"
    junit = "junit"
    sarif = "sarif"


FORMATS = tuple(f.value for f in OutputFormat)


def default_format(*, isatty: bool | None = None, environ: Mapping[str, str] | None = None) -> str:
    """`github` inside GitHub Actions, `full` on a terminal, `concise` otherwise (a CI log, a pipe, a file)."""
    env = os.environ if environ is None else environ
    if env.get("GITHUB_ACTIONS") == "true":
        return "github"
    tty = sys.stdout.isatty() if isatty is None else isatty
    return "full" if tty else "concise"


def choose_format(requested: OutputFormat | str | None, as_json: bool = False, *, isatty: bool | None = None,
                  environ: Mapping[str, str] | None = None) -> str:
    fmt = requested.value if isinstance(requested, OutputFormat) else requested
    if as_json:
        if fmt not in (None, "json"):
            raise UsageError(f"--json and --output-format {fmt} disagree: --json is --output-format json")
        return "json"
    return fmt or default_format(isatty=isatty, environ=environ)


@dataclass
class Requested:
    command: str | None = None
    format: str | None = None
    source: str | None = None


requested = Requested()


def begin(command: str, fmt: OutputFormat | str | None = None, as_json: bool = False,
          source: str | None = None) -> str:
    """Record the command and its output format (chosen from `--output-format`, `--json` and the defaults) for
    the failure path, and return the format."""
    requested.command, requested.source = command, source
    # --json asks for JSON even when it contradicts --output-format: the refusal itself is then a JSON error
    requested.format = "json" if as_json else None
    requested.format = choose_format(fmt, as_json)
    return requested.format


def reset() -> None:
    requested.command = requested.format = requested.source = None


def format_from_argv(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The machine format a command line asks for, read without parsing it (it may not parse: a usage error)."""
    env = os.environ if environ is None else environ
    fmt = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == "--json":
            return "json"
        if a == "--output-format" and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif a.startswith("--output-format="):
            fmt = a.split("=", 1)[1]
    fmt = fmt or env.get(ENV_FORMAT)
    return fmt.lower() if fmt and fmt.lower() in FORMATS else None


def write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def emit_json(doc: Any) -> None:
    write(json.dumps(doc, indent=2, default=str) + "\n")


def emit_report(doc: dict[str, Any], fmt: str, full: Callable[[], None]) -> None:
    """One report in the chosen format; `full` draws the rich view."""
    # deferred, each branch its own: the renderers load the checkpoint readers and the rules (not for --help)
    if fmt == "full":
        full()
    elif fmt == "json":
        emit_json(doc)
    elif fmt == "concise":
        from kconvert.report.concise import render_concise

        write(render_concise(doc))
    elif fmt == "github":
        from kconvert.report.github import render_github

        write(render_github(doc))
    elif fmt == "gitlab":
        from kconvert.report.gitlab import render_gitlab

        write(render_gitlab(doc))
    elif fmt == "junit":
        from kconvert.report.junit import render_junit

        write(render_junit(doc))
    elif fmt == "sarif":
        from kconvert.report.sarif import render_sarif

        write(render_sarif(doc))
    else:  # choose_format only returns the names above
        raise ValueError(fmt)


def error_line(message: str, hint: str | None = None) -> None:
    # deferred: the report package loads the checkpoint readers, which a `--help` never needs
    from kconvert.report.concise import LINE_BREAKS

    # Messages quote names from the checkpoint (`[tensor]`, `[/oops]`): never let rich read them as markup.
    err_console.print(f"[bold red]error:[/] {escape(message.translate(LINE_BREAKS))}", highlight=False,
                      soft_wrap=True)
    if hint:
        err_console.print(f"[dim]hint: {escape(hint.translate(LINE_BREAKS))}[/]", highlight=False, soft_wrap=True)


def error_document(kind: str, message: str, exit_code: int, *, hint: str | None = None,
                   command: str | None = None, last_lines: list[str] | None = None) -> dict[str, Any]:
    """The JSON error object (schemas/error.schema.json) printed on stdout when a `--json` run fails."""
    err: dict[str, Any] = {"type": kind, "message": message, "hint": hint}
    if last_lines:
        err["engine_last_lines"] = list(last_lines)
    return {"schema_version": 1, "tool": {"name": "kconvert", "version": __version__}, "command": command,
            "verdict": "error", "exit_code": exit_code, "error": err}


def emit_failure(kind: str, message: str, exit_code: int, *, hint: str | None = None,
                 last_lines: list[str] | None = None, fmt: str | None = None) -> None:
    """The stdout side of a failure in the requested machine format (the stderr line is printed separately)."""
    fmt = fmt or requested.format
    command = requested.command
    # deferred, each branch its own: the renderers load the checkpoint readers and the rules (not for --help)
    if fmt == "json":
        emit_json(error_document(kind, message, exit_code, hint=hint, command=command, last_lines=last_lines))
    elif fmt == "sarif":
        from kconvert.report.sarif import render_sarif_error

        write(render_sarif_error(message, exit_code, hint))
    elif fmt == "junit":
        from kconvert.report.junit import render_junit_error

        write(render_junit_error(command or "kconvert", kind, message, hint))
    elif fmt == "gitlab":
        from kconvert.report.gitlab import render_gitlab_error

        write(render_gitlab_error(requested.source, message))
    elif fmt == "github":
        from kconvert.report.github import command as workflow_command

        write(workflow_command("error", message + (f"\nhint: {hint}" if hint else ""),
                               title=f"kconvert {command or ''}".strip() + f" (exit {exit_code})") + "\n")


class NoStatus:
    """Stands in for `console.status(...)` where the output is quiet (JSON, or not a terminal): the same calls,
    nothing drawn."""

    def __enter__(self) -> "NoStatus":
        return self

    def __exit__(self, *exc: object) -> bool:
        return False

    def update(self, *_a: object, **_k: object) -> None:
        pass


ByteProgress = Callable[[int, int, str], None]  # (bytes done, bytes in all, what is under way)


@contextmanager
def byte_progress(first: str, *, quiet: bool) -> Iterator[ByteProgress]:
    """A transient bar of bytes on stderr (size, speed, time left) for fix's writing and push's hashing and upload;
    `quiet` (a machine format, or stderr not a terminal) draws nothing."""
    # deferred: rich.progress is ~15 ms of imports, and only fix and push draw a bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=err_console, disable=quiet,
                  transient=True) as prog:
        task = prog.add_task(first, total=None)

        def update(done: int, total: int, message: str) -> None:
            prog.update(task, completed=done, total=total, description=message[:40])

        yield update


def print_hub_commit(readme: str, dry_run: bool, commit_url: str | None, pr_url: str | None) -> None:
    """The end of `kconvert push` and `kconvert push-trace`: the card a dry run would upload, or the commit made
    (and its pull request)."""
    if dry_run:
        console.rule("README.md")
        console.print(readme, markup=False, highlight=False, soft_wrap=True)
        console.rule()
        console.print("[dim]dry run: nothing uploaded[/]")
    else:
        console.print(f"[green]committed[/] {commit_url}", highlight=False)
        if pr_url:
            console.print(f"[green]pull request[/] {pr_url}", highlight=False)
