"""`kconvert trace --engine vllm` on the shipped tiny example, live: a trace recorded inside vLLM (its
extract_hidden_states method, vLLM PR #33736) scores the MLA and the Llama-layer draft as the engine counts them.

float32: one recording run (an engine start of this module) against the live tier's float32 runs of both good drafts (tests/live_runs.py, shared with test_examples_live and test_score_live): the trace holds every
request's output token for token, and score's counters equal the engine's.

bfloat16, the Llama-layer draft: one recording run and one live run on the first 24 prompts, both on the kernel
path verify gives that draft (VLLM_MLA_DISABLE=1): the trace holds the run's output token for token and score is
within 0.01 AL. The MLA draft in bf16 is opt-in (KCONVERT_SLOW=1), with the MLA path's measured gap.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

from kconvert.score import ScoreSettings, score  # noqa: E402
from kconvert.trace.record_vllm import record_trace_vllm  # noqa: E402
from kconvert.trace.request import TraceRequest  # noqa: E402
from kconvert.trace.format import open_trace  # noqa: E402
from tests.live_runs import FP32, GOOD, TARGET, TINY, al, run_verify  # noqa: E402

pytestmark = pytest.mark.live

THREADS = 2


@pytest.fixture(scope="module")
def engine_trace_fp32(tmp_path_factory):
    out = tmp_path_factory.mktemp("engine-trace") / "fp32"
    return record_trace_vllm(TraceRequest(target=TARGET, out=str(out), prompts="all", max_tokens=64, layers="all",
                                          dtype="float32", lookahead=8))


def _counters(c) -> dict:
    return {"drafts": c["drafts"], "draft_tokens": c["draft_tokens"], "accepted": c["accepted"],
            "accepted_per_pos": list(c["accepted_per_pos"])}


@pytest.mark.parametrize("family", ["mla", "llama"])
def test_float32_engine_trace_scores_what_the_live_engine_counts(family, engine_trace_fp32):
    vr = run_verify(str(TINY / GOOD[family]), engine_args=FP32, lossless=family == "mla")
    tr = open_trace(engine_trace_fp32)
    assert tr.meta.recorder["tool"] == "kconvert trace --engine vllm"
    for i, out in enumerate(vr.live.output_token_ids):
        s = tr.sequence(i)
        assert s.input_ids[s.prompt_len: s.stop].tolist() == out, f"prompt {i}: the trace is not the engine's output"
    sr = score(str(TINY / GOOD[family]), str(engine_trace_fp32), settings=ScoreSettings(threads=THREADS))
    c = vr.live.counters
    assert _counters(sr.result.counters()) == {"drafts": c.drafts, "draft_tokens": c.draft_tokens,
                                               "accepted": c.accepted, "accepted_per_pos": list(c.accepted_per_pos)}
    assert sr.acceptance["mean_acceptance_length"] == pytest.approx(al(vr), abs=1e-12)




# bf16, the Llama-layer draft: verify runs it on the VLLM_MLA_DISABLE=1 kernel path (vllm_args), and the recording
# run is made on the same path. There the engine's greedy tokens do not depend on how a request's positions are
# grouped into steps (measured on all 96 prompts: the recording run, one speculative token per step, and the k=3
# live run emit the same tokens, 96/96), so the trace holds the live run's tokens and only the draft's own bf16
# arithmetic differs (94/96 requests identical step for step; AL 2.8155 vs 2.8176).
BF16_PROMPTS = 24
WITHIN_AL = 0.01  # issue 24: score on an engine trace = live within 0.01 AL in bf16


@pytest.fixture(scope="module")
def nomla_path():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_MLA_DISABLE", "1")
        yield


def test_bfloat16_engine_trace_scores_the_llama_draft_within_001_of_the_live_engine(tmp_path, nomla_path):
    from kconvert.commands.verify import VerifySettings, verify

    trace = record_trace_vllm(TraceRequest(target=TARGET, out=str(tmp_path / "bf16"), prompts="all",
                                           max_prompts=BF16_PROMPTS, max_tokens=64, layers="all", dtype="bfloat16",
                                           lookahead=8))
    draft = str(TINY / GOOD["llama"])
    vr = verify(draft, TARGET, settings=VerifySettings(prompts="all", max_prompts=BF16_PROMPTS, max_tokens=64,
                                                       num_speculative_tokens=3, timeout_s=900))
    tr = open_trace(trace)
    assert tr.meta.recorder["env"].get("VLLM_MLA_DISABLE") == "1" and tr.meta.dtype == "bfloat16"
    for i, out in enumerate(vr.live.output_token_ids):
        s = tr.sequence(i)
        assert s.input_ids[s.prompt_len: s.stop].tolist() == out, f"prompt {i}: the trace is not the engine's output"
    sr = score(draft, str(trace), settings=ScoreSettings(threads=THREADS))
    assert abs(sr.acceptance["mean_acceptance_length"] - al(vr)) <= WITHIN_AL, (sr.result.counters(),
                                                                               vr.live.counters)


# bf16, the MLA draft (opt-in, KCONVERT_SLOW=1: two more engine starts over all 96 prompts). vLLM's CPU build runs
# it on the MLA path only (with VLLM_MLA_DISABLE=1 the draft's MLA layer and the target's plain attention have "No
# common block size for 128 (CPU_ATTN: [MultipleOf(32)]; CPU_MLA: [16])"), and there the greedy tokens depend on
# how positions are grouped into steps, so one trace holds other tokens than each live run: measured, outputs
# identical in 40/96 prompts, AL 2.7555 vs live 2.7111 (0.044). The bound keeps that with margin; it is the
# engine's bf16 MLA kernel, not score (float32 above: equal counters on the same path).
MLA_BF16_WITHIN_AL = 0.08


@pytest.mark.skipif(not os.environ.get("KCONVERT_SLOW"), reason="MLA bf16 engine trace: set KCONVERT_SLOW=1")
def test_bfloat16_engine_trace_scores_the_mla_draft_within_the_mla_paths_measured_gap(tmp_path):
    trace = record_trace_vllm(TraceRequest(target=TARGET, out=str(tmp_path / "bf16"), prompts="all", max_tokens=64,
                                           layers="all", dtype="bfloat16", lookahead=8))
    vr = run_verify(str(TINY / GOOD["mla"]))
    sr = score(str(TINY / GOOD["mla"]), str(trace), settings=ScoreSettings(threads=THREADS))
    assert abs(sr.acceptance["mean_acceptance_length"] - al(vr)) <= MLA_BF16_WITHIN_AL
