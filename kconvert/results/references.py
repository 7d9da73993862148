"""Published acceptance-length curves as gates (`kconvert verify --reference ID`, issue #49 item 6).

A reference is a curve somebody published for one draft, AL per num_speculative_tokens, with the conditions it was
measured under (kconvert/results/reference_curves.json, shipped with the package). InferenceX's
`golden_al_distribution` files are the first: SPEED-Bench coding prompts on B300 at temperature 1.0, thinking on,
AL = 1 + accepted draft tokens / verification drafts from vLLM's counters (their README). A live run here is
greedy on kconvert's own prompt sets, so the comparison says how far the live figure is from the curve at the
run's k and names every condition that differs, since each moves the figure by itself.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kconvert.errors import InputError, UsageError, did_you_mean

REFERENCES_FILE = "reference_curves.json"


@dataclass(frozen=True)
class ReferenceCurve:
    id: str
    draft: str
    target: str
    method: str
    engine: str
    source: str
    conditions: dict[str, Any]
    metric: str
    metric_formula: str
    curve: dict[int, float]

    def at(self, k: int) -> float:
        if k not in self.curve:
            raise UsageError(f"--reference {self.id}: the curve has no figure for k={k} (it has k = "
                             f"{', '.join(str(i) for i in sorted(self.curve))})",
                             hint=f"run with --num-speculative-tokens {min(self.curve, key=lambda i: abs(i - k))}")
        return self.curve[k]


def _load() -> dict[str, ReferenceCurve]:
    raw = json.loads((resources.files("kconvert.results") / REFERENCES_FILE).read_text(encoding="utf-8"))
    out = {}
    for rid, r in raw.items():
        if rid.startswith("_"):
            continue
        try:
            out[rid] = ReferenceCurve(id=rid, draft=r["draft"], target=r["target"], method=r["method"],
                                      engine=r["engine"], source=r["source"], conditions=dict(r["conditions"]),
                                      metric=r["metric"], metric_formula=r["metric_formula"],
                                      curve={int(k): float(v) for k, v in r["curve"].items()})
        except (KeyError, TypeError, ValueError) as e:  # a shipped file kconvert wrote: a bug, not bad input
            raise InputError(f"{REFERENCES_FILE}: reference {rid!r} is malformed ({e})") from None
    return out


def reference_ids() -> list[str]:
    return sorted(_load())


def load_reference(rid: str) -> ReferenceCurve:
    refs = _load()
    if rid not in refs:
        raise UsageError(f"--reference {rid!r}: no such published curve{did_you_mean(rid, list(refs))}",
                         hint=f"known references: {', '.join(sorted(refs))}")
    return refs[rid]


# This run's conditions against the curve's, each named as the curve's file names it. kconvert's live runs are
# greedy (kconvert/engines/live_messages.py LiveRequest.temperature 0.0) on its shipped prompt sets.
def differences(ref: ReferenceCurve, run: dict[str, Any]) -> list[dict[str, Any]]:
    """What differs between the curve's conditions and this run's, one entry per condition either side states."""
    ref_side = {**ref.conditions, "draft": ref.draft, "target": ref.target, "engine": ref.engine,
                "metric": f"{ref.metric}: {ref.metric_formula}"}
    out = []
    for what, theirs in ref_side.items():
        ours = run.get(what, "not recorded")
        if what == "metric":
            # kconvert's AL is vLLM's 1 + accepted / drafts from the engine's counters: the same convention when
            # the curve is vLLM's; another convention is converted by CONVENTIONS before comparing
            ours = f"{run.get('metric', 'vllm')}: 1 + accepted / drafts from the engine's counters"
            if ref.metric == run.get("metric", "vllm"):
                continue
        if str(theirs) != str(ours):
            out.append({"what": what, "reference": theirs, "this_run": ours})
    return out


def reference_block(ref: ReferenceCurve, k: int, tolerance: float, run: dict[str, Any], al: float) -> dict[str, Any]:
    """The report's thresholds.reference: the curve's figure at k and `al`, that figure as vLLM's AL (converted by
    kconvert/results/thresholds.py expected_to_vllm_al, the one conversion between conventions), the gate's floor,
    the source and conditions, and what differs from this run (before any engine starts: a dry run shows it too)."""
    value = ref.at(k)
    return {"id": ref.id, "draft": ref.draft, "k": k, "value": value, "metric": ref.metric, "as_vllm_al": al,
            "tolerance": tolerance, "floor": round(al * (1 - tolerance), 4), "source": ref.source,
            "conditions": ref.conditions, "curve": {str(i): v for i, v in sorted(ref.curve.items())},
            "differs": differences(ref, run)}


def compare(block: dict[str, Any], live_al: float | None) -> dict[str, Any]:
    """How far the live mean acceptance length is from the reference at the run's k."""
    ref_al = block["as_vllm_al"]
    if live_al is None:
        return {"live": None, "reference": ref_al, "difference": None, "ratio": None}
    return {"live": live_al, "reference": ref_al, "difference": round(live_al - ref_al, 4),
            "ratio": round(live_al / ref_al, 4)}
