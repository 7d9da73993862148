"""`kconvert acceptance`: acceptance figures from saved vLLM /metrics scrapes."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._help import help_examples
from kconvert.cli._common import INPUT, SMALL_COUNT, json_opt, path
from kconvert.cli._output import begin, console, emit_json, err_console
from kconvert.guard.text import visible_document

EXAMPLES = """
Examples:

  curl -s localhost:8000/metrics > after.txt && kconvert acceptance after.txt

  kconvert acceptance after.txt --before before.txt --model kimi-k2.5 -k 3

  kconvert acceptance after.txt --before before.txt --json

  kconvert acceptance after.txt --server-info server_info.json
"""


@app.command("acceptance", epilog=help_examples(EXAMPLES))
def acceptance_command(
    metrics: Annotated[str, path(INPUT, typer.Argument(
        help="A vLLM /metrics scrape (Prometheus text; '-' reads stdin).", show_default=False))],
    before: Annotated[Optional[str], path(INPUT, typer.Option(
        "--before", help="An earlier scrape of the same server: report the counters between the two."))] = None,
    model: Annotated[Optional[str], typer.Option(
        "--model", help="Only this model_name label (default: sum over every model and engine).")] = None,
    k: Annotated[Optional[int], typer.Option(
        "-k", "--num-speculative-tokens", **SMALL_COUNT,
        help="Speculative tokens per step (default: the draft positions the scrape exports).")] = None,
    server_info: Annotated[Optional[str], typer.Option(
        "--server-info", help="The same server's /server_info?config_format=json, saved (vLLM serves it under "
                              "VLLM_SERVER_DEV_MODE=1): its sampler is checked, and a forced acceptance exits 1.")
    ] = None,
    as_json: json_opt("acceptance") = False,
) -> None:
    """Acceptance rate, mean acceptance length and per-position rates from vLLM's spec-decode counters.

    Reads vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens and
    _num_accepted_tokens_per_pos (with or without _total), summed over engines. One scrape gives the figures
    since the server started; --before gives those of the traffic between two scrapes. The counters do not show
    the sampler: with --server-info, a server that forces acceptance (rejection_sample_method synthetic) exits 1;
    without it the figure is only as honest as the server's sampler.
    """
    # deferred: the library and its renderers load the rules and the readers, which --help never needs
    from kconvert.report.terminal import render_acceptance
    from kconvert.commands.verify.deployment import acceptance_from_files

    begin("acceptance", "json" if as_json else "full", source=metrics)
    doc = acceptance_from_files(metrics, before, model=model, k=k, server_info=server_info)
    if as_json:
        emit_json(doc)
    else:
        render_acceptance(console, err_console, visible_document(doc))  # a server's model names: escaped
    raise typer.Exit(1 if doc["sampler"]["forced"] else 0)
