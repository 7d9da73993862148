"""`kconvert inspect`: read a draft's config and headers, detect its producer, judge it against the target and
engine. Reads headers and a few small tensors (d2t, t2d, a handful of embedding rows) only."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from kconvert.engines.expectations import EngineRules, engine_rules
from kconvert.errors import UsageError
from kconvert.formats import read_draft
from kconvert.formats.layouts import token_map_names
from kconvert.formats.model import DraftModel
from kconvert.rules import Context, Decisions, Finding, run_rules
from kconvert.rules.decisions import given
from kconvert.rules.selection import Ignored, Selection
from kconvert.source import open_checkpoint
from kconvert.source.checkpoint import Checkpoint
from kconvert.target import TargetModel, load_target


# The severities a gate can fail on, most severe first; `fail_on` names the least severe one that fails.
FAIL_ON = ("error", "warning")


def check_fail_on(fail_on: str) -> str:
    if fail_on not in FAIL_ON:
        raise UsageError(f"--fail-on {fail_on!r}: choose {' or '.join(FAIL_ON)}")
    return fail_on


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class InspectResult:
    """What `kconvert.inspect` found. `to_dict()` is the `kconvert inspect --json` report."""

    checkpoint: Checkpoint
    draft: DraftModel
    target: TargetModel | None
    engine: EngineRules
    findings: list[Finding]
    decisions: Decisions = field(default_factory=Decisions)
    fail_on: str = "error"  # "warning": warnings fail the gate too (`--fail-on warning`)
    # The rules in force (--select/--ignore, [tool.kconvert]) and the findings they set aside, with the reason.
    selection: Selection = field(default_factory=Selection)
    set_aside: list[tuple[Finding, Ignored]] = field(default_factory=list)
    created: str = field(default_factory=lambda: _now())  # looked up per call: tests pin the clock

    @property
    def options(self) -> Decisions:
        """The decisions under the library API's earlier name."""
        return self.decisions

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def failing(self) -> list[Finding]:
        """The findings that fail the gate: errors, and warnings under `fail_on="warning"`."""
        bad = FAIL_ON[: FAIL_ON.index(self.fail_on) + 1]
        return [f for f in self.findings if f.severity in bad]

    @property
    def exit_code(self) -> int:
        return 1 if self.failing else 0

    @property
    def verdict(self) -> str:
        return "fail" if self.exit_code else "pass"

    def to_dict(self, *, hashes: bool = False) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json), as `kconvert inspect --json` prints it; `hashes` adds the
        sha256 of every local file (`--hash`)."""
        from kconvert.report.document import build_report

        return build_report(self, command="inspect", hashes=hashes)

    def counts(self) -> dict[str, int]:
        c = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            c[f.severity] += 1
        # fixable: fix repairs it as the files stand; needs_decision: fix leaves it as is until a flag decides
        c["fixable"] = sum(1 for f in self.findings if f.ops and f.severity != "info")
        c["needs_decision"] = sum(1 for f in self.findings if f.needs_decision and not f.ops and f.severity != "info")
        return c


def open_draft(source: str) -> Checkpoint:
    """The draft's files and headers; from the Hub, its vocabulary maps are read up front (a bad answer stops here)."""
    return open_checkpoint(source, prefetch=token_map_names)


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
            selection: Selection | None = None) -> InspectResult:
    draft = read_draft(ckpt)
    decided = decisions or Decisions()
    check_decided_ids(decided, target)
    chosen = selection or Selection()
    findings, set_aside = chosen.split(run_rules(Context(draft=draft, target=target, engine=engine, decisions=decided)))
    return InspectResult(ckpt, draft, target, engine, findings, decided, fail_on=check_fail_on(fail_on),
                         selection=chosen, set_aside=set_aside)


def inspect(source: str, *, target: str | TargetModel | None = None, engine: str = "vllm",
            engine_version: str | None = None, decisions: Decisions | None = None,
            options: Decisions | None = None, fail_on: str = "error",
            selection: Selection | None = None) -> InspectResult:
    """Static checks of one draft; see `kconvert.inspect` (the package-level function) for the arguments."""
    decisions = given(decisions, options)
    check_fail_on(fail_on)
    ckpt = open_draft(source)
    tgt = load_target(target) if isinstance(target, str) else target
    return analyse(ckpt, tgt, engine_rules(engine, engine_version), decisions, fail_on=fail_on, selection=selection)
