"""`kconvert fix`: inspect, plan the repairs, stop on what the files cannot settle, stream a corrected copy."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from kconvert.engines.expectations import engine_rules
from kconvert.errors import AmbiguityError, SelfCheckError, UnfixableError, UsageError
from kconvert.guard.paths import check_output_folder
from kconvert.commands.fix.decided_by import decision
from kconvert.commands.inspect import analyse, open_draft
from kconvert.plan import Plan, build_fix_plan
from kconvert.results.fix import FixResult, left_as_is_entry, remaining_fixable
from kconvert.results.inspection import Inspection, check_fail_on
from kconvert.rules import REGISTRY, Decisions
from kconvert.rules.decisions import given
from kconvert.rules.selection import Selection
from kconvert.source.checkpoint import Checkpoint, load_folder
from kconvert.source.torch_convert import convert_to_safetensors
from kconvert.targets import TargetModel, load_target
from kconvert.writer.atomic import fix_output_owned


def check_only(only: set[str] | None) -> set[str] | None:
    """`--only` ids, upper-cased; an id that names no rule is a usage error that lists the known ones."""
    if only is None:
        return None
    ids = {x.strip().upper() for x in only if x.strip()}
    unknown = sorted(ids - set(REGISTRY))
    if unknown or not ids:
        raise UsageError(f"--only {','.join(unknown) or '(empty)'}: no such rule id; known ids: "
                         f"{', '.join(sorted(REGISTRY))}", hint="`kconvert rules` explains each")
    return ids


def plan_fix(res: Inspection, *, only: set[str] | None = None, to_format: str | None = None) -> Plan:
    """The plan for what inspect found (`kconvert.plan.build_fix_plan`)."""
    return build_fix_plan(res.findings, res.draft, res.target, res.engine, res.decisions, only=only, to_format=to_format)


def fix(source: str | Checkpoint, out_dir: str | Path | None, *, target: str | TargetModel | None = None,
        engine: str = "vllm", engine_version: str | None = None, decisions: Decisions | None = None,
        options: Decisions | None = None, only: set[str] | None = None, dry_run: bool = False, partial: bool = False,
        force: bool = False, to_format: str | None = None, progress: Callable[[int, int, str], None] | None = None,
        durable: bool = True, from_pickle: bool = False, decided_by: str | Path | None = None,
        selection: Selection | None = None, fail_on: str = "error",
        notify: Callable[[str], None] | None = None) -> FixResult:
    """Write a corrected copy of a draft that `engine` loads with the intended meaning.

    Streams the tensors (unchanged ones by byte range), keeps sharding, writes into a temporary folder beside
    `out_dir`, checks the result and renames it into place, with provenance in `kconvert.json`; never modifies
    the input, and a failed fix leaves nothing at `out_dir`.

    A finding that needs a decision no flag gave leaves its setting exactly as it is (`.plan.left_as_is`, recorded
    in kconvert.json); every repair that needs no decision is applied. Nothing to change: nothing is written
    (`.noop`, `.written` None, verdict pass).

    only: apply only the fixes of these rule ids (an unknown id is a `UsageError`; an id with no finding here
        changes nothing, as a fix with nothing to do). fail_on: "warning" fails the fix (exit 1) while the output
        still carries a warning. dry_run: plan only (`out_dir` may be None). partial: write what can be
        fixed even when unfixable errors remain. force: replace an existing `out_dir`. to_format: "flat" or
        "speculators". progress(done_bytes, total_bytes, message). durable: fsync before the rename.
        from_pickle: convert PyTorch pickle weights (.bin/.pt) to safetensors through
        `torch.load(weights_only=True)` after the static opcode check (without it such a draft is refused).
        decided_by: a `kconvert score --diagnose` report of this draft: the decision flags are taken from the
        reading it measured best (or checked against it: a contradiction is a `UsageError`, as is a report of
        other files), and which trace decided is recorded in kconvert.json (`kconvert.commands.fix.decided_by`).
        notify: a line worth keeping on screen (the decision `decided_by` took, with its acceptance lengths).

    Returns a `FixResult` (`.plan`, `.written`, `.verdict`, `.to_dict()` = `kconvert fix --json`). Raises
    `AmbiguityError` where a flag must decide (the message names it), `UnfixableError`, `UsageError`, `InputError`.
    """
    check_fail_on(fail_on)
    decisions, record = given(decisions, options), None
    # The user's own inputs as given, before anything is read or converted: a --from-pickle conversion is fixed from
    # a temporary copy, and a check against that copy let `-o DRAFT/sub` write into the draft (issue #45).
    inputs = [source if isinstance(source, str) else source.root, target if isinstance(target, str) else None,
              decided_by, (decisions or Decisions()).lm_head_source]
    if out_dir is not None and not dry_run:
        # what may never be written is refused before the draft is read; an earlier output without --force is
        # refused by the writer, so that a fix with nothing to change still says so (and writes nothing)
        check_output_folder(out_dir, what=str(out_dir), force=True, inputs=inputs, owned=fix_output_owned,
                            kind="fix output")
    if decided_by is not None:
        source = source if isinstance(source, Checkpoint) else open_draft(source)  # opened once, for both
        record, decisions = decision(str(decided_by), source, decisions or Decisions())
        if notify is not None:
            notify(record["summary"])
    result = _fix(source, out_dir, target=target, engine=engine, engine_version=engine_version, decisions=decisions,
                  only=only, dry_run=dry_run, partial=partial, force=force, to_format=to_format, progress=progress,
                  durable=durable, from_pickle=from_pickle, decided_by=record, selection=selection, inputs=inputs)
    result.fail_on = fail_on
    return result


def _fix(source: str | Checkpoint, out_dir: str | Path | None, *, target: str | TargetModel | None = None,
         engine: str = "vllm", engine_version: str | None = None, decisions: Decisions | None = None,
         only: set[str] | None = None, dry_run: bool = False, partial: bool = False, force: bool = False,
         to_format: str | None = None, progress: Callable[[int, int, str], None] | None = None, durable: bool = True,
         from_pickle: bool = False, converted: dict[str, Any] | None = None,
         decided_by: dict[str, Any] | None = None, selection: Selection | None = None,
         inputs: list[Any] | None = None) -> FixResult:
    # `converted`: provenance of a --from-pickle conversion, whose safetensors copy is fixed here; `inputs`: what the
    # user gave (the draft as given, before any conversion), which the output may not be, hold or lie inside
    only = check_only(only)
    ckpt = source if isinstance(source, Checkpoint) else open_draft(source)
    _check_pickle_weights(ckpt, from_pickle)
    if from_pickle and not dry_run:
        if out_dir is None:
            raise UsageError("fix needs -o/--output DIR (or --dry-run)")
        return _fix_from_pickle(ckpt, Path(out_dir), target=target, engine=engine, engine_version=engine_version,
                                decisions=decisions, only=only, partial=partial, force=force, to_format=to_format,
                                progress=progress, durable=durable, decided_by=decided_by, selection=selection,
                                inputs=[*(inputs or []), ckpt.root])
    tgt = load_target(target) if isinstance(target, str) else target
    rules = engine_rules(engine, engine_version)
    decided = decisions or Decisions()
    if decided.lm_head_source and "d2t" not in ckpt.tensors:
        raise UsageError("--lm-head-from needs a draft with d2t (the rows to re-select)")
    res = analyse(ckpt, tgt, rules, decided, selection=selection)
    refused = res.refusal("fix")
    if refused:
        # Another method's checkpoint (K105): no EAGLE-3 repair or conversion applies; nothing planned or written.
        return FixResult(inspect=res, plan=Plan(), only=only, dry_run=dry_run, refused=refused)
    result = FixResult(inspect=res, plan=plan_fix(res, only=only, to_format=to_format), only=only, dry_run=dry_run)
    _refuse(result, partial)
    if dry_run or (result.noop and not remaining_fixable(res, only)):
        # Nothing to change: the input already serves as it is; a copy would only be a second name for it. (A plan
        # without ops beside a repairable error is a kconvert bug: it goes on to the writer's self-check.)
        return result
    if out_dir is None:
        raise UsageError("fix needs -o/--output DIR (or --dry-run)")
    out = Path(out_dir)
    from kconvert.writer import write_checkpoint  # deferred: the byte mover (~65 ms, numpy); a dry run never writes

    def self_check(folder: Path) -> None:
        # The output must not carry a fixable error any more (of those --only selected). Checked before the
        # rename, so that a failed fix leaves no folder behind.
        # the same rules in force: an ignored rule is neither fixed nor held against the output
        result.after = analyse(open_draft(str(folder)), tgt, rules, Decisions(), selection=selection)
        left = remaining_fixable(result.after, only)
        if left:
            raise SelfCheckError(
                f"self-check: the output would still carry fixable errors ({', '.join(f.id for f in left)}); "
                f"nothing written to {out}", hint="this is a kconvert bug; please report it with the input's config.json")

    result.write_result = write_checkpoint(ckpt, result.plan.ops, out, force=force,
                                           provenance=_provenance(res, result.plan, converted, decided_by), progress=progress,
                                           durable=durable, before_commit=self_check,
                                           inputs=[*(inputs or []), tgt.local_path if tgt else None,
                                                   decided.lm_head_source])
    result.written = out
    return result


def _check_pickle_weights(ckpt: Checkpoint, from_pickle: bool) -> None:
    if ckpt.torch_files and not from_pickle:
        # Writing without them would leave a folder with no weights; converting unasked would run torch.load.
        raise AmbiguityError(f"the weights of {ckpt.ref} are PyTorch pickle files ({', '.join(ckpt.torch_files[:3])});"
                             " fix converts them to safetensors only when asked",
                             hint="rerun with --from-pickle (torch.load(weights_only=True), after a static check)")
    if from_pickle and not ckpt.torch_files:
        raise UsageError(f"--from-pickle: {ckpt.ref} holds no PyTorch weight file to convert")


def _refuse(result: FixResult, partial: bool) -> None:
    """Stop before writing where `--only` selects nothing here, a decision is missing, or (without `partial`) an
    error no op can repair remains."""
    plan, only = result.plan, result.only
    if only:
        # An id with no finding here is the same case as a fix with nothing to do: exit 0, nothing written.
        present = {f.id for f in result.inspect.findings}
        result.only_without_finding = sorted(only - present)
    if plan.blocking:
        lines = "; ".join(f"{f.id} {f.message} → decide with {f.needs_decision}" for f in plan.blocking)
        ids = sorted({f.id for f in plan.blocking})
        raise AmbiguityError(f"fix does not guess: {lines}",
                             hint="the repair of these errors is the decision itself; rerun with the flag(s) named "
                                  "above; " + ", ".join(f"`kconvert rules {i}`" for i in ids) + " explains")
    if plan.unfixable and not partial:
        lines = "; ".join(f"{f.id} {f.message}" for f in plan.unfixable)
        raise UnfixableError(f"error-level findings that no op can repair: {lines}",
                             hint="--partial writes what can be fixed and lists what is left")


def _provenance(res: Inspection, plan: Plan, converted: dict[str, Any] | None,
                decided_by: dict[str, Any] | None = None) -> dict[str, Any]:
    """What kconvert.json records beside the writer's own record: input, target, engine, decisions, findings, and
    which streams the written aux ids name."""
    ckpt = res.checkpoint
    provenance: dict[str, Any] = {
        "input": {"source": ckpt.ref, "revision": ckpt.revision, "commit": ckpt.commit,
                  "producer": res.draft.format.producer},
        "target": res.target.name if res.target else None,
        "engine": {"name": res.engine.engine, "rules_version": res.engine.version},
        "decisions": {k: v for k, v in vars(res.decisions).items() if v not in (None, False)},
        "findings_fixed": [f.id for f in plan.applied_findings],
        "findings_left": [f.id for f in plan.unfixable + plan.left + plan.left_as_is],
        # Settings fix did not touch because they need a decision no flag gave (and what the record measured).
        "left_as_is": [left_as_is_entry(f, res) for f in plan.left_as_is],
    }
    if not res.selection.is_default:
        # a rule set aside was not fixed: the record says which and why, beside the ops that were applied
        provenance["rule_selection"] = res.selection.to_dict(res.set_aside)
    if decided_by:
        provenance["decided_by"] = decided_by  # the measurement behind the decision flags (score --diagnose)
    if plan.aux_record:
        provenance["aux_ids"] = plan.aux_record
    if converted:
        provenance["input"].update(converted)
    return provenance


def _fix_from_pickle(ckpt, out: Path, **kw) -> FixResult:
    """Convert the PyTorch weights into a temporary safetensors copy beside the destination, then fix that copy
    (the provenance names the original files and their sha256); the copy is removed whatever happens. The
    destination is judged against the user's folder (`inputs`) before the copy's folder is made beside it."""
    check_output_folder(out, what=str(out), force=kw["force"], inputs=kw["inputs"], owned=fix_output_owned,
                        kind="fix output")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.kconvert-pickle-", dir=out.parent))
    try:
        converted = convert_to_safetensors(ckpt, tmp)
        copy = load_folder(tmp, ref=ckpt.ref)
        copy.revision, copy.commit = ckpt.revision, ckpt.commit
        return _fix(copy, out, converted=converted, **kw)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
