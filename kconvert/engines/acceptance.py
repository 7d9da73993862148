"""Acceptance figures from speculative-decoding counters (pure arithmetic, no engine).

Definitions follow vLLM's own metrics (``vllm/v1/spec_decode/metrics.py`` and the Grafana formulas there):

- a *draft* is one verify step of one request: the draft proposed up to ``k`` tokens and the target checked them;
- ``acceptance_rate`` = accepted / draft_tokens;
- ``mean_acceptance_length`` (AL) = 1 + accepted / drafts: tokens emitted per verify step, the bonus token
  (the target's own token after the last accepted draft token) included;
- ``per_position[i]`` = accepted_at_position_i / drafts: how often the i-th drafted token survives;
- ``conditional[i]`` = accepted_at_i / accepted_at_(i-1), with accepted_at_(-1) = drafts: the chance that
  position i is accepted given that position i-1 was.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

COUNTER_KEYS = ("drafts", "draft_tokens", "accepted")


def _ratio(num: float, den: float) -> float | None:
    return None if not den else num / den


def summarize(
    drafts: int,
    draft_tokens: int,
    accepted: int,
    accepted_per_pos: Sequence[int] | None,
    k: int | None,
) -> dict[str, Any]:
    """Turn raw spec-decode counters into acceptance figures.

    ``sglang_accept_length`` is what SGLang / SpecForge ``bench_eagle3.py`` report as ``accept_length``:
    completion tokens / verify steps, bonus token included. Each vLLM draft is one verify step that emits
    ``accepted_in_step + 1`` tokens, so over vLLM counters it equals ``mean_acceptance_length``; it is
    comparable across engines only at the same number of speculative tokens (and topk 1), and never to the
    acceptance rate. Every figure is ``None`` when there were no drafts (nothing to divide by).
    """
    per_pos = [int(c) for c in (accepted_per_pos or [])]
    if k is not None and len(per_pos) < k:
        per_pos = per_pos + [0] * (k - len(per_pos))
    al = None if not drafts else 1.0 + accepted / drafts
    conditional: list[float | None] = []
    prev = drafts
    for count in per_pos:
        conditional.append(_ratio(count, prev))
        prev = count
    return {
        "num_speculative_tokens": k,
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted": int(accepted),
        "accepted_per_pos": per_pos,
        "acceptance_rate": _ratio(accepted, draft_tokens),
        "mean_acceptance_length": al,
        "per_position": [_ratio(c, drafts) for c in per_pos],
        "conditional": conditional,
        "sglang_accept_length": al,
    }


def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Counter differences ``after - before`` (e.g. two snapshots around one prompt set in one engine).

    Both sides carry ``drafts``, ``draft_tokens``, ``accepted`` and optionally ``accepted_per_pos``; a
    missing side of the per-position vector counts as zeros. A negative difference means the snapshots are
    swapped or come from different engines, which is refused.
    """
    out: dict[str, Any] = {}
    for key in COUNTER_KEYS:
        diff = int(after.get(key) or 0) - int(before.get(key) or 0)
        if diff < 0:
            raise ValueError(f"counter {key} went down ({before.get(key)} -> {after.get(key)})")
        out[key] = diff
    b = list(before.get("accepted_per_pos") or [])
    a = list(after.get("accepted_per_pos") or [])
    n = max(len(a), len(b))
    b += [0] * (n - len(b))
    a += [0] * (n - len(a))
    per_pos = [int(x) - int(y) for x, y in zip(a, b)]
    if any(d < 0 for d in per_pos):
        raise ValueError("counter accepted_per_pos went down")
    out["accepted_per_pos"] = per_pos
    return out
