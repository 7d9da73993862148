"""What to run next, as exact command lines, and what a static PASS cannot see.

inspect names the `kconvert fix` command that repairs its fixable findings (with the decisions already given on
its own command line); a static PASS names the defect classes that only a live run reveals and the
`kconvert verify` command that runs it; fix names the `verify` command for what it wrote. A decision the files
leave open that a diagnosis measures (`kconvert.plan.candidates.diagnoses`) gets the lines that measure it, live
(`verify --diagnose`, vLLM) and offline (`score --diagnose`), whatever else is printed: the route to settle it is
printed where the finding is (docs/design.md "Findings").
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from kconvert.engines.expectations import engine_rules
from kconvert.engines.serve_lines import SERVER_LABEL, SERVER_NEXT_LINES
from kconvert.plan.candidates import SCORE, VERIFY, diagnoses
from kconvert.results.inspection import Inspection
from kconvert.rules.architecture import other_method
from kconvert.rules.base import eagle3_rules_apply
from kconvert.rules.integrity import values_unreadable
from kconvert.rules.recommend import recommendation
from kconvert.rules.embeddings import embeddings

TARGET_PLACEHOLDER = "<target>"  # verify needs a target; fix and inspect may have run without one


def fix_output_dir(source: str, engine: str, *, hub: bool) -> str:
    """A destination beside a local draft (`drafts/x` -> `drafts/x-vllm`), in the working directory for a Hub id."""
    if hub:
        return f"{source.split('@', 1)[0].rstrip('/').rsplit('/', 1)[-1]}-{engine}"
    p = Path(source.rstrip("/") or ".")
    return str(p.with_name(f"{p.name}-{engine}")) if p.name else f"draft-{engine}"


def _engine_flags(result: Inspection) -> list[str]:
    eng = result.engine
    flags = [] if eng.engine == "vllm" else ["--engine", eng.engine]
    try:
        default = engine_rules(eng.engine, None).version
    except Exception:  # an engine whose default cannot be resolved here: name the version explicitly
        default = None
    if eng.version != default:
        flags += ["--engine-version", str(eng.version)]
    return flags


def gate_flags(result: Inspection) -> list[str]:
    """The rule selection and gate a result was judged under, as the flags that reproduce it: the next command
    then sets aside what this one set aside (and fails on what this one failed on). What a project configuration
    holds is left to it (the next command reads the same file); what the command line gave is repeated."""
    sel = result.selection
    flags: list[str] = []
    if sel.select is not None:
        flags += ["--select", ",".join(sel.select)]
    cl = [i.selector for i in sel.ignore if i.source == "command line"]
    if cl:
        # all from the command line: --ignore replaced the configuration's (or there was none); else it extended it
        every = len(cl) == len(sel.ignore)
        flags += ["--ignore" if every else "--extend-ignore", ",".join(cl)]
    if result.fail_on != "error":
        flags += ["--fail-on", result.fail_on]
    return flags


def fix_command(result: Inspection, extra: list[str] | None = None) -> str:
    ck = result.checkpoint
    source = ck.ref
    argv = ["kconvert", "fix", source, "-o", fix_output_dir(source, result.engine.engine, hub=ck.kind == "hub")]
    if result.target is not None:
        argv += ["--target", result.target.name]
    flags = result.decisions.flags()
    for f in extra or []:
        if f not in flags:
            flags.append(f)
    # fix refuses a draft whose weights are PyTorch pickles unless asked to convert them (commands/fix
    # _check_pickle_weights): its line asks, or it would not run as printed
    pickle = ["--from-pickle"] if ck.torch_files and "--from-pickle" not in flags else []
    return shlex.join(argv + _engine_flags(result) + _split(flags) + pickle + gate_flags(result))


def _split(flags: list[str]) -> list[str]:
    out: list[str] = []
    for f in flags:
        out += f.split(" ", 1) if f.startswith("--") and " " in f else [f]
    return out


def _target_flags(result: Inspection) -> list[str]:
    """--trust-remote-code where the target's repository ships code the engine needs (Kimi-K2.5's tokenizer)."""
    return ["--trust-remote-code"] if result.target is not None and result.target.remote_code else []


def verify_steps(draft: str, result: Inspection, why: str, *, decisions: bool = True,
                 diagnose: bool = False) -> list[dict[str, str]]:
    """The live step: `kconvert verify` for vLLM; for an engine kconvert does not start (SGLang, tokenspeed:
    SERVER_NEXT_LINES) its launch line and `kconvert verify --server` against it."""
    engine = result.engine.engine
    if engine in SERVER_NEXT_LINES:
        target = result.target.name if result.target else TARGET_PLACEHOLDER
        launch, measure = SERVER_NEXT_LINES[engine](draft, target, tp=result.decisions.tp or 1)
        return [{"command": launch,
                 "why": f"{why}: start {SERVER_LABEL[engine]} with the draft (topk 1, k+1 draft tokens)"},
                {"command": measure, "why": "measure that server's acceptance (vLLM's mean acceptance length, bonus "
                                            "token included)"}]
    return [{"command": verify_command(draft, result, decisions=decisions, diagnose=diagnose), "why": why}]


def verify_command(draft: str, result: Inspection, *, decisions: bool = True, diagnose: bool = False) -> str:
    argv = ["kconvert", "verify", draft, "--target", result.target.name if result.target else TARGET_PLACEHOLDER]
    argv += _engine_flags(result) + _target_flags(result)
    if diagnose:
        argv.append("--diagnose")
    return shlex.join(argv + (result.decisions.flags() if decisions else []) + gate_flags(result))


TRACE_PLACEHOLDER = "<trace>"  # a folder `kconvert trace` recorded once where the target runs


def score_command(draft: str, result: Inspection) -> str:
    """`kconvert score --diagnose` on the engine row the result was judged on (score reads the files as that row's
    engine loads them)."""
    return shlex.join(["kconvert", "score", draft, "--trace", TRACE_PLACEHOLDER, "--diagnose"]
                      + _engine_flags(result))


def measured_open(findings: list) -> list:
    """The decisions left open that a diagnosis measures (`kconvert.plan.candidates.diagnoses`)."""
    return [f for f in findings if diagnoses(f)]


def measure_steps(subject: str, result: Inspection, open_: list, *, after: str = "", passes: bool = True,
                  decisions: bool = True) -> list[dict[str, str]]:
    """The lines that measure the decisions `open_` leaves open on `subject`: `verify --diagnose` where a live
    diagnosis measures one, the engine is vLLM (SGLang's lines have no --diagnose) and `subject` passes the static
    checks (verify starts no engine otherwise, and its preflight exits 1); `score --diagnose` always (it scores the
    readings whatever the static checks say). `after`: " after the fix" when `subject` is a fix line's output."""
    if not open_:
        return []
    names = ", ".join(sorted({f.id for f in open_}))
    live = sorted({f.id for f in open_ if VERIFY in diagnoses(f)})
    steps = []
    if live and passes and result.engine.engine == "vllm":
        steps.append({"command": verify_command(subject, result, diagnose=True, decisions=decisions),
                      "why": f"measure {', '.join(live)} live{after}: --diagnose runs the draft as loaded and then "
                             "the other readings, one engine start each, and names the best"})
    offline = sorted({f.id for f in open_ if SCORE in diagnoses(f)})
    if offline:
        steps.append({"command": score_command(subject, result),
                      "why": f"{'or ' if steps else ''}offline{after}: score the readings {names} "
                             f"{'leaves' if len(open_) == 1 else 'leave'} open against a trace of the target "
                             f"({TRACE_PLACEHOLDER}: recorded once with `kconvert trace`)"})
    return steps


def not_checked(result: Inspection) -> list[str]:
    """Defect classes that load without a trace, so static checks pass them: only a live run measures them."""
    d = result.draft
    out = []
    if d.aux.ids is None:
        out.append("no aux layer ids are recorded, so the engine feeds its default layers: a draft trained on other "
                   "layers loads and accepts little (vLLM PR #50170: 1.2% instead of 58.9%)")
    else:
        out.append(f"whether the recorded aux ids {list(d.aux.ids)} are the layers the draft was trained on")
    if "d2t" in d.tensors:
        out.append("an lm_head pruned to the draft vocabulary with the wrong index (lm_head[d2t] instead of "
                   "lm_head[d2t + arange]): right shape, wrong rows")
    if "embed_tokens.weight" in d.tensors and embeddings_checked(result):
        out.append(f"weights that load but were not trained for this target ({embeddings.id} sampled the draft's "
                   "own embed_tokens and found them trained; the other weights are not read)")
    else:
        out.append("weights that load but were not trained for this target (e.g. randomly initialised embed_tokens, "
                   "TorchSpec #38)")
    return out


def embeddings_checked(result: Inspection) -> bool:
    """K701 sampled the draft's own embed_tokens rows and found them trained (it reports nothing then): the
    tensor is shaped like the target's embedding, in a float dtype, and its rows were readable (K005 silent)."""
    d, t = result.draft, result.target
    info = d.tensors.get("embed_tokens.weight")
    if info is None or t is None or tuple(info.shape) != (t.vocab_size, d.effective_hidden):
        return False
    if info.dtype not in ("BF16", "F16", "F32") or any(f.id == embeddings.id for f in result.findings):
        return False
    return not any(f.id == values_unreadable.id and info.name in " ".join(str(e.where) for e in f.evidence)
                   for f in result.findings)


def _plan_parts(result: Inspection):
    """The findings a fix line would repair, leave as is, recommend a reading for, or never repair."""
    failing = result.failing
    repairs = [f for f in failing if f.ops]
    blocking = [f for f in result.findings if f.severity == "error" and f.needs_decision and not f.ops]
    unfixable = [f for f in failing if not f.ops and not f.needs_decision]
    decide = [f for f in result.findings if f.severity != "error" and f.needs_decision and not f.ops]
    recommended = [(f, r) for f in decide if (r := recommendation(f, result)) is not None]
    return repairs, blocking, unfixable, decide, recommended


def next_steps(result: Inspection, *, command: str, written: str | None = None,
               live: bool = False, left_as_is: list | None = None, noop: bool = False) -> dict[str, Any]:
    """`{"next_steps": [{"command", "why"}], "not_checked": [...]}` for a report of `command`. Every command is
    one a user can run as printed; each comment says what it does (and `exits 1` where it will)."""
    steps: list[dict[str, str]] = []
    checked: list[str] = []
    if command in ("inspect", "verify", "fix", "score") and not eagle3_rules_apply(result.draft, result.engine):
        # Another method's checkpoint: the EAGLE-3 gaps, fix, score and verify lines do not apply to it (verify,
        # score and fix refuse it: `Inspection.refusal`).
        steps.append({"command": shlex.join(["kconvert", "rules", other_method.id]),
                      "why": f"a {result.draft.method} checkpoint, not an EAGLE-3 draft: the finding names what "
                             f"serves it; kconvert fixes, scores and verifies EAGLE-3 drafts only"})
        return {"next_steps": steps, "not_checked": checked}
    if command == "fix":
        unfixable = _plan_parts(result)[2]
        if unfixable:
            # The output still fails on this engine row (fix exited 1): verifying it would stop at the same errors.
            for f in unfixable:
                steps.append({"command": shlex.join(["kconvert", "rules", f.id]),
                              "why": f"{f.id} remains: no file edit repairs it on {result.engine.key}"})
            return {"next_steps": steps, "not_checked": checked}
        if written:
            # The output records the decisions in kconvert.json: inspect of it repeats no flag, so neither does this.
            why = "measure the corrected draft live next to the target"
            measured = measured_open(left_as_is or [])
            # SGLang's lines have no --diagnose; a live diagnosis measures only some decisions (plan.candidates)
            diagnose = result.engine.engine == "vllm" and any(VERIFY in diagnoses(f) for f in measured)
            if left_as_is:
                why += ("; it still carries what fix left as is (" + ", ".join(sorted({f.id for f in left_as_is}))
                        + ")" + (": --diagnose measures the readings" if diagnose else ""))
            steps += verify_steps(written, result, why, decisions=False, diagnose=diagnose)
            steps += [s for s in measure_steps(written, result, measured, decisions=False)
                      if s["command"].startswith("kconvert score ")]
        elif noop and not result.failing:
            steps += verify_steps(result.checkpoint.ref, result,
                                  "nothing to change: the input already serves as it is; measure it live",
                                  decisions=False)
        return {"next_steps": steps, "not_checked": checked}
    if command not in ("inspect", "verify"):
        return {"next_steps": steps, "not_checked": checked}
    repairs, blocking, unfixable, decide, recommended = _plan_parts(result)
    if blocking:
        # The repair of these errors is the decision itself: a fix line without it would refuse as printed.
        for f in blocking:
            steps.append({"command": shlex.join(["kconvert", "rules", f.id]),
                          "why": f"{f.id} is an error whose repair needs a decision: fix waits for "
                                 f"{f.needs_decision}"})
    elif repairs or recommended:
        flags = [r.flag for _, r in recommended]
        why_parts = []
        if repairs:
            why_parts.append(f"repairs {', '.join(sorted({f.id for f in repairs}))}")
        for f, r in recommended:
            why_parts.append(f"{f.id}: {r.flag} is what {r.source} served ({r.figure}); "
                             + ("the other reading was measured too" if r.other_measured
                                else "no public run measured the other"))
        rest = [f for f in decide if f not in [x for x, _ in recommended]]
        if rest:
            # "K902, decide with --rope-from-target (if ...)": the decision text carries its own parenthesis
            why_parts.append("leaves as is: " + "; ".join(f"{f.id}, decide with {f.needs_decision}" for f in rest))
        if unfixable:
            flags.append("--partial")
            why_parts.append(f"{', '.join(sorted({f.id for f in unfixable}))} stays: no file edit repairs it, so "
                             "fix exits 1")
        steps.append({"command": fix_command(result, flags), "why": "; ".join(why_parts)})
    # Each decision left open that a diagnosis measures gets the lines that measure it (docs/design.md "Findings":
    # where evidence disagrees the finding names the measurement that settles it), whether or not the draft fails
    # and whether or not a fix line is printed. A failing draft is measured after the fix line above (the copy it
    # writes; kconvert.json records the decisions, so no flag is repeated); one that passes, or whose fix waits for
    # a decision, as it is, both readings side by side.
    open_ = measured_open(result.findings)
    fixed = result.failing and not blocking and (repairs or recommended)
    ck = result.checkpoint
    subject = fix_output_dir(ck.ref, result.engine.engine, hub=ck.kind == "hub") if fixed else ck.ref
    measuring = measure_steps(subject, result, open_, after=" after the fix" if fixed else "",
                              passes=not (blocking or unfixable) if result.failing else True,
                              decisions=not fixed)
    diagnosed_live = any(s["command"].startswith("kconvert verify ") for s in measuring)
    if not result.failing and command == "inspect" and not live and not recommended:
        checked = not_checked(result)
        if not diagnosed_live:
            steps += verify_steps(result.checkpoint.ref, result, "static checks passed; measure acceptance live")
        else:
            measuring[0]["why"] = "static checks passed; " + measuring[0]["why"]
    steps += measuring
    return {"next_steps": steps, "not_checked": checked}
