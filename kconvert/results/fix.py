"""What `kconvert.fix` returns: the inspection, the plan, what was written and the inspection of the output."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.plan import Plan
from kconvert.results.document import build_report
from kconvert.results.inspection import Inspection
from kconvert.rules import Finding
from kconvert.rules.recommend import recommendation
from kconvert.source.names import is_pickle, is_torch_weights
from kconvert.writer.ops import Op, describe, op_to_dict


@dataclass
class FixResult:
    """What `kconvert.fix` planned and wrote. `to_dict()` is the `kconvert fix --json` report."""

    inspect: Inspection
    plan: Plan
    written: Path | None = None
    write_result: Any = None
    after: Inspection | None = None  # inspect of the output
    notes: list[str] = field(default_factory=list)
    only: set[str] | None = None  # the rule ids `--only` selected
    only_without_finding: list[str] = field(default_factory=list)  # of those, the ids with no finding here
    dry_run: bool = False
    fail_on: str = "error"  # `--fail-on warning`: a warning left in the output fails the fix too
    # Another method's checkpoint (K105, `Inspection.refusal`): nothing planned or written, exit 1
    refused: dict[str, Any] | None = None

    @property
    def ops(self) -> list[Op]:
        return self.plan.ops

    @property
    def noop(self) -> bool:
        """Nothing to change: no op, and no input file the copy would leave out (a pickle file is never copied)."""
        return not self.refused and not self.plan.ops and not self.leaves_out

    @property
    def leaves_out(self) -> list[str]:
        return sorted(r for r in self.inspect.checkpoint.files if is_pickle(r) and not is_torch_weights(r))

    def remaining_fixable(self) -> list[Finding]:
        if self.after is None:
            return []
        return remaining_fixable(self.after, self.only)

    @property
    def exit_code(self) -> int:
        """0 when no error-level finding remains (nothing to fix counts: the input already serves), 1 when one
        does (or, under --fail-on warning, a warning: one left as is for a decision, or one no op repairs)."""
        if self.refused or self.plan.unfixable or self.remaining_fixable():
            return 1
        if self.fail_on == "warning" and self.warnings_left():
            return 1
        return 0

    def warnings_left(self) -> list[Finding]:
        """The warnings the output still carries (inspect of the output; for a dry run or a noop, the plan's)."""
        if self.after is not None:
            return [f for f in self.after.findings if f.severity == "warning"]
        return [f for f in self.plan.left + self.plan.left_as_is if f.severity == "warning"]

    @property
    def verdict(self) -> str:
        return "fail" if self.exit_code else "pass"

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json) with its `fix` section, as `kconvert fix --json` prints."""
        return build_report(self.inspect, command="fix", extra={"fix": fix_summary(self), "refused": self.refused}, exit_code=self.exit_code,
                            written=str(self.written) if self.written else None, left_as_is=self.plan.left_as_is,
                            noop=self.noop and not self.dry_run)


def remaining_fixable(after: Inspection, only: set[str] | None = None) -> list[Finding]:
    """Error-level findings of fix's output that an op could still repair (those `--only` selected)."""
    return [f for f in after.findings if f.severity == "error" and f.ops and (not only or f.id in only)]


def left_as_is_entry(f: Finding, res: Inspection) -> dict[str, Any]:
    rec = recommendation(f, res)
    return {"id": f.id, "message": f.message, "decide_with": f.needs_decision or "",
            "recommended": rec.to_dict() if rec else None}


def fix_summary(result: FixResult) -> dict[str, Any]:
    p = result.plan
    return {
        "ops": [op_to_dict(o) for o in p.ops],
        "steps": [describe(o) for o in p.ops],
        "only": sorted(result.only) if result.only else None,
        "only_without_finding": list(result.only_without_finding),
        "dry_run": result.dry_run,
        "applied_findings": [f.id for f in p.applied_findings],
        "unfixable": [f.to_dict() for f in p.unfixable],
        "left": [f.to_dict() for f in p.left],
        "left_as_is": [left_as_is_entry(f, result.inspect) for f in p.left_as_is],
        "output": str(result.written) if result.written else None,
        "noop": result.noop,
        "remaining_fixable_after": [f.id for f in result.remaining_fixable()],
    }
