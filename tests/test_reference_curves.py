"""Published acceptance-length curves as gates (issue #49 item 6): `kconvert verify --reference ID`.

Engine-free: the live figure comes from a recorded result (the seed's vLLM /metrics scrape of Kimi-K2.5 with the
AQ-MedAI draft at k=4, tests/data/seed_kimi_k25_aqmedai.metrics.txt), and every expected value is derived here
from the counters and the curve's published figure, not from kconvert's comparison.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.results.references import differences, load_reference, reference_ids
from kconvert.results.thresholds import Gate, evaluate

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "data" / "seed_kimi_k25_aqmedai.metrics.txt"
TINY = ROOT / "examples" / "tiny"


def _counter(name: str) -> float:
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.]+)$", SEED.read_text(), re.M)
    assert m, name
    return float(m.group(1))


def seed_al() -> float:
    # vLLM's mean acceptance length: 1 + accepted draft tokens / drafts (the bonus token counted), the convention
    # InferenceX's golden curves use too (golden_al_distribution/README.md)
    return 1 + _counter("vllm:spec_decode_num_accepted_tokens_total") / _counter("vllm:spec_decode_num_drafts_total")


@pytest.mark.parametrize("rid", reference_ids())
def test_every_shipped_curve_is_a_possible_acceptance_length(rid):
    # 1 <= AL <= k + 1 for any draft at k draft tokens per step (the bonus token alone, or every draft accepted)
    ref = load_reference(rid)
    assert ref.curve
    for k, al in ref.curve.items():
        assert 1 <= al <= k + 1, (rid, k, al)
    assert ref.metric == "vllm" and "golden_al_distribution/" in ref.source


@pytest.mark.parametrize("rid", reference_ids())
def test_a_run_under_the_curves_own_conditions_differs_in_nothing(rid):
    ref = load_reference(rid)
    same = {**ref.conditions, "draft": ref.draft, "target": ref.target, "engine": ref.engine, "metric": ref.metric}
    assert differences(ref, same) == []
    # and each stated condition, changed alone, is the one difference named
    for what in same:
        if what == "metric":
            continue
        changed = {**same, what: "something else"}
        assert [d["what"] for d in differences(ref, changed)] == [what]


def test_recorded_live_figure_against_the_kimi_curve():
    al = seed_al()
    assert round(al, 4) == 3.0714  # 1 + 88381 / 42668
    published = 3.24  # InferenceX kimik2.5_eagle3.yaml thinking_on, k = 4
    run = {"hardware": "gpu", "temperature": 0.0, "draft": "AQ-MedAI/Kimi-K25-eagle3", "target": "kimi-k2.5",
           "engine": "vllm", "metric": "vllm", "prompts": "GSM8K"}
    th = Gate(reference="inferencex:kimi-k2.5-eagle3-mla", tolerance=0.1, max_degenerate_share="off").resolve(
        target="kimi-k2.5", prompts="math", k=4, run=run)
    [check] = evaluate(th, {"mean_acceptance_length": al})
    assert check.name == "reference" and check.passed
    assert check.required == pytest.approx(published * 0.9)
    cmp = th.reference["comparison"]
    assert cmp["difference"] == pytest.approx(al - published, abs=1e-4)
    assert cmp["ratio"] == pytest.approx(al / published, abs=1e-4)
    named = {d["what"] for d in th.reference["differs"]}
    assert {"draft", "temperature", "hardware", "prompts", "target"} <= named
    assert "engine" not in named and "metric" not in named
    # a tighter tolerance puts the floor (3.078) above the recorded figure: the gate fails and says by how much
    th = Gate(reference="inferencex:kimi-k2.5-eagle3-mla", tolerance=0.05, max_degenerate_share="off").resolve(
        target="kimi-k2.5", prompts="math", k=4, run=run)
    [check] = evaluate(th, {"mean_acceptance_length": al})
    assert not check.passed and f"{al - published:+.3f}" in check.message and "differs: " in check.message


def test_a_k_outside_the_curve_is_bad_usage():
    with pytest.raises(UsageError, match="no figure for k=9"):
        Gate(reference="inferencex:kimi-k2.5-eagle3-mla").resolve(target="t", prompts="math", k=9)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=ROOT)


def test_verify_dry_run_records_the_reference_and_what_differs():
    r = _cli("verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"), "-k", "3",
             "--reference", "inferencex:kimi-k2.5-eagle3-mla", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    ref = doc["thresholds"]["reference"]
    assert ref["value"] == 2.88 and ref["k"] == 3  # the published figure at k = 3
    assert {d["what"] for d in ref["differs"]} >= {"hardware", "temperature", "draft", "prompts"}
    r = _cli("verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"),
             "--reference", "inferencex:nope", "--dry-run")
    assert r.returncode == 2 and "known references: inferencex:kimi-k2.5-eagle3-mla" in r.stderr
