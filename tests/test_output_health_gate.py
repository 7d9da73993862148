"""The output-health gate (issue #46 item 4): `--max-degenerate-share` and the policy key of the same name, resolved
into the gate's limit, its measured default, "off", and the check it adds. Engine-free, under a second; the live
run on a looping target is in tests/test_examples_live.py."""
from __future__ import annotations

import re

import pytest

from kconvert.engines.output_health import summarize_health
from kconvert.errors import InputError, UsageError
from kconvert.results.thresholds import (DEFAULT_MAX_DEGENERATE_SHARE, Gate, Thresholds, evaluate, load_policy)
from tests.oracles import SEED_K, seed
from kconvert.engines.acceptance import summarize

_C = seed()
SEED = summarize(_C["drafts"], _C["draft_tokens"], _C["accepted"], _C["accepted_per_pos"], SEED_K)

LOOP = [7, 9] * 32  # a two-token loop over all 64 tokens: degenerate
TEXT = list(range(64))  # never repeats


def outputs(bad: int, good: int) -> dict:
    return summarize_health([LOOP] * bad + [TEXT] * good)


def resolve(**kw) -> Thresholds:
    return Gate(**kw).resolve(target="t", prompts="math", k=3)


def test_the_gate_checks_output_health_by_default_and_off_turns_it_off():
    assert resolve().max_degenerate_share == DEFAULT_MAX_DEGENERATE_SHARE and not resolve().empty
    off = resolve(max_degenerate_share="off")
    assert off.max_degenerate_share is None and off.empty  # nothing else asked: verify then runs no gate at all
    assert resolve(max_degenerate_share="0.2").max_degenerate_share == 0.2
    assert resolve(max_degenerate_share="OFF", min_acceptance_length=2.5).max_degenerate_share is None


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "inf", "abc", ""])
def test_a_limit_outside_0_to_1_is_bad_usage_naming_the_default_and_off(value):
    with pytest.raises(UsageError) as e:
        resolve(max_degenerate_share=value)
    assert e.value.exit_code == 2 and "--max-degenerate-share" in e.value.message
    assert f"default {DEFAULT_MAX_DEGENERATE_SHARE}" in e.value.message and "off" in e.value.message


@pytest.mark.parametrize("bad, good, passed", [(3, 1, True), (4, 0, False), (0, 5, True)])
def test_the_check_passes_up_to_the_limit_and_fails_above_it(bad, good, passed):
    """Limit 0.75: three loops of four outputs are allowed (0.75), four of four are not."""
    h = outputs(bad, good)
    checks = evaluate(Thresholds(max_degenerate_share=0.75), SEED, h)
    assert [c.name for c in checks] == ["max_degenerate_share"]
    c = checks[0]
    assert (c.passed, c.observed, c.required) == (passed, bad / (bad + good), 0.75)
    assert f"{bad} of {bad + good} outputs degenerate" in c.message
    if not passed:
        assert "not the draft's quality" in c.message and "--max-degenerate-share off" in c.message


def test_no_limit_adds_no_check_and_no_outputs_fail_a_set_limit():
    assert evaluate(Thresholds(min_acceptance_length=3.0), SEED, outputs(4, 0))[0].name == "min_acceptance_length"
    assert len(evaluate(Thresholds(min_acceptance_length=3.0), SEED, outputs(4, 0))) == 1
    (c,) = evaluate(Thresholds(max_degenerate_share=0.5), SEED, None)
    assert not c.passed and "not measured" in c.message


def test_a_policy_entry_sets_the_limit_or_turns_it_off_and_a_flag_overrides_it(tmp_path):
    p = tmp_path / "gate.toml"
    p.write_text('[[gate]]\nprompt_set = "math"\nmax_degenerate_share = 0.3\n\n'
                 '[[gate]]\nprompt_set = "chat"\nmax_degenerate_share = "off"\n\n'
                 '[[gate]]\nmin_acceptance_length = 2.0\n')
    assert load_policy(p, target="t", prompt_set="math", k=3).max_degenerate_share == 0.3
    assert load_policy(p, target="t", prompt_set="chat", k=3).max_degenerate_share is None
    assert load_policy(p, target="t", prompt_set="code", k=3).max_degenerate_share == DEFAULT_MAX_DEGENERATE_SHARE
    assert Gate(policy=str(p), max_degenerate_share="0.9").resolve(
        target="t", prompts="math", k=3).max_degenerate_share == 0.9


@pytest.mark.parametrize("value", ["1.5", '"of"', "true"])
def test_a_policy_value_the_schema_refuses_is_bad_input(tmp_path, value):
    p = tmp_path / "gate.toml"
    p.write_text(f"[[gate]]\nmax_degenerate_share = {value}\n")
    with pytest.raises(InputError, match="max_degenerate_share"):
        load_policy(p, target="t", prompt_set="math", k=3)


def test_verify_help_names_the_default_the_code_applies(capsys, monkeypatch):
    from kconvert.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["verify", "--help"]) == 0
    text = re.sub(r"[\s│]+", " ", capsys.readouterr().out)
    assert f"Default {DEFAULT_MAX_DEGENERATE_SHARE}, measured (bench/NOTES.md" in text
