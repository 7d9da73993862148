"""kconvert/rules/vocab_mapping.py's d2t reading (classify_d2t), target vocabulary (target_vocab) and its rules
K501-K504 (every finding in full: severity, message, evidence, ops, fixable), against facts outside kconvert:

- vLLM and SGLang read d2t as offsets: target id = draft id + d2t[draft id] (vLLM 0.32, the CPU build in .venv:
  vllm/model_executor/models/llama_eagle3.py:428-429 loads `d2t` as `draft_id_to_target_id`, and :385-386
  `targets = torch.arange(draft_vocab_size) + self.draft_id_to_target_id`; docs/formats-and-engines.md
  sections 1 and 5); t2d is a boolean mask over the target vocabulary marking the ids d2t maps to; a target
  vocabulary of V tokens has ids 0..V-1.
- The shipped examples (examples/build/package.py, written with torch, not kconvert): examples/tiny/drafts/
  mla-torchspec holds d2t offsets with its t2d; examples/tiny/broken/d2t-absolute is the same draft with
  `d2t + torch.arange(len(d2t))` (package.py step 2: absolute ids). Read here with the safetensors library.
- vLLM sizes the draft head from draft_vocab_size, defaulting to vocab_size (docs/rules.md K501;
  docs/formats-and-engines.md#vllm-032-loading-rules: "`draft_vocab_size` defaults to `vocab_size`").
- The rules' contracts (docs/rules.md): K501's fix sets draft_vocab_size to the lm_head rows (the tensor is the
  ground truth). K502: a pruned head without d2t, a d2t not 1-D int, of another length than the head, or mapping
  outside the vocabulary is an error no fix repairs; absolute ids are rewritten to offsets; an ambiguous d2t is a
  warning waiting for `--d2t offsets|absolute`. K503: t2d must be a mask over the target vocabulary marking exactly
  the ids d2t maps to; fix rebuilds it from d2t (always). K504: the draft's vocab_size must be the target's; fix
  sets it (always), in the speculators format under transformer_layer_config (its nested layer config:
  docs/formats-and-engines.md#producers-and-their-layouts).
- The tiny draft (tests/factories.py TINY): hidden 64, vocab_size 512, draft_vocab_size 128, lm_head [128, 64],
  d2t I64 [128], t2d BOOL [512]; the tiny target's vocabulary is 512 (tests here rewrite it to 1000 or 1024).
- The reasons are the words K502 prints after "d2t holds absolute target ids, engines read offsets (...)" and
  "d2t could be offsets or absolute ids (...)" (kconvert/rules/vocab_mapping.py d2t_rule), what a user reads.

Each expected value is worked out by hand in a comment from the arrays written here. Engine-free, milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import safe_open

from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from kconvert.rules.vocab_mapping import classify_d2t
from kconvert.writer.ops import RebuildT2D, RewriteD2TOffsets, SetConfig
from tests.factories import make_draft, make_target, one_rule, read_folder

ROOT = Path(__file__).resolve().parent.parent
T2D_AGREES_OFF = ("offsets", "d2t + arange equals the ids set in t2d")
T2D_AGREES_ABS = ("absolute", "d2t itself equals the ids set in t2d")
ONLY_OFF = ("offsets", "only d2t + arange gives distinct ids inside the target vocabulary")
ONLY_ABS = ("absolute", "d2t + arange leaves the target vocabulary or repeats ids, d2t alone does not")
ZEROS = ("offsets", "all offsets are 0 (identity mapping)")
AMBIGUOUS = ("ambiguous", "both readings give distinct ids inside the target vocabulary")
INVALID = ("invalid", "neither reading gives distinct ids inside the target vocabulary")


def a(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def mask(V: int, *ids: int) -> np.ndarray:
    m = np.zeros(V, dtype=bool)
    m[list(ids)] = True
    return m


# --- classify_d2t on hand-made arrays ---------------------------------------------------------------------------

def test_both_readings_valid_is_ambiguous_until_t2d_says_which():
    # d2t [0, 1, 3], V 10: as offsets -> ids [0, 2, 5]; as absolute ids -> [0, 1, 3]; both distinct, inside 0..9.
    d2t = a(0, 1, 3)
    assert classify_d2t(d2t, 10, None) == AMBIGUOUS
    assert classify_d2t(d2t, 10, mask(10, 0, 2, 5)) == T2D_AGREES_OFF
    assert classify_d2t(d2t, 10, mask(10, 0, 1, 3)) == T2D_AGREES_ABS


def test_a_t2d_that_marks_other_ids_or_has_another_length_settles_nothing():
    d2t = a(0, 1, 3)
    assert classify_d2t(d2t, 10, mask(10, 0, 2, 6)) == AMBIGUOUS      # neither [0, 2, 5] nor [0, 1, 3]
    assert classify_d2t(d2t, 10, mask(10, 0, 2, 5, 7)) == AMBIGUOUS   # 4 ids marked for 3 draft ids
    assert classify_d2t(d2t, 10, mask(10, 0, 1)) == AMBIGUOUS         # 2 ids marked for 3 draft ids
    assert classify_d2t(d2t, 10, mask(12, 0, 2, 5)) == AMBIGUOUS      # a mask over 12 ids is not over V = 10


def test_only_the_offset_reading_is_valid():
    # d2t [5, 5, 5], V 10: offsets -> [5, 6, 7]; absolute -> 5 three times (one id twice).
    assert classify_d2t(a(5, 5, 5), 10, None) == ONLY_OFF


def test_only_the_absolute_reading_is_valid():
    # d2t [7, 8, 9], V 10: offsets -> [7, 9, 11] (11 is past id 9); absolute -> [7, 8, 9].
    assert classify_d2t(a(7, 8, 9), 10, None) == ONLY_ABS
    # d2t [7, 7, 8], V 10: offsets -> [7, 8, 10]: 10 is not an id of a 10-token vocabulary (0..9);
    # absolute -> 7 twice. Neither.
    assert classify_d2t(a(7, 7, 8), 10, None) == INVALID
    # V 11 makes id 10 real: offsets [7, 8, 10] are then valid, absolute still repeats 7.
    assert classify_d2t(a(7, 7, 8), 11, None) == ONLY_OFF


def test_negative_ids_are_outside_the_vocabulary_and_zero_is_inside():
    # d2t [-1, 0], V 10: offsets -> [-1, 1]; absolute -> [-1, 0]: -1 is no token.
    assert classify_d2t(a(-1, 0), 10, None) == INVALID
    # d2t [0, 4], V 10: offsets [0, 5], absolute [0, 4]: id 0 is a token, both readings valid.
    assert classify_d2t(a(0, 4), 10, None) == AMBIGUOUS


def test_one_zero_offset_is_the_identity_mapping():
    # d2t [0], V 10: both readings give [0]; an all-zero d2t is the identity (offsets 0).
    assert classify_d2t(a(0), 10, None) == ZEROS
    # d2t [3], V 10: both readings give [3], and it is not all zeros.
    assert classify_d2t(a(3), 10, None) == AMBIGUOUS
    # d2t [10], V 10: both readings give id 10, past the last id 9: one draft id can be invalid too.
    assert classify_d2t(a(10), 10, None) == INVALID


def test_without_a_vocabulary_the_largest_id_read_bounds_it():
    # No target and no vocab_size: V = 1 + the largest id either reading gives. d2t [5, 5, 5]: offsets [5, 6, 7],
    # absolute [5, 5, 5] -> V = 8; ids 5..7 fit in 0..7, and the absolute reading repeats 5.
    assert classify_d2t(a(5, 5, 5), None, None) == ONLY_OFF
    # d2t [2, 2]: offsets [2, 3], absolute [2, 2] -> V 4: a t2d over 4 ids marking {2, 3} settles offsets.
    assert classify_d2t(a(2, 2), None, mask(4, 2, 3)) == T2D_AGREES_OFF
    # d2t [1, 3]: offsets [1, 4], absolute [1, 3] -> V = 5 (the largest offset reading 4, plus 1), so a t2d over
    # 5 ids marking {1, 3} is read and says absolute.
    assert classify_d2t(a(1, 3), None, mask(5, 1, 3)) == T2D_AGREES_ABS
    # d2t [0]: both readings give id 0 -> V = 1, so a one-id t2d marking {0} is over the vocabulary and is read.
    assert classify_d2t(a(0), None, mask(1, 0)) == T2D_AGREES_OFF


def test_an_empty_d2t_is_both_readings_at_once():
    # No draft ids: both readings give no ids (valid), and "all zeros" needs at least one: ambiguous.
    assert classify_d2t(a(), 10, None) == AMBIGUOUS
    assert classify_d2t(a(), None, None) == AMBIGUOUS


def test_ids_are_exact_64_bit_integers_not_floats():
    # safetensors' I64 is a 64-bit integer; float64 holds integers exactly only up to 2**53 (IEEE 754 binary64:
    # 53-bit significand), so 2**53 + 1 has no float64 of its own. d2t [2**53, 2**53 + 1], no vocabulary: offsets ->
    # [2**53, 2**53 + 2], absolute -> [2**53, 2**53 + 1], V = 2**53 + 3: both readings distinct and inside it.
    B = 2 ** 53
    assert classify_d2t(a(B, B + 1), None, None) == AMBIGUOUS


def test_int32_d2t_is_read_as_the_same_ids():
    # vLLM loads d2t as an integer tensor whatever its width; int32 [5, 5, 5] is the same offsets.
    assert classify_d2t(np.array([5, 5, 5], dtype=np.int32), 10, None) == ONLY_OFF


# --- classify_d2t on the shipped examples ------------------------------------------------------------------------

def _tensors(folder: str) -> dict[str, np.ndarray]:
    """d2t and t2d only (the bf16 weights are not needed, and NumPy has no bfloat16)."""
    out: dict[str, np.ndarray] = {}
    for f in sorted((ROOT / "examples" / "tiny" / folder).glob("*.safetensors")):
        with safe_open(str(f), framework="np") as st:
            out.update({k: st.get_tensor(k) for k in st.keys() if k in ("d2t", "t2d")})
    return out


def test_the_examples_offsets_and_their_absolute_copy_are_told_apart_by_t2d():
    good = _tensors("drafts/mla-torchspec")
    bad = _tensors("broken/d2t-absolute")
    V = good["t2d"].shape[0]
    assert classify_d2t(good["d2t"], V, good["t2d"]) == T2D_AGREES_OFF
    assert classify_d2t(bad["d2t"], V, bad["t2d"]) == T2D_AGREES_ABS


# --- target_vocab: the target's vocabulary when there is a target, else the draft's ------------------------------

def test_the_target_vocabulary_bounds_draft_vocab_size_when_a_target_is_given(tmp_path):
    # The tiny target has 512 tokens (tests/factories.py TINY.vocab). A draft whose own config says vocab_size 1000
    # and draft_vocab_size 600 is judged against the target's 512: 600 > 512.
    def cfg(c):
        c.update(vocab_size=1000, draft_vocab_size=600)
    folder = make_draft(tmp_path / "d", "specforge", config=cfg)
    res = inspect(str(folder), target=str(make_target(tmp_path / "t")), engine="vllm", engine_version="0.32/v1")
    msgs = [f.message for f in res.findings if f.id == "K501"]
    assert msgs == ["draft_vocab_size 600 is larger than the target vocabulary 512"]
    # Without a target the draft's own vocab_size (1000) bounds it: 600 fits, and the head's 128 rows disagree.
    res = inspect(str(folder), engine="vllm", engine_version="0.32/v1")
    msgs = [f.message for f in res.findings if f.id == "K501"]
    assert msgs == ["lm_head has 128 rows but the engine will read draft_vocab_size = 600"]


# --- K501-K504 in full: every finding the rules yield, as `inspect` prints it ------------------------------------

DECIDE = "--d2t offsets|absolute (how the d2t values were written)"  # the flag K502 names (docs/rules.md K502)
REBUILD_WHY = "t2d must mark exactly the ids d2t maps to"


def full(f) -> tuple:
    """Everything a user reads of a finding: severity, message, evidence, ops, fixable, the flag it waits for."""
    return (f.severity, f.message, [(e.where, e.observed, e.expected) for e in f.evidence], f.ops, f.fixable,
            f.needs_decision)


def target(tmp_path: Path, vocab: int = 512, name: str = "target"):
    """The tiny target, with its text_config's vocab_size set to `vocab`."""
    import json

    from kconvert.targets import load_target

    folder = make_target(tmp_path / name)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["text_config"]["vocab_size"] = vocab
    (folder / "config.json").write_text(json.dumps(cfg))
    return load_target(str(folder))


def draft(tmp_path: Path, name: str, producer: str = "specforge", *, config=None, tensors=None):
    return read_folder(make_draft(tmp_path / name, producer, config=config, tensors=tensors))


def head(rows: int):
    """A `tensors=` edit: lm_head [rows, 64] (zeros), the d2t/t2d left as they are."""
    def mut(t):
        t["lm_head.weight"] = ("BF16", (rows, 64), np.zeros((rows, 64), np.float32))
    return mut


def vmap(d2t, t2d_ids=None, *, V: int = 512, t2d_shape=None, d2t_dtype: str = "I64", d2t_shape=None,
         rows: int | None = None):
    """A `tensors=` edit: d2t holding `d2t`, a t2d over V ids marking `t2d_ids` (None: no t2d), and an lm_head of
    len(d2t) rows (or `rows`)."""
    vals = np.asarray(d2t, dtype=np.int64)

    def mut(t):
        shape = d2t_shape or (vals.size,)
        t["d2t"] = (d2t_dtype, shape, vals.reshape(shape))
        t.pop("t2d")
        if t2d_ids is not None:
            shape_m = t2d_shape or (V,)
            m = np.zeros(int(np.prod(shape_m)), dtype=bool)
            m[list(t2d_ids)] = True
            t["t2d"] = ("BOOL", shape_m, m.reshape(shape_m))
        n = vals.size if rows is None else rows
        t["lm_head.weight"] = ("BF16", (n, 64), np.zeros((n, 64), np.float32))
    return mut


def no_map(t):
    t.pop("d2t")
    t.pop("t2d")


def prefixed(edit=None):
    """A `tensors=` edit then every name under `model.` (the layout kconvert reads with prefix "model.")."""
    from tests.factories import rename_all

    def mut(t):
        if edit:
            edit(t)
        rename_all(t, lambda k: "model." + k)
    return mut


def drop(*keys: str):
    def cfg(c):
        for k in keys:
            c.pop(k, None)
    return cfg


# --- K501 draft-vocab-size ----------------------------------------------------------------------------------------

def test_k501_a_draft_vocab_size_past_the_target_vocabulary_is_set_to_the_head_rows(tmp_path):
    # draft_vocab_size 600 > the target's 512 tokens; the head's 128 rows fit in 512, so fix writes 128.
    d = draft(tmp_path, "d", config=lambda c: c.update(draft_vocab_size=600))
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f) == ("error", "draft_vocab_size 600 is larger than the target vocabulary 512",
                       [("draft_vocab_size", 600, "<= 512")],
                       [SetConfig(("draft_vocab_size",), 128, "lm_head rows")], True, None)


def test_k501_draft_vocab_size_equal_to_the_vocabulary_is_not_larger_and_one_more_is(tmp_path):
    # 513 > 512: larger. 512 == 512 is not larger, and then it disagrees with the 128 rows instead.
    d = draft(tmp_path, "d513", config=lambda c: c.update(draft_vocab_size=513))
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f)[1:3] == ("draft_vocab_size 513 is larger than the target vocabulary 512",
                            [("draft_vocab_size", 513, "<= 512")])
    d = draft(tmp_path, "d512", config=lambda c: c.update(draft_vocab_size=512))
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f) == ("error", "lm_head has 128 rows but the engine will read draft_vocab_size = 512",
                       [("draft_vocab_size", 512, 128)],
                       [SetConfig(("draft_vocab_size",), 128, "lm_head rows")], True, None)


def test_k501_a_head_with_more_rows_than_the_vocabulary_gives_no_value_to_write(tmp_path):
    # draft_vocab_size 600 > 512, and the head has 513 rows (> 512): writing 513 would still be too large, so
    # no op: not fixable. A head of exactly 512 rows fits (512 <= 512): fix writes 512.
    d = draft(tmp_path, "d513", config=lambda c: c.update(draft_vocab_size=600), tensors=head(513))
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f) == ("error", "draft_vocab_size 600 is larger than the target vocabulary 512",
                       [("draft_vocab_size", 600, "<= 512")], [], False, None)
    d = draft(tmp_path, "d512", config=lambda c: c.update(draft_vocab_size=600), tensors=head(512))
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert f.ops == [SetConfig(("draft_vocab_size",), 512, "lm_head rows")] and f.fixable


def test_k501_without_a_head_only_a_too_large_draft_vocab_size_is_reported(tmp_path):
    # No lm_head: no rows to compare with or to write. 600 > 512 is still reported (no op); 128 is not.
    def no_head(t):
        t.pop("lm_head.weight")
    d = draft(tmp_path, "d", config=lambda c: c.update(draft_vocab_size=600), tensors=no_head)
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f) == ("error", "draft_vocab_size 600 is larger than the target vocabulary 512",
                       [("draft_vocab_size", 600, "<= 512")], [], False, None)
    assert one_rule("K501", draft(tmp_path, "e", tensors=no_head), target=target(tmp_path)) == []


def test_k501_a_missing_draft_vocab_size_defaults_to_vocab_size(tmp_path):
    # No draft_vocab_size: the engine reads vocab_size 512 for a head of 128 rows. The config has no
    # draft_vocab_size, so the evidence observes None and the message says where 512 came from.
    d = draft(tmp_path, "d", config=drop("draft_vocab_size"))
    expected = ("error", "lm_head has 128 rows but the engine will read draft_vocab_size = 512 (defaulted from "
                "vocab_size)", [("draft_vocab_size", None, 128)],
                [SetConfig(("draft_vocab_size",), 128, "lm_head rows")], True, None)
    [f] = one_rule("K501", d)
    assert full(f) == expected
    [f] = one_rule("K501", d, target=target(tmp_path))
    assert full(f) == expected
    # a full-vocabulary head (512 rows) is what vocab_size 512 says: nothing to report
    assert one_rule("K501", draft(tmp_path, "f", config=drop("draft_vocab_size"), tensors=head(512))) == []


def test_k501_with_no_vocabulary_known_only_the_head_rows_are_compared(tmp_path):
    # No target and no vocab_size: no vocabulary bounds draft_vocab_size. 128 == the 128 rows: nothing;
    # 100 != 128: the rows win.
    assert one_rule("K501", draft(tmp_path, "a", config=drop("vocab_size"))) == []
    d = draft(tmp_path, "b", config=lambda c: (c.pop("vocab_size"), c.update(draft_vocab_size=100)))
    [f] = one_rule("K501", d)
    assert full(f) == ("error", "lm_head has 128 rows but the engine will read draft_vocab_size = 100",
                       [("draft_vocab_size", 100, 128)],
                       [SetConfig(("draft_vocab_size",), 128, "lm_head rows")], True, None)


def test_k501_the_factory_draft_agrees(tmp_path):
    # draft_vocab_size 128, lm_head 128 rows, 128 <= 512
    assert one_rule("K501", draft(tmp_path, "d"), target=target(tmp_path)) == []


# --- K502 d2t -----------------------------------------------------------------------------------------------------

def test_k502_a_pruned_head_without_d2t_is_reported_not_fixable(tmp_path):
    # 128 rows < 512 target tokens and no d2t: vLLM maps draft id i to target id i. Nothing to write it from.
    d = draft(tmp_path, "d", tensors=no_map)
    [f] = one_rule("K502", d, target=target(tmp_path))
    assert full(f) == ("error", "lm_head has 128 rows (< target vocabulary 512) but there is no d2t",
                       [("d2t", "absent", "int64 [128]")], [], False, None)
    # without a target the draft's vocab_size (512) is the vocabulary: the same finding
    assert [full(f) for f in one_rule("K502", d)] == [full(f)]
    # a target of 1000 tokens is the vocabulary when given (the draft's 512 is not read)
    [g] = one_rule("K502", d, target=target(tmp_path, 1000, "t1000"))
    assert g.message == "lm_head has 128 rows (< target vocabulary 1000) but there is no d2t"


def test_k502_no_d2t_is_right_for_a_full_head_and_unjudged_without_head_or_vocabulary(tmp_path):
    # 512 rows == 512 tokens: a full head needs no d2t; 513 rows is not fewer either (K501/K801 judge it).
    for rows in (512, 513):
        d = draft(tmp_path, f"r{rows}", tensors=lambda t, n=rows: (no_map(t), head(n)(t)))
        assert one_rule("K502", d, target=target(tmp_path)) == [], rows
    # no lm_head: no rows to compare
    d = draft(tmp_path, "nohead", tensors=lambda t: (no_map(t), t.pop("lm_head.weight")))
    assert one_rule("K502", d, target=target(tmp_path)) == []
    # no target and no vocab_size: no vocabulary to compare 128 rows with
    assert one_rule("K502", draft(tmp_path, "nov", config=drop("vocab_size"), tensors=no_map)) == []


def test_k502_a_d2t_that_is_not_a_1d_integer_tensor(tmp_path):
    # F32 [128]: not an integer tensor; I64 [128, 1]: not 1-D. The expected shape is [lm_head rows].
    d = draft(tmp_path, "f32", tensors=vmap(np.zeros(128), d2t_dtype="F32"))
    [f] = one_rule("K502", d)
    assert full(f) == ("error", "d2t is F32 [128]; expected a 1-D int64 tensor",
                       [("d2t", ["F32", [128]], ["I64", [128]])], [], False, None)
    d = draft(tmp_path, "2d", tensors=vmap(np.zeros(128), d2t_shape=(128, 1)))
    [f] = one_rule("K502", d)
    assert full(f) == ("error", "d2t is I64 [128, 1]; expected a 1-D int64 tensor",
                       [("d2t", ["I64", [128, 1]], ["I64", [128]])], [], False, None)
    # no lm_head: the rows are unknown (None)
    d = draft(tmp_path, "nohead", tensors=lambda t: (vmap(np.zeros(128), d2t_dtype="F32")(t),
                                                      t.pop("lm_head.weight")))
    [f] = one_rule("K502", d)
    assert f.evidence[0].expected == ["I64", [None]]


def test_k502_an_int32_d2t_is_read(tmp_path):
    # I32 is an integer tensor vLLM loads as well: offsets [0, 0, 0, 0] (identity) are right, nothing to report;
    # absolute-only values in I32 are still read and reported as absolute ids.
    assert one_rule("K502", draft(tmp_path, "ok", tensors=vmap([0, 0, 0, 0], d2t_dtype="I32"))) == []
    [f] = one_rule("K502", draft(tmp_path, "abs", tensors=vmap([510, 511], d2t_dtype="I32")))
    assert f.message.startswith("d2t holds absolute target ids")


def test_k502_a_d2t_of_another_length_than_the_head(tmp_path):
    # 100 entries for 128 rows
    d = draft(tmp_path, "d", tensors=vmap(np.zeros(100), rows=128))
    [f] = one_rule("K502", d)
    assert full(f) == ("error", "d2t has 100 entries but lm_head has 128 rows", [("d2t", 100, 128)], [], False,
                       None)
    # without an lm_head there is no length to compare: the (identity) offsets are judged, and are right
    d = draft(tmp_path, "nohead", tensors=lambda t: (vmap(np.zeros(100))(t), t.pop("lm_head.weight")))
    assert one_rule("K502", d) == []


def test_k502_absolute_ids_that_t2d_confirms_are_rewritten_to_offsets(tmp_path):
    # d2t [10, 20, 30, 40], V 512: offsets -> [10, 21, 32, 43], absolute -> [10, 20, 30, 40], both valid; t2d marks
    # {10, 20, 30, 40}: absolute. Evidence: the first three values, and the offsets they mean:
    # [10 - 0, 20 - 1, 30 - 2] = [10, 19, 28].
    d = draft(tmp_path, "d", tensors=vmap([10, 20, 30, 40], [10, 20, 30, 40]))
    [f] = one_rule("K502", d, target=target(tmp_path))
    assert full(f) == ("error", "d2t holds absolute target ids, engines read offsets (d2t itself equals the ids set "
                       "in t2d)", [("d2t", "d2t[:3]=[10, 20, 30]", "offsets [10, 19, 28]")],
                       [RewriteD2TOffsets("d2t", "engines read d2t as offsets")], True, None)


def test_k502_absolute_ids_that_only_fit_as_absolute(tmp_path):
    # d2t [508, 509, 510, 511], V 512, no t2d: offsets [508, 510, 512, 514] pass id 511; absolute ids are valid.
    # offsets of the first three: [508 - 0, 509 - 1, 510 - 2] = [508, 508, 508].
    d = draft(tmp_path, "d", tensors=vmap([508, 509, 510, 511]))
    [f] = one_rule("K502", d)
    assert full(f) == ("error", "d2t holds absolute target ids, engines read offsets (d2t + arange leaves the "
                       "target vocabulary or repeats ids, d2t alone does not)",
                       [("d2t", "d2t[:3]=[508, 509, 510]", "offsets [508, 508, 508]")],
                       [RewriteD2TOffsets("d2t", "engines read d2t as offsets")], True, None)
    # against a target of 1024 tokens the offsets [508, 510, 512, 514] fit too: both readings, ambiguous
    [g] = one_rule("K502", d, target=target(tmp_path, 1024))
    assert g.severity == "warning" and g.needs_decision == DECIDE


def test_k502_a_two_entry_absolute_d2t_shows_both(tmp_path):
    # d2t [510, 511], V 512: offsets [510, 512] pass 511, absolute fit. Two values only: [510 - 0, 511 - 1].
    [f] = one_rule("K502", draft(tmp_path, "d", tensors=vmap([510, 511])))
    assert [(e.where, e.observed, e.expected) for e in f.evidence] == [("d2t", "d2t[:3]=[510, 511]",
                                                                        "offsets [510, 510]")]


def test_k502_the_rewrite_names_the_d2t_as_the_files_spell_it(tmp_path):
    # every tensor under `model.`: the d2t the op rewrites is `model.d2t`
    d = draft(tmp_path, "d", tensors=prefixed(vmap([508, 509, 510, 511])))
    [f] = one_rule("K502", d)
    assert f.ops == [RewriteD2TOffsets("model.d2t", "engines read d2t as offsets")]


def test_k502_a_d2t_both_readings_fit_waits_for_the_flag(tmp_path):
    # d2t [0, 1, 3, 5], V 512, no t2d: offsets [0, 2, 5, 8], absolute [0, 1, 3, 5]: both distinct and inside.
    d = draft(tmp_path, "d", tensors=vmap([0, 1, 3, 5]))
    [f] = one_rule("K502", d, target=target(tmp_path))
    assert full(f) == ("warning", "d2t could be offsets or absolute ids (both readings give distinct ids inside "
                       "the target vocabulary); engines read offsets", [("d2t", "d2t[:3]=[0, 1, 3]", None)], [],
                       True, DECIDE)


def test_k502_the_d2t_flag_decides_the_reading(tmp_path):
    # --d2t absolute on the ambiguous [0, 1, 3, 5]: absolute ids, rewritten; offsets [0, 1 - 1, 3 - 2] = [0, 0, 1].
    d = draft(tmp_path, "d", tensors=vmap([0, 1, 3, 5]))
    [f] = one_rule("K502", d, decisions=Decisions(d2t_kind="absolute"))
    assert full(f) == ("error", "d2t holds absolute target ids, engines read offsets (decided by --d2t)",
                       [("d2t", "d2t[:3]=[0, 1, 3]", "offsets [0, 0, 1]")],
                       [RewriteD2TOffsets("d2t", "engines read d2t as offsets")], True, None)
    # --d2t offsets: the values are offsets as they are, even the absolute-only [508, 509, 510, 511]
    assert one_rule("K502", d, decisions=Decisions(d2t_kind="offsets")) == []
    e = draft(tmp_path, "e", tensors=vmap([508, 509, 510, 511]))
    assert one_rule("K502", e, decisions=Decisions(d2t_kind="offsets")) == []


def test_k502_a_d2t_neither_reading_fits_is_reported_not_fixable(tmp_path):
    # d2t [-1, 0, 600, 7], V 512: offsets [-1, 1, 602, 10], absolute [-1, 0, 600, 7]: -1 is no token either way.
    # Its values range from -1 to 600; ids are 0..511.
    d = draft(tmp_path, "d", tensors=vmap([-1, 0, 600, 7]))
    [f] = one_rule("K502", d, target=target(tmp_path))
    assert full(f) == ("error", "d2t maps outside the target vocabulary or twice to one id (neither reading gives "
                       "distinct ids inside the target vocabulary)",
                       [("d2t", "min -1, max 600", "ids within [0, 512)")], [], False, None)
    # a target of 1000 tokens bounds it instead
    [g] = one_rule("K502", d, target=target(tmp_path, 1000, "t1000"))
    assert g.evidence[0].expected == "ids within [0, 1000)"


def test_k502_the_factory_offsets_are_right(tmp_path):
    # tests/factories.py writes d2t = ids - arange for 128 sorted distinct ids of 512 and the matching t2d
    assert one_rule("K502", draft(tmp_path, "d"), target=target(tmp_path)) == []


# --- K503 t2d -----------------------------------------------------------------------------------------------------

# d2t [0, 4, 7, 508] as offsets maps draft ids 0..3 to [0, 5, 9, 511] (id 0 and the last id 511 included);
# read as absolute ids it is [0, 4, 7, 508]: both fit, so without a t2d it is ambiguous and K503 checks offsets.
D2T = [0, 4, 7, 508]
IDS = [0, 5, 9, 511]


def test_k503_a_t2d_marking_exactly_the_mapped_ids_is_right(tmp_path):
    assert one_rule("K503", draft(tmp_path, "d", tensors=vmap(D2T, IDS)), target=target(tmp_path)) == []
    assert one_rule("K503", draft(tmp_path, "f"), target=target(tmp_path)) == []  # the factory's own pair


def test_k503_a_t2d_over_another_vocabulary_is_rebuilt(tmp_path):
    # t2d [500] for a 512-token vocabulary
    d = draft(tmp_path, "d", tensors=vmap(D2T, [0, 5, 9], V=500))
    [f] = one_rule("K503", d, target=target(tmp_path))
    assert full(f) == ("error", "t2d has shape [500]; the target vocabulary is 512", [("t2d", [500], [512])],
                       [RebuildT2D("t2d", "d2t", 512, REBUILD_WHY)], True, None)
    # the factory's t2d [512] against a target of 1024 tokens: rebuilt over 1024
    [f] = one_rule("K503", draft(tmp_path, "f"), target=target(tmp_path, 1024, "t1024"))
    assert full(f) == ("error", "t2d has shape [512]; the target vocabulary is 1024", [("t2d", [512], [1024])],
                       [RebuildT2D("t2d", "d2t", 1024, REBUILD_WHY)], True, None)


def test_k503_a_2d_t2d_is_not_a_mask_over_the_vocabulary(tmp_path):
    # [512, 1]: 512 rows, but not 1-D
    d = draft(tmp_path, "d", tensors=vmap(D2T, IDS, t2d_shape=(512, 1)))
    [f] = one_rule("K503", d, target=target(tmp_path))
    assert full(f) == ("error", "t2d has shape [512, 1]; the target vocabulary is 512", [("t2d", [512, 1], [512])],
                       [RebuildT2D("t2d", "d2t", 512, REBUILD_WHY)], True, None)


def test_k503_the_rebuild_names_both_tensors_as_the_files_spell_them(tmp_path):
    d = draft(tmp_path, "d", tensors=prefixed(vmap(D2T, [0, 5, 9], V=500)))
    [f] = one_rule("K503", d, target=target(tmp_path))
    assert f.ops == [RebuildT2D("model.t2d", "model.d2t", 512, REBUILD_WHY)]


def test_k503_a_t2d_marking_other_ids_is_a_warning(tmp_path):
    # one id too many: 5 marked for 4 draft ids
    [f] = one_rule("K503", draft(tmp_path, "more", tensors=vmap(D2T, IDS + [100])), target=target(tmp_path))
    assert full(f) == ("warning", "t2d marks 5 ids that disagree with the 4 ids d2t maps to",
                       [("t2d", "5 ids set", "4")], [RebuildT2D("t2d", "d2t", 512, REBUILD_WHY)], True, None)
    # as many ids, but 510 marked instead of 511
    [f] = one_rule("K503", draft(tmp_path, "moved", tensors=vmap(D2T, [0, 5, 9, 510])), target=target(tmp_path))
    assert full(f) == ("warning", "t2d marks 4 ids that disagree with the 4 ids d2t maps to",
                       [("t2d", "4 ids set", "4")], [RebuildT2D("t2d", "d2t", 512, REBUILD_WHY)], True, None)


def test_k503_ids_d2t_maps_outside_the_vocabulary_disagree_with_any_t2d(tmp_path):
    # d2t [0, 0, 7, 509]: offsets [0, 1, 9, 512], absolute [0, 0, 7, 509] (0 twice): neither reading fits, and K503
    # reads it as offsets: 512 is past id 511 (the last id), so no mask over 512 ids can mark it, even one marking
    # 4 ids {0, 1, 9, 511} as the 4 draft ids need.
    [f] = one_rule("K503", draft(tmp_path, "hi", tensors=vmap([0, 0, 7, 509], [0, 1, 9, 511])), target=target(tmp_path))
    assert full(f)[:3] == ("warning", "t2d marks 4 ids that disagree with the 4 ids d2t maps to",
                           [("t2d", "4 ids set", "4")])
    # --d2t offsets on [0, 4, 7, 509] (offsets [0, 5, 9, 512]): the same id 512, past the vocabulary
    d = draft(tmp_path, "hi2", tensors=vmap([0, 4, 7, 509], IDS))
    [f] = one_rule("K503", d, target=target(tmp_path), decisions=Decisions(d2t_kind="offsets"))
    assert f.message == "t2d marks 4 ids that disagree with the 4 ids d2t maps to"
    # d2t [-1, 4, 7, 508]: offsets [-1, 5, 9, 511]; -1 is no token (even though t2d[511], NumPy's t2d[-1], is set)
    [f] = one_rule("K503", draft(tmp_path, "lo", tensors=vmap([-1, 4, 7, 508], IDS)), target=target(tmp_path))
    assert full(f)[:3] == ("warning", "t2d marks 4 ids that disagree with the 4 ids d2t maps to",
                           [("t2d", "4 ids set", "4")])


def test_k503_absolute_ids_are_compared_as_absolute(tmp_path):
    # d2t [508, 509, 510, 511] can only be absolute ids (offsets pass 511): a t2d marking {508..511} agrees
    d = draft(tmp_path, "d", tensors=vmap([508, 509, 510, 511], [508, 509, 510, 511]))
    assert one_rule("K503", d, target=target(tmp_path)) == []
    # --d2t offsets says they are offsets: [508, 510, 512, 514], which no t2d over 512 ids can mark
    [f] = one_rule("K503", d, target=target(tmp_path), decisions=Decisions(d2t_kind="offsets"))
    assert f.message == "t2d marks 4 ids that disagree with the 4 ids d2t maps to"


def test_k503_the_d2t_flag_decides_which_ids_t2d_must_mark(tmp_path):
    # D2T read as offsets is [0, 5, 9, 511]; a t2d marking D2T itself ({0, 4, 7, 508}) disagrees, unless
    # --d2t absolute says the values are the ids.
    d = draft(tmp_path, "d", tensors=vmap(D2T, D2T))
    [f] = one_rule("K503", d, target=target(tmp_path))
    assert f.message == "t2d marks 4 ids that disagree with the 4 ids d2t maps to"
    assert one_rule("K503", d, target=target(tmp_path), decisions=Decisions(d2t_kind="absolute")) == []


def test_k503_an_empty_d2t_and_an_empty_t2d_agree(tmp_path):
    # a head of 0 rows, d2t [] and a t2d over 512 ids marking none: 0 ids marked for 0 draft ids
    d = draft(tmp_path, "d", tensors=vmap([], []))
    assert one_rule("K503", d, target=target(tmp_path)) == []
    # one id marked for no draft id
    [f] = one_rule("K503", draft(tmp_path, "e", tensors=vmap([], [3])), target=target(tmp_path))
    assert f.message == "t2d marks 1 ids that disagree with the 0 ids d2t maps to"


def test_k503_says_nothing_when_either_map_cannot_be_decoded(tmp_path, monkeypatch):
    # A map stored as F8_E4M3 (a safetensors dtype of 1 byte an element, safetensors' format spec) has no NumPy
    # dtype to decode it into: its values cannot be read (K005 reports that), so K503 compares nothing. A t2d of
    # the right shape [512] and a d2t of 4 entries, each in turn undecodable.
    import tests.writer_factories as wf

    monkeypatch.setitem(wf.SIZES, "F8_E4M3", 1)

    def f8(name: str, n: int):
        def mut(t):
            vmap(D2T, IDS)(t)
            t[name] = ("F8_E4M3", (n,), bytes(n))
        return mut
    assert one_rule("K503", draft(tmp_path, "d2t", tensors=f8("d2t", 4)), target=target(tmp_path)) == []
    assert one_rule("K503", draft(tmp_path, "t2d", tensors=f8("t2d", 512)), target=target(tmp_path)) == []


def test_k503_needs_both_maps_and_a_vocabulary(tmp_path):
    # no t2d; no d2t; no target and no vocab_size: nothing to compare
    assert one_rule("K503", draft(tmp_path, "a", tensors=vmap(D2T)), target=target(tmp_path)) == []
    assert one_rule("K503", draft(tmp_path, "b", tensors=lambda t: t.pop("d2t")), target=target(tmp_path)) == []
    assert one_rule("K503", draft(tmp_path, "c", config=drop("vocab_size"), tensors=vmap(D2T, [0, 5, 9], V=500))) == []
    # without a target the draft's vocab_size 512 is the vocabulary
    [f] = one_rule("K503", draft(tmp_path, "e", tensors=vmap(D2T, [0, 5, 9], V=500)))
    assert f.message == "t2d has shape [500]; the target vocabulary is 512"


# --- K504 vocab-size ----------------------------------------------------------------------------------------------

def test_k504_a_vocab_size_copied_from_another_model_is_set_to_the_targets(tmp_path):
    # vocab_size 1000 in the draft, 512 in the target
    d = draft(tmp_path, "d", config=lambda c: c.update(vocab_size=1000))
    [f] = one_rule("K504", d, target=target(tmp_path))
    assert full(f) == ("warning", "vocab_size 1000 != the target's 512", [("vocab_size", 1000, 512)],
                       [SetConfig(("vocab_size",), 512, "target vocabulary")], True, None)


def test_k504_in_the_speculators_format_vocab_size_is_set_in_the_layer_config(tmp_path):
    # speculators nests the layer config under transformer_layer_config: vocab_size 512 there vs a target of 1000
    d = draft(tmp_path, "d", "speculators")
    [f] = one_rule("K504", d, target=target(tmp_path, 1000))
    assert full(f) == ("warning", "vocab_size 512 != the target's 1000", [("vocab_size", 512, 1000)],
                       [SetConfig(("transformer_layer_config", "vocab_size"), 1000, "target vocabulary")], True,
                       None)


def test_k504_nothing_to_compare_without_a_target_or_a_vocab_size_and_nothing_when_equal(tmp_path):
    d = draft(tmp_path, "d", config=lambda c: c.update(vocab_size=1000))
    assert one_rule("K504", d) == []  # no target
    assert one_rule("K504", draft(tmp_path, "e", config=drop("vocab_size")), target=target(tmp_path)) == []
    assert one_rule("K504", draft(tmp_path, "f"), target=target(tmp_path)) == []  # 512 == 512
