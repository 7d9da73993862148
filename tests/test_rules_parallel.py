"""K302 and K304 (kconvert/rules/attention.py) against vLLM 0.32's own code and hand-derived shape and TP arithmetic.

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
- K302, vllm/model_executor/models/ of the same build:
  - llama.py LlamaAttention (lines 158-161): `head_dim = getattr(config, "head_dim", None) or hidden_size //
    total_num_heads`; q is heads x head_dim rows, k/v num_kv_heads x head_dim rows; o_proj maps heads x head_dim back
    to hidden (a torch Linear weight is [out, in], so o is [hidden, heads x head_dim]).
  - llama_eagle3.py:82 and deepseek_eagle3.py:82: layer 0 takes 2 x hidden inputs, every later layer hidden (vLLM PR
    #26164).
  - qwen3.py:153-154: q_norm and k_norm are RMSNorm(head_dim).
  - deepseek_v2.py DeepseekV2MLAAttention (lines 1033, 1051-1111): qk_head_dim = qk_nope + qk_rope; q_a_proj
    [q_lora_rank, in], q_b_proj [heads x qk_head_dim, q_lora_rank] (q_proj [heads x qk_head_dim, in] without
    q_lora_rank), kv_a_proj_with_mqa [kv_lora_rank + qk_rope, in], kv_b_proj [heads x (qk_nope + v_head), kv_lora],
    o_proj [hidden, heads x v_head]; `in` is 2 x hidden for layer 0 (deepseek_eagle3.py:82).
  - docs/rules.md K302: fix sets head_dim from q_proj rows / heads; other mismatches are not fixable. MLA cache dims
    (kv_lora_rank, qk_rope_head_dim) other than the target's are a warning (the engine shares one MLA cache layout).
  The tiny draft (tests/factories.py TINY): hidden 64, 2 heads, 1 KV head, head_dim 32, so q [64, 128], k/v [32, 128],
  o [64, 64]; MLA: q_lora 32, kv_lora 64, rope 16, nope 16, v_head 16. Kimi-K2.5's MLA ranks (kv_lora_rank 512,
  qk_rope_head_dim 64) are its config.json's (kconvert/targets/profiles/kimi-k2.5.json).
Every figure below (remainders, padded rows, rows per rank, replicas, shapes) is derived by hand in a comment.

Engine-free; the direct calls take microseconds, the inspect() and read_draft calls on the tiny draft well under a
second."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from kconvert.rules.attention import (SplitProblem, draft_tp_in_effect, draft_tp_problem, head_problems,
                                     vocab_problem)
from kconvert.targets import load_profile, load_target
from kconvert.writer.ops import SetConfig
from tests.factories import TINY, layers, make_draft, make_target, one_rule, read_folder

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


# --- K302 attention_shapes: every finding in full, called directly on a read draft ------------------------------

H = TINY.hidden  # 64
Q = "layers.0.self_attn.q_proj.weight"
O = "layers.0.self_attn.o_proj.weight"


def _k302(tmp_path, producer="specforge", *, target=None, name="d", **kw):
    return one_rule("K302", read_folder(make_draft(tmp_path / name, producer, **kw)), target=target)


def _w(*shape):
    return ("BF16", shape, np.zeros(shape, np.float32))


def _set(**tensors):
    """A `tensors=` edit: give canonical-named tensors new shapes under the name the files use (`midlayer.` for
    `layers.0.` in SpecForge/TorchSpec files), or add them; None removes one."""
    def mut(t):
        for n, shape in tensors.items():
            raw = [k for k in t if k.replace("midlayer.", "layers.0.") == n]
            assert raw or shape is not None, f"no {n} to remove"
            for k in raw:
                del t[k]
            if shape is not None:
                t[raw[0] if raw else n] = _w(*shape)
    return mut


def _full(f):
    """What `kconvert inspect` prints of a finding, as plain data."""
    return (f.id, f.severity, f.message, [e.to_dict() for e in f.evidence], f.ops, f.fixable)


def _ev(where, observed, expected):
    return {"where": where, "observed": observed, "expected": expected}


def _heads3(c):
    # 3 heads of 32 (q [96, 128], o [64, 96]) over hidden 64: 64 // 3 = 21 is not the head_dim, 96 % 3 = 0 rows
    # divide, 128 % 3 = 2 inputs do not
    c.update(num_attention_heads=3)


HEADS3 = dict(config=_heads3, tensors=_set(**{Q: (96, 128), O: (64, 96)}))


def test_k302_says_nothing_of_consistent_llama_drafts(tmp_path):
    # the factory's tiny draft: q 2 x 32 = 64 rows of 2 x 64 = 128 inputs, k 1 x 32 = 32 rows, o [64, 2 x 32 = 64]
    assert _k302(tmp_path) == []
    # 3 heads of 32: q 96 rows (96 % 3 = 0, although its 128 inputs do not divide by 3), o [64, 96]
    assert _k302(tmp_path, name="h3", **HEADS3) == []
    # the same layout through the speculators format (layer config nested under transformer_layer_config)
    assert _k302(tmp_path, "speculators", name="spec") == []


def test_k302_skips_what_it_cannot_judge(tmp_path):
    # no q_proj, no heads, or no hidden size (neither hidden_size nor fc): nothing to derive head_dim from
    assert _k302(tmp_path, name="noq", tensors=_set(**{Q: None})) == []
    assert _k302(tmp_path, name="noheads", config=lambda c: c.pop("num_attention_heads")) == []
    assert _k302(tmp_path, name="noH", config=lambda c: c.pop("hidden_size"), tensors=_set(**{"fc.weight": None})) == []
    # absent k_proj and o_proj are K202's to report, not shapes to compare
    assert _k302(tmp_path, name="nok", tensors=_set(**{"layers.0.self_attn.k_proj.weight": None, O: None})) == []


def test_k302_q_rows_that_do_not_split_into_heads_are_the_only_finding(tmp_path):
    # 3 heads over the tiny q [64, 128]: 64 % 3 = 1; the rule stops there (no head_dim to derive the rest from),
    # although o [64, 64] is not [64, 3 x 21] either
    (f,) = _k302(tmp_path, config=_heads3)
    assert _full(f) == ("K302", "error", "q_proj has 64 rows, not a multiple of 3 heads",
                        [_ev(Q, [64, 128], None)], [], False)


def test_k302_missing_head_dim_is_derived_from_q_rows_and_set(tmp_path):
    # 3 heads, head_dim not set: vLLM takes 64 // 3 = 21; q's 96 rows / 3 heads = 32 (the trained head_dim)
    (f,) = _k302(tmp_path, config=lambda c: (_heads3(c), c.pop("head_dim")), tensors=HEADS3["tensors"])
    assert _full(f) == (
        "K302", "error",
        "q_proj implies head_dim 32 but the config gives 21 (hidden 64 / 3 heads: head_dim is not set)",
        [_ev("head_dim", None, 32)], [SetConfig(("head_dim",), 32, "q_proj rows / num_attention_heads")], True)


def test_k302_a_wrong_head_dim_is_set_where_the_format_keeps_it(tmp_path):
    # head_dim 16 declared, q 64 rows / 2 heads = 32: no "(hidden ... not set)" note since the config gives one;
    # speculators keeps head_dim under transformer_layer_config (docs/formats-and-engines.md), so fix writes it there
    (f,) = _k302(tmp_path, "speculators", config=lambda c: c["transformer_layer_config"].update(head_dim=16))
    assert _full(f) == ("K302", "error", "q_proj implies head_dim 32 but the config gives 16",
                        [_ev("head_dim", 16, 32)],
                        [SetConfig(("transformer_layer_config", "head_dim"), 32, "q_proj rows / num_attention_heads")],
                        True)


def test_k302_q_inputs_other_than_twice_hidden(tmp_path):
    # q [64, 192]: layer 0 takes 2 x 64 = 128 inputs (the embedding and the fc output concatenated)
    (f,) = _k302(tmp_path, tensors=_set(**{Q: (64, 192)}))
    assert _full(f) == ("K302", "error", "q_proj takes 192 inputs; an EAGLE-3 layer takes 2 x hidden = 128",
                        [_ev(Q, [64, 192], [64, 128])], [], False)


def test_k302_k_rows_against_the_kv_heads(tmp_path):
    # 2 KV heads declared over k's 32 rows: 2 x 32 = 64; the rows say 32 // 32 = 1 KV head
    (f,) = _k302(tmp_path, config=lambda c: c.update(num_key_value_heads=2))
    assert _full(f) == ("K302", "error", "k_proj has 32 rows; 2 kv heads x head_dim 32 = 64",
                        [_ev("num_key_value_heads", 2, 1)], [], False)
    # no num_key_value_heads: vLLM takes the 2 attention heads (MHA), 2 x 32 = 64 against 32 rows
    (f,) = _k302(tmp_path, name="nokv", config=lambda c: c.pop("num_key_value_heads"))
    assert _full(f) == ("K302", "error", "k_proj has 32 rows; 2 kv heads x head_dim 32 = 64",
                        [_ev("num_key_value_heads", None, 1)], [], False)
    # k 80 rows with 1 KV head: 80 != 32, and the rows give 80 // 32 = 2 whole heads (2.5 is no head count)
    (f,) = _k302(tmp_path, name="k80", tensors=_set(**{"layers.0.self_attn.k_proj.weight": (80, 128)}))
    assert _full(f) == ("K302", "error", "k_proj has 80 rows; 1 kv heads x head_dim 32 = 32",
                        [_ev("num_key_value_heads", 1, 2)], [], False)


def test_k302_o_proj_against_heads_times_head_dim(tmp_path):
    # o [64, 128]: 2 heads x 32 = 64 columns back to hidden 64 -> [64, 64]
    (f,) = _k302(tmp_path, tensors=_set(**{O: (64, 128)}))
    assert _full(f) == ("K302", "error", "o_proj is [64, 128], expected [64, 64]",
                        [_ev(O, [64, 128], [64, 64])], [], False)


def test_k302_reports_head_dim_q_k_and_o_together_in_order(tmp_path):
    # q [128, 192] with 2 heads and head_dim 32 declared: 128 / 2 = 64 (head_dim), 192 != 128 (inputs),
    # k 32 rows != 1 x 64, o [64, 64] != [64, 2 x 64 = 128]
    fs = _k302(tmp_path, tensors=_set(**{Q: (128, 192)}))
    assert [_full(f) for f in fs] == [
        ("K302", "error", "q_proj implies head_dim 64 but the config gives 32", [_ev("head_dim", 32, 64)],
         [SetConfig(("head_dim",), 64, "q_proj rows / num_attention_heads")], True),
        ("K302", "error", "q_proj takes 192 inputs; an EAGLE-3 layer takes 2 x hidden = 128",
         [_ev(Q, [128, 192], [128, 128])], [], False),
        ("K302", "error", "k_proj has 32 rows; 1 kv heads x head_dim 64 = 64", [_ev("num_key_value_heads", 1, 0)],
         [], False),
        ("K302", "error", "o_proj is [64, 64], expected [64, 128]", [_ev(O, [64, 64], [64, 128])], [], False),
    ]


def test_k302_q_of_no_rows_gives_head_dim_zero_and_no_kv_head_count(tmp_path):
    # q [0, 128]: 0 % 2 = 0 rows per head, so head_dim 0 against the declared 32; k 32 rows != 1 x 0 and no head
    # count follows from a head_dim of 0; o [64, 64] != [64, 2 x 0]
    fs = _k302(tmp_path, tensors=_set(**{Q: (0, 128)}))
    assert [_full(f) for f in fs] == [
        ("K302", "error", "q_proj implies head_dim 0 but the config gives 32", [_ev("head_dim", 32, 0)],
         [SetConfig(("head_dim",), 0, "q_proj rows / num_attention_heads")], True),
        ("K302", "error", "k_proj has 32 rows; 1 kv heads x head_dim 0 = 0", [_ev("num_key_value_heads", 1, None)],
         [], False),
        ("K302", "error", "o_proj is [64, 64], expected [64, 0]", [_ev(O, [64, 64], [64, 0])], [], False),
    ]


def _qwen3(q0=32, k0=32, q1=32, k1=32):
    """Layers 0 and 1 of a Qwen3 draft, each with q_norm/k_norm of the given lengths (head_dim 32 is right)."""
    def mut(t):
        layers((1, True))(t)
        for i, (q, k) in enumerate(((q0, k0), (q1, k1))):
            t[f"layers.{i}.self_attn.q_norm.weight"] = ("BF16", (q,), np.ones(q, np.float32))
            t[f"layers.{i}.self_attn.k_norm.weight"] = ("BF16", (k,), np.ones(k, np.float32))
    return mut


def test_k302_qwen3_per_head_norms_are_head_dim_long(tmp_path):
    two = lambda c: c.update(num_hidden_layers=2)  # noqa: E731
    # both layers' q_norm/k_norm [32] = [head_dim]: a consistent Qwen3 draft (the tensors make it qwen3)
    assert _k302(tmp_path, config=two, tensors=_qwen3()) == []
    # layer 0's k_norm [64] and layer 1's q_norm [16]: reported layer by layer, q before k
    fs = _k302(tmp_path, name="bad", config=two, tensors=_qwen3(k0=64, q1=16))
    assert [_full(f) for f in fs] == [
        ("K302", "error", "layers.0.self_attn.k_norm.weight is [64]; a Qwen3 layer's per-head norm is [32]",
         [_ev("layers.0.self_attn.k_norm.weight", [64], [32])], [], False),
        ("K302", "error", "layers.1.self_attn.q_norm.weight is [16]; a Qwen3 layer's per-head norm is [32]",
         [_ev("layers.1.self_attn.q_norm.weight", [16], [32])], [], False),
    ]


def test_k302_qwen3_norms_follow_the_head_dim_q_implies(tmp_path):
    # 3 heads of 32 (q 96 rows), head_dim not declared: the norms [32] match q's head_dim; 64 // 3 = 21 is what
    # the config gives, the head_dim finding alone says so
    def cfg(c):
        _heads3(c)
        c.pop("head_dim")
        c.update(num_hidden_layers=2)

    def ts(t):
        HEADS3["tensors"](t)
        _qwen3()(t)
        t["layers.1.self_attn.q_proj.weight"] = _w(96, 64)
        t["layers.1.self_attn.o_proj.weight"] = _w(64, 96)
    fs = _k302(tmp_path, config=cfg, tensors=ts)
    assert [f.message for f in fs] == [
        "q_proj implies head_dim 32 but the config gives 21 (hidden 64 / 3 heads: head_dim is not set)"]


def test_k302_later_layers_take_hidden_inputs(tmp_path):
    # layers 1..3 after the first (vLLM PR #26164): q takes hidden = 64 inputs. Layer 1 [64, 128] (2 x hidden, as
    # layer 0), layer 2 a 3-d [64, 64, 2] (its last dim read as the inputs), layer 3 right [64, 64]
    def ts(t):
        layers((1, True), (2, True), (3, True))(t)
        t["layers.1.self_attn.q_proj.weight"] = _w(64, 128)
        t["layers.2.self_attn.q_proj.weight"] = _w(64, 64, 2)
    fs = _k302(tmp_path, config=lambda c: c.update(num_hidden_layers=4), tensors=ts)
    assert [_full(f) for f in fs] == [
        ("K302", "error", "layers.1.self_attn.q_proj takes 128 inputs; layers after the first take hidden = 64",
         [_ev("layers.1.self_attn.q_proj.weight", [64, 128], [64, 64])], [], False),
        ("K302", "error", "layers.2.self_attn.q_proj takes 2 inputs; layers after the first take hidden = 64",
         [_ev("layers.2.self_attn.q_proj.weight", [64, 64, 2], [64, 64])], [], False),
    ]
    # all later layers right: nothing (layer 0 keeps its 2 x hidden)
    assert _k302(tmp_path, name="ok", config=lambda c: c.update(num_hidden_layers=4),
                 tensors=layers((1, True), (2, True), (3, True))) == []


# MLA (tiny): kv_a [64 + 16 = 80, 128], kv_b [2 x (16 + 16) = 64, 64], o [64, 2 x 16 = 32], q_a [32, 128],
# q_b [2 x (16 + 16) = 64, 32]
KV_A, KV_B = "layers.0.self_attn.kv_a_proj_with_mqa.weight", "layers.0.self_attn.kv_b_proj.weight"
Q_A, Q_B = "layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.q_b_proj.weight"


def _mla(tmp_path, name="d", **kw):
    return read_folder(make_draft(tmp_path / name, "torchspec", family="mla", **kw))


def _no_q_lora(c):
    c.pop("q_lora_rank")


NO_Q_LORA_TENSORS = _set(**{Q_A: None, Q_B: None, "layers.0.self_attn.q_a_layernorm.weight": None,
                            # q_proj [2 x (16 + 16) = 64, 2 x 64 = 128]
                            Q: (64, 128)})


def test_k302_says_nothing_of_consistent_mla_drafts(tmp_path):
    assert one_rule("K302", _mla(tmp_path)) == []
    # without q_lora_rank: q_proj [64, 128] in place of q_a/q_b
    assert one_rule("K302", _mla(tmp_path, "plain", config=_no_q_lora, tensors=NO_Q_LORA_TENSORS)) == []
    # against a target of the same cache dims (the tiny target: kv_lora 64, rope 16)
    assert one_rule("K302", _mla(tmp_path, "t"), target=load_target(str(make_target(tmp_path / "tgt")))) == []


def test_k302_an_mla_config_without_its_ranks_names_each_missing_one(tmp_path):
    def strip(c):
        for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_attention_heads"):
            c.pop(k)
    (f,) = one_rule("K302", _mla(tmp_path, config=strip))
    assert _full(f) == (
        "K302", "error",
        "MLA draft config lacks kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, num_attention_heads",
        [_ev(k, None, "an integer") for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                                              "num_attention_heads")], [], False)
    # a string is no integer; the others present: only those two, in the rule's order
    (f,) = one_rule("K302", _mla(tmp_path, "some", config=lambda c: (c.pop("qk_nope_head_dim"),
                                                                  c.update(v_head_dim="16"))))
    assert _full(f) == ("K302", "error", "MLA draft config lacks qk_nope_head_dim, v_head_dim",
                        [_ev("qk_nope_head_dim", None, "an integer"), _ev("v_head_dim", None, "an integer")], [],
                        False)


def test_k302_each_mla_projection_of_another_shape_is_named(tmp_path):
    # every projection one off what the tiny ranks imply (see above), listed in the rule's order: kv_a, kv_b, o, q_a,
    # q_b
    d = _mla(tmp_path, tensors=_set(**{KV_A: (80, 192), KV_B: (64, 32), O: (64, 64), Q_A: (32, 64), Q_B: (96, 32)}))
    assert [_full(f) for f in one_rule("K302", d)] == [
        ("K302", "error", f"{KV_A} is [80, 192]; the MLA config implies [80, 128]", [_ev(KV_A, [80, 192], [80, 128])],
         [], False),
        ("K302", "error", f"{KV_B} is [64, 32]; the MLA config implies [64, 64]", [_ev(KV_B, [64, 32], [64, 64])],
         [], False),
        ("K302", "error", f"{O} is [64, 64]; the MLA config implies [64, 32]", [_ev(O, [64, 64], [64, 32])], [], False),
        ("K302", "error", f"{Q_A} is [32, 64]; the MLA config implies [32, 128]", [_ev(Q_A, [32, 64], [32, 128])],
         [], False),
        ("K302", "error", f"{Q_B} is [96, 32]; the MLA config implies [64, 32]", [_ev(Q_B, [96, 32], [64, 32])],
         [], False),
    ]


def test_k302_mla_q_proj_without_q_lora_and_absent_projections(tmp_path):
    # no q_lora_rank: q_proj must be [64, 128]; [64, 192] is reported. kv_b absent: not judged here (K202's)
    d = _mla(tmp_path, config=_no_q_lora,
             tensors=lambda t: (NO_Q_LORA_TENSORS(t), _set(**{Q: (64, 192), KV_B: None})(t)))
    assert [_full(f) for f in one_rule("K302", d)] == [
        ("K302", "error", f"{Q} is [64, 192]; the MLA config implies [64, 128]", [_ev(Q, [64, 192], [64, 128])],
         [], False)]


def test_k302_mla_cache_dims_other_than_the_targets_are_a_warning(tmp_path):
    # Kimi-K2.5 (kconvert/targets/profiles/kimi-k2.5.json, its config.json): kv_lora_rank 512, qk_rope_head_dim 64;
    # the tiny draft has 64 and 16
    (f,) = one_rule("K302", _mla(tmp_path), target=load_profile("kimi-k2.5"))
    assert _full(f) == (
        "K302", "warning", "MLA cache dims differ from the target's (kv_lora_rank, qk_rope_head_dim): the engine "
        "shares one MLA cache layout between target and draft",
        [_ev("kv_lora_rank", 64, 512), _ev("qk_rope_head_dim", 16, 64)], [], False)

    # a target whose kv_lora_rank is 128 and that does not say its qk_rope_head_dim: only kv_lora_rank is compared
    def tgt(name, **text):
        folder = make_target(tmp_path / name)
        cfg = json.loads((folder / "config.json").read_text())
        cfg["text_config"].update(text)
        cfg["text_config"] = {k: v for k, v in cfg["text_config"].items() if v is not None}
        (folder / "config.json").write_text(json.dumps(cfg))
        return load_target(str(folder))
    (f,) = one_rule("K302", _mla(tmp_path, "one"), target=tgt("t128", kv_lora_rank=128, qk_rope_head_dim=None))
    assert _full(f) == (
        "K302", "warning", "MLA cache dims differ from the target's (kv_lora_rank): the engine shares one MLA cache "
        "layout between target and draft", [_ev("kv_lora_rank", 64, 128)], [], False)
    # only the rope dim differs (target 32)
    (f,) = one_rule("K302", _mla(tmp_path, "rope"), target=tgt("t32", qk_rope_head_dim=32))
    assert f.message.startswith("MLA cache dims differ from the target's (qk_rope_head_dim):")
    assert [e.to_dict() for e in f.evidence] == [_ev("qk_rope_head_dim", 16, 32)]
    # shape errors come first, the warning after them
    d = _mla(tmp_path, "both", tensors=_set(**{O: (64, 64)}))
    assert [(f.severity, f.evidence[0].where) for f in one_rule("K302", d, target=load_profile("kimi-k2.5"))] == [
        ("error", O), ("warning", "kv_lora_rank")]


def test_k302_an_mla_draft_without_a_target_or_with_a_non_mla_target_compares_no_cache_dims(tmp_path):
    assert one_rule("K302", _mla(tmp_path), target=None) == []
    # a Llama target (no MLA ranks): nothing to share
    assert one_rule("K302", _mla(tmp_path, "l"), target=load_profile("llama-3.1-8b")) == []


# --- K304 through the rule, in full ---------------------------------------------------------------------------------

def test_k304_a_draft_tp_other_than_one_is_refused_at_target_tp_one(tmp_path):
    # target TP 1 and draft TP 2: _verify_and_get_draft_tp accepts 1 or the target's 1 only
    d = read_folder(make_draft(tmp_path / "d", "specforge"))
    (f,) = one_rule("K304", d, tp=1, draft_tp=2)
    assert _full(f) == ("K304", "error", f"draft_tensor_parallel_size 2 with tensor_parallel_size 1: vLLM accepts "
                        f"only 1 or the target's TP ('{VLLM_DRAFT_TP.format(n=2)}')",
                        [_ev("--draft-tp", 2, [1, 1])], [], False)
    # at TP 1 with the draft's TP unset or 1 nothing splits (2 heads, 1 KV head, vocab 128 on one rank)
    assert one_rule("K304", d, tp=1) == [] and one_rule("K304", d, tp=1, draft_tp=1) == []


def test_k304_findings_in_full_at_the_draft_tp(tmp_path):
    # 6 heads, 3 KV heads, draft vocab 100 at TP 4: 6 % 4 = 2 (refused); 3 < 4 and 4 % 3 = 1 (assert while
    # loading); 100 % 4 = 0 divides
    d = read_folder(make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(
        num_attention_heads=6, num_key_value_heads=3, draft_vocab_size=100)))
    assert [_full(f) for f in one_rule("K304", d, tp=4)] == [
        ("K304", "error", "draft's 6 attention heads do not divide by TP 4: vLLM refuses to start ('Total number of "
         "attention heads (6) must be divisible by tensor parallel size (4)')",
         [_ev("draft.num_attention_heads", 6, "divisible by draft TP 4")], [], False),
        ("K304", "error", "draft's 3 KV heads cannot be replicated evenly over TP 4: vLLM asserts tp % num_kv_heads "
         "== 0 while loading (the engine crashes at start)",
         [_ev("draft.num_key_value_heads", 3, "divisible by draft TP 4")], [], False),
    ]
    # the draft at TP 1 under a target at TP 4: nothing splits
    assert one_rule("K304", d, tp=4, draft_tp=1) == []
    # draft vocab 100 at TP 3 (heads 6 / 3 = 2, KV 3 / 3 = 1): 100 -> 128 padded rows, 128 % 3 = 2: fails to load
    (f,) = one_rule("K304", d, tp=3)
    assert _full(f) == ("K304", "error", "draft_vocab_size 100 does not divide by TP 3, nor does its padding to 128 "
                        "rows: vLLM's vocab-parallel lm_head fails to load ('128 is not divisible by 3')",
                        [_ev("draft_vocab_size", 100, "divisible by draft TP 3")], [], False)
