"""kconvert/rules/vocab_mapping.py's d2t reading (classify_d2t) and target vocabulary (target_vocab), against facts outside
kconvert:

- vLLM and SGLang read d2t as offsets: target id = draft id + d2t[draft id] (vLLM 0.32, the CPU build in .venv:
  vllm/model_executor/models/llama_eagle3.py:428-429 loads `d2t` as `draft_id_to_target_id`, and :385-386
  `targets = torch.arange(draft_vocab_size) + self.draft_id_to_target_id`; docs/formats-and-engines.md
  sections 1 and 5); t2d is a boolean mask over the target vocabulary marking the ids d2t maps to; a target
  vocabulary of V tokens has ids 0..V-1.
- The shipped examples (examples/build/package.py, written with torch, not kconvert): examples/tiny/drafts/
  mla-torchspec holds d2t offsets with its t2d; examples/tiny/broken/d2t-absolute is the same draft with
  `d2t + torch.arange(len(d2t))` (package.py step 2: absolute ids). Read here with the safetensors library.
- The reasons are the words K502 prints after "d2t holds absolute target ids, engines read offsets (...)" and
  "d2t could be offsets or absolute ids (...)" (kconvert/rules/vocab_mapping.py d2t_rule), what a user reads.

Each expected value is worked out by hand in a comment from the arrays written here. Engine-free, milliseconds.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import safe_open

from kconvert.commands.inspect import inspect
from kconvert.rules.vocab_mapping import classify_d2t
from tests.factories import make_draft, make_target

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
