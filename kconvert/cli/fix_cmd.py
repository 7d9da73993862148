"""`kconvert fix`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from kconvert.cli._app import app
from kconvert.cli._gate import gate_options
from kconvert.cli._panels import PanelCommand
from kconvert.cli._help import help_examples
from kconvert.cli._common import (INPUT, OUTPUT_FOLDER, AuxConvOpt, AuxIdsOpt, ConfigOpt, D2tOpt, EngineOpt,
                                  EngineVersionOpt, ExtendIgnoreOpt, FailOnOpt, IgnoreOpt, IsolatedOpt, JsonOpt,
                                  OutputFormatOpt, SelectOpt, SourceArg, TargetOpt, path, project_settings)
from kconvert.cli._output import begin, byte_progress, echo_line, emit_report, err_console
from kconvert.guard.text import visible_lines
from kconvert.errors import UsageError

EXAMPLES = """
Examples:

  kconvert fix AQ-MedAI/Kimi-K25-eagle3 -o ./kimi-draft-vllm --target kimi-k2.5 --aux-convention input

  kconvert fix ./draft -o ./draft-sglang --engine sglang --dry-run

  kconvert fix ./draft --target kimi-k2.5 --dry-run --output-format concise

  kconvert fix ./draft -o ./fixed --target ./target --aux-ids 2,30,58

  kconvert fix ./pruned -o ./fixed --lm-head-from ./full-vocab-draft

  kconvert fix ./eagle3-llama3.1-8b -o ./draft-st --target llama-3.1-8b --from-pickle
"""

CAST = {"bf16": "BF16", "bfloat16": "BF16", "fp16": "F16", "float16": "F16", "fp32": "F32", "float32": "F32"}


@app.command("fix", epilog=help_examples(EXAMPLES), cls=PanelCommand)  # options in panels: _panels
@gate_options  # --extend-select, --exit-zero, --statistics, --show-settings: kconvert.cli._gate
def fix_command(
    source: SourceArg,
    output: Annotated[Optional[str], path(OUTPUT_FOLDER, typer.Option(
        "--output", "-o", help="Destination folder: a new path, an empty folder, or (with --force) an earlier fix "
                               "output; nothing else is ever replaced."))] = None,
    target: TargetOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan (config diff and tensor ops); "
                                                            "write nothing.")] = False,
    only: Annotated[Optional[str], typer.Option("--only", help="Apply only the fixes of these rule ids "
                                                               "(comma-separated, e.g. K404,K502).")] = None,
    aux_ids: AuxIdsOpt = None,
    aux_convention: AuxConvOpt = None,
    d2t: D2tOpt = None,
    lm_head_from: Annotated[Optional[str], path(INPUT, typer.Option(
        "--lm-head-from", help="Full-vocabulary draft whose lm_head rows are re-selected as full[d2t + arange] "
                               "(repairs a prune that indexed with d2t alone)."))] = None,
    cast: Annotated[Optional[str], typer.Option("--cast", help="Cast floating-point weights: bf16, fp16 or "
                                                               "fp32 (lossy; never done unasked).")] = None,
    rope_from_target: Annotated[bool, typer.Option(
        "--rope-from-target", help="Copy the target's rope scaling into a draft that has none (only when a "
                                   "converter dropped it; K902).")] = False,
    to_format: Annotated[Optional[str], typer.Option(
        "--to-format", help="Write the speculators format or the flat SpecForge/vLLM layout (default: keep, "
                            "except speculators → flat for SGLang).")] = None,
    partial: Annotated[bool, typer.Option("--partial", help="Write what can be fixed even when error-level "
                                                            "findings remain; list them.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing destination (atomically).")] = False,
    from_pickle: Annotated[bool, typer.Option(
        "--from-pickle", help="Convert PyTorch weight files (pytorch_model.bin, *.pt) to safetensors through "
                              "torch.load(weights_only=True), after the static check inspect makes; needs torch.")] = False,
    fsync: Annotated[bool, typer.Option(
        "--fsync/--no-fsync",
        help="Flush the output to disk before renaming it into place (default), so that even a power cut "
             "cannot leave a complete-looking folder with data missing. --no-fsync leaves the flushing to the "
             "OS like cp does (faster on slow disks); an interrupted or killed fix still leaves nothing.")] = True,
    decided_by: Annotated[Optional[str], path(INPUT, typer.Option(
        "--decided-by", help="A `kconvert score --diagnose` report of this draft: take the decision flags from the "
                             "reading it measured best (or check the flags given agree) and record in kconvert.json "
                             "which trace decided, with the acceptance lengths."))] = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    extend_ignore: ExtendIgnoreOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    fail_on: FailOnOpt = None,
    output_format: OutputFormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a corrected copy of a draft that the chosen engine loads with the intended meaning.

    Streams the tensors (unchanged ones are copied by byte range), keeps sharding, writes into a temporary folder
    beside the destination, checks the result and renames it into place, and records every op in kconvert.json.
    Never modifies the input; a failed fix leaves no output folder. Stops, naming the flag to pass, where the
    files cannot settle a decision. A setting that needs a decision no flag gave is left exactly as it is (named,
    and recorded in kconvert.json); every other repair is applied. Nothing to change: nothing is written. Exit 0
    no error-level finding remains (1 under --fail-on warning while a warning does), 1 an error remains or its
    repair needs a decision, or another method's checkpoint (K105: refused, nothing written), 2 bad input.
    """
    # deferred: the library and its renderers load the rules and the readers, which --help never needs
    from kconvert.commands.fix import check_only, fix
    from kconvert.writer.ops import DeleteConfig, SetConfig

    fmt = begin("fix", output_format, as_json, source)
    cast_dtype = None
    if cast is not None:
        cast_dtype = CAST.get(cast.lower())
        if cast_dtype is None:
            raise UsageError(f"--cast {cast!r}: choose bf16, fp16 or fp32")
    # deferred: importing the rules registers every rule (the checkpoint readers, the engine rows): not for --help
    from kconvert.rules.decisions import decisions_from_flags

    decisions = decisions_from_flags(aux_ids, aux_convention, d2t, lm_head_source=lm_head_from,
                                     cast_dtype=cast_dtype, rope_from_target=rope_from_target)
    only_set = check_only(set(only.split(","))) if only is not None else None
    ps = project_settings(config, isolated, select=select, ignore=ignore, extend_ignore=extend_ignore,
                          engine=engine, engine_version=engine_version, target=target, fail_on=fail_on)
    if not dry_run and output is None:
        raise UsageError("fix needs -o/--output DIR (or --dry-run to only print the plan)")

    quiet = fmt != "full" or not err_console.is_terminal
    with byte_progress("writing", quiet=quiet) as progress:
        result = fix(source, output, target=ps.target, engine=ps.engine, engine_version=ps.engine_version,
                     decisions=decisions, only=only_set, dry_run=dry_run, partial=partial, force=force,
                     to_format=to_format, progress=progress, durable=fsync, from_pickle=from_pickle,
                     decided_by=decided_by or None, selection=ps.selection, fail_on=ps.fail_on,
                     notify=lambda line: echo_line(line, "dim"))
    doc = result.to_dict()
    config_ops = (SetConfig, DeleteConfig)
    tensor_steps = [i for i, op in enumerate(result.plan.ops) if not isinstance(op, config_ops)]
    emit_report(doc, fmt, lambda c, shown: render_fix(c, shown, result.plan.config_diff(), tensor_steps))
    raise typer.Exit(result.exit_code)


def render_fix(console: Console, doc: dict, config_diff: str, tensor_steps: list[int]) -> None:
    """fix's full view, from the report (its strings escaped: kconvert.cli._output.emit_report) and the config
    diff; `tensor_steps`: the positions of the tensor ops among the report's `fix.steps`. Every document string
    reaches rich inside a Text (never read as markup)."""
    # deferred: the report package loads the checkpoint readers, which --help never needs
    from kconvert.report.terminal import render_next

    fx = doc["fix"]
    if doc.get("refused"):
        console.print(Text.assemble(("refused:", "red"), " ", doc["refused"]["reason"]))
        render_next(console, doc)
        return
    only = set(fx.get("only") or [])
    for rid in fx["only_without_finding"]:
        console.print(Text.assemble((f"--only {rid}:", "yellow"), f" no {rid} finding in this checkpoint"))
    unselected = [f for f in fx["left"] if only and f["id"] not in only]
    if fx["noop"]:
        written = "" if fx["dry_run"] else "; nothing written"
        if unselected or fx["unfixable"]:
            console.print(Text(f"0 ops: nothing selected can change this checkpoint{written}", style="yellow"))
        elif fx["left_as_is"]:
            console.print(Text(f"0 ops: nothing to change that the files settle{written}.", style="green"))
        else:
            console.print(Text(f"0 ops: the checkpoint already loads as intended on {doc['engine']['name']}; "
                               f"nothing to change{written}.", style="green"))
    else:
        if config_diff:
            from rich.syntax import Syntax  # deferred: rich.syntax loads pygments (~15 ms); only a config diff shown needs it

            console.print(Syntax(visible_lines(config_diff), "diff", theme="ansi_dark", word_wrap=True))
        tops = [fx["steps"][i] for i in tensor_steps]
        if tops:
            console.print(Text(f"{len(tops)} tensor op(s):", style="bold"))
            for line in tops[:40]:
                console.print(Text(f"  {line}"), highlight=False)
            if len(tops) > 40:
                console.print(f"  ... and {len(tops) - 40} more")
        console.print(Text.assemble((f"{len(fx['ops'])} op(s)", "bold"),
                                    f" from findings {', '.join(fx['applied_findings'])}"))
    for f in fx["unfixable"]:
        console.print(Text.assemble(("left (not fixable):", "red"), f" {f['id']} {f['message']}"))
    for f in fx["left"]:
        why = " (not selected by --only)" if f in unselected else ""
        console.print(Text.assemble((f"left as is{why}:", "yellow"), f" {f['id']} {f['message']}"
                                    + (f" (decide with {f['needs_decision']})" if f.get("needs_decision") else "")))
    for entry in fx["left_as_is"]:
        rec = entry.get("recommended")
        console.print(Text.assemble(("left as is:", "yellow"), f" {entry['id']} {entry['message'].split(': ')[0]}; "
                                    f"decide with {entry['decide_with']}"
                                    + (f"; measured: {rec['flag']} ({rec['figure']}, {rec['source']})" if rec else "")))
    for a in (doc.get("rule_selection") or {}).get("set_aside") or []:
        console.print(Text.assemble(("set aside by the rule selection:", "yellow"),
                                    f" {a['id']} {a['severity']} {a['message']} ({a['reason']}): not fixed, not gated"))
    if fx["dry_run"]:
        console.print(Text("dry run: nothing written", style="dim"))
    elif fx["output"]:
        console.print(Text.assemble(("wrote", "green"), f" {fx['output']} (provenance in kconvert.json)"))
    render_next(console, doc)
