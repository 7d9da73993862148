"""Output health: how degenerate the target's own greedy outputs were (pure facts on token ids, no engine).

Why it matters: a target that loops makes any draft look good. Once an output is a short cycle, every next token
is predictable from the context, so the acceptance counted over it measures the loop, not the draft: tokenspeed
issue #1305 measured 74.6 % acceptance for a Kimi draft on random raw prompts whose outputs were a two-token loop,
against 48.5 % on chat prompts for the same draft (kconvert issue #46, item 4).

Per output (the token ids as the engine generated them, a stop token included, so an output that ended by itself
never ends in a cycle):

- ``distinct_share``: distinct token ids / tokens (None for an empty output);
- ``cycle_length`` p and ``cycle_repeats`` r: the output ends in r >= 2 back-to-back copies of its last p tokens,
  p <= ``MAX_CYCLE_LENGTH``; of all such p the one whose copies cover the most tokens (p * r), the shortest among
  equals, so ``abababab`` is (2, 4), not (4, 2); None and 0 when the output ends in no repeated cycle. This is
  the pattern vLLM's own repetition detection looks for at an output's tail (``RepetitionDetectionParams``,
  ``vllm/v1/core/sched/utils.py`` ``_has_repeating_pattern``: the last p tokens against the ``min_count - 1``
  copies before them);
- ``loop_share``: p * r / tokens, the share of the output that is the final loop;
- ``degenerate``: ``loop_share >= MIN_LOOP_SHARE``: at least half of the output is one short cycle repeated.

The summary over a prompt set gives the share of degenerate prompts, which `kconvert verify`'s gate compares with
``max_degenerate_share`` (kconvert/results/thresholds.py, measured default), and the median distinct share.
"""
from __future__ import annotations

from typing import Any, Sequence

# A cycle of up to 8 tokens: the two-token loop of tokenspeed #1305, and a phrase or line repeated word for word
# (a short sentence is about 8 tokens). Longer periods are left to the distinct share: over kconvert's default 64
# tokens a 16-token cycle could repeat only 4 times.
MAX_CYCLE_LENGTH = 8
# "At least half of the output is the loop": the loop then decides most of what the acceptance was counted on.
MIN_LOOP_SHARE = 0.5


def tail_cycle(ids: Sequence[int], max_length: int = MAX_CYCLE_LENGTH) -> tuple[int | None, int]:
    """``(cycle_length, cycle_repeats)`` of the repeated cycle ``ids`` ends in, or ``(None, 0)`` (module doc)."""
    n = len(ids)
    best: tuple[int | None, int] = (None, 0)
    covered = 0
    for p in range(1, min(max_length, n // 2) + 1):
        # The longest suffix with period p, by one scan backwards: token i repeats token i + p.
        i = n - 1 - p
        while i >= 0 and ids[i] == ids[i + p]:
            i -= 1
        repeats = (n - 1 - i) // p
        if repeats >= 2 and p * repeats > covered:
            best, covered = (p, repeats), p * repeats
    return best


def token_health(ids: Sequence[int]) -> dict[str, Any]:
    """The health figures of one output (module doc)."""
    n = len(ids)
    length, repeats = tail_cycle(ids)
    loop = (length * repeats / n) if length else 0.0
    return {"tokens": n, "distinct_share": len(set(ids)) / n if n else None, "cycle_length": length,
            "cycle_repeats": repeats, "loop_share": loop, "degenerate": loop >= MIN_LOOP_SHARE}


def summarize_health(outputs: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The health of a prompt set's outputs: the per-prompt figures and their summary (module doc)."""
    import statistics  # deferred: ~5 ms (fractions, decimal), and the renderers import this module for health_line

    per = [token_health(ids) for ids in outputs]
    shares = [p["distinct_share"] for p in per if p["distinct_share"] is not None]
    bad = sum(p["degenerate"] for p in per)
    return {
        "prompts": len(per),
        "degenerate_prompts": bad,
        "degenerate_share": bad / len(per) if per else None,
        "median_distinct_share": statistics.median(shares) if shares else None,
        "max_cycle_length": MAX_CYCLE_LENGTH,
        "min_loop_share": MIN_LOOP_SHARE,
        "per_prompt": per,
    }


def health_line(h: dict[str, Any]) -> str:
    """One line a person reads: how many outputs degenerated, what that means, and the median distinct share."""
    share, med = h.get("degenerate_share"), h.get("median_distinct_share")
    return (f"{h.get('degenerate_prompts')} of {h.get('prompts')} outputs degenerate"
            + (f" ({share:.0%})" if share is not None else "")
            + f" (ending in a loop of <= {h.get('max_cycle_length')} tokens that fills >= "
            f"{h.get('min_loop_share', MIN_LOOP_SHARE):.0%} of the output); median distinct-token share "
            + ("n/a" if med is None else f"{med:.3f}"))
