"""Which public measurement a decision-needing finding recommends: the finding's rule names the question
(`kconvert.rules.measured`'s table answers it). Kept apart from the table, which the rules consult while they
run, so that the rules and the table import one way."""
from __future__ import annotations

from typing import Any

from kconvert.rules.aux_layers import aux_ids_convention
from kconvert.rules.base import Context, Finding
from kconvert.rules.measured import MeasuredReading, measured_reading


def _question_of(rule_id: str) -> str | None:
    return {aux_ids_convention.id: "aux-convention"}.get(rule_id)


def recommendation(finding: Finding, res: Any) -> MeasuredReading | None:
    """The measured reading a decision-needing finding recommends (None: the record measured none); `res` is an
    inspect result (draft, target, engine, decisions)."""
    question = _question_of(finding.id)
    if question is None or not finding.needs_decision:
        return None
    return measured_reading(Context(res.draft, res.target, res.engine, res.decisions), question)
