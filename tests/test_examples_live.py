"""The shipped tiny example, live: real vLLM engines on CPU, no mocks.

The good drafts reach mean acceptance length >= 2.5 at k=3 next to the tiny Kimi-K2.5-shaped target; four broken
variants are refused by the static checks (no engine started; what they do when forced live is recorded in
examples/tiny/README.md, not run here), and the two the static checks let through (no-aux-ids,
lm-head-wrong-prune), forced live with skip_static, run and lose >= 0.15 of acceptance length against their good
draft (float32, same session; an engine crash there is a failure); `kconvert fix`
gives back each good draft (same tensor bytes, same engine reading) and, live for the lm_head re-selection, its
good draft's acceptance, measured in the same session. The figures of a verify report equal the engine's own counters
from the same run. The seed deployment's serve line (TP 8, draft at TP 8, k=4) replayed on the example passes, gives
the TP=1 greedy outputs token for token in float32, and still tells a broken variant from the good draft. The
good drafts' runs record the target's output health, which passes the measured default limit; the same good draft
next to a copy of the target that loops (tests/live_runs.py looping_target) clears the acceptance floor and is
refused by the output-health gate (issue #46 item 4).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from kconvert.commands.fix import fix  # noqa: E402
from kconvert.commands.inspect import inspect  # noqa: E402
from kconvert.rules import Options  # noqa: E402
from kconvert.commands.verify import build_verify_report  # noqa: E402
from tests.live_runs import (FP32, GOOD, LOOP_TOKEN, SEED_SPEC, SEED_TP, TARGET, TINY, al, looping_target,  # noqa: E402
                             run_verify)
from kconvert.results.thresholds import DEFAULT_MAX_DEGENERATE_SHARE, Thresholds, evaluate  # noqa: E402
from kconvert.report.concise import render_concise  # noqa: E402
from kconvert.report.terminal import render_verify  # noqa: E402
from rich.console import Console  # noqa: E402

pytestmark = pytest.mark.live

# The example's promise: every good draft reaches this mean acceptance length at k=3 (and at the seed's k=4),
# in bf16 and float32, at TP 1, 2 and 8, on every CPU kernel path this vLLM build offers. The lowest figure measured
# over those configurations (examples/build/measure_spread.py, examples/tiny/README.md "How stable is it") is
# 2.77; 2.5 keeps 0.27 below it, more than three times the 0.078 that separated two machines of this kind
# (AVX2 vs AVX-512-bf16) on the earlier example. The live tests run in float32: its figures did not move at all
# between TP sizes and kernel paths (so a CI machine of another kind measures what this one did), and the MLA
# engine runs about 5x faster in float32 than in bf16 on CPUs without native bf16. bf16 at the example's settings
# is what `scripts/demo.sh` gates, with the same 2.5.
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


def good_fp32(base: str):
    """The good draft in float32: the floor's subject and the reference the variants are compared with; the MLA
    run also proves losslessness (one run, two uses)."""
    return run_verify(str(TINY / GOOD[base]), engine_args=FP32, lossless=base == "mla")


@pytest.fixture(scope="module", params=sorted(GOOD))
def good(request):
    return request.param, good_fp32(request.param)


def test_good_draft_reaches_the_acceptance_the_example_promises(good):
    name, vr = good
    assert vr.live is not None and not vr.static_blocked
    assert al(vr) >= MIN_GOOD_AL, f"{name}: AL {al(vr):.3f}"


def test_report_figures_equal_the_engines_own_counters(good):
    check_counters(good[1])


def test_report_names_the_attention_backend_each_model_ran_on(good):
    """float32: kconvert asks CPU_MLA for the MLA target and draft on every CPU (AMX_MLA takes no float32,
    docs/vllm-cpu.md#intel-cpus-with-amx); a Llama-layer draft beside it runs with MLA disabled, on CPU_ATTN
    (vllm/platforms/cpu.py get_attn_backend_cls), the target too."""
    name, vr = good
    expected = "CPU_MLA" if name == "mla" else "CPU_ATTN"
    assert vr.live.attention_backends == {"target": [expected], "draft": [expected]}
    # and the views a person reads say so too (concise, terminal), not only the JSON
    doc = build_verify_report(vr)
    assert f"attention backend: target {expected}, draft {expected}" in render_concise(doc)
    console = Console(record=True, width=200)
    render_verify(console, doc)
    assert f"target {expected}, draft {expected}" in console.export_text()


def tail_loop(ids: list[int], longest: int) -> tuple[int | None, int]:
    """Derived here from the definition (kconvert/engines/output_health.py): the period p <= `longest` whose whole
    copies at the end of `ids`, compared as slices, cover the most tokens (the shortest among equals), and how many
    copies that is; (None, 0) when no period repeats at least twice."""
    best: tuple[int | None, int] = (None, 0)
    for p in range(1, longest + 1):
        r = 0
        while p * (r + 1) <= len(ids) and ids[len(ids) - p * (r + 1):] == ids[len(ids) - p:] * (r + 1):
            r += 1
        if r >= 2 and (best[0] is None or p * r > best[0] * best[1]):
            best = (p, r)
    return best


def check_output_health(doc: dict, outputs: list[list[int]]) -> dict:
    """The report's output-health block against a derivation from the token ids the engine generated."""
    h = doc["live"]["output_health"]
    assert h["prompts"] == len(outputs) == len(h["per_prompt"])
    for ids, got in zip(outputs, h["per_prompt"]):
        p, r = tail_loop(ids, h["max_cycle_length"])
        assert (got["tokens"], got["distinct_share"]) == (len(ids), len(set(ids)) / len(ids))
        assert (got["cycle_length"], got["cycle_repeats"]) == (p, r)
        assert got["degenerate"] == (p is not None and p * r >= h["min_loop_share"] * len(ids))
    assert h["degenerate_prompts"] == sum(p["degenerate"] for p in h["per_prompt"])
    return h


def test_the_examples_outputs_are_recorded_and_pass_the_default_health_gate(good):
    """The shipped target is untrained and loops on many prompts, measured in bench/NOTES.md "Output health"
    (float32, `all`: 40 of 96 outputs degenerate, 0.417); the measured default limit, 0.75, lets it pass: these
    runs are the healthy side of that measurement."""
    name, vr = good
    doc = build_verify_report(vr)
    h = check_output_health(doc, vr.live.output_token_ids)
    assert h["degenerate_share"] <= DEFAULT_MAX_DEGENERATE_SHARE, f"{name}: {h['degenerate_share']:.3f}"
    (check,) = evaluate(Thresholds(max_degenerate_share=DEFAULT_MAX_DEGENERATE_SHARE), vr.acceptance, h)
    assert check.passed, check.message


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
    forced = run_verify(path, engine_args=FP32, skip_static=True)  # must run: these variants load in vLLM
    assert al(forced) <= good_al - MIN_LOSS, f"{variant}: live AL {al(forced):.3f} vs good {good_al:.3f}"


# The fixed variant proven live: the lm_head re-selection of the Llama draft, the one fix that rewrites tensor
# bytes. Every fixed variant is shown equal to its good draft in what the engine reads (below: the same tensors
# byte for byte, the same reading of the config), tests/test_score_live.py scores each fixed variant with its
# good draft's counters (score's counters equal the engine's in float32), and `scripts/demo.sh` verifies the
# fixed K404 variant live in bf16; more live runs (about 90 s each here) would measure the same drafts again.
LIVE_FIXED = {"lm-head-wrong-prune"}


def tensor_digests(folder: Path) -> dict[str, str]:
    import hashlib

    import torch
    from safetensors import safe_open

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                t = st.get_tensor(name).contiguous()
                out[name] = f"{t.dtype}:{tuple(t.shape)}:" + hashlib.sha256(
                    t.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    return out


def engine_reading_of(path) -> dict:
    from kconvert.engines.expectations import engine_rules
    from kconvert.score.reading import engine_reading
    from kconvert.targets import load_target

    tgt = load_target(TARGET)
    return engine_reading(inspect(str(path), target=TARGET).draft, engine_rules("vllm", None),
                          tgt.num_hidden_layers, tgt.vocab_size).describe()


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_fix_brings_each_broken_variant_back(variant, tmp_path):
    base, opts, _ = BROKEN[variant]
    out = tmp_path / "fixed"
    result = fix(str(TINY / "broken" / variant), out, target=TARGET, options=Options(**opts))
    assert not result.noop
    assert result.remaining_fixable() == []
    good = TINY / GOOD[base]
    # the fix gives back the good draft: the same tensors byte for byte, read by vLLM the same way
    assert tensor_digests(out) == tensor_digests(good)
    assert engine_reading_of(out) == engine_reading_of(good)
    if variant not in LIVE_FIXED:
        return
    vr = run_verify(str(out), engine_args=FP32)
    assert not vr.static_blocked
    good_al = al(good_fp32(base))
    assert al(vr) >= good_al - RESTORED_WITHIN, f"{variant} fixed: AL {al(vr):.3f} (good {base} draft: {good_al:.3f})"
    assert al(vr) >= MIN_GOOD_AL


def test_greedy_outputs_with_the_draft_equal_the_targets_alone():
    vr = good_fp32("mla")
    assert vr.lossless is not None and vr.lossless["identical"], vr.lossless
    assert vr.lossless["tokens_compared"] > 0


# TP=8 puts eight CPU workers on this machine's cores: the run costs ~3x a TP=1 run per prompt. It runs the first
# 32 prompts of `all` (the math set): float32 AL at TP 8, k=4 measured 2.7530 (per position 0.525 / 0.436 / 0.401 /
# 0.392; `kconvert verify ... --max-prompts 32 --tensor-parallel-size 8 --speculative-config <SEED_SPEC>
# --engine-arg dtype=float32`), so the floor stays MIN_GOOD_AL with 0.25 of margin.
TP8_PROMPTS = 32


def seed_run(draft: str, **kw):
    """The seed deployment's serve line replayed on the tiny example: TP 8, draft at TP 8, k=4, float32."""
    return run_verify(draft, engine_args=FP32, replay=(SEED_SPEC, SEED_TP), max_prompts=TP8_PROMPTS, **kw)


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
    assert len(eight.live.output_token_ids) == TP8_PROMPTS
    assert eight.live.output_token_ids == one.live.output_token_ids[:TP8_PROMPTS]
    assert sum(map(len, eight.live.output_token_ids)) > 0


def test_counters_at_tp8_equal_the_engines_own():
    check_counters(seed_run(str(TINY / GOOD["mla"])))


def test_a_broken_variant_is_still_refused_under_the_seed_serve_line():
    """The seed's serve line does not change the gate's answer: the SGLang-convention ids are refused (K404) before
    any engine starts. (Forced live at TP 8, the engine's default layers cost what they cost at TP 1: no-aux-ids
    2.5388 vs 2.7743 in float32 at both, examples/tiny/README.md; not re-run here, a TP=8 engine costs minutes.)"""
    vr = run_verify(str(TINY / "broken" / "aux-ids-sglang-convention"), engine_args=FP32,
                    replay=(SEED_SPEC, SEED_TP), max_prompts=TP8_PROMPTS)
    assert vr.static_blocked and vr.live is None and vr.exit_code == 1
    assert "K404" in {f.id for f in vr.inspect.errors}
    assert vr.settings.tp == 8 and vr.settings.draft_tp == 8 and vr.settings.num_speculative_tokens == 4


def test_cli_gate_refuses_a_looping_target_whose_acceptance_alone_would_pass(tmp_path):
    """The CLI end to end on the shipped target's looping copy (tests/live_runs.py looping_target) with a good draft:
    the acceptance clears the example's floor, and the output-health gate still fails the run (exit 1), in the JSON,
    JUnit and Markdown reports and in every format verify prints; a statically refused variant exits 1 before any
    engine starts. (This run replaced a passing CLI run on the shipped target: tests/test_cli_live.py passes the
    CLI with the default health gate on its factory pair, and the runs above pass the example.)"""
    from kconvert.report.formats import formats, get
    from kconvert.schemas import validate

    env = dict(os.environ, CI="")
    base = [sys.executable, "-m", "kconvert", "verify"]
    common = ["--max-prompts", "8", "--max-tokens", "32", "--no-lossless"]
    target = looping_target(tmp_path / "looping-target")
    run = subprocess.run(base + [str(TINY / GOOD["mla"]), "--target", str(target)] + common + [
        "--engine-arg", "dtype=float32", "--min-acceptance-length", str(MIN_GOOD_AL),
        "--report", str(tmp_path / "v.json"), "--junit", str(tmp_path / "v.xml"), "--markdown", str(tmp_path / "v.md")],
        capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    doc = json.loads((tmp_path / "v.json").read_text())
    validate(doc, "report")
    assert doc["verdict"] == "fail" and doc["exit_code"] == 1 and all(f["sha256"] for f in doc["subject"]["files"])
    checks = {c["name"]: c for c in doc["thresholds"]["checks"]}
    # the acceptance alone passes: the draft predicts the loop
    assert checks["min_acceptance_length"]["passed"], checks
    assert doc["live"]["acceptance"]["mean_acceptance_length"] >= MIN_GOOD_AL
    # the outputs it was counted on are one token repeated, and the health gate says so
    outputs = [[LOOP_TOKEN] * 32] * 8
    h = check_output_health(doc, outputs)
    assert h["degenerate_prompts"] == 8 and h["median_distinct_share"] == 1 / 32
    health = checks["max_degenerate_share"]
    assert not health["passed"] and health["required"] == DEFAULT_MAX_DEGENERATE_SHARE and health["observed"] == 1.0
    assert "not the draft's quality" in health["message"]
    junit = ET.fromstring((tmp_path / "v.xml").read_text())
    failed = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed == ["max_degenerate_share"], failed
    md = (tmp_path / "v.md").read_text()
    assert "Output health of the target's outputs: 8 of 8 outputs degenerate (100%)" in md
    assert f"❌ {health['message']}" in md
    # every format verify prints or writes carries the failed check (the machine formats by its name)
    for fmt in formats():
        if fmt.renders("verify") and fmt.render is not None:
            out = fmt.render("verify", doc)
            assert "max_degenerate_share" in out or health["message"] in out, fmt.name
    console = Console(record=True, width=250)
    render_verify(console, doc)
    text = " ".join(console.export_text().split())  # rich wraps the long line
    assert f"FAIL {health['message']}" in text and "8 of 8 outputs degenerate (100%)" in text
    assert get("concise").render("verify", doc).count("output health: 8 of 8 outputs degenerate") == 2

    refused = subprocess.run(base + [str(TINY / "broken" / "d2t-absolute"), "--target", TARGET] + common + [
        "--junit", str(tmp_path / "r.xml")], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "no engine was started" in refused.stdout
    assert "K502" in (tmp_path / "r.xml").read_text()
