"""The lossless check: greedy outputs with the draft must equal those without it, token for token."""
from __future__ import annotations

from typing import Any


def first_divergence(x: list[int], y: list[int]) -> int | None:
    """First token position where two outputs differ (a length difference diverges at the shorter length)."""
    if x == y:
        return None
    return next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))


def compare_outputs(spec: list[list[int]], base: list[list[int]]) -> dict[str, Any]:
    """Compare the token ids of each request with the draft (`spec`) and without it (`base`). Names the first
    request and position where they differ, with both tokens there."""
    for i, (a, b) in enumerate(zip(spec, base)):
        n = first_divergence(a, b)
        if n is not None:
            return {"identical": False, "requests": len(spec), "first_difference": {
                "request": i, "position": n, "speculative_token": a[n] if n < len(a) else None,
                "baseline_token": b[n] if n < len(b) else None}}
    if len(spec) != len(base):
        return {"identical": False, "requests": len(spec), "first_difference": {"request": min(len(spec), len(base)),
                                                                                "position": 0}}
    return {"identical": True, "requests": len(spec), "tokens_compared": sum(len(a) for a in spec),
            "first_difference": None}
