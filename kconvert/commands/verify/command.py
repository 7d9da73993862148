"""The live run of `kconvert verify`: the static checks, a refusal of a TP the engine cannot run, the draft next to
the target in vLLM (child process, hard timeout), the acceptance from the engine's own counters, the optional
lossless baseline and the gate."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from kconvert._version import vllm_install_hint
from kconvert.engines.arg_policy import check_request, settings_from_config
from kconvert.engines.expectations import EngineRules, engine_rules, other_runner
from kconvert.engines.installed import detect_platform, installed_version
from kconvert.engines.live_messages import LiveRequest
from kconvert.engines.method_detection import Resolution, release_key, resolve
from kconvert.engines.serve_lines import SERVER_LABEL, SERVER_NEXT_LINES, parse_speculative_config, serve_lines
from kconvert.errors import EXIT_ENGINE, EngineError, UsageError
from kconvert.prompts import load_prompts
from kconvert.commands.inspect import analyse, ask_oracle, open_draft
from kconvert.commands.verify.diagnose_live import diagnose as run_diagnosis
from kconvert.commands.verify.diagnose_live import plan_diagnosis
from kconvert.results.inspection import Inspection
from kconvert.results.next_steps import TARGET_PLACEHOLDER
from kconvert.results.thresholds import Gate, Thresholds, evaluate
from kconvert.results.verify import VerifyResult, VerifySettings
from kconvert.rules import Decisions
from kconvert.rules.decisions import given
from kconvert.rules.attention import draft_tp_in_effect, draft_tp_problem, head_problems
from kconvert.rules.selection import Selection
from kconvert.runners.engine_setup import read_model_config
from kconvert.runners.vllm_args import build_engine_args
from kconvert.runners.vllm_offline import run_vllm
from kconvert.engines.remote_code import remote_code_parts
from kconvert.targets import TargetModel, load_profile, load_target, profile_hub_id, profile_names
from kconvert.commands.verify.lossless import compare_outputs
from kconvert.commands.verify.model_runner import runner_block

Progress = Callable[[str], None]


def sglang_next_step_error(launch: str, measure: str, engine: str = "sglang") -> UsageError:
    """verify starts vLLM only: for SGLang or tokenspeed, a `UsageError` carrying the launch line and the `kconvert
    verify --server` line that measures the server it starts (`.next_lines`, which the command line prints; the
    hint names both). A plain UsageError, as the JSON error's type has always been."""
    label = SERVER_LABEL[engine]
    err = UsageError(f"live verify starts vLLM only; verify {'an' if label[0] in 'AEIOSaeio' else 'a'} {label} "
                     f"deployment with --server: start {label} with the first line, then measure it with the second",
                     hint=f"{launch} ; then: {measure}")
    err.next_lines = [launch, measure]  # type: ignore[attr-defined]
    return err


def replay_serve_line(st: VerifySettings, spec_json: str) -> VerifySettings:
    """`st` with a production `--speculative-config` applied; a -k or draft TP given with another value is refused
    rather than silently overridden (k 3 is the default, not a choice). The engine-argument policy refuses what
    must not reach the engine (forced acceptance, another draft's revision ...: exit 2)."""
    try:
        rp = parse_speculative_config(spec_json)
    except ValueError as e:
        raise UsageError(str(e)) from None
    check_request(speculative=rp.line)
    k = st.num_speculative_tokens
    if rp.num_speculative_tokens is not None and k != 3 and k != rp.num_speculative_tokens:
        raise UsageError(f"-k {k} contradicts --speculative-config num_speculative_tokens "
                         f"{rp.num_speculative_tokens}: give one of them")
    if rp.draft_tp is not None and st.draft_tp is not None and st.draft_tp != rp.draft_tp:
        raise UsageError(f"--draft-tp {st.draft_tp} contradicts --speculative-config draft_tensor_parallel_size "
                         f"{rp.draft_tp}: give one of them")
    return st.replay(rp)


def resolve_target(ref: str) -> tuple[TargetModel, str]:
    """The target's facts for the static checks, and what the engine loads (a profile maps to its Hub id)."""
    if ref in profile_names():
        hub = profile_hub_id(ref)
        if not hub:
            raise UsageError(f"profile {ref} names no Hub id; pass the target's folder or Hub id")
        return load_profile(ref), hub
    return load_target(ref), ref


def refuse_parallel_split(res: Inspection, st: VerifySettings) -> None:
    """Refuse, before any engine starts, a TP the engine cannot run: a draft TP other than 1 or the target's,
    target heads that do not divide, or (with the static gate skipped) draft heads that do not divide. With the
    static gate on, the draft's own split problems are K304 findings and block the run like any error."""
    bad = draft_tp_problem(st.tp, st.draft_tp)
    if bad:
        raise UsageError(bad)
    problems = []
    if res.target is not None:
        problems += [p for p in head_problems("target", res.target.num_attention_heads,
                                              res.target.num_key_value_heads, st.tp, mla=res.target.is_mla)
                     if p.fatal]
    if st.skip_static:
        d = res.draft
        problems += [p for p in head_problems("draft", d.num_attention_heads, d.num_key_value_heads,
                                              draft_tp_in_effect(st.tp, st.draft_tp), mla=d.layer_family == "mla")
                     if p.fatal]
    if problems:
        raise UsageError(f"--tp {st.tp}" + (f" --draft-tp {st.draft_tp}" if st.draft_tp is not None else "") +
                         ": " + "; ".join(p.message for p in problems),
                         hint="choose a TP the heads divide by (the draft can stay on one rank with --draft-tp 1)")


def run_conditions(st: VerifySettings, *, draft: str, target: str, engine: str) -> dict[str, Any]:
    """This run's conditions as a published curve states its own (kconvert/results/references.py differences):
    live runs are greedy (LiveRequest.temperature) on kconvert's prompt sets, rendered with the target's chat
    template as it is (thinking as the template defaults)."""
    return {"hardware": detect_platform(), "tensor_parallel": st.tp,
            "quantization": st.engine_args.get("quantization", "none (the checkpoints' own dtype)"),
            "prompts": f"kconvert prompt set {st.prompts!r}, max_tokens {st.max_tokens}",
            "thinking": "the target's chat template default", "temperature": LiveRequest.temperature,
            "top_p": "greedy", "top_k": "greedy", "draft": draft, "target": target, "engine": engine,
            "metric": "vllm"}


def verify(draft: str | None, target: str | None, *, engine: str = "vllm", engine_version: str | None = None,
           settings: VerifySettings | None = None, thresholds: Thresholds | Gate | None = None,
           decisions: Decisions | None = None, options: Decisions | None = None, progress: Progress | None = None,
           fail_on: str = "error", selection: Selection | None = None,
           dry_run: bool = False, diagnose: bool = False, notify: Progress | None = None,
           speculative_config: str | None = None, oracle: bool = False) -> VerifyResult:
    """Static checks, then the draft next to `target` in a real vLLM engine (child process, hard timeout):
    acceptance from the engine's own counters, the optional lossless check, and the gate.

    target: a folder, a Hub id, or a profile name (mapped to its Hub id for the engine).
    settings: `kconvert.VerifySettings` (tp, k, prompts, max tokens, engine args, timeout, lossless, ...).
    speculative_config: the JSON of a production `vllm serve --speculative-config`, replayed on `settings` (its k
    and draft TP; a -k or draft TP that contradicts it is a `UsageError`).
    thresholds: `kconvert.Thresholds` to gate on, or a `Gate` (verify's flags: a policy file, floors, an
    expected value, the output-health limit) resolved once k is known; None is `Gate()`, the command line's gate
    with no flag: the output-health check at its measured default (`Thresholds()` gates on nothing); its notes go
    to `notify`. The live run's output health (`.output_health`) is recorded either way. fail_on: "error" or
    "warning" for the static checks (failing findings stop before the engine starts unless
    `settings.skip_static`). dry_run: the static checks and the planned engine arguments and serve line
    (`.planned`); nothing started, no engine imported.
    diagnose: after the live run, when acceptance is low or a convention is unsettled, run the candidate readings
    (one engine run each) and name the best with its `kconvert fix` command in `.diagnosis`, as `kconvert verify
    --diagnose` does (with `dry_run`, `.planned` says it would). progress: each stage as it starts; notify: a line
    worth keeping on screen, the gate's notes, the lossless check, the diagnosis plan with its time estimate before
    its runs start (default: progress). oracle: the static checks also ask the engine's own code about this draft
    and target (as `kconvert.inspect(oracle=True)`; K107 where it disagrees with the row, an error that stops the
    live run like any other).

    engine "sglang" without `dry_run` starts nothing: kconvert starts vLLM only, so an EAGLE-3 draft raises a
    `UsageError` whose `.next_lines` are SGLang's launch line and the `verify --server` line (placeholders for a
    draft or target not given); another method's checkpoint (K105) is refused as on vLLM.

    Returns a `VerifyResult` (`.acceptance`, `.verdict`, `.exit_code`, `.to_dict()` = `kconvert verify --json`).
    Raises `EngineError` when the engine could not run, and the other `KConvertError` subclasses.
    """
    decisions = given(decisions, options)
    st = settings or VerifySettings()
    say = progress or (lambda _s: None)
    tell = notify or say
    # SGLang first, from the flags as given: its lines need neither the target's facts nor a replayed vLLM line
    ckpt = sglang_next_step(draft, target, st, engine_version, selection, engine) \
        if engine in SERVER_NEXT_LINES and not dry_run else None
    if draft is None or target is None:
        raise UsageError("verify needs a DRAFT and --target TARGET (or --server URL to measure a running deployment)")
    # the engine-argument policy, before anything is read or started: a refused key is exit 2, dry run included
    check_request(st.engine_args)
    if speculative_config is not None:
        st = replay_serve_line(st, speculative_config)
    if thresholds is None:
        # the command line's gate with no flag given: the measured output-health check alone, so that the library
        # and `kconvert verify` agree
        thresholds = Gate()
    if isinstance(thresholds, Gate):
        resolved = thresholds.resolve(target=target, prompts=st.prompts, k=st.num_speculative_tokens,
                                      run=run_conditions(st, draft=draft, target=target, engine=engine))
        thresholds = None if resolved.empty else resolved
    for note in thresholds.notes if thresholds is not None else []:
        tell(note)
    if st.lossless:
        tell("lossless check on: one more engine run without the draft")
    tgt, engine_target = resolve_target(target)
    ckpt = ckpt or open_draft(draft)
    decided = replace(decisions or Decisions(), tp=st.tp, draft_tp=st.draft_tp)
    row = engine_rules(engine, engine_version)
    served = None
    if st.replayed_line is not None and engine == "vllm":
        # the method the engine gives the replayed line (K109 fails an EAGLE-3 draft it would serve otherwise)
        served = served_method(st.replayed_line, ckpt, row, ask_engine=not dry_run)
        decided = replace(decided, served=served)
        st = replace(st, method=served.method)
    for line in remote_code_notes(tgt, st.trust_remote_code):
        tell(line)
    if oracle:
        say("oracle: asking the engine's own code about the draft")
    answers = ask_oracle(ckpt, tgt, row) if oracle else None
    res = analyse(ckpt, tgt, row, decided, fail_on=fail_on, selection=selection, oracle=answers)
    refuse_parallel_split(res, st)
    out = VerifyResult(inspect=res, settings=st, engine_target=engine_target, thresholds=thresholds, served=served)
    out.prompt_set, prompts = load_prompts(st.prompts)
    other = other_runner(res.engine) if engine == "vllm" else None
    other_res = (analyse(ckpt, tgt, other, decided, fail_on=fail_on, selection=selection)
                 if other is not None else None)
    out.prompts = prompts[: st.max_prompts] if st.max_prompts else prompts
    # Another method's checkpoint (K105): an EAGLE-3 engine line for it would run something else, so none is
    # planned or started, --skip-static or not.
    out.refused = res.refusal("verify", skip_static=st.skip_static)
    if out.refused:
        if dry_run:
            out.planned = plan_refused(out)
        return out
    if engine == "vllm" and res.draft.method == "peagle" and "parallel_drafting" not in st.speculative_extra:
        # A P-EAGLE draft on a row whose EAGLE-3 classes load it (K105's text): served as method eagle3 with
        # parallel drafting. vLLM switches that on by itself only when the speculators checkpoint is the served
        # model (speculators/base.py build_vllm_speculative_config), never for a draft inside speculative_config,
        # so without this verify would measure sequential drafting, which is not how it serves. A replayed serve
        # line that sets the key keeps its own value.
        st = replace(st, speculative_extra={**st.speculative_extra, "parallel_drafting": True})
        out.settings = st
    if engine == "vllm":
        out.runner = runner_block(res.engine, res, other_res,
                                  parallel_drafting=bool(st.speculative_extra.get("parallel_drafting")))
    if engine != "vllm" and not dry_run:
        raise UsageError(f"live verify runs vLLM; measure a running {SERVER_LABEL[engine]} server with --server URL "
                         f"--engine {engine}")
    if dry_run:
        out.planned = plan_live(out, str(ckpt.root) if ckpt.root is not None else ckpt.ref, tgt)
        if diagnose:
            out.planned["diagnose"] = ("after the run, when acceptance is low or a convention is unsettled: the "
                                       "candidate readings, one engine run each")
        return out
    if res.failing and not st.skip_static:
        out.static_blocked = True
        return out
    if ckpt.root is None:
        raise UsageError(f"{draft}: the live test needs the weights; download the draft first")
    try:
        _run_live(out, str(ckpt.root), say)
    except EngineError as e:
        notes = remote_code_notes(tgt, st.trust_remote_code)
        if notes:  # the engine's own words first (its tokenizer or config loader), then what kconvert knows
            e.hint = "; ".join([*notes, *([e.hint] if e.hint else [])])
        raise
    if thresholds is not None:
        out.checks = evaluate(thresholds, out.acceptance or {}, out.output_health)
    if diagnose:
        plan = plan_diagnosis(out)
        if plan.needed:
            (notify or say)(f"diagnose: {plan.summary()}")
        out.diagnosis = run_diagnosis(out, plan, progress=say)
    return out


def sglang_next_step(draft: str | None, target: str | None, st: VerifySettings, engine_version: str | None,
                     selection: Selection | None, engine: str = "sglang"):
    """Raise `sglang_next_step_error` for an EAGLE-3 draft (or no draft named) on an engine kconvert does not start
    (SERVER_NEXT_LINES: SGLang, tokenspeed); return the opened checkpoint of another method's (K105), which verify
    then refuses with its report instead of printing an EAGLE-3 launch line."""
    ckpt = open_draft(draft) if draft is not None else None
    if ckpt is None or analyse(ckpt, None, engine_rules(engine, engine_version),
                               selection=selection).refusal("verify") is None:
        raise sglang_next_step_error(*SERVER_NEXT_LINES[engine](draft or "<draft>", target or TARGET_PLACEHOLDER,
                                                                k=st.num_speculative_tokens, tp=st.tp), engine)
    return ckpt


def plan_live(out: VerifyResult, draft_dir: str, tgt: TargetModel) -> dict[str, Any]:
    """What `_run_live` would start, computed without starting it (and without importing vLLM): the platform,
    the engine arguments and environment kconvert would set, the settings it chose by itself, and the serve
    lines of the same run."""
    req = out.settings.live_request(out.engine_target, draft_dir, out.prompts)
    engine = out.inspect.engine.engine
    # A Hub target is not fetched for a dry run: its facts come from the profile or config already read.
    target_config = (read_model_config(out.engine_target) if Path(out.engine_target).is_dir()
                     else _config_of(tgt))
    platform = detect_platform()
    args, env, auto = build_engine_args(req, platform=platform, target_config=target_config,
                                        draft_config=read_model_config(draft_dir) if Path(draft_dir).is_dir() else None)
    engine_env = {**dict(out.inspect.engine.serve_env), **env}
    # what the engine would run with: the recorded keys as given, vLLM's defaults for the sampling methods, and the
    # recorded variables of the environment it inherits (kconvert's on top: runners/processes.py child_env)
    settings = settings_from_config(None, args, {**os.environ, **engine_env})
    lines = serve_lines(out.inspect.checkpoint.ref, out.engine_target, k=out.settings.num_speculative_tokens,
                        tp=out.settings.tp, draft_tp=out.settings.draft_tp, engine_aux_note=False,
                        extra=out.settings.speculative_extra, engine_args=args, env=engine_env,
                        method=out.settings.method, recorded=settings)
    planned: dict[str, Any] = {
        "engine": engine, "platform": platform, "target": out.engine_target, "prompt_set": out.prompt_set,
        "num_prompts": len(out.prompts), "num_speculative_tokens": out.settings.num_speculative_tokens,
        "engine_args": args, "env": env, "auto_settings": auto, "serve_line": lines["vllm"],
        "sglang_launch_line": lines["sglang"], "tokenspeed_launch_line": lines["tokenspeed"], "engine_settings": settings,
        "served_method": out.served.to_dict() if out.served is not None else None,
        "remote_code": remote_code_notes(tgt, out.settings.trust_remote_code),
        "would_start": not (out.inspect.failing and not out.settings.skip_static) and engine == "vllm",
    }
    vllm_version = installed_version("vllm") if engine == "vllm" else None
    planned["engine_installed"] = vllm_version is not None if engine == "vllm" else None
    if engine == "vllm" and vllm_version is None:
        # the live run stops at MissingPackageError (kconvert.runners.vllm_offline.run_offline): exit 3
        planned["would_start"] = False
        planned["note"] = (f"vLLM is not installed here: the live run would exit {EXIT_ENGINE} before starting "
                           f"an engine (install it: {vllm_install_hint()}); this dry "
                           "run only planned it")
    elif engine != "vllm":
        planned["note"] = (f"live verify starts vLLM only; for {SERVER_LABEL[engine]}, launch the server with the "
                           f"line above and measure it with `kconvert verify --server URL --engine {engine}`")
    elif not planned["would_start"]:
        planned["note"] = "static checks fail: verify would stop here and start no engine (--skip-static runs it)"
    return planned


def served_method(line: dict[str, Any], ckpt: Any, row: EngineRules, *, ask_engine: bool) -> Resolution:
    """The method `row`'s vLLM gives a replayed `line`: its own `method`, else vLLM's own detection on the line's
    `model` as written when the installed vLLM is that release and `ask_engine` (a live run; kconvert/runners/
    method_probe.py, a child process), else the row's table (kconvert/engines/method_detection.py)."""
    answer = None
    model = line.get("model")
    installed = installed_version("vllm")
    if (ask_engine and line.get("method") is None and model is not None and ckpt.root is not None
            and installed is not None and release_key(installed) == release_key(row.version)):
        # deferred: a child process that imports vLLM (seconds), only for a live run of a line without a method
        from kconvert.runners.method_probe import detect_with_vllm

        got = detect_with_vllm([{"model": str(model), "folder": str(ckpt.root)}])
        if got is not None and isinstance(got["methods"][0], str):
            answer = (got["methods"][0], got["where"])
    config = ckpt.config if isinstance(ckpt.config, dict) else None
    return resolve(line, config, row.version, engine_answer=answer)


def remote_code_notes(tgt: TargetModel, trust_remote_code: bool) -> list[str]:
    """What of the target the engine loads only with --trust-remote-code (kconvert/engines/remote_code.py), as
    the line the dry run shows and the live run's error repeats; nothing when the flag is given."""
    if trust_remote_code:
        return []
    parts = remote_code_parts(tgt)
    if not parts:
        return []
    return [f"the target {tgt.name} ships code the engine needs to load it ({'; '.join(parts)}): vLLM loads it "
            "only with --trust-remote-code, which runs that code (SECURITY.md); add --trust-remote-code to run it"]


def plan_refused(out: VerifyResult) -> dict[str, Any]:
    """The dry run of a refused verify: what it would not start, and why; no engine line (it would be EAGLE-3's)."""
    return {"engine": out.inspect.engine.engine, "platform": detect_platform(), "target": out.engine_target,
            "prompt_set": out.prompt_set, "num_prompts": len(out.prompts),
            "num_speculative_tokens": out.settings.num_speculative_tokens, "engine_args": {}, "env": {},
            "auto_settings": [], "serve_line": None, "sglang_launch_line": None, "would_start": False}


def _config_of(tgt: TargetModel) -> dict[str, Any]:
    """The few config.json keys the engine arguments depend on (multimodal wrapper, MLA, max positions)."""
    cfg: dict[str, Any] = {"architectures": list(tgt.architectures), "model_type": tgt.model_type,
                           "max_position_embeddings": tgt.max_position_embeddings}
    if tgt.mla:
        cfg["kv_lora_rank"] = tgt.mla.get("kv_lora_rank")
    return cfg


def _run_live(out: VerifyResult, draft_dir: str, say: Progress) -> None:
    req = out.settings.live_request(out.engine_target, draft_dir, out.prompts)
    say("speculative run")
    out.live = run_vllm(req, progress=say)
    out.acceptance = out.live.acceptance()
    out.output_health = out.live.output_health()
    if out.settings.lossless:
        say("lossless baseline (no draft)")
        base = run_vllm(LiveRequest(**{**req.to_dict(), "draft": None}), progress=say)
        out.lossless = compare_outputs(out.live.output_token_ids, base.output_token_ids)
        out.lossless["baseline_generate_s"] = base.timings.generate_s
