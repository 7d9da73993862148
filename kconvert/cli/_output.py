"""All output goes through here: the full view (rich), the CI formats (concise, github, gitlab, junit, sarif) and
JSON, each a format of kconvert.report.formats. Commands never print directly.

A command records the output format it was asked for (`begin`) before it does any work, in the `Run` that
`kconvert.cli.main` makes for each call (this module keeps no run's state), so that a failure
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
from rich.text import Text

from typer._click.globals import get_current_context  # typer 0.29 bundles click: its context, not click's

from kconvert.errors import UsageError
from kconvert.guard.text import visible, visible_document, visible_lines
from kconvert.report.formats import DOCUMENTS, Failure, get, output_formats, render, render_failure


console = Console()
err_console = Console(stderr=True)

ENV_FORMAT = "KCONVERT_OUTPUT_FORMAT"


def default_format(*, isatty: bool | None = None, environ: Mapping[str, str] | None = None) -> str:
    """`github` inside GitHub Actions, `full` on a terminal, `concise` otherwise (a CI log, a pipe, a file)."""
    env = os.environ if environ is None else environ
    if env.get("GITHUB_ACTIONS") == "true":
        return "github"
    tty = sys.stdout.isatty() if isatty is None else isatty
    return "full" if tty else "concise"


def choose_format(requested: Enum | str | None, as_json: bool = False, *, isatty: bool | None = None,
                  environ: Mapping[str, str] | None = None) -> str:
    fmt = requested.value if isinstance(requested, Enum) else requested
    if as_json:
        if fmt not in (None, "json"):
            raise UsageError(f"--json and --output-format {fmt} disagree: --json is --output-format json")
        return "json"
    return fmt or default_format(isatty=isatty, environ=environ)


@dataclass
class Run:
    """One `kconvert.cli.main` call: the command and the output format it asked for, recorded by `begin` for the
    failure path. `main` makes one per call and hands it to click as the context's `obj`."""

    command: str | None = None
    format: str | None = None
    source: str | None = None
    statistics: bool = False  # --statistics (kconvert.cli._gate): counts per rule instead of the findings

    def failure(self, kind: str, message: str, exit_code: int, *, hint: str | None = None,
                last_lines: list[str] | None = None) -> Failure:
        return Failure(kind, message, exit_code, hint=hint, command=self.command, source=self.source,
                       last_lines=last_lines)


def current_run() -> Run | None:
    """The `Run` of the command line being executed (None when a command function is called outside `main`)."""
    ctx = get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj if isinstance(obj, Run) else None


def begin(command: str, fmt: Enum | str | None = None, as_json: bool = False,
          source: str | None = None) -> str:
    """Record the command and its output format (chosen from `--output-format`, `--json` and the defaults) in the
    current `Run` for the failure path, and return the format."""
    run = current_run() or Run()
    run.command, run.source = command, source
    # --json asks for JSON even when it contradicts --output-format: the refusal itself is then a JSON error
    run.format = "json" if as_json else None
    run.format = choose_format(fmt, as_json)
    if fmt is not None and command in DOCUMENTS and not get(run.format).renders(command):
        able = ", ".join(f.name for f in output_formats() if f.renders(command))
        raise UsageError(f"--output-format {run.format} does not render a {command} report; choose one of {able}")
    return run.format


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
    return fmt.lower() if fmt and fmt.lower() in {f.name for f in output_formats()} else None


def write(text: str) -> None:
    """Text for stdout (a rendered format, a line): whatever it holds, every character that would act on a
    terminal but the line feeds is shown escaped (kconvert.guard.text), the last guard before the terminal."""
    sys.stdout.write(visible_lines(text))
    sys.stdout.flush()


def emit_json(doc: Any) -> None:
    """A JSON document that is no report of the registry (rules, a push, a trace, a server measurement), its
    strings escaped as every format's are (kconvert.guard.text)."""
    write(json.dumps(visible_document(doc), indent=2, default=str, allow_nan=False) + "\n")


def emit_report(doc: dict[str, Any], fmt: str, full: Callable[[Console, dict[str, Any]], None], *,
                document: str | None = None) -> None:
    """One document (`document`, by default its `command`: inspect, fix, verify, score; the matrix) in the chosen
    format (kconvert.report.formats.render); `full(console, doc)` draws the rich view. Either way the renderer
    gets the document with every string escaped (kconvert.guard.text): nothing it prints can act on a
    terminal."""
    run = current_run()
    if run is not None and run.statistics:
        write(statistics(doc.get("findings") or []))
        return
    if get(fmt).render is None:
        full(console, visible_document(doc))
    else:
        write(render(fmt, document or doc["command"], doc))


def _rule_name(rule_id: str) -> str:
    from kconvert.rules import REGISTRY  # deferred: loaded already by the run that found them

    r = REGISTRY.get(rule_id)
    return r.name if r is not None else ""


def statistics(findings: Sequence[dict[str, Any]]) -> str:
    """ruff's `--statistics`: one line per rule, most findings first: count, id, severity (the most severe its
    findings have), name, and `[*]` when fix repairs them all."""
    order = {"error": 0, "warning": 1, "info": 2}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_id.setdefault(f["id"], []).append(f)
    rows = sorted(by_id.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = []
    for rid, fs in rows:
        sev = min((f.get("severity", "error") for f in fs), key=lambda s: order.get(s, 9))
        fixable = "[*]" if all(f.get("fixable") and not f.get("needs_decision") for f in fs) else "   "
        name = fs[0].get("name") or _rule_name(rid)
        lines.append(f"{len(fs):>5}  {rid}  {sev:<7}  {fixable} {name}")
    return "\n".join(lines) + ("\n" if lines else "")


def error_line(message: str, hint: str | None = None) -> None:
    # Messages quote names from the checkpoint (`[tensor]`, `[/oops]`) and arguments as given: controls escaped
    # (kconvert.guard.text), and a Text, never read by rich as markup or emoji codes.
    err_console.print(Text.assemble(("error:", "bold red"), " ", visible(message)), highlight=False, soft_wrap=True)
    if hint:
        err_console.print(Text(f"hint: {visible(hint)}", style="dim"), highlight=False, soft_wrap=True)


_INTERRUPT_LINES: list[str] = []  # the interrupt lines printed in this process (kconvert.cli.main counts them)


def interrupt_line(exc: BaseException | None = None, note: str = "") -> int:
    """The one line of a run SIGINT or SIGTERM stopped (`error: interrupted by SIGTERM`, and what is left where
    it matters), printed once; returns the exit code, 128 + the signal (kconvert.errors)."""
    from kconvert.errors import interrupt_exit_code, interrupt_message

    line = interrupt_message(exc) + (f": {note}" if note else "")
    error_line(line)
    _INTERRUPT_LINES.append(line)
    return interrupt_exit_code(exc)


def interrupt_lines() -> int:
    return len(_INTERRUPT_LINES)


def echo_line(line: str, style: str | None = None) -> None:
    """One line of someone else's text on stderr (an engine's log line, a note naming a file), escaped and never
    read as markup or emoji codes."""
    err_console.print(Text(visible(line), style=style or ""), highlight=False, soft_wrap=True)


def emit_failure(failure: Failure, fmt: str | None) -> None:
    """The stdout side of a failure in the requested machine format (the stderr line is printed separately); a
    format without a failure rendering (full, concise) prints nothing on stdout."""
    if fmt is None:
        return
    text = render_failure(fmt, failure)
    if text is not None:
        write(text)


@contextmanager
def stage_progress(command: str, quiet: bool, *, first: str | None = None,
                   echo_when_quiet: bool = False) -> Iterator[Callable[[str], None]]:
    """The `progress(stage)` callback a long command hands its library call: a spinner on stderr that shows the
    stage (`first` before any), or, when the report is quiet (JSON, a CI format, no terminal), nothing, or with
    `echo_when_quiet` one plain line a stage on a terminal's stderr (verify's engine stages take minutes)."""
    if quiet:
        def echo(stage: str) -> None:
            if echo_when_quiet and err_console.is_terminal:
                echo_line(f"{command}: {stage}")
        yield echo
        return
    # a stage names files and engines: a Text, escaped, never read as markup
    with err_console.status(Text(visible(f"{command}: {first}" if first else command)), spinner="dots") as status:
        yield lambda stage: status.update(Text(visible(f"{command}: {stage}")))


ByteProgress = Callable[[int, int, str], None]  # (bytes done, bytes in all, what is under way)


@contextmanager
def byte_progress(first: str, *, quiet: bool) -> Iterator[ByteProgress]:
    """A transient bar of bytes on stderr (size, speed, time left) for fix's writing and push's hashing and upload;
    `quiet` (a machine format, or stderr not a terminal) draws nothing."""
    # deferred: rich.progress is ~15 ms of imports, and only fix and push draw a bar
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    # the description names files (`copied model.safetensors`): escaped, and the column reads no markup
    with Progress(TextColumn("{task.description}", style="progress.description", markup=False), BarColumn(),
                  DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=err_console, disable=quiet,
                  transient=True) as prog:
        task = prog.add_task(first, total=None)

        def update(done: int, total: int, message: str) -> None:
            prog.update(task, completed=done, total=total, description=visible(message)[:40])

        yield update


def print_hub_commit(readme: str, dry_run: bool, commit_url: str | None, pr_url: str | None) -> None:
    """The end of `kconvert push` and `kconvert push-trace`: the card a dry run would upload, or the commit made
    (and its pull request)."""
    if dry_run:
        console.rule("README.md")
        console.print(Text(visible_lines(readme)), highlight=False, soft_wrap=True)
        console.rule()
        console.print("[dim]dry run: nothing uploaded[/]")
    else:
        console.print(Text.assemble(("committed", "green"), " ", visible(str(commit_url))), highlight=False)
        if pr_url:
            console.print(Text.assemble(("pull request", "green"), " ", visible(pr_url)), highlight=False)
