"""The candidate readings of a draft's files, named once for both diagnoses: `verify --diagnose` (live, one
engine start each, `kconvert.commands.verify.diagnose_live`) and `score --diagnose` (offline, on a recorded trace,
`kconvert.score.diagnose_offline`).

Here: what counts as low acceptance, the one `Candidate` type, each reading's name, and the `kconvert fix` flags
and command that apply it. How a reading is run (config overrides for the engine, a `Reading` for the offline
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
    overrides: dict[str, Any] | None = None  # live: config overrides (vLLM reads input-of-layer ids at top level)
    d2t_absolute: bool = False  # live: rewrite d2t as absolute ids before the engine start
    reading: Any = None  # offline: the kconvert.score.reading.Reading to score


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
