"""The candidate readings of a draft's files, named once for both diagnoses: `verify --diagnose` (live, one
engine start each, `kconvert.commands.verify.diagnose_live`) and `score --diagnose` (offline, on a recorded trace,
`kconvert.score.diagnose_offline`).

Here: what counts as low acceptance, the one `Candidate` type, which readings each diagnosis varies and so which
open decisions it measures (`diagnoses`), each reading's name, and the `kconvert fix` flags and command that apply
it. How a reading is run (config overrides for the engine, a `Reading` for the offline
runner) rides on the candidate; the renderer of both tables is `kconvert.report.terminal.render_diagnosis`.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Iterable

LOW_AL_FRACTION = 0.6  # below 60% of the maximum (k + 1) counts as low, live and offline


def is_low(mean_acceptance_length: float | None, k: int) -> bool:
    """Acceptance low enough that every reading is worth trying (or none measured at all)."""
    return mean_acceptance_length is None or mean_acceptance_length < LOW_AL_FRACTION * (k + 1)


@dataclass
class Candidate:
    """One reading of the files to measure: its name, what it changes, and the `kconvert fix` flags that make the
    engine read the files that way ([] when plain `fix` does it, None when no flag can)."""

    name: str
    description: str
    fix_args: list[str] | None = None
    kind: str = ""  # the reading it varies: a value of READINGS (LIVE_READINGS for verify --diagnose's)
    overrides: dict[str, Any] | None = None  # live: config overrides (vLLM reads input-of-layer ids at top level)
    d2t_absolute: bool = False  # live: rewrite d2t as absolute ids before the engine start
    reading: Any = None  # offline: the kconvert.score.reading.Reading to score


# --------------------------------------------------------------------------- what the diagnoses measure ---

# The reading each diagnosis varies, by the category of the finding whose open question it answers. score
# --diagnose tries the reading of every category here that a static finding names, or those --try asks for
# (`kconvert.score.diagnose_offline`: its choices are these values); verify --diagnose, one engine start per
# reading, re-points the aux ids by config overrides and rewrites d2t (LIVE_READINGS,
# `kconvert.commands.verify.diagnose_live.candidates`). tests/test_diagnosis_route.py holds both to the candidates
# the two diagnoses build over every shipped draft.
READINGS = {"aux-layers": "aux", "vocab-mapping": "d2t", "embeddings": "embeddings", "lm-head": "lm-head",
            "norms": "norm", "tensor-names": "names"}
LIVE_READINGS = ("aux", "d2t")
VERIFY, SCORE = "verify", "score"


def diagnoses(finding: Any) -> tuple[str, ...]:
    """The diagnoses that measure the decision a finding leaves open: VERIFY (live) and SCORE (offline), SCORE
    alone, or none.

    A diagnosis measures the draft as loaded against the other readings of the same files (the aux ids shifted by
    one or searched, d2t as the other kind, ...). That answers an open decision when the files run as written
    while it stays open, so that the reading as loaded is one side of it: a warning whose category a diagnosis
    varies (K404's two conventions, K401's layers, an ambiguous d2t). A decision-needing error asks for what the
    files lack (K403: as many ids as fc takes; K405: which of two keys' ids), which no reading of them supplies;
    fix and verify stop at it until it is given."""
    # a warning: score's diagnosis tries the readings of the warnings' and errors' categories
    # (diagnose_offline.wanted_choices), and an error here is one whose repair is the decision
    if not finding.needs_decision or finding.ops or finding.severity != "warning":
        return ()
    reading = READINGS.get(finding.category)
    if reading is None:
        return ()
    return (VERIFY, SCORE) if reading in LIVE_READINGS else (SCORE,)


# ------------------------------------------------------------------------------------------------- names ---

def aux_ids_name(ids: Iterable[int]) -> str:
    return f"aux ids {list(ids)}"


def engine_default_name(ids: Iterable[int]) -> str:
    return f"engine default layers {list(ids)}"


D2T_ABSOLUTE_NAME = "d2t read as absolute ids"  # live: the files rewritten as if d2t held absolute ids


def d2t_as_name(kind: str) -> str:
    """Offline: d2t read as `kind` (offsets or absolute)."""
    return f"d2t as {kind}"


def embeddings_name(whose: str) -> str:
    return f"{whose}'s embeddings"


LM_HEAD_RESELECTED_NAME = "lm_head re-selected"
NAMES_WITHOUT_PREFIX_NAME = "tensor names without the prefix"


def norm_name(value: bool) -> str:
    return f"norm_before_residual {str(value).lower()}"


# ------------------------------------------------------------------------------------------ fix commands ---

def aux_ids_args(ids: Iterable[int]) -> list[str]:
    return ["--aux-ids", ",".join(map(str, ids))]


AUX_DEFAULT_ARGS = ["--aux-ids", "default"]
D2T_ABSOLUTE_ARGS = ["--d2t", "absolute"]


def lm_head_args(source: str) -> list[str]:
    return ["--lm-head-from", source]


def fix_command(draft_ref: str, fix_args: list[str], *, target_ref: str | None = None,
                report_ref: str | None = None) -> str:
    """The `kconvert fix` line that applies a reading: the draft as the user named it, written beside itself, the
    target as named (a profile stays a profile: fix reads its facts, not the Hub), and the report that measured
    it (`--decided-by`) when there is one."""
    cmd = ["kconvert", "fix", draft_ref, "-o", f"{draft_ref.rstrip('/')}-fixed"]
    if target_ref:
        cmd += ["--target", target_ref]
    cmd += fix_args
    if report_ref:
        cmd += ["--decided-by", report_ref]
    return shlex.join(cmd)
