"""kconvert score against the live engine, on the shipped tiny example, in the same session.

float32: one trace recorded by `kconvert trace` (HF transformers' greedy continuation) scores the MLA and the
Llama-layer draft exactly as the engine counted them: drafts, drafted tokens, accepted tokens and accepted per
position equal (measured on every draft, broken and fixed variant: bench/score_agreement.py).

bfloat16: the engine's greedy output depends on the draft (the k+1-token verification step and the one-token
decode step round differently; examples/tiny/README.md), so a single trace cannot hold every run's tokens. A trace
teacher-forced on the tokens the live run produced (`kconvert trace --continuations`) isolates score's own
fidelity: then only the target's hidden states differ (HF vs vLLM kernels, in bf16). The tolerance below is the
largest such difference measured on the 13 runs of bench/score_agreement.py (0.034), with margin.

`score --diagnose` on the float32 trace names, for each broken variant, the reading that the fix restores, and
the fixed draft scores as the good draft does.

Live runs come from tests/live_runs.py (cached for the session); the only new engine run is the Llama draft in
float32.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from kconvert.score import ScoreSettings, score  # noqa: E402
from kconvert.trace.record_hf import record_trace  # noqa: E402
from kconvert.trace.request import TraceRequest  # noqa: E402
from kconvert.trace.format import open_trace  # noqa: E402
from tests.live_runs import FP32, GOOD, TARGET, TINY, al, qwen3_layer_draft, run_verify  # noqa: E402

pytestmark = pytest.mark.live

# |score AL - live AL| in bf16 on a trace teacher-forced on the live run's own tokens. Measured
# (bench/score_agreement.py, 13 runs): at most 0.034, for the Llama-layer draft, whose target runs vLLM's non-MLA
# path (HF's argmax differs from the engine's token at 22 % of output positions there, 8 % on the MLA path, 0 %
# in float32); the draft's own arithmetic moves AL by at most 0.002. README "Without the target".
BF16_TOLERANCE = 0.05
THREADS = 2


def _counters(c) -> dict:
    return {"drafts": c["drafts"], "draft_tokens": c["draft_tokens"], "accepted": c["accepted"],
            "accepted_per_pos": list(c["accepted_per_pos"])}


@pytest.fixture(scope="module")
def fp32_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("score-live") / "trace-fp32"
    # two threads (this machine's cores; nothing else runs meanwhile): 62 s wall here (one thread took 260 s in a run
    # shared with other jobs). Against a one-thread recording: the same tokens, hidden states within 6e-4 at the
    # last layer, the same counters for both good drafts.
    return record_trace(TraceRequest(target=TARGET, out=str(out), prompts="all", max_tokens=64, layers="all",
                                     dtype="float32", lookahead=8, threads=THREADS, batch_size=96))


def _live_fp32(family: str):
    if family == "mla":
        # the same run as test_examples_live's lossless check (one engine start for both)
        return run_verify(str(TINY / GOOD["mla"]), engine_args=FP32, lossless=True)
    return run_verify(str(TINY / GOOD[family]), engine_args=FP32)


@pytest.mark.parametrize("family", ["mla", "llama"])
def test_float32_score_counts_what_the_live_engine_counts(family, fp32_trace):
    vr = _live_fp32(family)
    tr = open_trace(fp32_trace)
    for i, out in enumerate(vr.live.output_token_ids):
        s = tr.sequence(i)
        assert s.input_ids[s.prompt_len: s.stop].tolist() == out, f"prompt {i}: the trace is not the engine's output"
    sr = score(str(TINY / GOOD[family]), str(fp32_trace), settings=ScoreSettings(threads=THREADS))
    c = vr.live.counters
    live = {"drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
            "accepted_per_pos": list(c.accepted_per_pos)}
    assert _counters(sr.result.counters()) == live
    assert sr.acceptance["mean_acceptance_length"] == pytest.approx(al(vr), abs=1e-12)


def test_float32_score_of_a_qwen3_layer_draft_counts_what_the_live_engine_counts(fp32_trace, tmp_path_factory):
    """vLLM 0.32 builds Eagle3Qwen3ForCausalLM for `transformer_layer_config.model_type: qwen3` (algos.py,
    qwen3_eagle3.py): the run loading and drafting is the engine's word that q_norm/k_norm are placed, and score,
    which applies them per head before the rotary embedding as qwen3.py does, counts what the engine counted."""
    draft = qwen3_layer_draft(tmp_path_factory.mktemp("qwen3") / "qwen3-draft")
    vr = run_verify(str(draft), engine_args=FP32)
    assert vr.live.counters.drafts > 0
    tr = open_trace(fp32_trace)
    for i, out in enumerate(vr.live.output_token_ids):
        s = tr.sequence(i)
        assert s.input_ids[s.prompt_len: s.stop].tolist() == out, f"prompt {i}: the trace is not the engine's output"
    sr = score(str(draft), str(fp32_trace), settings=ScoreSettings(threads=THREADS))
    c = vr.live.counters
    live = {"drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
            "accepted_per_pos": list(c.accepted_per_pos)}
    assert _counters(sr.result.counters()) == live
    assert sr.acceptance["mean_acceptance_length"] == pytest.approx(al(vr), abs=1e-12)


BF16_RUNS = {
    "mla-torchspec": (GOOD["mla"], {}),
    "llama-speculators": (GOOD["llama"], {}),
    "no-aux-ids": ("broken/no-aux-ids", {"skip_static": True}),
    "lm-head-wrong-prune": ("broken/lm-head-wrong-prune", {"skip_static": True}),
}


# Opt-in (`KCONVERT_SLOW=1 scripts/test.sh -m live -k bfloat16`): each case records a bf16 trace of all 96 prompts
# through HF transformers, whose bf16 matmuls are emulated on CPUs without native bf16 (minutes each), and two
# cases need bf16 engine runs of their own. The CI run keeps the float32 equality and the diagnosis; the bf16
# figures of every draft are measured by bench/score_agreement.py and listed in README "Without the target".
@pytest.mark.skipif(not os.environ.get("KCONVERT_SLOW"), reason="bf16 agreement: set KCONVERT_SLOW=1 (minutes per case)")
@pytest.mark.parametrize("name", sorted(BF16_RUNS))
def test_bfloat16_score_on_the_engines_own_tokens_is_within_the_measured_tolerance(name, tmp_path):
    rel, kw = BF16_RUNS[name]
    path = str(TINY / rel)
    vr = run_verify(path, **kw)
    items = [{"prompt_token_ids": p, "output_token_ids": o, "chat_template_applied": True}
             for p, o in zip(vr.live.prompt_token_ids, vr.live.output_token_ids)]
    trace = record_trace(TraceRequest(target=TARGET, out=str(tmp_path / "t"), layers="all", dtype="bfloat16",
                                      lookahead=8, threads=1, batch_size=96, continuations=items,
                                      continuations_from=f"live {name} bf16"))
    sr = score(path, str(trace), settings=ScoreSettings(threads=1, skip_static=True))
    assert abs(sr.acceptance["mean_acceptance_length"] - al(vr)) <= BF16_TOLERANCE, (
        sr.acceptance["mean_acceptance_length"], al(vr))


# variant -> (the reading diagnose must name, diagnose options, kconvert.fix options, the good draft)
BROKEN = {
    "aux-ids-sglang-convention": ("aux ids [2, 5, 7]", {}, {}, "mla"),
    "d2t-absolute": ("d2t as absolute", {}, {}, "mla"),
    "no-aux-ids": ("aux ids [2, 5, 7]", {}, {"aux_ids": [2, 5, 7]}, "mla"),
    "norm-before-residual-missing": ("norm_before_residual false", {}, {}, "llama"),
    "model-prefixed-keys": ("tensor names without the prefix", {}, {}, "llama"),
    "lm-head-wrong-prune": ("lm_head re-selected", {"lm_head_from": str(TINY / "drafts" / "llama-fullvocab")},
                            {"lm_head_source": str(TINY / "drafts" / "llama-fullvocab")}, "llama"),
}


DIAGNOSE = ScoreSettings(threads=THREADS, skip_static=True, max_sequences=32)
_good_scores: dict = {}


def _good(base: str, trace):
    if base not in _good_scores:
        _good_scores[base] = score(str(TINY / GOOD[base]), str(trace), settings=DIAGNOSE)
    return _good_scores[base]


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_diagnose_names_the_reading_the_fix_restores(variant, fp32_trace, tmp_path):
    from kconvert.commands.fix import fix
    from kconvert.rules import Options

    expected, dkw, fkw, base = BROKEN[variant]
    path = str(TINY / "broken" / variant)
    st = DIAGNOSE
    # the library does what `kconvert score --diagnose` does: score as loaded, then every reading left open
    sr = score(path, str(fp32_trace), settings=dataclasses.replace(st, lm_head_from=dkw.get("lm_head_from")),
               diagnose=True)
    good = _good(base, fp32_trace)
    cands = json.dumps(sr.diagnosis["candidates"], indent=1)
    if variant == "no-aux-ids":
        # Nothing in the files says which layers the draft was trained on, so the search of the recorded layers
        # decides by measurement, and it may find a set the draft accepts more from than its training set: on
        # the shipped example [3, 5, 7] (2.7947 over all 96 sequences in float32, vs 2.7743 for the trained
        # [2, 5, 7]; the engine measured 2.794720 with the draft fixed to [3, 5, 7], the same to the last digit).
        best = next(c for c in sr.diagnosis["candidates"] if c["candidate"] == sr.diagnosis["best"])
        assert sr.diagnosis["best"].startswith("aux ids"), cands
        assert best["mean_acceptance_length"] >= good.acceptance["mean_acceptance_length"] - 0.02, cands
    else:
        assert sr.diagnosis["best"] == expected, cands
        best = next(c for c in sr.diagnosis["candidates"] if c["candidate"] == expected)
        assert best["mean_acceptance_length"] == pytest.approx(good.acceptance["mean_acceptance_length"])
    fixed = tmp_path / "fixed"
    fix(path, fixed, target=TARGET, options=Options(**fkw))
    again = score(str(fixed), str(fp32_trace), settings=st)
    assert again.result.counters() == good.result.counters()


def test_matrix_ranks_the_shipped_drafts_and_variants_in_their_live_order(fp32_trace):
    """Issue 22: `kconvert matrix --trace` over the shipped drafts and broken variants ranks them by scored AL in
    the order the live engine measures them. Oracle: the float32 engine runs of this session (tests/live_runs.py,
    vLLM's own counters; the two good drafts' runs are the ones the tests above make), one per draft the ranking
    holds. A draft whose static checks fail on vLLM 0.32 is never ranked (inspect exits 1 for it)."""
    from kconvert.commands.inspect import inspect
    from kconvert.matrix import MatrixRequest, run_matrix

    drafts = sorted(str(p) for g in ("drafts", "broken") for p in (TINY / g).iterdir() if (p / "config.json").is_file())
    doc = run_matrix(MatrixRequest(drafts=drafts, target=TARGET, engines="vllm:0.32", trace=str(fp32_trace),
                                   score_threads=THREADS))
    static_fail = {d for d in drafts if inspect(d, target=TARGET, engine="vllm", engine_version="0.32").exit_code}
    ranked = doc["ranking"]["order"]
    assert set(ranked) == set(drafts) - static_fail and len(ranked) >= 4
    assert all(d["rank"] is None for d in doc["drafts"] if d["draft"] in static_fail)
    runs = {TINY / GOOD["mla"]: dict(lossless=True)}  # the lossless run test_examples_live shares
    live = {d: al(run_verify(d, engine_args=FP32, **runs.get(Path(d), {}))) for d in ranked}
    measured = [live[d] for d in ranked]
    assert measured == sorted(measured, reverse=True), list(zip(ranked, measured))
    scored = {d["draft"]: d["score"]["acceptance_length"] for d in doc["drafts"] if d["draft"] in ranked}
    for d in ranked:  # float32: the score counts what the engine counts (the tests above), so the figures agree
        assert scored[d] == pytest.approx(live[d], abs=1e-9), d
