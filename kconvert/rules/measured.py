"""Readings the public record measured: where the files cannot settle a decision (which convention aux ids follow)
but a public run served the draft under one reading and measured it, the finding recommends that reading, with the
figure and the source, and says whether the other reading was ever measured.

The table is data: one entry per measurement, matched by what the files say (the ids, the target's layer count and
model type, the producer), never by a repository name, so a replica or a renamed copy of the same files gets the
same recommendation, and a draft that merely shares a name does not. Each entry rests on a public source; the zoo
(tests/zoo/*/RECORD.md) keeps the record the entry was taken from.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kconvert.rules.base import Context


@dataclass(frozen=True)
class MeasuredReading:
    question: str  # the decision it settles: "aux-convention"
    reading: str  # the reading served: "input" | "output"
    flag: str  # the flag that states it
    # what the files must say for the measurement to be this draft's
    ids: tuple[int, ...]
    target_layers: int
    target_model_types: tuple[str, ...]
    producer: str
    # the measurement
    draft: str  # the published draft that was measured
    engine: str
    figure: str
    source: str
    other_measured: bool  # was the other reading ever measured in public?

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "reading": self.reading, "flag": self.flag, "draft": self.draft,
                "engine": self.engine, "figure": self.figure, "source": self.source,
                "other_measured": self.other_measured}

    @property
    def other(self) -> str:
        return "output" if self.reading == "input" else "input"

    def sentence(self) -> str:
        """The measurement whole: a finding's evidence."""
        return (f"{self.engine} served {self.draft} with these ids read as {self.reading} ({self.figure}, "
                f"{self.source}); "
                + (f"the {self.other} reading was measured too" if self.other_measured
                   else f"no public run measured the {self.other} reading"))

    def brief(self) -> str:
        """The measurement in a few words, for a finding's message (`sentence` is its evidence)."""
        return (f"{self.source} measured the {self.reading} reading, "
                + (f"and the {self.other} one was measured too" if self.other_measured
                   else f"no public run the {self.other}"))


MEASURED: tuple[MeasuredReading, ...] = (
    # vLLM PR #35966 ("Kimi K2/DeepSeek Support eagle3"): Kimi-K2.5 + AQ-MedAI/Kimi-K25-eagle3, k=4, GSM8K, TP 8:
    # 42668 drafts, 170672 draft tokens, 88381 accepted. vLLM reads ids as input-of-layer and feeds [2, 30, 58].
    # tests/zoo/aqmedai_kimi_k25_eagle3/RECORD.md; docs/formats-and-engines.md#acceptance-metrics.
    MeasuredReading(
        question="aux-convention", reading="input", flag="--aux-convention input", ids=(2, 30, 58),
        target_layers=61, target_model_types=("kimi_k25", "kimi_k2"), producer="specforge",
        draft="AQ-MedAI/Kimi-K25-eagle3", engine="vLLM", figure="51.78% acceptance at k=4 on GSM8K, TP 8",
        source="vLLM PR #35966", other_measured=False),
)


def _matches(m: MeasuredReading, ctx: Context) -> bool:
    d, t = ctx.draft, ctx.target
    if t is None or d.aux.ids is None:
        return False
    types = {t.model_type, t.text_model_type}
    return (tuple(d.aux.ids) == m.ids and t.num_hidden_layers == m.target_layers
            and bool(types & set(m.target_model_types)) and d.format.producer == m.producer)


def measured_reading(ctx: Context, question: str) -> MeasuredReading | None:
    """The public measurement of this draft's files that settles `question`, if there is one."""
    for m in MEASURED:
        if m.question == question and _matches(m, ctx):
            return m
    return None
