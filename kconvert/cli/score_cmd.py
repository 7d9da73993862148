"""`kconvert score`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._gate import gate_options
from kconvert.cli._panels import PanelCommand
from kconvert.cli._help import help_examples
from kconvert.cli._common import (COUNT, FRACTION, INPUT, LENGTH, SMALL_COUNT, AuxIdsOpt, ConfigOpt, EngineOpt,
                                  EngineVersionOpt, ExtendIgnoreOpt, IgnoreOpt, IsolatedOpt, JsonOpt, OutputFormatOpt,
                                  SelectOpt, file_outputs, path, project_settings, write_outputs)
from kconvert.cli._output import begin, console, emit_report, err_console, stage_progress
from kconvert.errors import UsageError

EXAMPLES = """
Examples:

  kconvert trace examples/tiny/target --prompts all -o tiny-trace --layers all

  kconvert score examples/tiny/drafts/mla-torchspec --trace tiny-trace

  kconvert score examples/tiny/broken/aux-ids-sglang-convention --trace tiny-trace --diagnose --report score.json

  kconvert score AQ-MedAI/Kimi-K25-eagle3 --trace kimi-trace -k 4 --min-acceptance-length 2.8 --json

  kconvert score AQ-MedAI/Kimi-K25-eagle3 --trace my-org/kimi-k25-trace -k 4
"""


@app.command("score", epilog=help_examples(EXAMPLES), cls=PanelCommand)  # options in panels: _panels
@file_outputs("score")  # --report: kconvert.report.formats
@gate_options  # --extend-select, --exit-zero, --statistics, --show-settings: kconvert.cli._gate
def score_command(
    draft: Annotated[str, path(INPUT, typer.Argument(help="Draft checkpoint folder (or a Hub id in the cache).",
                                                     show_default=False))],
    trace: Annotated[str, path(INPUT, typer.Option(
        "--trace", help="Trace recorded by `kconvert trace`: a folder, or a Hub dataset org/name[@rev] read through "
                        "the Hugging Face cache (HF_HUB_OFFLINE=1 reads the cache only). A path that exists always "
                        "wins; write ./org/name for a folder."))],
    k: Annotated[int, typer.Option("--num-speculative-tokens", "-k", **SMALL_COUNT, help="Draft tokens per step.")] = 3,
    aux_ids: AuxIdsOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    target: Annotated[Optional[str], path(INPUT, typer.Option(
        "--target", "-t", help="The target's facts for the static checks (default: the config the trace records)."))
    ] = None,
    dtype: Annotated[Optional[str], typer.Option(
        "--dtype", help="Compute dtype of the draft: bfloat16, float16 or float32 (default: the trace's).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto (a GPU when torch sees one), cpu, cuda, cuda:N.")
                      ] = "auto",
    threads: Annotated[Optional[int], typer.Option(
        "--threads", **SMALL_COUNT,
        help="torch CPU threads (1 is fastest on a few shared cores; default: torch's).")] = None,
    mode: Annotated[Optional[str], typer.Option(
        "--mode", help="replay (the engine's verify steps over a greedy trace; default) or every-position "
                       "(teacher-forced estimate; default for offline training dumps).")] = None,
    max_sequences: Annotated[Optional[int], typer.Option("--max-sequences", **COUNT, help="Score only the first N "
                                                                                 "sequences.")] = None,
    skip_static: Annotated[bool, typer.Option("--skip-static", help="Score even when static checks find errors "
                                                                    "(to measure a defect); never another method's "
                                                                    "checkpoint (K105: refused).")] = False,
    diagnose: Annotated[bool, typer.Option("--diagnose", help="Also try the readings the static findings leave "
                                           "open (or those of --try) and name the best by measured acceptance "
                                           "length.")] = False,
    try_: Annotated[Optional[str], typer.Option(
        "--try", help="Readings to try with --diagnose: aux,d2t,embeddings,lm-head,norm,names or all.")] = None,
    search_aux: Annotated[Optional[bool], typer.Option(
        "--search-aux/--no-search-aux", help="With --diagnose: search the recorded layers for the aux ids "
                                             "(default: when the config declares none).")] = None,
    lm_head_from: Annotated[Optional[str], path(INPUT, typer.Option(
        "--lm-head-from", help="A full-vocabulary head (draft folder) to re-select lm_head rows from "
                               "(full[d2t + arange]) in --diagnose."))] = None,
    min_al: Annotated[Optional[float], typer.Option("--min-acceptance-length", **LENGTH, help="Gate: minimum mean "
                                                    "acceptance length (vLLM's, bonus token included).")] = None,
    min_rate: Annotated[Optional[float], typer.Option("--min-acceptance-rate", **FRACTION,
                                                      help="Gate: minimum acceptance rate.")] = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    extend_ignore: ExtendIgnoreOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    output_format: OutputFormatOpt = None,
    as_json: JsonOpt = False,
    outputs: dict[str, str] | None = None,
) -> None:
    """Measure a draft's acceptance against a recorded target trace, without the target.

    Runs the draft alone in torch (CPU, or a GPU when there is one) the way vLLM runs it next to the target: its
    KV cache for verified positions from the target's recorded states, chained steps on its own outputs,
    greedy acceptance against the target's tokens. Reads only the draft's weights, one tensor at a time. Reports
    verify's fields: drafts, accepted tokens, acceptance rate, mean acceptance length (bonus included),
    per-position and conditional rates. Exit 0 pass, 1 static errors / below a threshold / the engine could not
    run the draft as read / another method's checkpoint (K105: refused, nothing scored), 2 bad input.
    """
    from kconvert.rules.decisions import decisions_from_flags, parse_aux_ids
    from kconvert.score import ScoreSettings, score
    from kconvert.results.thresholds import Thresholds

    fmt = begin("score", output_format, as_json, draft)
    report = (outputs or {}).get("json")
    ids, default = parse_aux_ids(aux_ids)
    if default:
        raise UsageError("--aux-ids default: score already feeds the engine's defaults when the config has no ids")
    from kconvert.score.diagnose_offline import parse_choices

    asked = parse_choices(try_)
    if (asked or search_aux or lm_head_from) and not diagnose:
        raise UsageError("--try, --search-aux and --lm-head-from go with --diagnose")
    decisions = decisions_from_flags(aux_ids, None, None)
    th = Thresholds(min_acceptance_length=min_al, min_acceptance_rate=min_rate)
    st = ScoreSettings(num_speculative_tokens=k, dtype=dtype, device=device, mode=mode,
                       skip_static=skip_static, aux_ids=ids, max_sequences=max_sequences, threads=threads,
                       lm_head_from=lm_head_from)
    ps = project_settings(config, isolated, select=select, ignore=ignore, extend_ignore=extend_ignore,
                          engine=engine, engine_version=engine_version, target=target)
    engine, engine_version, target = ps.engine, ps.engine_version, ps.target
    quiet = fmt != "full" or not err_console.is_terminal
    with stage_progress("score", quiet) as progress:
        sr = score(draft, trace, engine=engine, engine_version=engine_version, settings=st,
                   thresholds=None if th.empty else th, options=decisions, target=target, progress=progress,
                   selection=ps.selection, diagnose=diagnose, readings=asked, search_aux=search_aux,
                   report_ref=report)
    doc = sr.to_dict()
    write_outputs("score", doc, outputs or {})
    from kconvert.report.terminal import render_score

    emit_report(doc, fmt, render_score)
    raise typer.Exit(sr.exit_code)
