"""Draft vocabulary: draft_vocab_size, d2t offsets, t2d mask, and pruned heads without a mapping."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import numpy as np

from kconvert.writer.ops import RebuildT2D, RewriteD2TOffsets, SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule

DECIDE_D2T = "--d2t offsets|absolute (how the d2t values were written)"


def target_vocab(ctx: Context) -> int | None:
    return ctx.target.vocab_size if ctx.target else ctx.draft.vocab_size


def classify_d2t(d2t: np.ndarray, vocab: int | None, t2d: np.ndarray | None) -> tuple[str, str]:
    """('offsets'|'absolute'|'ambiguous'|'invalid', reason) for a 1-D d2t."""
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    n = d2t.shape[0]
    ar = np.arange(n, dtype=np.int64)
    as_off = d2t.astype(np.int64) + ar
    as_abs = d2t.astype(np.int64)
    V = vocab if vocab is not None else int(max(as_off.max(initial=0), as_abs.max(initial=0))) + 1

    def ok(ids: np.ndarray) -> bool:
        return bool(ids.size == 0 or (ids.min() >= 0 and ids.max() < V and np.unique(ids).size == ids.size))

    off_ok, abs_ok = ok(as_off), ok(as_abs)
    if t2d is not None and t2d.shape[0] == V:
        mask_ids = np.flatnonzero(t2d)
        if off_ok and mask_ids.size == n and np.array_equal(np.sort(as_off), mask_ids):
            return "offsets", "d2t + arange equals the ids set in t2d"
        if abs_ok and mask_ids.size == n and np.array_equal(np.sort(as_abs), mask_ids):
            return "absolute", "d2t itself equals the ids set in t2d"
    if off_ok and not abs_ok:
        return "offsets", "only d2t + arange gives distinct ids inside the target vocabulary"
    if abs_ok and not off_ok:
        return "absolute", "d2t + arange leaves the target vocabulary or repeats ids, d2t alone does not"
    if off_ok and abs_ok:
        if n and np.all(d2t == 0):
            return "offsets", "all offsets are 0 (identity mapping)"
        return "ambiguous", "both readings give distinct ids inside the target vocabulary"
    return "invalid", "neither reading gives distinct ids inside the target vocabulary"


@rule("K501", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`draft_vocab_size` disagrees with the rows of `lm_head`.",
      why="vLLM sizes the draft head from draft_vocab_size (defaulting to vocab_size); a head of another size "
          "fails to load, or with no d2t it maps draft ids to the wrong target ids.",
      fix="fix sets draft_vocab_size to the lm_head rows (safe: the tensor is the ground truth).")
def draft_vocab_size(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    rows = d.lm_head_rows
    V = target_vocab(ctx)
    if d.draft_vocab_size is not None and V is not None and d.draft_vocab_size > V:
        yield draft_vocab_size.finding(
            f"draft_vocab_size {d.draft_vocab_size} is larger than the target vocabulary {V}",
            evidence=[Evidence("draft_vocab_size", d.draft_vocab_size, f"<= {V}")],
            ops=[SetConfig(("draft_vocab_size",), rows, "lm_head rows")] if rows is not None and rows <= V else [])
        return
    if rows is None:
        return
    declared = d.draft_vocab_size if d.draft_vocab_size is not None else d.vocab_size
    if declared != rows:
        yield draft_vocab_size.finding(
            f"lm_head has {rows} rows but the engine will read draft_vocab_size = {declared}"
            + ("" if d.draft_vocab_size is not None else " (defaulted from vocab_size)"),
            evidence=[Evidence("draft_vocab_size", d.draft_vocab_size, rows)],
            ops=[SetConfig(("draft_vocab_size",), rows, "lm_head rows")])


@rule("K502", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="`d2t` is missing, of the wrong length, holds absolute ids instead of offsets, or maps outside the "
              "target vocabulary or twice to one id.",
      why="vLLM, SGLang and tokenspeed read d2t as offsets (target = draft_id + d2t[draft_id]; tokenspeed 0.1.1 "
          "models/llama_eagle3.py load_weights: hot_token_id = d2t + arange); absolute ids index past the "
          "vocabulary and crash the engine (index out of bounds) or map to wrong tokens. A pruned head (fewer rows "
          "than the target vocabulary) without d2t maps draft id i to target id i: wrong tokens, near-zero "
          "acceptance.",
      fix="fix rewrites absolute ids to offsets (safe when the reading is unambiguous, e.g. t2d agrees). An "
          "ambiguous d2t (a warning) is left exactly as it is, the other repairs applied and the choice recorded "
          "in kconvert.json, until --d2t offsets|absolute decides. Missing or invalid mappings are not fixable.")
def d2t_rule(ctx: Context) -> Iterator[Finding]:
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    d = ctx.draft
    V = target_vocab(ctx)
    rows = d.lm_head_rows
    info = d.tensors.get("d2t")
    if info is None:
        if rows is not None and V is not None and rows < V:
            yield d2t_rule.finding(f"lm_head has {rows} rows (< target vocabulary {V}) but there is no d2t",
                                   evidence=[Evidence("d2t", "absent", f"int64 [{rows}]")])
        return
    if len(info.shape) != 1 or info.dtype not in ("I64", "I32"):
        yield d2t_rule.finding(f"d2t is {info.dtype} {list(info.shape)}; expected a 1-D int64 tensor",
                               evidence=[Evidence("d2t", [info.dtype, list(info.shape)], ["I64", [rows]])])
        return
    if rows is not None and info.shape[0] != rows:
        yield d2t_rule.finding(f"d2t has {info.shape[0]} entries but lm_head has {rows} rows",
                               evidence=[Evidence("d2t", info.shape[0], rows)])
        return
    d2t = ctx.array("d2t")
    if d2t is None:
        return
    kind, why = classify_d2t(d2t, V, ctx.array("t2d"))
    if ctx.decisions.d2t_kind:
        kind, why = ctx.decisions.d2t_kind, "decided by --d2t"
    if kind == "absolute":
        yield d2t_rule.finding(f"d2t holds absolute target ids, engines read offsets ({why})",
                               evidence=[Evidence("d2t", f"d2t[:3]={d2t[:3].tolist()}",
                                                  f"offsets {(d2t[:3] - np.arange(min(3, d2t.size))).tolist()}")],
                               ops=[RewriteD2TOffsets(d.raw_names["d2t"], "engines read d2t as offsets")])
    elif kind == "ambiguous":
        yield d2t_rule.finding(f"d2t could be offsets or absolute ids ({why}); engines read offsets",
                               severity="warning", evidence=[Evidence("d2t", f"d2t[:3]={d2t[:3].tolist()}", None)],
                               needs_decision=DECIDE_D2T)
    elif kind == "invalid":
        yield d2t_rule.finding(f"d2t maps outside the target vocabulary or twice to one id ({why})",
                               evidence=[Evidence("d2t", f"min {int(d2t.min())}, max {int(d2t.max())}",
                                                  f"ids within [0, {V})")])


@rule("K503", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="`t2d` does not cover the target vocabulary or disagrees with d2t.",
      why="vLLM skips t2d when loading, but SGLang and training tools use it; a t2d that disagrees with d2t means "
          "one of them was rebuilt from another vocabulary.",
      fix="fix rebuilds t2d from d2t over the target vocabulary (safe once d2t is settled).")
def t2d_rule(ctx: Context) -> Iterator[Finding]:
    import numpy as np  # deferred: ~40 ms to import; `kconvert --help` and `kconvert rules` never run a rule
    d = ctx.draft
    info = d.tensors.get("t2d")
    V = target_vocab(ctx)
    if info is None or V is None or "d2t" not in d.tensors:
        return
    op = RebuildT2D(d.raw_names["t2d"], d.raw_names["d2t"], V, "t2d must mark exactly the ids d2t maps to")
    if len(info.shape) != 1 or info.shape[0] != V:
        yield t2d_rule.finding(f"t2d has shape {list(info.shape)}; the target vocabulary is {V}",
                               evidence=[Evidence("t2d", list(info.shape), [V])], ops=[op])
        return
    t2d = ctx.array("t2d")
    d2t = ctx.array("d2t")
    if t2d is None or d2t is None:
        return
    kind, _ = classify_d2t(d2t, V, None)
    if ctx.decisions.d2t_kind:
        kind = ctx.decisions.d2t_kind
    ids = d2t.astype(np.int64) + (np.arange(d2t.size) if kind != "absolute" else 0)
    count = int(np.count_nonzero(t2d))
    if count != d2t.size or (ids.size and (ids.min() < 0 or ids.max() >= V or not bool(np.all(t2d[ids] != 0)))):
        yield t2d_rule.finding(f"t2d marks {count} ids that disagree with the {d2t.size} ids d2t maps to",
                               severity="warning", evidence=[Evidence("t2d", f"{count} ids set", f"{d2t.size}")],
                               ops=[op])


@rule("K504", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="The draft's `vocab_size` differs from the target's.",
      why="vLLM sizes the shared embedding and the d2t mapping against the target vocabulary; a different "
          "vocab_size in the draft config means it was copied from another model.",
      fix="fix sets vocab_size to the target's (safe: the draft shares the target's tokenizer).", needs_target=True)
def vocab_size(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if ctx.target is None or d.vocab_size is None or d.vocab_size == ctx.target.vocab_size:
        return
    yield vocab_size.finding(f"vocab_size {d.vocab_size} != the target's {ctx.target.vocab_size}",
                             evidence=[Evidence("vocab_size", d.vocab_size, ctx.target.vocab_size)],
                             ops=[SetConfig(ctx.key_path("vocab_size"), ctx.target.vocab_size, "target vocabulary")])
