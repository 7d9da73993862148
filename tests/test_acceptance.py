"""Acceptance arithmetic against vLLM's definitions and the seed data of vLLM PR #35966 (docs/formats-and-engines.md#acceptance-metrics)."""
from __future__ import annotations

import pytest

from kconvert.engines.acceptance import delta, summarize

from tests.oracles import SEED_K, by_hand, seed

# Kimi-K2.5 + AQ-MedAI draft on vLLM, k=4, GSM8K (vLLM PR #35966): the scrape's counters, read by
# prometheus_client from the one fixture that holds them. Published there (docs/formats-and-engines.md#acceptance-metrics):
# rate 51.78 %, AL 3.07, per position 0.771/0.583/0.420/0.298.
C = seed()
SEED = {"drafts": C["drafts"], "draft_tokens": C["draft_tokens"], "accepted": C["accepted"]}
SEED_PER_POS = C["accepted_per_pos"]


def test_seed_fixture_obeys_vllms_counter_invariants():
    # vLLM counts k draft tokens per draft and every accepted token at exactly one position: a fixture that
    # breaks either is not a vLLM scrape (the three copies this file replaced broke the second).
    assert SEED["draft_tokens"] == SEED_K * SEED["drafts"]
    assert len(SEED_PER_POS) == SEED_K and sum(SEED_PER_POS) == SEED["accepted"]


def test_seed_data_reproduces_published_rate_and_acceptance_length():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=SEED_K)
    assert round(100 * s["acceptance_rate"], 2) == 51.78
    assert round(s["mean_acceptance_length"], 2) == 3.07
    assert [round(r, 3) for r in s["per_position"]] == [0.771, 0.583, 0.420, 0.298]


def test_seed_figures_equal_vllms_definitions_written_out():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=SEED_K)
    want = by_hand(SEED["drafts"], SEED["draft_tokens"], SEED["accepted"], SEED_PER_POS)
    assert s["acceptance_rate"] == pytest.approx(want["acceptance_rate"])
    # 1 + accepted / drafts = 3.0714: the bonus token is in (without it, 2.07)
    assert s["mean_acceptance_length"] == pytest.approx(want["mean_acceptance_length"])
    assert s["per_position"] == pytest.approx(want["per_position"])


def test_conditional_rates_chain_from_drafts():
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=SEED_K)
    c = s["conditional"]
    p = SEED_PER_POS
    # conditional_0 = count_0 / drafts; conditional_i = count_i / count_{i-1}
    assert c == pytest.approx([p[0] / SEED["drafts"], p[1] / p[0], p[2] / p[1], p[3] / p[2]])


def test_sglang_accept_length_equals_vllm_acceptance_length_on_vllm_counters():
    # SGLang: completion tokens / verify steps = (drafts + accepted) / drafts on the same counters
    s = summarize(**SEED, accepted_per_pos=SEED_PER_POS, k=SEED_K)
    assert s["sglang_accept_length"] == pytest.approx((SEED["drafts"] + SEED["accepted"]) / SEED["drafts"])


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


# --- issue #30: survivors of the mutation run of kconvert/engines/acceptance.py, killed by hand-derived values ---

def test_summarize_returns_the_counters_it_was_given_under_their_names():
    """Expected by hand: 10 drafts of k=3 (30 draft tokens), 12 accepted (6, 4, 2 at positions 0-2): rate 12/30,
    AL 1 + 12/10 = 2.2 (vLLM's definitions, module docstring)."""
    s = summarize(10, 30, 12, [6, 4, 2], 3)
    assert (s["drafts"], s["draft_tokens"], s["accepted"]) == (10, 30, 12)
    assert s["accepted_per_pos"] == [6, 4, 2]
    assert s["acceptance_rate"] == pytest.approx(0.4) and s["mean_acceptance_length"] == pytest.approx(2.2)


def test_delta_of_two_empty_or_zero_snapshots_is_zero():
    """Expected: nothing happened between two snapshots that both read 0 (or lack the counter)."""
    zero = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    assert delta(zero, zero) == zero
    assert delta({}, {}) == zero


def test_delta_reports_which_counter_went_down_with_both_values():
    """Expected: the message names the counter and the two readings, before -> after."""
    with pytest.raises(ValueError) as ei:
        delta({"drafts": 5, "draft_tokens": 15, "accepted": 3}, {"drafts": 3, "draft_tokens": 15, "accepted": 3})
    assert str(ei.value) == "counter drafts went down (5 -> 3)"


def test_delta_counts_a_missing_position_of_the_after_side_as_zero():
    """Expected (docstring: a missing side of the per-position vector counts as zeros): after [3] against before
    [2, 0] is [1, 0]; after [3] against before [2, 1] is a position that went from 1 to 0, refused."""
    base = {"drafts": 1, "draft_tokens": 1, "accepted": 1}
    assert delta({**base, "accepted_per_pos": [2, 0]}, {**base, "accepted_per_pos": [3]})["accepted_per_pos"] == [1, 0]
    with pytest.raises(ValueError) as ei:
        delta({**base, "accepted_per_pos": [2, 1]}, {**base, "accepted_per_pos": [3]})
    assert str(ei.value) == "counter accepted_per_pos went down"
