"""`kconvert push`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.text import Text

from kconvert.cli._app import app
from kconvert.cli._common import INPUT, SMALL_COUNT, CreatePrOpt, HubRevisionOpt, HubTokenOpt, PrivateOpt, path
from kconvert.cli._help import help_examples
from kconvert.guard.text import visible
from kconvert.cli._output import begin, byte_progress, console, emit_json, err_console, print_hub_commit

EXAMPLES = """
Examples:

  kconvert push ./kimi-draft-vllm my-org/Kimi-K2.5-eagle3 --report verify.json --dry-run

  kconvert push ./kimi-draft-vllm my-org/Kimi-K2.5-eagle3 --report verify.json --private

  kconvert push ./fixed my-org/draft --report verify.json --revision kconvert-fix --create-pr

  HF_TOKEN=hf_... kconvert push ./fixed my-org/draft --report verify.json --json
"""


@app.command("push", epilog=help_examples(EXAMPLES))
def push_command(
    folder: Annotated[str, path(INPUT, typer.Argument(
        help="The checkpoint folder that was verified (e.g. `kconvert fix` output).", show_default=False))],
    repo_id: Annotated[str, typer.Argument(help="Hub repository to publish to: org/name (created if missing).",
                                           show_default=False)],
    report: Annotated[str, path(INPUT, typer.Option("--report", "-r", help="The `kconvert verify --json` report of "
                                                                         "this folder; its verdict must be pass and "
                                                                         "its sha256s must match the folder's files.",
                                        show_default=False))],
    revision: HubRevisionOpt = None,
    create_pr: CreatePrOpt = False,
    private: PrivateOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check the gate, print the files and the model card; "
                                                            "no network.")] = False,
    commit_message: Annotated[Optional[str], typer.Option("--commit-message", "-m", help="Commit summary "
                                                          "(default names the engine and the acceptance length).")]
    = None,
    base_model: Annotated[Optional[str], typer.Option(
        "--base-model", help="Target's Hub id for the card's base_model and serve lines (default: from the "
                             "report; needed when verify used a local target folder).")] = None,
    tp: Annotated[Optional[int], typer.Option("--tp", **SMALL_COUNT,
                                              help="Tensor-parallel size in the card's serve lines (default: the "
                                                   "verify run's).")] = None,
    token: HubTokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (operations, card, commit: "
                                                         "schemas/push.schema.json) instead of the terminal output; a failure prints a JSON "
                                                         "error object (schemas/error.schema.json).")] = False,
) -> None:
    """Publish a draft only if it is, byte for byte, the checkpoint a passing `kconvert verify` report measured.

    Refuses (exit 1, naming the first mismatch) when the verdict is not pass or any weight/config file's sha256
    differs from the report, is missing, or is not in it, and when the folder holds another method's checkpoint
    (K105: DFlash, DSpark, an MTP layer), whatever the report says. Renders the model card (acceptance in vLLM and SGLang
    conventions, serve commands, provenance from kconvert.json), keeping an existing README.md and its metadata,
    and uploads every file plus README.md in one commit.
    """
    # deferred: the library and its renderers load the rules and the readers, which --help never needs
    from kconvert.commands.push import push

    begin("push", "json" if as_json else "full", source=folder)
    quiet = as_json or not err_console.is_terminal
    with byte_progress("hashing", quiet=quiet) as progress:
        def on_upload(done: int, total: int) -> None:
            # huggingface_hub draws its own bars for LFS/Xet transfers; this line says which commit is under way.
            progress(done, total, f"uploading to {repo_id}")

        result = push(folder, repo_id, report=report, revision=revision, create_pr=create_pr,
                      private=True if private else None, dry_run=dry_run, commit_message=commit_message,
                      token=token, base_model=base_model, tp=tp, progress=progress, on_upload=on_upload)
    if as_json:
        emit_json(result.to_dict())
        raise typer.Exit(0)
    where = f"{repo_id}@{revision or 'main'}" + (" (pull request)" if create_pr else "")
    from rich.table import Table  # deferred: only the summary of a push draws a table

    # file names, the repository id, notes: escaped, and Text (never read as markup)
    table = Table(title=Text(visible(f"{'would upload' if dry_run else 'uploaded'} to {where}: one commit"),
                             style="table.title"), title_justify="left")
    table.add_column("file")
    table.add_column("bytes", justify="right")
    table.add_column("sha256")
    table.add_column("bound to report")
    for f in result.files:
        table.add_row(Text(visible(f.name)), f"{f.size:,}", Text(visible(f.sha256 or "")), "yes" if f.bound else "")
    table.add_row("README.md", f"{len(result.readme.encode('utf-8')):,}", "(rendered model card)", "")
    console.print(table)
    console.print(Text(visible(f"commit message: {result.commit_message}")), highlight=False)
    for note in result.notes:
        console.print(Text.assemble(("note:", "yellow"), " ", visible(note)), highlight=False)
    print_hub_commit(result.readme, dry_run, result.commit_url, result.pr_url)
    raise typer.Exit(0)
