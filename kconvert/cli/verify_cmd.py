"""`kconvert verify`."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._gate import gate_options
from kconvert.cli._panels import PanelCommand
from kconvert.cli._help import help_examples
from kconvert.cli._common import (COUNT, FRACTION, INPUT, LENGTH, SECONDS, SMALL_COUNT, AuxConvOpt, AuxIdsOpt,
                                  ConfigOpt, D2tOpt, EngineOpt, EngineVersionOpt, ExtendIgnoreOpt, FailOnOpt, IgnoreOpt,
                                  IsolatedOpt, JsonOpt, OracleOpt, OutputFormatOpt, SelectOpt, file_outputs, path,
                                  project_settings, write_outputs)
from kconvert.cli._output import begin, echo_line, emit_report, err_console, stage_progress, write
from kconvert.errors import UsageError

EXAMPLES = """
Examples:

  kconvert verify examples/tiny/drafts/mla-torchspec --target examples/tiny/target

  kconvert verify ./kimi-draft-vllm --target moonshotai/Kimi-K2.5 --tp 8 --trust-remote-code \\
      --min-acceptance-length 2.8 --report verify.json --junit verify.xml --markdown verify.md

  kconvert verify ./draft --target ./target --engine-arg max_model_len=4096 --engine-arg kv_cache_dtype=fp8

  kconvert verify ./draft --target kimi-k2.5 --policy gate.toml --prompts math

  kconvert verify ./draft --target moonshotai/Kimi-K2.5 --tp 8 --output-format sarif > verify.sarif

  kconvert verify --server http://localhost:8000 --prompts math --output-format concise

  kconvert verify --server http://127.0.0.1:30000 --engine sglang -k 3
"""


@app.command("verify", epilog=help_examples(EXAMPLES), cls=PanelCommand)  # options in panels: _panels
@file_outputs("verify")  # --report, --junit, --markdown, --sarif: kconvert.report.formats
@gate_options  # --extend-select, --exit-zero, --statistics, --show-settings: kconvert.cli._gate
def verify_command(
    draft: Annotated[Optional[str], path(INPUT, typer.Argument(
        help="Draft checkpoint folder (or Hub id in the cache); not needed with --server.", show_default=False))
    ] = None,
    target: Annotated[Optional[str], path(INPUT, typer.Option(
        "--target", "-t", help="Target: a local folder, a Hub id, or a profile name (mapped to its Hub id); not "
                               "needed with --server.", show_default=False))] = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    tp: Annotated[int, typer.Option("--tp", "--tensor-parallel-size", **SMALL_COUNT,
                                    help="Tensor parallel size of the target (8 for Kimi-K2.5); "
                                         "--tensor-parallel-size as vllm serve spells it.")] = 1,
    draft_tp: Annotated[Optional[int], typer.Option("--draft-tp", **SMALL_COUNT,
                                                    help="Tensor parallel size of the draft.")] = None,
    k: Annotated[int, typer.Option("--num-speculative-tokens", "-k", **SMALL_COUNT,
                                   help="Draft tokens per step.")] = 3,
    speculative_config: Annotated[Optional[str], typer.Option(
        "--speculative-config", "--speculative_config",
        help="Replay a production serve line: the JSON of vllm serve's --speculative-config as written there. "
             "Its num_speculative_tokens and draft_tensor_parallel_size set -k and --draft-tp, every other key "
             "goes to the engine as written unless refused (forced acceptance: docs/engine-policy.md, exit 2); "
             "its model is replaced by DRAFT (and recorded). Without a method the line gets the one vLLM detects "
             "from its model's name as written and its config (K109 fails an EAGLE-3 draft served otherwise). "
             "Use it with --tensor-parallel-size from the same line.")] = None,
    prompts: Annotated[str, path(INPUT, typer.Option(
        "--prompts", help="Prompt set: math, chat, code, all, or a .jsonl/.txt file."))] = "all",
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", **COUNT,
                                                       help="Use only the first N prompts.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", **COUNT,
                                            help="Tokens generated per prompt (greedy).")] = 64,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Let the engine run the target's "
                                                    "remote code (Kimi-K2.5 needs it); never on unless given.")] = False,
    engine_arg: Annotated[Optional[list[str]], typer.Option(
        "--engine-arg", help="Any other engine argument, KEY=VALUE (repeatable): quantization, max_model_len, "
                             "kv_cache_dtype, distributed_executor_backend, ... Keys that would change what is "
                             "measured (another model, forced acceptance, trust_remote_code) are refused, exit 2; "
                             "those that change what acceptance means are recorded in the report "
                             "(docs/engine-policy.md).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", **SECONDS,
                                           help="Hard limit for one engine run, in seconds.")] = 1200.0,
    skip_static: Annotated[bool, typer.Option("--skip-static", help="Run live even when static checks find "
                                                                    "errors (to measure a defect); never another "
                                                                    "method's checkpoint (K105: refused).")] = False,
    lossless: Annotated[bool, typer.Option("--lossless/--no-lossless", help="Also run without the draft and "
                                           "require identical greedy outputs (one more engine run). Off by default: "
                                           "in bf16 a k+1-token verify step and a one-token decode step round "
                                           "differently, so a good draft can change greedy outputs; it proves "
                                           "losslessness with --engine-arg dtype=float32.")] = False,
    min_al: Annotated[Optional[float], typer.Option("--min-acceptance-length", **LENGTH,
                                                    help="Gate: minimum mean acceptance length (vLLM's, bonus token "
                                                         "included).")] = None,
    min_rate: Annotated[Optional[float], typer.Option("--min-acceptance-rate", **FRACTION,
                                                      help="Gate: minimum acceptance rate (accepted / draft "
                                                           "tokens).")] = None,
    min_pos: Annotated[Optional[str], typer.Option("--min-per-position", help="Gate: minimum rate per position, "
                                                   "e.g. 0.7,0.5,0.3.")] = None,
    expected: Annotated[Optional[float], typer.Option("--expected-accept-length", **LENGTH,
                                                      help="A published acceptance length (e.g. from a model card) to "
                                                           "gate against.")] = None,
    expected_convention: Annotated[str, typer.Option("--expected-convention", help="How --expected-accept-length "
                                                     "counts: vllm, sglang (both include the bonus token) or "
                                                     "accepted (without it).")] = "sglang",
    tolerance: Annotated[float, typer.Option("--tolerance", **FRACTION,
                                             help="Allowed shortfall from the expected value.")] = 0.1,
    reference: Annotated[Optional[str], typer.Option(
        "--reference", help="Gate against a published acceptance-length curve at the run's k, e.g. "
                            "inferencex:kimi-k2.5-eagle3-mla (shipped with its source and conditions; the report "
                            "says how far the live figure is and what differs). Floor: the curve's figure less "
                            "--tolerance.")] = None,
    policy: Annotated[Optional[str], path(INPUT, typer.Option(
        "--policy", help="TOML gate policy keyed by target and prompt set (schemas/policy.schema.json)."))] = None,
    max_degenerate: Annotated[Optional[str], typer.Option(
        "--max-degenerate-share", help="Gate: the largest share of the target's outputs that may end in a short loop "
                                       "filling half of them (the acceptance is then counted on the loop, not the "
                                       "draft); a share from 0 to 1, or off. Default 0.75, measured (bench/NOTES.md, "
                                       "Output health).", show_default=False)] = None,
    aux_ids: AuxIdsOpt = None,
    aux_convention: AuxConvOpt = None,
    d2t: D2tOpt = None,
    diagnose: Annotated[bool, typer.Option("--diagnose", help="When acceptance is low or a convention is "
                                           "unsettled, run the candidate readings live and name the best.")] = False,
    server: Annotated[Optional[str], typer.Option("--server", help="Measure a running server at this URL "
                                                  "instead of starting an engine; a server whose sampler forces "
                                                  "acceptance exits 1 (vLLM shows it under VLLM_SERVER_DEV_MODE=1, "
                                                  "SGLang under SGLANG_EXPOSE_OWN_ENV_VARS=1).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Preflight: validate, run the static checks, resolve "
                                          "the target and print the engine arguments and the serve line (with "
                                          "--server: what would be measured); start nothing. Exit 0/1 by the "
                                          "static verdict, 2 bad input.")] = False,
    fail_on: FailOnOpt = None,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    extend_ignore: ExtendIgnoreOpt = None,
    config: ConfigOpt = None,
    isolated: IsolatedOpt = False,
    oracle: OracleOpt = False,
    output_format: OutputFormatOpt = None,
    as_json: JsonOpt = False,
    outputs: dict[str, str] | None = None,
) -> None:
    """Load the draft next to the target in a real engine and measure acceptance live.

    Runs the static checks first (errors stop here, exit 1, unless --skip-static), then starts vLLM in a child
    process with the speculative config (method eagle3), feeds a shipped prompt set rendered with the target's
    chat template, greedy, and reports drafts, draft tokens, accepted tokens, acceptance rate, mean acceptance
    length (bonus included), per-position and conditional rates and SGLang's equivalent accept_length, all from
    the engine's own counters, and how many of the target's outputs degenerated into a loop (gated by
    --max-degenerate-share). Exit 0 pass, 1 below a threshold / outputs degenerate / static errors / outputs
    differ, 2 bad input, 3 this machine cannot run the step (the engine failed, or vLLM is not installed).
    SGLang is measured as a server you start (--server URL --engine sglang); --engine sglang without --server
    prints its launch line and that command, and exits 2. Another method's checkpoint (K105: DFlash, DSpark, an
    MTP layer) is refused before any engine line is planned, with what serves it, exit 1 (--skip-static too).
    """
    # deferred: the library and its renderers load the rules and the readers, which --help never needs
    from kconvert.commands.verify import VerifySettings, verify
    from kconvert.results.thresholds import Gate
    from kconvert.rules.decisions import decisions_from_flags
    from kconvert.runners.vllm_args import parse_engine_args

    fmt = begin("verify", output_format, as_json, draft)
    ps = project_settings(config, isolated, select=select, ignore=ignore, extend_ignore=extend_ignore,
                          engine=engine, engine_version=engine_version, target=target, fail_on=fail_on)
    if server:
        from kconvert.cli.server_mode import run_server_mode

        run_server_mode(server, engine=ps.engine, prompts=prompts, k=k, max_tokens=max_tokens, max_prompts=max_prompts,
                        fmt=fmt, report=(outputs or {}).get("json"), dry_run=dry_run)
        return
    settings = VerifySettings(tp=tp, draft_tp=draft_tp, num_speculative_tokens=k, prompts=prompts,
                              max_tokens=max_tokens, trust_remote_code=trust_remote_code,
                              engine_args=parse_engine_args(engine_arg), timeout_s=timeout, skip_static=skip_static,
                              lossless=lossless, max_prompts=max_prompts)
    gate = Gate(min_acceptance_length=min_al, min_acceptance_rate=min_rate, min_per_position=min_pos, policy=policy,
                expected=expected, expected_convention=expected_convention, tolerance=tolerance,
                max_degenerate_share=max_degenerate, reference=reference)
    decisions = decisions_from_flags(aux_ids, aux_convention, d2t)
    quiet = fmt != "full" or not err_console.is_terminal
    try:
        with stage_progress("verify", quiet, first="static checks", echo_when_quiet=True) as progress:
            vr = verify(draft, ps.target, engine=ps.engine, engine_version=ps.engine_version, settings=settings,
                        thresholds=gate, decisions=decisions, progress=progress, fail_on=ps.fail_on,
                        selection=ps.selection, dry_run=dry_run, diagnose=diagnose,
                        speculative_config=speculative_config, oracle=oracle,
                        notify=echo_line)
    except UsageError as e:
        if getattr(e, "next_lines", None) and fmt in ("full", "concise"):
            write("\n".join(e.next_lines) + "\n")  # SGLang's launch line, then the `verify --server` line
        raise
    doc = vr.to_dict()
    write_outputs("verify", doc, outputs or {})
    from kconvert.report.terminal import render_verify  # deferred: the rich report modules, not for --help

    emit_report(doc, fmt, render_verify)
    raise typer.Exit(vr.exit_code)

