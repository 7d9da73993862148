"""The matrix's cell functions: module-level, one picklable `CellSpec` in, one JSON-compatible dict out, so that the
local pool and a Ray cluster run the same code (`kconvert.matrix.executors`).

- `static_cell`: `kconvert inspect` of the draft on one engine row: one `cells[]` element of
  schemas/matrix.schema.json (state, finding ids, findings, fix availability, the fix command inspect prints);
- `score_cell`: `kconvert score` of the draft against a trace: the draft's offline acceptance;
- `live_cell`: `kconvert verify` on the installed vLLM: one `cells[]` element of kind "live".

A cell never raises for what its draft or engine does: an unreadable or hostile draft, a missing file, an engine
crash or timeout is a cell of state "error" with the message and the exit code the command would have given, so
one bad cell never stops the others. Nothing here depends on the machine: timings go in `seconds` only.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from kconvert.errors import EXIT_INTERNAL, KConvertError
from kconvert.matrix.spec import CellSpec

NO_TARGET = ("target unknown: target-dependent rules were not run (give --target, or a draft whose metadata "
             "names its target)")


def _guarded(spec: CellSpec, body: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    t0 = time.perf_counter()
    cell: dict[str, Any] = {**spec.base_cell(), "state": "error", "finding_ids": [], "message": None}
    try:
        body(cell)
    except KConvertError as e:
        cell.update(state="error", message=e.message, exit_code=e.exit_code)
    except Exception as e:  # a kconvert bug in one cell: that cell says so, the others still run
        cell.update(state="error", message=f"internal error: {type(e).__name__}: {e}", exit_code=EXIT_INTERNAL)
    cell["seconds"] = round(time.perf_counter() - t0, 4)
    return cell


def _findings(findings: list[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    ids = sorted({f.id for f in findings})
    out = [{"id": f.id, "severity": f.severity, "message": f.message, "fixable": bool(f.fixable)} for f in findings]
    return ids, out


FIXED_DIR = "kconvert-fixed"  # matrix fix lines write here: never beside the drafts, where a glob would read them


def matrix_fix_output(draft: str, engine: str, version: str) -> str:
    """One output folder per draft and engine row (`kconvert-fixed/runs_a_epoch_1-vllm-0.32`): two suggestions never
    write the same folder, and the draft globs (`runs/*/epoch_*`) never pick a fixed copy up on the next run."""
    name = "_".join(p for p in draft.split("@", 1)[0].replace("\\", "/").split("/") if p not in ("", ".", ".."))
    # a runner row's version has a slash (0.33/v1): one folder, not a nested one
    return f"{FIXED_DIR}/{name or 'draft'}-{engine}-{version.replace('/', '-')}"


def _with_output(command: str, output: str, version: str) -> str:
    """The cell's fix line writing to `output`, naming its engine row (the default row is the installed engine's,
    which differs between machines)."""
    import shlex

    argv = shlex.split(command)
    if "-o" in argv:
        argv[argv.index("-o") + 1] = output
    if "--engine-version" not in argv:
        argv += ["--engine-version", version]
    return shlex.join(argv)


def _fix(result: Any) -> dict[str, Any] | None:
    """What `kconvert fix` can do for this cell, from the same plan inspect's next steps print: the command (its
    output folder the matrix's own), inspect's comment on it, the ids it repairs and the digest of what it writes
    (`kconvert.matrix.fixes`: rows with the same digest share one command)."""
    from kconvert.results.next_steps import next_steps

    findings = [f for f in result.findings if f.severity != "info"]
    repairs = [f for f in findings if f.ops]
    undecided = [f for f in findings if f.needs_decision and not f.ops]
    if not repairs and not undecided:
        return None
    steps = next_steps(result, command="inspect")["next_steps"]
    step = next((s for s in steps if s["command"].startswith("kconvert fix ")), None)
    command = output = None
    if step is not None:
        eng = result.engine
        command = _with_output(step["command"], matrix_fix_output(result.checkpoint.ref, eng.engine,
                                                                  str(eng.version)), str(eng.version))
        plan = _planned(result, command)
        if plan is not None and not plan.ops:
            # the line a recommended reading adds to a warning can have nothing to write (the ids already read
            # as recommended on this row): fix would say "nothing to change", which repairs no row
            command = None
        elif plan is not None:
            from kconvert.matrix.fixes import output_digest

            output = output_digest(plan)
    return {"available": command is not None, "certain": not undecided,
            "decisions": [f"{f.id}: {f.needs_decision}" for f in undecided], "command": command,
            # the ids inspect's comment says the line repairs (kconvert.results.next_steps: failing, with ops)
            "repairs": sorted({f.id for f in result.failing if f.ops}) if command else [],
            "why": step["why"] if step else None, "output": output}


def _planned(result: Any, command: str) -> Any:
    """The plan `kconvert fix --dry-run` makes for `command` as printed (its decision flags, a recommended reading
    among them, and `--partial`) on the draft inspect read, or None when fix would refuse it (then the command
    stands alone: `kconvert.matrix.fixes`)."""
    import shlex

    from kconvert.commands.fix import fix, plan_fix
    from kconvert.rules.decisions import decisions_from_flags

    argv = shlex.split(command)

    def flag(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv[:-1] else None

    try:
        decisions = decisions_from_flags(flag("--aux-ids"), flag("--aux-convention"), flag("--d2t"))
        if decisions == result.decisions:
            # fix would analyse the draft as inspect just did and plan from that (commands/fix `_fix`): reuse it
            return plan_fix(result)
        planned = fix(result.checkpoint, None, target=result.target, engine=result.engine.engine,
                      engine_version=str(result.engine.version), dry_run=True, partial="--partial" in argv,
                      decisions=decisions, selection=result.selection, fail_on=result.fail_on)
    except KConvertError:
        return None
    return None if planned.refused else planned.plan


def _state(result: Any, *, has_target: bool) -> tuple[str, str | None]:
    # the gate inspect applies (errors; warnings too under fail-on warning): the same draft and row exit the same
    if result.failing:
        return "fail", None if has_target else NO_TARGET
    if not has_target:
        return "skipped", NO_TARGET
    return ("warn" if any(f.severity == "warning" for f in result.findings) else "pass"), None


def static_cell(spec: CellSpec) -> dict[str, Any]:
    """`kconvert inspect DRAFT --target T --engine E --engine-version V` as one matrix cell."""

    def body(cell: dict[str, Any]) -> None:
        from kconvert.commands.inspect import inspect

        res = inspect(spec.read_ref, target=spec.target, engine=spec.engine, engine_version=spec.engine_version,
                      selection=spec.selection, fail_on=spec.fail_on, oracle=bool(spec.setting("oracle")))
        ids, findings = _findings(res.findings)
        state, message = _state(res, has_target=res.target is not None)
        cell.update(state=state, message=message, finding_ids=ids, findings=findings, fix=_fix(res),
                    set_aside=sorted({f.id for f, _ in res.set_aside}),
                    exit_code=res.exit_code, producer=getattr(res.draft.format, "producer", None),
                    method=getattr(res.draft, "method", None))

    return _guarded(spec, body)


def _acceptance(acc: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out = {"acceptance_length": acc["mean_acceptance_length"], "acceptance_rate": acc["acceptance_rate"],
           "per_position": list(acc["per_position"]), "num_speculative_tokens": acc["num_speculative_tokens"]}
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def score_cell(spec: CellSpec) -> dict[str, Any]:
    """`kconvert score DRAFT --trace DIR` as the draft's score: state pass (scored), fail (static errors on the
    scoring row, the draft does not run as read, or score refused another method's checkpoint), error (unreadable input, torch missing)."""

    def body(cell: dict[str, Any]) -> None:
        from kconvert.results.score import ScoreSettings
        from kconvert.score import score

        assert spec.trace is not None, "a score cell needs a trace"
        st = ScoreSettings(num_speculative_tokens=spec.setting("k", 3), threads=spec.setting("threads"),
                           max_sequences=spec.setting("max_sequences"))
        sr = score(spec.read_ref, spec.trace, engine=spec.engine, engine_version=spec.engine_version,
                   target=spec.target, settings=st)
        cell["kind"] = "score"
        cell["exit_code"] = sr.exit_code
        if sr.refused:
            # another method's checkpoint (K105): score refuses it (exit 1), so the cell fails and is never ranked
            cell.update(state="fail", finding_ids=[sr.refused["rule"]],
                        message=f"{sr.refused['reason']}; never ranked")
            return
        if sr.static_blocked:
            ids = sorted({f.id for f in sr.inspect.errors})
            cell.update(state="fail", finding_ids=ids,
                        message=f"static errors on {spec.row} ({', '.join(ids)}): not scored, never ranked")
            return
        if sr.error is not None:
            cell.update(state="fail", message=f"does not run as the engine reads it: {sr.error}")
            return
        acc = sr.acceptance
        cell.update(state="pass", score=_acceptance(acc, positions=sr.result.positions, trace=spec.trace,
                                                    verdict=sr.verdict))

    return _guarded(spec, body)


def live_cell(spec: CellSpec) -> dict[str, Any]:
    """`kconvert verify DRAFT --target T` on the installed vLLM as one cell of kind "live": pass / fail by verify's
    gate, error with exit code 3 when the engine could not run (crash, timeout), skipped without a target."""

    def body(cell: dict[str, Any]) -> None:
        if spec.target is None:
            cell.update(state="skipped", message="target unknown: a live run needs the target (give --target)")
            return
        from kconvert.commands.verify.command import verify
        from kconvert.results.verify import VerifySettings

        st = VerifySettings(num_speculative_tokens=spec.setting("k", 3), prompts=spec.setting("prompts", "all"),
                            max_prompts=spec.setting("max_prompts"), max_tokens=spec.setting("max_tokens", 64),
                            engine_args=dict(spec.setting("engine_args", ())),
                            timeout_s=float(spec.setting("timeout_s", 1200.0)),
                            trust_remote_code=bool(spec.setting("trust_remote_code", False)))
        vr = verify(spec.read_ref, spec.target, engine=spec.engine, engine_version=spec.engine_version, settings=st)
        ids, findings = _findings(vr.inspect.findings)
        cell.update(finding_ids=ids, findings=findings, exit_code=vr.exit_code)
        if vr.refused:
            # another method's checkpoint (K105): verify starts no engine for it (exit 1)
            cell.update(state="fail", message=vr.refused["reason"])
            return
        if vr.static_blocked:
            cell.update(state="fail", message="static errors: verify starts no engine for this draft")
            return
        acc = vr.acceptance or {}
        if acc.get("mean_acceptance_length") is None:
            cell.update(state="fail", message="the engine drafted nothing")
            return
        cell.update(state=vr.verdict, live=_acceptance(acc, verdict=vr.verdict))
        # verify's default gate failed: the output-health check (issue #46), the one check it runs without flags
        failed = [c.message for c in vr.checks if not c.passed]
        if failed:
            cell.update(message="; ".join(failed))

    return _guarded(spec, body)


CELL_FUNCTIONS: dict[str, Callable[[CellSpec], dict[str, Any]]] = {
    "static": static_cell, "score": score_cell, "live": live_cell}


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """The cell function for `spec.kind`, called."""
    return CELL_FUNCTIONS[spec.kind](spec)


__all__ = ["CELL_FUNCTIONS", "live_cell", "run_cell", "score_cell", "static_cell"]
