"""Thresholds, policy files, convention conversion of published figures, JUnit output, lossless comparison."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from kconvert.errors import InputError, UsageError
from kconvert.results.thresholds import Thresholds, apply_expected, evaluate, expected_to_vllm_al, load_policy
from kconvert.engines.acceptance import summarize
from kconvert.report.junit import render_junit
from kconvert.commands.verify import compare_outputs
from tests.oracles import SEED_K, seed

# Kimi-K2.5 + AQ-MedAI draft, k=4, GSM8K: the seed scrape's counters (tests/data, read by tests/oracles.py).
_C = seed()
SEED = summarize(_C["drafts"], _C["draft_tokens"], _C["accepted"], _C["accepted_per_pos"], SEED_K)


def test_thresholds_pass_and_fail_on_the_seed_figures():
    th = Thresholds(min_acceptance_length=3.0, min_acceptance_rate=0.52, min_per_position=[0.7, 0.6])
    checks = {c.name: c for c in evaluate(th, SEED)}
    assert checks["min_acceptance_length"].passed  # AL 3.07
    assert not checks["min_acceptance_rate"].passed  # 51.78% < 52%
    assert checks["min_per_position[0]"].passed  # 0.771
    assert not checks["min_per_position[1]"].passed  # 0.583 < 0.6


def test_published_sglang_accept_length_counts_the_bonus_token_like_vllm_al():
    assert expected_to_vllm_al(3.20, "sglang") == pytest.approx(3.20)
    assert expected_to_vllm_al(1.746, "accepted") == pytest.approx(2.746)
    with pytest.raises(UsageError):
        expected_to_vllm_al(3.0, "tokens-per-second")


def test_expected_value_becomes_a_floor_and_says_how_it_converted():
    th = Thresholds()
    apply_expected(th, 1.746, "accepted", 0.1, "model card")
    assert th.min_acceptance_length == pytest.approx(2.746 * 0.9)
    assert "no bonus token" in th.notes[0]


def test_policy_file_is_validated_and_keyed_by_target_and_prompt_set(tmp_path):
    p = tmp_path / "gate.toml"
    p.write_text("""
[[gate]]
target = "moonshotai/*"
prompt_set = "math"
min_acceptance_rate = 0.45
expected = { value = 3.20, convention = "sglang", tolerance = 0.1, source = "lightseekorg card, GSM8K" }

[[gate]]
target = "*"
min_acceptance_length = 2.0
""")
    th = load_policy(p, target="moonshotai/Kimi-K2.5", prompt_set="math", k=3)
    assert th.min_acceptance_rate == 0.45
    assert th.min_acceptance_length == pytest.approx(3.20 * 0.9)
    th2 = load_policy(p, target="./local-target", prompt_set="chat", k=3)
    assert th2.min_acceptance_length == 2.0


def test_policy_with_unknown_keys_is_refused(tmp_path):
    p = tmp_path / "gate.toml"
    p.write_text("[[gate]]\nmin_acceptance_lenght = 2.0\n")
    with pytest.raises(InputError, match="min_acceptance_lenght"):
        load_policy(p, target="x", prompt_set="math", k=3)


def test_policy_that_is_not_toml_is_refused(tmp_path):
    p = tmp_path / "gate.toml"
    p.write_text("[[gate\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_policy(p, target="x", prompt_set="math", k=3)


def test_lossless_comparison_reports_the_first_difference():
    same = compare_outputs([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]])
    assert same["identical"] and same["tokens_compared"] == 5
    diff = compare_outputs([[1, 2, 3], [4, 9, 6]], [[1, 2, 3], [4, 5, 6]])
    assert not diff["identical"]
    assert diff["first_difference"] == {"request": 1, "position": 1, "speculative_token": 9, "baseline_token": 5}


def test_junit_has_one_testcase_per_rule_and_per_threshold():
    from kconvert.rules import REGISTRY

    doc = {
        "findings": [{"id": "K404", "severity": "error", "message": "ids in SGLang convention", "evidence": []}],
        "target": {"name": "t"},
        "live": {"acceptance": SEED, "lossless": {"identical": True}},
        "thresholds": {"checks": [{"name": "min_acceptance_length", "passed": False,
                                   "message": "mean acceptance length 2.0 < 2.5"}]},
    }
    root = ET.fromstring(render_junit(doc))
    cases = root.findall(".//testcase")
    assert len(cases) == len(REGISTRY) + 3  # rules + engine run + lossless + one threshold
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["K404 aux-ids-convention", "min_acceptance_length"]
    assert root.get("failures") == "2"
