"""What `kconvert.score.score` returns: the inspection, the trace and reading it scored, the offline acceptance and
the gate's checks, and its JSON report (the one report shape with the `score` section).

The trace, the reading and the score are `kconvert.score` objects (torch-backed); they are held here by duck type
(`summary()`, `describe()`, `acceptance()`, `counters()`) so that this layer, below the commands, imports none of
them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kconvert.results.document import build_report
from kconvert.results.inspection import Gated, Inspection


@dataclass
class ScoreSettings:
    num_speculative_tokens: int = 3
    dtype: str | None = None  # compute dtype of the draft; default: the trace's
    device: str | None = None  # auto: cuda when visible, else cpu
    mode: str | None = None  # replay | every-position; default: replay for greedy traces
    skip_static: bool = False
    aux_ids: list[int] | None = None  # score as if the engine fed these streams
    max_sequences: int | None = None
    lm_head_from: str | None = None
    check_trace_sha256: bool = True
    threads: int | None = None  # torch intra-op threads (1 is fastest on a few shared cores)


@dataclass
class ScoreResult(Gated):
    inspect: Inspection
    trace: Any  # Trace
    settings: ScoreSettings
    reading: Any = None  # Reading as the engine loads the files
    result: Any = None  # ReadingScore
    weights: Any = None  # the draft's WeightCache (kconvert.score.weights): read once, reused by diagnose
    static_blocked: bool = False
    thresholds: Any = None
    checks: list[Any] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"
    dtype: str = ""
    # Another method's checkpoint (K105, `Inspection.refusal`): nothing scored, exit 1
    refused: dict[str, Any] | None = None

    @property
    def acceptance(self) -> dict[str, Any] | None:
        return self.result.acceptance() if self.result is not None else None

    @property
    def error(self) -> str | None:
        return self.result.error if self.result is not None else None

    @property
    def passed(self) -> bool:
        if self.refused or self.static_blocked or self.result is None or self.result.error is not None:
            return False
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json, with the `score` section), as `kconvert score --json`
        prints it."""
        return build_score_report(self)



def score_section(sr: ScoreResult) -> dict[str, Any] | None:
    """The report's `score` section: verify's counters and acceptance fields, plus the trace and reading."""
    if sr.result is None:
        return None
    r = sr.result
    k = sr.settings.num_speculative_tokens
    counters = r.counters() if r is not None else None
    return {
        "engine_model": "vllm 0.32 proposer (greedy)",
        "trace": sr.trace.summary() | {"target": {kk: v for kk, v in sr.trace.meta.target.items() if kk != "config"}},
        "reading": sr.reading.describe() if sr.reading is not None else None,
        "mode": r.mode if r is not None else None,
        "num_speculative_tokens": k,
        "dtype": sr.dtype,
        "device": sr.device,
        "error": sr.error,
        "counters": counters,
        "acceptance": sr.acceptance,
        "positions_scored": r.positions if r is not None else 0,
        "drafted_past_trace": r.unknown if r is not None else 0,
        "per_sequence_accepted": [s.steps for s in r.sequences] if r is not None else [],
        "timings": {k2: round(v, 4) for k2, v in sr.timings.items()},
    }


def build_score_report(sr: ScoreResult) -> dict[str, Any]:
    th = sr.thresholds.to_dict() if sr.thresholds is not None else None
    if th is not None:
        th["checks"] = [c.to_dict() for c in sr.checks]
    verdict = "pass" if sr.passed else "fail"
    doc = build_report(sr.inspect, command="score", hashes=True, live=None, thresholds=th, verdict=verdict,
                       exit_code=sr.exit_code, extra={"static_blocked": sr.static_blocked, "refused": sr.refused,
                                                      "score": score_section(sr), "diagnosis": sr.diagnosis})
    return doc
