"""`kconvert matrix`: parse, call `kconvert.matrix.matrix`, render what it returns (the terminal table of
kconvert.report.matrix_terminal, JSON, files)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from kconvert.cli._app import app
from kconvert.cli._gate import gate_options
from kconvert.cli._panels import PanelCommand
from kconvert.cli._common import (CACHE, COUNT, INPUT, SECONDS, SMALL_COUNT, ConfigOpt, ExtendIgnoreOpt, FailOnOpt,
                                  IgnoreOpt, IsolatedOpt, OracleOpt, SelectOpt, add_inputs, file_outputs, json_opt,
                                  path, write_outputs)
from kconvert.cli._help import help_examples
from kconvert.cli._output import begin, current_run, emit_report, err_console, interrupt_line, statistics, write
from kconvert.errors import UsageError
from kconvert.guard.text import visible

EXAMPLES = """
Examples:

  kconvert matrix examples/tiny/drafts/mla-torchspec examples/tiny/drafts/llama-speculators --target examples/tiny/target --engines vllm

  kconvert matrix examples/tiny/drafts/mla-torchspec --target examples/tiny/target --engines vllm:0.33,sglang:0.5.23 --cache off --json

  kconvert matrix 'runs/*/epoch_*' --target kimi-k2.5 --trace ./trace --markdown matrix.md

  kconvert fix $(kconvert matrix 'runs/*/epoch_*' --trace ./trace --best) -o ./best-vllm --target kimi-k2.5

  kconvert matrix --hub-author AQ-MedAI --engines all --html matrix.html --csv matrix.csv

  kconvert matrix --from drafts.txt --workers 2 --cache ./matrix.sqlite --refresh
"""

@contextmanager
def progress(quiet: bool) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """The spinner on stderr that counts the cells as they finish (none when quiet), as the `on_cell` callback."""
    if quiet:
        yield None
        return
    with err_console.status("matrix", spinner="dots") as status:
        n = [0]

        def on_cell(c: dict[str, Any]) -> None:
            n[0] += 1
            status.update(Text(visible(f"matrix: {n[0]} cell{'' if n[0] == 1 else 's'} ({c['draft']} on {c['engine']} "
                                       f"{c['engine_version']})")))

        yield on_cell


@app.command("matrix", epilog=help_examples(EXAMPLES), cls=PanelCommand)  # options in panels: _panels
@file_outputs("matrix")  # --markdown, --html, --csv, --report: kconvert.report.formats
@gate_options  # --extend-select, --exit-zero, --statistics, --show-settings: kconvert.cli._gate
def matrix_command(
    drafts: Annotated[Optional[list[str]], path(INPUT, typer.Argument(
        help="Drafts: local folders, globs (runs/*/epoch_*, quoted or not), Hub ids org/name[@rev].",
        show_default=False))] = None,
    from_file: Annotated[Optional[str], path(INPUT, typer.Option(
        "--from", help="A file of drafts, one per line, optionally followed by its target; # starts a comment."))
    ] = None,
    hub_search: Annotated[Optional[str], typer.Option(
        "--hub-search", help="Add the Hub's models matching this text (HfApi.list_models).")] = None,
    hub_author: Annotated[Optional[str], typer.Option(
        "--hub-author", help="Add the Hub's models of this author or organisation.")] = None,
    hub_limit: Annotated[int, typer.Option("--hub-limit", **COUNT, help="At most this many models from a Hub "
                                                                      "search (most downloaded first).")] = 200,
    target: Annotated[Optional[str], path(INPUT, typer.Option(
        "--target", "-t", help="The target of every draft: a profile (kimi-k2.5, ...), a folder or a Hub id. "
                               "Default: inferred per draft from its metadata, with the evidence shown; unknown "
                               "is its own state."))] = None,
    engines: Annotated[str, typer.Option(
        "--engines", help="Engine rows: all, an engine (vllm, sglang), or a list such as "
                          "vllm:0.32,sglang:post-32334.")] = "all",
    trace: Annotated[Optional[str], path(INPUT, typer.Option(
        "--trace", help="A trace folder (`kconvert trace`): score every draft against it and rank them by "
                        "acceptance length."))] = None,
    k: Annotated[int, typer.Option("--num-speculative-tokens", "-k", **SMALL_COUNT, help="Draft tokens per step (score "
                                                                                  "and live).")] = 3,
    score_threads: Annotated[Optional[int], typer.Option("--threads", **SMALL_COUNT, help="torch CPU threads per score "
                                                                                  "cell.")] = None,
    max_sequences: Annotated[Optional[int], typer.Option("--max-sequences", **COUNT, help="Score only the first N "
                                                                                        "sequences of the trace.")
                             ] = None,
    best: Annotated[bool, typer.Option("--best", help="Print only the best-ranked draft's path (needs --trace), "
                                                      "for $(...) in a script; exit 1 when none is ranked.")] = False,
    live: Annotated[bool, typer.Option("--live", help="Also verify each draft live on the installed vLLM "
                                                      "(kconvert verify).")] = False,
    prompts: Annotated[str, path(INPUT, typer.Option("--prompts", help="Live: prompt set or JSONL file."))] = "all",
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", **COUNT, help="Live: only the first N "
                                                                                    "prompts.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", **COUNT, help="Live: tokens per prompt.")] = 64,
    engine_arg: Annotated[Optional[list[str]], typer.Option(
        "--engine-arg", help="Live: a vLLM engine argument K=V (repeatable), e.g. dtype=float32.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", **SECONDS,
                                           help="Live: seconds before an engine run is stopped.")] = 1200.0,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Live: the target ships code the "
                                                                                 "engine needs.")] = False,
    executor: Annotated[str, typer.Option("--executor", help="local (a process pool) or ray "
                                          "(pip install 'kconvert-eagle3[ray]').")
                        ] = "local",
    workers: Annotated[int, typer.Option("--workers", **SMALL_COUNT,
                                         help="Cells computed at once (1: in this process).")] = 1,
    ray_address: Annotated[Optional[str], typer.Option(
        "--ray-address", help="Ray cluster to join (auto reads RAY_ADDRESS); default a local Ray instance.")] = None,
    ray_runtime_env: Annotated[Optional[str], typer.Option(
        "--ray-runtime-env", help="Ray runtime_env as JSON, passed through (e.g. to pin an engine version).")
    ] = None,
    cache: Annotated[Optional[str], path(CACHE, typer.Option(
        "--cache", help="The cell cache (sqlite); off for none. Default $XDG_CACHE_HOME/kconvert/matrix.sqlite."))
    ] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Recompute every cell (and store it).")] = False,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    extend_ignore: ExtendIgnoreOpt = None,
    fail_on: FailOnOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    oracle: OracleOpt = False,
    as_json: json_opt("matrix") = False,
    outputs: dict[str, str] | None = None,
) -> None:
    """Every draft x every engine row: inspect's verdict per cell, a score per draft against a trace, live cells.

    A cell holds the verdict (pass / warn / fail, by inspect's rules and exit semantics), the finding ids, whether
    fix repairs them and whether that leaves a decision, and the fix command. An unreadable draft, a missing
    file, an engine crash is a cell of state error; a draft whose target is unknown gets target-less checks
    (state skipped unless they fail). Cells are cached by the draft's commit sha or content digest, the engine
    row, kconvert's version and the trace's digest. Exit 0 when every cell passes or warns, 1 when any fails,
    2 on bad usage or an unreadable draft, 3 when a live cell's engine could not run.
    """
    # deferred: the matrix loads the rules, the engines' facts and rich's tables, which --help never needs
    from kconvert.matrix import matrix
    from kconvert.report.matrix_terminal import render_matrix

    fmt = begin("matrix", None, as_json)
    if best and not trace:
        raise UsageError("--best ranks by scored acceptance length: give --trace")
    from kconvert.runners.vllm_args import parse_engine_args  # the one --engine-arg parser, verify's too

    args = parse_engine_args(engine_arg)
    from kconvert.matrix.gather import listed_inputs

    # the drafts and targets a glob or a --from list names are inputs too, known only here
    add_inputs("matrix", outputs or {}, listed_inputs(list(drafts or []), from_file))
    with progress(fmt != "full" or best or not err_console.is_terminal) as on_cell:
        doc = matrix(drafts, config=config, isolated=isolated, select=select, ignore=ignore,
                     extend_ignore=extend_ignore, target=target, fail_on=fail_on, executor=executor, workers=workers,
                     ray_address=ray_address, ray_runtime_env=ray_runtime_env, cache=cache, on_cell=on_cell,
                     from_file=from_file, hub_search=hub_search, hub_author=hub_author, hub_limit=hub_limit,
                     engines=engines, trace=trace, live=live, k=k, score_threads=score_threads,
                     max_sequences=max_sequences, prompts=prompts, max_prompts=max_prompts, max_tokens=max_tokens,
                     engine_args=args, timeout_s=timeout, trust_remote_code=trust_remote_code, refresh=refresh,
                     oracle=oracle)
    write_outputs("matrix", doc, outputs or {})
    if best:
        chosen = (doc.get("ranking") or {}).get("best")
        if chosen is None:
            err_console.print("kconvert matrix --best: no draft was ranked (each failed statically, could not "
                              "be scored, or is another method's checkpoint: K105)", markup=False, highlight=False)
            raise typer.Exit(1)
        write(chosen + "\n")
        raise typer.Exit(0)
    run = current_run()
    if run is not None and run.statistics:  # --statistics: every cell's findings counted per rule
        write(statistics([f for c in doc.get("cells") or [] for f in c.get("findings") or []]))
    else:
        emit_report(doc, "json" if fmt == "json" else "full", render_matrix, document="matrix")
    if doc.get("interrupted"):
        raise typer.Exit(interrupt_line(note="the matrix above holds the cells finished before it"))
    raise typer.Exit(doc["exit_code"])
