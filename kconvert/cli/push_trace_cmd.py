"""`kconvert push-trace`: publish a trace folder already recorded (`kconvert trace ... --push` does it right after
recording). A command of its own rather than `kconvert trace --from-trace DIR`: `trace` records and takes the
target as its argument, which a push of a finished folder does not need; `push-trace FOLDER REPO` reads like
`kconvert push FOLDER REPO`, with the same options."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.text import Text

from kconvert.cli._app import app
from kconvert.cli._common import INPUT, CreatePrOpt, HubRevisionOpt, HubTokenOpt, PrivateOpt, path
from kconvert.cli._help import help_examples
from kconvert.guard.text import visible
from kconvert.cli._output import begin, byte_progress, console, emit_json, err_console, print_hub_commit

EXAMPLES = """
Examples:

  kconvert push-trace tiny-trace my-org/tiny-trace --dry-run

  kconvert push-trace kimi-trace my-org/kimi-k25-trace --private

  HF_TOKEN=hf_... kconvert push-trace kimi-trace my-org/kimi-k25-trace --revision bf16-2k --json
"""


@app.command("push-trace", epilog=help_examples(EXAMPLES))
def push_trace_command(
    folder: Annotated[str, path(INPUT, typer.Argument(help="A trace folder written by `kconvert trace`.",
                                                      show_default=False))],
    repo_id: Annotated[str, typer.Argument(help="Hub dataset repository: org/name (created if missing).",
                                           show_default=False)],
    revision: HubRevisionOpt = None,
    create_pr: CreatePrOpt = False,
    private: PrivateOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the trace, print the files and the dataset "
                                                            "card; no network.")] = False,
    commit_message: Annotated[Optional[str], typer.Option("--commit-message", "-m", help="Commit summary.")] = None,
    token: HubTokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (files, card, commit: "
                                                         "schemas/push-trace.schema.json); a failure prints a JSON "
                                                         "error object (schemas/error.schema.json).")] = False,
) -> None:
    """Publish a recorded trace as a Hub dataset, for `kconvert score DRAFT --trace org/name` anywhere.

    Opens the folder as score does (schema, headers, shapes, every data file's sha256 against trace.json) and
    uploads only trace.json and the safetensors files it lists, plus a dataset card (README.md) stating the
    target and its revision, dtype, recording engine and version, prompt set, layers, positions and size, in one
    commit. A file that changes after the check is refused. Exit 0, 2 bad input or a Hub error.
    """
    from kconvert.trace import push_trace

    begin("push-trace", "json" if as_json else "full", source=folder)
    quiet = as_json or not err_console.is_terminal
    with byte_progress("uploading", quiet=quiet) as progress:
        result = push_trace(folder, repo_id, revision=revision, create_pr=create_pr,
                            private=True if private else None, dry_run=dry_run, commit_message=commit_message,
                            token=token, on_upload=lambda d, t: progress(d, t, f"uploading to {repo_id}"))
    if as_json:
        emit_json(result.to_dict())
        raise typer.Exit(0)
    from rich.table import Table

    where = f"{repo_id}@{revision or 'main'} (dataset)"
    table = Table(title=Text(visible(f"{'would upload' if dry_run else 'uploaded'} to {where}: one commit"),
                             style="table.title"), title_justify="left")
    for col in ("file", "bytes", "sha256"):
        table.add_column(col, justify="right" if col == "bytes" else "left")
    for f in result.files:
        table.add_row(Text(visible(f.name)), f"{f.size:,}", Text(visible(f.sha256 or "")))
    table.add_row("README.md", f"{len(result.readme.encode('utf-8')):,}", "(rendered dataset card)")
    console.print(table)
    print_hub_commit(result.readme, dry_run, result.commit_url, result.pr_url)
    if not dry_run:
        console.print(Text(visible(f"score drafts against it: kconvert score DRAFT --trace {result.reference}")),
                      highlight=False)
    raise typer.Exit(0)
