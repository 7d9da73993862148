"""What the static checks found, and the gate they pass or fail: the base of every command's result.

`Inspection` holds no report; `kconvert.results.inspect_result.InspectResult` adds `to_dict()`. The report's parts
(`kconvert.results.document`, `locations`, `next_steps`) read an `Inspection`, so they and the result import
one way.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from kconvert.engines.expectations import EngineRules
from kconvert.errors import UsageError
from kconvert.formats.model import DraftModel
from kconvert.rules import Decisions, Finding
from kconvert.rules.architecture import other_method
from kconvert.rules.base import eagle3_rules_apply
from kconvert.rules.selection import Ignored, Selection
from kconvert.source.checkpoint import Checkpoint
from kconvert.targets import TargetModel


# The severities a gate can fail on, most severe first; `fail_on` names the least severe one that fails.
FAIL_ON = ("error", "warning")


def check_fail_on(fail_on: str) -> str:
    if fail_on not in FAIL_ON:
        raise UsageError(f"--fail-on {fail_on!r}: choose {' or '.join(FAIL_ON)}")
    return fail_on


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Gated:
    """A result's exit code and verdict from whether it passed (each result says what passing is: `passed`)."""

    passed: Any  # a property in each result (not a dataclass field: this class is no dataclass)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"


@dataclass
class Inspection(Gated):
    """What the static checks found: the checkpoint, its DraftModel, the target and engine row, the findings and
    the gate (`fail_on`, the rules in force). `InspectResult` adds its JSON report."""

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
    # `--oracle`: what the engine's own code answered about this draft and target (None: not asked)
    oracle: dict[str, Any] | None = None

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
    def passed(self) -> bool:
        return not self.failing

    def refusal(self, command: str, *, skip_static: bool = False) -> dict[str, Any] | None:
        """Why `command` (verify, score, fix) must not run on this checkpoint: another method's (K105), which
        kconvert has no EAGLE-3 reading of on this engine row; None for an EAGLE-3 draft (or a P-EAGLE draft on a
        row that loads it with its EAGLE-3 classes). The reason is K105's own text, whether or not a selection
        set the finding aside: an EAGLE-3 engine line, score or conversion of a DFlash or MTP checkpoint would be
        a figure or a checkpoint of something else. `skip_static` skips the static gate, never this."""
        if command == "score" and self.draft.method == "peagle":
            # even where vLLM's EAGLE-3 classes load it: a P-EAGLE draft proposes its k tokens in one pass
            # (parallel drafting), and score replays EAGLE-3's chain of k sequential steps
            return {"rule": other_method.id, "method": "peagle",
                    "reason": "score not run: this is a P-EAGLE draft (speculators_model_type peagle), which drafts "
                              "its k tokens in one parallel pass; score replays EAGLE-3's sequential drafting only, "
                              "so measure it live with `kconvert verify` (it turns parallel_drafting on)"}
        if eagle3_rules_apply(self.draft, self.engine):
            return None
        k105 = next((f for f in self.findings + [f for f, _ in self.set_aside] if f.id == other_method.id), None)
        what = k105.message if k105 else f"this is a {self.draft.method} checkpoint, not an EAGLE-3 draft"
        reason = (f"{command} not run: {what}; kconvert {command} handles EAGLE-3 drafts only "
                  f"(`kconvert rules {other_method.id}`)")
        if skip_static:
            reason += "; --skip-static skips the static gate, not this refusal"
        return {"rule": other_method.id, "method": self.draft.method, "reason": reason}

    def counts(self) -> dict[str, int]:
        c = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            c[f.severity] += 1
        # fixable: fix repairs it as the files stand; needs_decision: fix leaves it as is until a flag decides
        c["fixable"] = sum(1 for f in self.findings if f.ops and f.severity != "info")
        c["needs_decision"] = sum(1 for f in self.findings if f.needs_decision and not f.ops and f.severity != "info")
        return c
