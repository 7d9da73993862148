"""The lm_head: a draft that has none."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule


@rule("K801", "error",
      fix_availability=FixAvailability.NEVER,
      summary="`lm_head` is missing.",
      why="Without lm_head the engine shares the target's; with a reduced draft vocabulary the shapes no longer "
          "agree and acceptance drops to 0 (sglang issue #27829).",
      fix="Not fixable: the draft's trained head cannot be invented.")
def lm_head_missing(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.has_lm_head or not d.tensors:
        return
    vocab = ctx.target.vocab_size if ctx.target else d.vocab_size
    reduced = d.draft_vocab_size is not None and vocab is not None and d.draft_vocab_size != vocab
    yield lm_head_missing.finding(
        "lm_head is missing" + (f" while draft_vocab_size is {d.draft_vocab_size}: acceptance will be 0"
                                if reduced else ": the engine will use the target's head, not the trained one"),
        severity="error" if reduced else "warning",
        evidence=[Evidence("lm_head.weight", "absent", "present")])
