"""`kconvert inspect`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._gate import gate_options
from kconvert.cli._panels import PanelCommand
from kconvert.cli._help import help_examples
from kconvert.cli._common import (SMALL_COUNT, AuxConvOpt, AuxIdsOpt, ConfigOpt, D2tOpt, EngineOpt, EngineVersionOpt,
                                  ExtendIgnoreOpt, FailOnOpt, IgnoreOpt, IsolatedOpt, JsonOpt, OracleOpt,
                                  OutputFormatOpt, SelectOpt, SourceArg, TargetOpt, file_outputs, project_settings, write_outputs)
from kconvert.cli._output import begin, console, emit_report
from kconvert.errors import UsageError

EXAMPLES = """
Examples:

  kconvert inspect AQ-MedAI/Kimi-K25-eagle3 --target kimi-k2.5

  kconvert inspect ./my-draft --target ./tiny-target --engine sglang --json

  kconvert inspect ./draft --target kimi-k2.5 --output-format github --fail-on warning

  kconvert inspect ./draft --target kimi-k2.5 --output-format sarif > kconvert.sarif

  kconvert inspect lightseekorg/kimi-k2.5-eagle3@main --target moonshotai/Kimi-K2.5
"""


@app.command("inspect", epilog=help_examples(EXAMPLES), cls=PanelCommand)  # options in panels: _panels
@file_outputs("inspect")  # --report, --sarif: kconvert.report.formats
@gate_options  # --extend-select, --exit-zero, --statistics, --show-settings: kconvert.cli._gate
def inspect_command(
    source: SourceArg,
    target: TargetOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    aux_ids: AuxIdsOpt = None,
    aux_convention: AuxConvOpt = None,
    d2t: D2tOpt = None,
    fail_on: FailOnOpt = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    extend_ignore: ExtendIgnoreOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    output_format: OutputFormatOpt = None,
    as_json: JsonOpt = False,
    hashes: Annotated[bool, typer.Option("--hash", help="Also compute the sha256 of every local file "
                                                         "(reads all bytes; off by default).")] = False,
    tp: Annotated[Optional[int], typer.Option(
        "--tp", "--tensor-parallel-size", **SMALL_COUNT,
        help="Tensor-parallel size the draft will be served at: K304 checks that its heads, KV heads and draft "
             "vocabulary split over it as vLLM splits them.")] = None,
    draft_tp: Annotated[Optional[int], typer.Option(
        "--draft-tp", **SMALL_COUNT,
        help="draft_tensor_parallel_size, when it differs from --tp (vLLM accepts 1 or --tp).")
    ] = None,
    oracle: OracleOpt = False,
    outputs: dict[str, str] | None = None,
) -> None:
    """Describe a draft, name its producer and list every incompatibility with the target and engine.

    Reads config.json, the index and the safetensors headers, plus a few small tensors (d2t, t2d, a handful of
    embedding rows); never loads the weights, never runs code from the checkpoint. Exit 0 when nothing fails the
    gate (--fail-on), 1 otherwise, 2 for unreadable input.
    """
    # deferred: the library and its renderers load the rules and the readers, which --help never needs
    from kconvert.commands.inspect import inspect
    from kconvert.report.terminal import render_report

    fmt = begin("inspect", output_format, as_json, source)
    if draft_tp is not None and tp is None:
        raise UsageError("--draft-tp needs --tp (the target's tensor-parallel size)")
    # deferred: importing the rules registers every rule (the checkpoint readers, the engine rows): not for --help
    from kconvert.rules.decisions import decisions_from_flags

    decisions = decisions_from_flags(aux_ids, aux_convention, d2t, tp=tp, draft_tp=draft_tp)
    ps = project_settings(config, isolated, select=select, ignore=ignore, extend_ignore=extend_ignore,
                          engine=engine, engine_version=engine_version, target=target, fail_on=fail_on)
    result = inspect(source, target=ps.target, engine=ps.engine, engine_version=ps.engine_version,
                     decisions=decisions, fail_on=ps.fail_on, selection=ps.selection, oracle=oracle)
    doc = result.to_dict(hashes=hashes)
    write_outputs("inspect", doc, outputs or {})
    emit_report(doc, fmt, render_report)
    raise typer.Exit(result.exit_code)
