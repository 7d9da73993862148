"""The shipped tiny example, live: real vLLM engines on CPU, no mocks.

The good drafts reach mean acceptance length >= 2.5 at k=3 next to the tiny Kimi-K2.5-shaped target; each broken
variant is refused by the static checks (no engine started) or, forced live with skip_static, loses >= 0.3 of
acceptance length against its good draft or crashes the engine (exit 3); `kconvert fix` brings each back to its good
draft's acceptance, measured in the same session. The figures of a verify report equal the engine's own counters
from the same run. The seed deployment's serve line (TP 8, draft at TP 8, k=4) replayed on the example passes, gives
the TP=1 greedy outputs token for token in float32, and still tells a broken variant from the good draft.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from kconvert.errors import EngineError  # noqa: E402
from kconvert.fix import fix  # noqa: E402
from kconvert.inspect import inspect  # noqa: E402
from kconvert.rules import Options  # noqa: E402
from kconvert.verify import build_verify_report  # noqa: E402
from tests.live_runs import FP32, GOOD, SEED_SPEC, SEED_TP, TARGET, TINY, al, run_verify  # noqa: E402

pytestmark = pytest.mark.live

# The example's promise: every good draft reaches this mean acceptance length at k=3 (and at the seed's k=4),
# in bf16 and float32, at TP 1, 2 and 8, on every CPU kernel path this vLLM build offers. The lowest figure measured
# over those configurations (examples/build/measure_spread.py, examples/tiny/README.md "How stable is it") is
# 2.77; 2.5 keeps 0.27 below it, more than three times the 0.078 that separated two machines of this kind
# (AVX2 vs AVX-512-bf16) on the earlier example.
MIN_GOOD_AL = 2.5
# A defect the static checks let through costs at least this much against its good draft, both measured in float32
# in the same session. The smallest such loss is no-aux-ids' (the engine's default aux layers instead of the trained
# ones): 0.236, the same at TP 1 and 8 and on both ATen kernel paths (float32 figures did not move at all between
# them); 0.15 keeps 0.086 of margin.
MIN_LOSS = 0.15
# A fixed variant is back to its good draft's acceptance, measured in the same session on the same machine.
RESTORED_WITHIN = 0.05

# variant -> (good draft it was derived from, extra fix options, static rule expected to refuse it or None)
BROKEN = {
    "aux-ids-sglang-convention": ("mla", {}, "K404"),
    "d2t-absolute": ("mla", {}, "K502"),
    "no-aux-ids": ("mla", {"aux_ids": [2, 5, 7]}, None),
    "norm-before-residual-missing": ("llama", {}, "K602"),
    "model-prefixed-keys": ("llama", {}, "K201"),
    "lm-head-wrong-prune": ("llama", {"lm_head_source": str(TINY / "drafts" / "llama-fullvocab")}, None),
}


@pytest.fixture(scope="module", params=sorted(GOOD))
def good(request):
    return request.param, run_verify(str(TINY / GOOD[request.param]))


def good_fp32(base: str):
    """The good draft in float32: the reference the variants are compared with. In float32 the figures hardly
    move between CPU kernel paths (examples/tiny/README.md), and the MLA engine runs several times faster than in
    bf16 on CPUs without native bf16; the MLA run also proves losslessness (one run, two uses)."""
    return run_verify(str(TINY / GOOD[base]), engine_args=FP32, lossless=base == "mla")


def test_good_draft_reaches_the_acceptance_the_example_promises(good):
    name, vr = good
    assert vr.live is not None and not vr.static_blocked
    assert al(vr) >= MIN_GOOD_AL, f"{name}: AL {al(vr):.3f}"


def test_report_figures_equal_the_engines_own_counters(good):
    check_counters(good[1])


def check_counters(vr) -> None:
    doc = build_verify_report(vr)
    raw = {m["name"]: m for m in vr.live.raw_metrics if m["name"].startswith("vllm:spec_decode")}

    def value(name):
        return sum(m.get("value", 0) for m in vr.live.raw_metrics if m["name"] == name)

    c = doc["live"]["counters"]
    assert raw, "the worker dumped no spec-decode metrics"
    assert c["drafts"] == value("vllm:spec_decode_num_drafts")
    assert c["draft_tokens"] == value("vllm:spec_decode_num_draft_tokens")
    assert c["accepted"] == value("vllm:spec_decode_num_accepted_tokens")
    per_pos = [m for m in vr.live.raw_metrics if m["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos"]
    summed = [sum(v) for v in zip(*[m["values"] for m in per_pos])]
    assert c["accepted_per_pos"] == summed
    acc = doc["live"]["acceptance"]
    assert acc["mean_acceptance_length"] == pytest.approx(1 + c["accepted"] / c["drafts"])
    assert acc["acceptance_rate"] == pytest.approx(c["accepted"] / c["draft_tokens"])


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_broken_variant_is_refused_statically_or_loses_acceptance_live(variant):
    base, _, rule = BROKEN[variant]
    path = str(TINY / "broken" / variant)
    res = inspect(path, target=TARGET)
    if rule is not None:
        # Refused before any engine starts: that is the gate's answer, no live run needed (the forced live
        # figures of these variants are in examples/tiny/README.md).
        assert rule in {f.id for f in res.errors}, [(f.id, f.message) for f in res.findings]
        vr = run_verify(path)
        assert vr.static_blocked and vr.live is None and vr.exit_code == 1
        return
    good_al = al(good_fp32(base))
    try:
        forced = run_verify(path, engine_args=FP32, skip_static=True)
    except EngineError as e:
        assert e.exit_code == 3 and e.last_lines
        return
    assert al(forced) <= good_al - MIN_LOSS, f"{variant}: live AL {al(forced):.3f} vs good {good_al:.3f}"


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_fix_brings_each_broken_variant_back(variant, tmp_path):
    base, opts, _ = BROKEN[variant]
    out = tmp_path / "fixed"
    result = fix(str(TINY / "broken" / variant), out, target=TARGET, options=Options(**opts))
    assert not result.noop
    assert result.remaining_fixable() == []
    vr = run_verify(str(out), engine_args=FP32)
    assert not vr.static_blocked
    good_al = al(good_fp32(base))
    assert al(vr) >= good_al - RESTORED_WITHIN, f"{variant} fixed: AL {al(vr):.3f} (good {base} draft: {good_al:.3f})"
    assert al(vr) >= MIN_GOOD_AL


def test_greedy_outputs_with_the_draft_equal_the_targets_alone():
    vr = good_fp32("mla")
    assert vr.lossless is not None and vr.lossless["identical"], vr.lossless
    assert vr.lossless["tokens_compared"] > 0


def seed_run(draft: str):
    """The seed deployment's serve line replayed on the tiny example: TP 8, draft at TP 8, k=4, float32."""
    return run_verify(draft, engine_args=FP32, replay=(SEED_SPEC, SEED_TP))


def test_the_seed_serve_line_at_tp8_passes_and_runs_what_production_runs():
    vr = seed_run(str(TINY / GOOD["mla"]))
    args = vr.live.engine_args
    assert args["tensor_parallel_size"] == 8
    assert args["speculative_config"]["draft_tensor_parallel_size"] == 8
    assert args["speculative_config"]["num_speculative_tokens"] == 4 and len(vr.acceptance["per_position"]) == 4
    assert vr.settings.production_draft == "AQ-MedAI/Kimi-K25-eagle3"
    line = build_verify_report(vr)["live"]["serve_line"]
    assert "--tensor-parallel-size 8" in line and '"draft_tensor_parallel_size": 8' in line
    if vr.live.platform == "cpu":  # eight CPU workers on this machine's cores, bound by kconvert
        assert len(vr.live.env["VLLM_CPU_OMP_THREADS_BIND"].split("|")) == 8
    assert vr.passed and al(vr) >= MIN_GOOD_AL, f"TP=8 k=4: AL {al(vr):.3f}"


def test_tensor_parallel_8_gives_the_same_greedy_outputs_as_tp1_in_float32():
    """Lossless speculation makes the outputs independent of k and of the draft, so the TP=8, k=4 run must be
    token for token the TP=1, k=3 run and the target alone (all three in float32)."""
    one = good_fp32("mla")
    eight = seed_run(str(TINY / GOOD["mla"]))
    assert eight.live.output_token_ids == one.live.output_token_ids
    assert sum(map(len, eight.live.output_token_ids)) > 0


def test_counters_at_tp8_equal_the_engines_own():
    check_counters(seed_run(str(TINY / GOOD["mla"])))


def test_a_broken_variant_is_still_measurably_worse_at_tp8():
    good = seed_run(str(TINY / GOOD["mla"]))
    broken = run_verify(str(TINY / "broken" / "no-aux-ids"), engine_args=FP32, replay=(SEED_SPEC, SEED_TP),
                        skip_static=True)
    assert broken.live.engine_args["tensor_parallel_size"] == 8
    assert al(broken) <= al(good) - MIN_LOSS, f"no-aux-ids at TP=8: {al(broken):.3f} vs good {al(good):.3f}"


def test_cli_verify_gate_exit_codes_and_reports(tmp_path):
    """The CLI end to end: a passing gate (exit 0) with JSON, JUnit and Markdown reports; a statically refused
    variant exits 1 before any engine starts."""
    env = dict(os.environ, CI="")
    base = [sys.executable, "-m", "kconvert", "verify"]
    common = ["--target", TARGET, "--max-prompts", "8", "--max-tokens", "32", "--no-lossless"]
    ok = subprocess.run(base + [str(TINY / GOOD["mla"])] + common + [
        "--min-acceptance-length", "1.5", "--report", str(tmp_path / "v.json"), "--junit", str(tmp_path / "v.xml"),
        "--markdown", str(tmp_path / "v.md")], capture_output=True, text=True, env=env, timeout=900)
    assert ok.returncode == 0, ok.stderr[-3000:]
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["verdict"] == "pass" and doc["live"]["counters"]["drafts"] > 0
    assert all(f["sha256"] for f in doc["subject"]["files"])
    assert "<testsuites" in (tmp_path / "v.xml").read_text()
    assert "acceptance" in (tmp_path / "v.md").read_text().lower()
    refused = subprocess.run(base + [str(TINY / "broken" / "d2t-absolute")] + common + [
        "--junit", str(tmp_path / "r.xml")], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "no engine was started" in refused.stdout
    assert "K502" in (tmp_path / "r.xml").read_text()
