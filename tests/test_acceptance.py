"""Acceptance arithmetic against vLLM's definitions and the seed data of vLLM PR #35966 (docs/formats-and-engines.md#acceptance-metrics)."""
from __future__ import annotations

import pytest

from kconvert.engines.acceptance import delta, summarize

# Kimi-K2.5 + AQ-MedAI draft on vLLM, k=4, GSM8K: published rate 51.78 %, AL 3.07, per position
# 0.771/0.583/0.420/0.298. The per-position counts are derived: they round to the published rates and sum to
# the published accepted total.
SEED = {"drafts": 42668, "draft_tokens": 170672, "accepted": 88381}
SEED_PER_POS = [32897, 24875, 17906, 12703]


def test_seed_counts_are_consistent_with_the_published_totals():
    assert sum(SEED_PER_POS) == SEED["accepted"]
    assert SEED["draft_tokens"] == 4 * SEED["drafts"]


def test_seed_data_reproduces_published_rate_and_acceptance_length():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=4)
    assert round(100 * s["acceptance_rate"], 2) == 51.78
    assert round(s["mean_acceptance_length"], 2) == 3.07
    assert [round(r, 3) for r in s["per_position"]] == [0.771, 0.583, 0.420, 0.298]


def test_acceptance_length_is_one_plus_sum_of_per_position_rates():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=4)
    assert s["mean_acceptance_length"] == pytest.approx(1 + sum(s["per_position"]))


def test_conditional_rates_chain_from_drafts():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=4)
    c = s["conditional"]
    assert c[0] == pytest.approx(32897 / 42668)
    assert c[1] == pytest.approx(24875 / 32897)
    assert c[3] == pytest.approx(12703 / 17906)
    # The product of the conditionals up to i is the per-position rate at i.
    prod = 1.0
    for i, rate in enumerate(c):
        prod *= rate
        assert prod == pytest.approx(s["per_position"][i])


def test_sglang_accept_length_equals_vllm_acceptance_length_on_vllm_counters():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=4)
    assert s["sglang_accept_length"] == s["mean_acceptance_length"]


def test_zero_drafts_gives_none_not_division_errors():
    s = summarize(0, 0, 0, [], k=3)
    assert s["acceptance_rate"] is None
    assert s["mean_acceptance_length"] is None
    assert s["sglang_accept_length"] is None
    assert s["per_position"] == [None, None, None]
    assert s["conditional"] == [None, None, None]


def test_conditional_after_a_never_accepted_position_is_none():
    s = summarize(10, 30, 10, [10, 0, 0], k=3)
    assert s["conditional"] == [1.0, 0.0, None]
    assert s["mean_acceptance_length"] == 2.0
    assert s["acceptance_rate"] == pytest.approx(1 / 3)


def test_short_per_position_vector_is_padded_to_k():
    s = summarize(4, 12, 2, [2], k=3)
    assert s["accepted_per_pos"] == [2, 0, 0]


def test_delta_subtracts_counters_and_vectors():
    before = {"drafts": 10, "draft_tokens": 30, "accepted": 12, "accepted_per_pos": [7, 4, 1]}
    after = {"drafts": 25, "draft_tokens": 75, "accepted": 30, "accepted_per_pos": [17, 9, 4]}
    assert delta(before, after) == {"drafts": 15, "draft_tokens": 45, "accepted": 18, "accepted_per_pos": [10, 5, 3]}


def test_delta_from_an_empty_snapshot_is_the_snapshot():
    after = {"drafts": 5, "draft_tokens": 15, "accepted": 3, "accepted_per_pos": [2, 1, 0]}
    assert delta({}, after) == after


def test_delta_refuses_counters_that_go_down():
    with pytest.raises(ValueError):
        delta({"drafts": 5, "draft_tokens": 15, "accepted": 3}, {"drafts": 4, "draft_tokens": 15, "accepted": 3})
