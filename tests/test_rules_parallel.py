"""K304 and its arithmetic (kconvert/rules/attention.py) against vLLM 0.32's own code and hand-derived TP arithmetic.

Outside facts, read in the installed vLLM 0.32 CPU build:
- config/speculative.py `_verify_and_get_draft_tp` (lines 1712-1743): an unset draft TP becomes the target's
  `tensor_parallel_size`; a set one must be 1 or the target's, else
  ValueError(f"{speculative_draft_tensor_parallel_size=} cannot be other value than 1 or target model
  tensor_parallel_size").
- config/model.py `verify_with_parallel_config` (lines 1544-1551): ValueError("Total number of attention heads
  ({heads}) must be divisible by tensor parallel size ({tp}).").
- model_executor/layers/linear.py QKVParallelLinear (lines 1053-1057): `tp_size >= total_num_kv_heads` gives
  `divide(tp_size, total_num_kv_heads)` replicas, else `divide(total_num_kv_heads, tp_size)` heads per rank;
  vllm/distributed/utils.py `divide` asserts the division is exact.
- model_executor/layers/vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE = 64 (line 36) and
  `pad_vocab_size` = ((v + 63) // 64) * 64 (line 97).
Every figure below (remainders, padded rows, rows per rank, replicas) is derived by hand in a comment.

Engine-free; the direct calls take microseconds, the inspect() calls on the tiny draft well under a second."""
from __future__ import annotations

import pytest

from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from kconvert.rules.attention import (SplitProblem, draft_tp_in_effect, draft_tp_problem, head_problems,
                                     vocab_problem)
from tests.factories import make_draft

VLLM_DRAFT_TP = ("speculative_draft_tensor_parallel_size={n} cannot be other value than 1 or target model "
                 "tensor_parallel_size")  # config/speculative.py:1740-1741, with f"{x=}" spelled out


def test_the_draft_tp_in_effect_is_the_targets_unless_one_is_given():
    # _verify_and_get_draft_tp: None -> target_parallel_config.tensor_parallel_size; a given value is kept
    assert draft_tp_in_effect(8, None) == 8
    assert draft_tp_in_effect(8, 1) == 1
    assert draft_tp_in_effect(8, 8) == 8


def test_a_draft_tp_of_one_or_the_targets_is_accepted():
    assert draft_tp_problem(8, None) is None
    assert draft_tp_problem(8, 1) is None
    assert draft_tp_problem(8, 8) is None
    assert draft_tp_problem(1, None) is None
    assert draft_tp_problem(1, 1) is None


@pytest.mark.parametrize("tp,draft_tp", [(0, None), (-2, None), (8, 0), (8, -1), (0, 0)])
def test_sizes_below_one_are_refused(tp, draft_tp):
    assert draft_tp_problem(tp, draft_tp) == "tensor-parallel sizes must be at least 1"


def test_another_draft_tp_is_refused_in_vllms_words():
    # 2 and 4 are neither 1 nor the target's 8
    for n in (2, 4):
        assert draft_tp_problem(8, n) == (
            f"draft_tensor_parallel_size {n} with tensor_parallel_size 8: vLLM accepts only 1 or the target's TP "
            f"('{VLLM_DRAFT_TP.format(n=n)}')")


def test_one_rank_splits_nothing():
    # heads 3, kv 3 would not divide by 2; at TP 1 (and 0) nothing is split
    assert head_problems("draft", 3, 3, 1, mla=False) == []
    assert head_problems("draft", 3, 3, 0, mla=False) == []
    # at TP 1 not even a count no split rule understands is judged (a broken config's -1 KV heads: 1 % -1 == 0
    # would otherwise read as "replicated on -1 ranks")
    assert head_problems("draft", 2, -1, 1, mla=False) == []
    assert vocab_problem(100, 1) is None


def test_heads_that_divide_and_kv_heads_that_divide_say_nothing():
    # Kimi-shaped draft: 64 heads / 8 = 8 per rank, 8 KV heads / 8 = 1 per rank (tests/factories.py KIMI)
    assert head_problems("draft", 64, 8, 8, mla=False) == []
    # KV heads equal to the TP: tp_size >= total_num_kv_heads, divide(8, 8) = 1 replica: nothing to say
    assert head_problems("draft", 8, 8, 8, mla=False) == []
    # KV heads above the TP that divide: 16 / 4 = 4 per rank
    assert head_problems("draft", 16, 16, 4, mla=False) == []
    # absent counts are not judged
    assert head_problems("draft", None, None, 8, mla=False) == []


def test_heads_that_do_not_divide_are_fatal_in_vllms_words():
    # 6 % 4 = 2: config/model.py raises; KV 2 < 4 and 4 % 2 = 0: replicated on 4 // 2 = 2 ranks (not fatal)
    assert head_problems("target", 6, 2, 4, mla=False) == [
        SplitProblem("target.num_attention_heads", 6, 4, True,
                     "target's 6 attention heads do not divide by TP 4: vLLM refuses to start ('Total number of "
                     "attention heads (6) must be divisible by tensor parallel size (4)')"),
        SplitProblem("target.num_key_value_heads", 2, 4, False,
                     "target's 2 KV heads are fewer than TP 4: vLLM replicates each on 2 ranks (loads and runs; "
                     "KV-cache memory per rank as for 2x the heads)"),
    ]


def test_kv_heads_above_the_tp_that_do_not_divide_crash_loading():
    # 12 heads / 4 = 3 per rank; 6 KV heads >= 4 and 6 % 4 = 2: divide(6, 4) asserts in QKVParallelLinear
    assert head_problems("draft", 12, 6, 4, mla=False) == [
        SplitProblem("draft.num_key_value_heads", 6, 4, True,
                     "draft's 6 KV heads do not divide by TP 4: vLLM's QKVParallelLinear asserts num_kv_heads % tp "
                     "== 0 while loading (the engine crashes at start)")]


def test_kv_heads_below_the_tp_that_do_not_divide_it_crash_loading():
    # 8 heads / 8 = 1 per rank; 3 KV heads < 8 and 8 % 3 = 2: divide(8, 3) asserts
    assert head_problems("draft", 8, 3, 8, mla=False) == [
        SplitProblem("draft.num_key_value_heads", 3, 8, True,
                     "draft's 3 KV heads cannot be replicated evenly over TP 8: vLLM asserts tp % num_kv_heads == 0 "
                     "while loading (the engine crashes at start)")]


def test_mla_kv_heads_are_never_judged():
    # config/model.py get_num_kv_heads: MLA decodes as MQA, one latent head per rank whatever the count
    assert head_problems("draft", 8, 3, 8, mla=True) == []
    # the attention heads still have to divide: 6 % 4 = 2
    assert [p.where for p in head_problems("draft", 6, 3, 4, mla=True)] == ["draft.num_attention_heads"]


def test_a_draft_vocab_that_divides_says_nothing():
    # 32000 / 8 = 4000 rows per rank (AQ-MedAI/Kimi-K25-eagle3's draft vocab at TP 8)
    assert vocab_problem(32000, 8) is None
    assert vocab_problem(None, 8) is None
    assert vocab_problem(0, 8) is None


def test_a_draft_vocab_that_does_not_divide_is_padded_to_64():
    # 100 % 8 = 4; pad_vocab_size(100) = ((100 + 63) // 64) * 64 = 128, and 128 / 8 = 16 rows per rank
    assert vocab_problem(100, 8) == SplitProblem(
        "draft_vocab_size", 100, 8, False,
        "draft_vocab_size 100 does not divide by TP 8: vLLM pads the vocab-parallel lm_head to 128 rows (16 per "
        "rank) and drops the padding from the logits before d2t maps them (loads and runs)")
    # 32001 % 2 = 1; ((32001 + 63) // 64) * 64 = 32064 (501 * 64), 32064 / 2 = 16032
    p = vocab_problem(32001, 2)
    assert p is not None and "32064 rows (16032 per rank)" in p.message


def test_a_draft_vocab_whose_padding_does_not_divide_either_fails_to_load():
    # 32000 % 3 = 2 and 32000 is already 500 * 64, so pad_vocab_size leaves it; VocabParallelEmbedding then calls
    # divide(32000, 3), whose ensure_divisibility asserts "32000 is not divisible by 3" (vLLM 0.32
    # vocab_parallel_embedding.py, vllm/distributed/utils.py). At TP 6: 32000 % 6 = 2, the same assertion.
    assert vocab_problem(32000, 3) == SplitProblem(
        "draft_vocab_size", 32000, 3, True,
        "draft_vocab_size 32000 does not divide by TP 3, nor does its padding to 32000 rows: vLLM's vocab-parallel "
        "lm_head fails to load ('32000 is not divisible by 3')")
    p = vocab_problem(32000, 6)
    assert p is not None and p.fatal and "'32000 is not divisible by 6'" in p.message
    # 100 -> 128 rows at TP 3: 128 % 3 = 2, refused too, although 128 divides by every TP up to 64 that is a power
    # of 2
    assert vocab_problem(100, 3).fatal and not vocab_problem(100, 64).fatal


def _k304(folder, **decisions):
    return [f for f in inspect(str(folder), decisions=Decisions(**decisions)).findings if f.id == "K304"]


def test_k304_says_nothing_without_a_tp_or_below_one(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")  # tiny: 2 heads, 1 KV head, draft vocab 128
    assert _k304(d) == []
    assert _k304(d, tp=0) == []
    assert _k304(d, tp=-1) == []


def test_k304_refuses_a_draft_tp_and_names_what_was_given(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    (f,) = _k304(d, tp=8, draft_tp=2)
    assert f.severity == "error" and not f.fixable and f.ops == []
    assert f.message == (f"draft_tensor_parallel_size 2 with tensor_parallel_size 8: vLLM accepts only 1 or the "
                         f"target's TP ('{VLLM_DRAFT_TP.format(n=2)}')")
    assert [e.to_dict() for e in f.evidence] == [{"where": "--draft-tp", "observed": 2, "expected": [1, 8]}]


def test_k304_splits_the_draft_at_the_draft_tp_in_effect(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(num_attention_heads=8,
                                                                         num_key_value_heads=2))
    # TP 8 for the target, the draft at TP 8 by default: 8 heads / 8 = 1; 2 KV heads < 8, 8 % 2 = 0 -> replicated
    # on 8 // 2 = 4 ranks (info); draft vocab 128 / 8 = 16 (divides)
    (f,) = _k304(d, tp=8)
    assert f.severity == "info" and not f.fixable
    assert f.message == ("draft's 2 KV heads are fewer than TP 8: vLLM replicates each on 4 ranks (loads and runs; "
                         "KV-cache memory per rank as for 4x the heads)")
    assert [e.to_dict() for e in f.evidence] == [
        {"where": "draft.num_key_value_heads", "observed": 2, "expected": "divisible by draft TP 8"}]
    # the draft kept on one rank: nothing splits
    assert _k304(d, tp=8, draft_tp=1) == []


def test_k304_reports_heads_and_vocab_in_order_with_their_severities(tmp_path):
    # 6 heads, 6 KV heads, draft vocab 100 at TP 4: 6 % 4 = 2 (fatal), 6 >= 4 and 6 % 4 = 2 (fatal),
    # 100 % 4 = 0 -> vocab fine; so the vocab case uses draft_vocab_size 90: 90 % 4 = 2, padded 128, 32 per rank
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(
        num_attention_heads=6, num_key_value_heads=6, draft_vocab_size=90))
    fs = _k304(d, tp=4)
    assert [(f.severity, f.evidence[0].where, f.evidence[0].observed) for f in fs] == [
        ("error", "draft.num_attention_heads", 6), ("error", "draft.num_key_value_heads", 6),
        ("info", "draft_vocab_size", 90)]
    assert fs[2].message == ("draft_vocab_size 90 does not divide by TP 4: vLLM pads the vocab-parallel lm_head to "
                             "128 rows (32 per rank) and drops the padding from the logits before d2t maps them "
                             "(loads and runs)")
    assert all(not f.fixable and f.ops == [] for f in fs)


def test_k304_judges_the_full_vocab_when_no_draft_vocab_is_declared(tmp_path):
    # no draft_vocab_size: vLLM's draft_vocab_size defaults to vocab_size (docs/formats-and-engines.md#vllm-032-loading-rules); the tiny
    # target vocab 512 / 8 = 64 divides, 500 % 8 = 4 does not: padded ((500 + 63) // 64) * 64 = 512, 64 per rank
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: (c.pop("draft_vocab_size"),
                                                                  c.update(vocab_size=500, num_attention_heads=8,
                                                                           num_key_value_heads=8)))
    (f,) = _k304(d, tp=8)
    assert f.evidence[0].where == "draft_vocab_size" and f.evidence[0].observed == 500
    assert "pads the vocab-parallel lm_head to 512 rows (64 per rank)" in f.message


def test_k304_on_an_mla_draft_does_not_judge_its_kv_heads(tmp_path):
    # an MLA draft (torchspec, family mla) with 8 heads and 3 KV heads at TP 8: 8 / 8 = 1; KV heads not judged
    d = make_draft(tmp_path / "d", "torchspec", family="mla", config=lambda c: c.update(
        num_attention_heads=8, num_key_value_heads=3))
    assert _k304(d, tp=8) == []
