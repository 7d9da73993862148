"""`kconvert inspect`: read a draft's config and headers, detect its producer, judge it against the target and
engine. Reads headers and a few small tensors (d2t, t2d, a handful of embedding rows) only."""
from __future__ import annotations

from kconvert.engines.expectations import EngineRules, engine_rules
from kconvert.errors import UsageError
from kconvert.formats.canonical import read_draft
from kconvert.formats.detect import locate_draft
from kconvert.formats.layouts import token_map_names
from kconvert.results.inspect_result import InspectResult
from kconvert.results.inspection import check_fail_on
from kconvert.rules import Context, Decisions, run_rules
from kconvert.rules.decisions import given
from kconvert.rules.selection import Selection
from kconvert.source import open_checkpoint
from kconvert.source.checkpoint import Checkpoint
from kconvert.targets import TargetModel, load_target


def open_draft(source: str) -> Checkpoint:
    """The draft's files and headers; from the Hub, its vocabulary maps are read up front (a bad answer stops here).
    A producer's checkpoint folder (NeMo Automodel's `epoch_E_step_S/`) is read at the draft folder inside it."""
    return open_checkpoint(locate_draft(source), prefetch=token_map_names)


def check_decided_ids(decided: Decisions, target: TargetModel | None) -> None:
    """`--aux-ids` names streams of the target (vLLM's numbering: stream k enters layer k, stream L leaves the last
    layer); one past them is the user's typo, not the draft's defect (K402 judges the ids the files hold)."""
    L = target.num_hidden_layers if target is not None else None
    if not decided.aux_ids or not isinstance(L, int):
        return
    bad = [i for i in decided.aux_ids if i > L]
    if bad:
        name = f" ({target.name})" if getattr(target, "name", None) else ""
        raise UsageError(f"--aux-ids {','.join(map(str, decided.aux_ids))}: {', '.join(map(str, bad))} is past the "
                         f"target's layers; a {L}-layer target{name} has streams 0..{L} in vLLM's input-of-layer "
                         "numbering",
                         hint=f"give ids within 0..{L}, e.g. the engine default {2},{L // 2},{L - 3}")
    if len(set(decided.aux_ids)) != len(decided.aux_ids):
        raise UsageError(f"--aux-ids {','.join(map(str, decided.aux_ids))}: a layer is given twice")


def analyse(ckpt: Checkpoint, target: TargetModel | None, engine: EngineRules,
            decisions: Decisions | None = None, *, fail_on: str = "error",
            selection: Selection | None = None, oracle: dict | None = None) -> InspectResult:
    draft = read_draft(ckpt)
    decided = decisions or Decisions()
    check_decided_ids(decided, target)
    chosen = selection or Selection()
    findings, set_aside = chosen.split(run_rules(Context(draft=draft, target=target, engine=engine, decisions=decided,
                                                         oracle=oracle)))
    return InspectResult(ckpt, draft, target, engine, findings, decided, fail_on=check_fail_on(fail_on),
                         selection=chosen, set_aside=set_aside, oracle=oracle)


def ask_oracle(ckpt: Checkpoint, target: TargetModel | None, engine: EngineRules) -> dict:
    """`--oracle`: the engine's own code asked about this draft and target (kconvert/runners/engine_oracle.py)."""
    from kconvert.runners.engine_oracle import ask_about_draft  # deferred: only --oracle starts a child

    return ask_about_draft(ckpt, target, engine)


def inspect(source: str, *, target: str | TargetModel | None = None, engine: str = "vllm",
            engine_version: str | None = None, decisions: Decisions | None = None,
            options: Decisions | None = None, fail_on: str = "error",
            selection: Selection | None = None, oracle: bool = False) -> InspectResult:
    """Static checks of an EAGLE-3 draft: producer, canonical description, every incompatibility with the target
    and the engine. Reads config, index and safetensors headers (and d2t/t2d and a few embedding rows), never the
    weights, never code from the checkpoint.

    source: a local folder or a Hub id `org/name[@revision]`.
    target: a built-in profile (`kimi-k2.5`, ...), a folder, a Hub id (only its config.json is read), a
        `TargetModel`, or None (target-dependent rules are skipped and say so).
    engine / engine_version: whose loading rules apply (`vllm` or `sglang`; default the installed version).
    decisions: what the files cannot settle (`kconvert.Decisions`: aux ids, their convention, d2t kind);
        `options=` is its earlier name (`kconvert.Options` = `kconvert.Decisions`).
    fail_on: "error" (default) or "warning": the least severe finding that makes `.verdict` "fail".
    selection: `kconvert.rules.selection.Selection`, the rules in force (select / ignore with a reason); the
        findings it sets aside are in `.set_aside` and the report's `rule_selection`.
    oracle: also ask the engine's own code about this draft and target (the installed vLLM, or the Python files of
        the release the row was learned from; one child interpreter, no GPU): its answers are the report's
        `oracle`, and K107 is an error wherever they disagree with the row's verdict.

    Returns an `InspectResult` (`.findings`, `.verdict`, `.exit_code`, `.to_dict()` = `kconvert inspect --json`).
    Raises `KConvertError` subclasses for unreadable or hostile input and bad arguments.
    """
    decisions = given(decisions, options)
    check_fail_on(fail_on)
    ckpt = open_draft(source)
    tgt = load_target(target) if isinstance(target, str) else target
    row = engine_rules(engine, engine_version)
    answers = ask_oracle(ckpt, tgt, row) if oracle else None
    return analyse(ckpt, tgt, row, decisions, fail_on=fail_on, selection=selection, oracle=answers)
