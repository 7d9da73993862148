"""kconvert/score/walk.py, runner.py and weights.py, kconvert/source/tensor_read.py and kconvert/trace/device.py
(the weights reader, the engine's reading of a draft, the verify-step walks, torch's device and threads) against
facts outside it:

- verify steps and acceptance counters derived by hand from vLLM 0.32's greedy rule
  (v1/sample/rejection_sampler.py rejection_greedy_sample_kernel; v1/core/sched/scheduler.py: a request drafts while
  it has emitted fewer than its output length), each count written out in a comment;
- the tensor names and shapes vLLM 0.32's EAGLE-3 loaders allocate (vllm/model_executor/models/llama_eagle3.py,
  deepseek_eagle3.py, qwen3.py; paths below), written out as literals;
- tensor bytes as safetensors' own loader reads them (safetensors.torch.load_file), and the spec's header layout;
- the messages a user reads, spelled out here as the user sees them.

Engine-free; the draft scored is tests/score_factories.py constant_proposer (its lm_head is all zeros, so every
logit is 0 and argmax picks draft id 0: torch documents that ties give the first maximal index) on hand_pattern's
trace, whose verify steps are derived by hand there.
"""
from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kconvert.engines.expectations import engine_rules  # noqa: E402
from kconvert.errors import InputError, UsageError  # noqa: E402
from kconvert.formats.canonical import read_draft  # noqa: E402
from kconvert.score import runner as score_runner  # noqa: E402
from kconvert.score import walk as score_walk  # noqa: E402
from kconvert.score import weights as score_weights  # noqa: E402
from kconvert.source import tensor_read  # noqa: E402
from kconvert.trace import device as torch_device  # noqa: E402
from kconvert.score.reading import engine_reading  # noqa: E402
from kconvert.score.runner import expected_shape, required_weights  # noqa: E402
from kconvert.score.walk import (  # noqa: E402
    ReadingScore, SequenceScore, every_position, reference_tokens, replay, score_reading, sequence_inputs)
from kconvert.score.weights import WeightCache  # noqa: E402
from kconvert.trace.format import Sequence, open_trace  # noqa: E402
from kconvert.source import open_checkpoint  # noqa: E402
from tests.score_factories import HAND_COUNTERS, V, constant_proposer, hand_pattern, pattern_trace  # noqa: E402

VLLM = engine_rules("vllm", "0.32/v1")
torch.set_num_threads(1)


def _seq(x, y, P, out, index=0) -> Sequence:
    return Sequence(index, 0, np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64), P, out)


# ------------------------------------------------------------------------------------- every_position ---

def test_every_position_counts_each_cursor_by_hand():
    # a trace that is the target's own everywhere: y[i] = x[i + 1] (and y[7] = 99, the target's token after it)
    x = [10, 11, 12, 13, 14, 15, 16, 17]
    y = x[1:] + [99]
    s = _seq(x, y, 1, 7, index=7)
    drafts = np.array([[13, 14, 15], [0, 0, 0], [17, 99, 0], [99, 0, 0]])
    r = every_position(s, drafts, np.array([1, 2, 5, 6]), 3)
    # cursor 1: drafted tokens must be y[2], y[3], y[4] = 13, 14, 15: all three accepted
    # cursor 2: y[3] = 14 wanted, 0 drafted: 0
    # cursor 5: y[6] = 17, y[7] = 99 accepted; the third would be the target's token at position 8, past the
    #           trace's 8 tokens: 1 unknown
    # cursor 6: y[7] = 99 accepted; the second lies at position 8: 2 unknown
    assert r.steps == [3, 0, 2, 1]
    assert r.unknown == 1 + 2
    assert (r.index, r.positions) == (7, 4)


def test_every_position_stops_where_the_traces_token_is_not_the_targets():
    # the target at position 1 emits 40 (y[1]) but the trace goes on with x[2] = 12: the states at 2 and after are
    # not the target's own path, so drafted token 1 at cursor 0 (which would be checked against y[2]) is unknown
    x = [10, 11, 12, 13, 14, 15]
    y = [11, 40, 13, 14, 15, 99]
    r = every_position(_seq(x, y, 1, 5), np.array([[40, 13, 14]]), np.array([0]), 3)
    assert r.steps == [1] and r.unknown == 2


# ------------------------------------------------------------------------------------------------ replay ---

def test_replay_by_hand_with_a_short_lookahead_twice():
    # prompt 2, output 4 (stop 6), 7 tokens recorded (lookahead 1); the engine emitted x2 after the prefill.
    x = [10, 11, 12, 13, 14, 15, 16]
    s = _seq(x, x[1:] + [0], 2, 4, index=3)
    # cursor 1 (first): k = 3 drafted vs x3, x4, x5: [13, 0, 0] accepts 1 -> cursor 3 (emitted x2..x4, 3 of 4)
    # cursor 3: vs x5, x6, x7: [15, 16, 17]: x5, x6 accepted, x7 is past the 7 tokens: 1 unknown -> cursor 6: done
    drafts = np.zeros((4, 3), dtype=np.int64)  # cursors 1 .. stop - 3 = 3
    drafts[0] = [13, 0, 0]
    drafts[2] = [15, 16, 17]
    r = replay(s, drafts, 1, 3)
    assert r.steps == [1, 2] and r.unknown == 1 and (r.index, r.positions) == (3, 4)
    # the same trace one token shorter (x6 not recorded): cursor 3 accepts x5, then x6 and x7 are unknown
    s2 = _seq(x[:6], x[1:6] + [0], 2, 4)
    drafts[1] = [0, 0, 0]
    r2 = replay(s2, drafts, 1, 3)
    assert r2.steps == [1, 1] and r2.unknown == 2


def test_replay_with_a_first_cursor_offset():
    # drafts[c - first_cursor]: rows start at cursor 4 (prompt 5); one step of three accepted ends output 4
    x = list(range(30, 42))
    s = _seq(x, x[1:] + [0], 5, 4)
    drafts = np.array([[x[6], x[7], x[8]], [0, 0, 0], [0, 0, 0]])
    assert replay(s, drafts, 4, 3).steps == [3]  # 1 (prefill) + 3 + 1 = 5 >= 4 emitted


# ------------------------------------------------------------------------------- sequence_inputs / reference ---

class _FakeTrace:
    """hidden(seq, layer, count): a [count, 2] block whose values name the layer and the position."""

    def hidden(self, seq, layer, count):
        pos = torch.arange(count, dtype=torch.float32)[:, None]
        return torch.cat([pos * 0 + layer, pos], dim=1)


def test_sequence_inputs_replay_by_hand():
    # prompt 3, output 4 (stop 7), 9 tokens: replay cursors 2 .. stop - 3 = 4; the draft needs positions 0..4
    x = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    s = _seq(x, x[1:] + [0], 3, 4)
    tokens_next, aux, cursors, first = sequence_inputs(_FakeTrace(), s, (2, 5), "replay")
    assert tokens_next.tolist() == [11, 12, 13, 14, 15]  # the token after each of positions 0..4
    assert cursors.tolist() == [2, 3, 4] and first == 2
    assert aux.tolist() == [[2, p, 5, p] for p in range(5)]  # layers in the reading's order, concatenated
    # output 1: the engine emits that token after the prefill and never verifies: nothing to draft
    assert sequence_inputs(_FakeTrace(), _seq(x, x[1:] + [0], 3, 1), (2,), "replay") is None
    # output 2: one verify step, at cursor 2 (stop - 3 = 2)
    got = sequence_inputs(_FakeTrace(), _seq(x, x[1:] + [0], 3, 2), (2,), "replay")
    assert got[2].tolist() == [2] and got[0].tolist() == [11, 12, 13]


def test_sequence_inputs_every_position_keeps_the_cursors_whose_next_token_is_the_targets():
    # prompt 2, 7 tokens; positions 1..min(stop - 2, length - 2) = 1..5; y[c] == x[c + 1] at 1, 3, 5 only
    # (y0 = x1 too, but position 0 lies inside the prompt: the engine drafts first after the prefill, at P - 1)
    x = [10, 11, 12, 13, 14, 15, 16]
    y = [11, 12, 99, 14, 99, 16, 0]
    s = _seq(x, y, 2, 20)
    tokens_next, aux, cursors, first = sequence_inputs(_FakeTrace(), s, (1,), "every-position")
    assert cursors.tolist() == [1, 3, 5] and first == 1
    assert tokens_next.tolist() == [11, 12, 13, 14, 15, 16]  # positions 0..5
    assert aux.tolist() == [[1, p] for p in range(6)]  # the states of the same positions, no more
    # output shorter than the trace: positions up to stop - 2 = 3 (prompt 2 + output 3 = 5)
    _, _, c2, _ = sequence_inputs(_FakeTrace(), _seq(x, y, 2, 3), (1,), "every-position")
    assert c2.tolist() == [1, 3]
    # no position whose next token is the target's: nothing to draft
    assert sequence_inputs(_FakeTrace(), _seq(x, [0] * 7, 2, 20), (1,), "every-position") is None
    # a prompt of 6: one cursor left, 5 (= length - 2, whose next token x6 = 16 is y5); a prompt of 7 fills the
    # trace: nothing to draft
    assert sequence_inputs(_FakeTrace(), _seq(x, y, 6, 20), (1,), "every-position")[2].tolist() == [5]
    assert sequence_inputs(_FakeTrace(), _seq(x, y, 7, 20), (1,), "every-position") is None


def test_reference_tokens_by_hand():
    x = [10, 11, 12, 13, 14, 15, 16]
    s = _seq(x, x[1:] + [0], 2, 4)
    # replay: drafted token j at cursor c must equal x[c + 2 + j]; past the 7 tokens: -1
    assert reference_tokens(s, np.array([1, 3, 4]), 3, "replay").tolist() == [
        [13, 14, 15], [15, 16, -1], [16, -1, -1]]
    # every position: token j must equal y[c + 1 + j] while x[c + 1 + j] == y[c + j] (the trace is the target's
    # own) for j > 0; once one is -1 the rest are too
    y = [11, 12, 50, 14, 15, 16, 77]  # the target would emit 50 after position 2; the trace has x3 = 13
    s2 = _seq(x, y, 1, 6)
    assert reference_tokens(s2, np.array([0, 1, 3, 5]), 3, "every-position").tolist() == [
        [12, 50, -1],   # cursor 0: y1 = 12; y2 = 50 (x2 == y1); j=2: x3 = 13 != y2 = 50: -1
        [50, -1, -1],   # cursor 1: y2; j=1: x3 != y2: -1
        [15, 16, 77],   # cursor 3: y4, y5 (x5 == y4), y6 (x6 == y5)
        [77, -1, -1]]   # cursor 5: y6; position 7 is past the trace
    # a target that repeats its last token (y6 = x6 = 16): still nothing past the trace's 7 tokens
    s3 = _seq(x, [11, 12, 13, 14, 15, 16, 16], 1, 6)
    assert reference_tokens(s3, np.array([5]), 2, "every-position").tolist() == [[16, -1]]


# -------------------------------------------------------------------------------------------- counters ---

def test_counters_and_positions_over_sequences():
    # k = 3, steps [1, 3] and [0]: 3 drafts, 9 draft tokens, 4 accepted; position 0 accepted in 2 steps (the 1
    # and the 3), positions 1 and 2 in one (the 3); AL = 1 + 4/3; positions 5 + 4, unknown 2 + 1
    s = ReadingScore(reading=None, sequences=[SequenceScore(0, [1, 3], positions=5, unknown=2),
                                              SequenceScore(1, [0], positions=4, unknown=1)], k=3)
    assert s.counters() == {"drafts": 3, "draft_tokens": 9, "accepted": 4, "accepted_per_pos": [2, 1, 1]}
    assert (s.positions, s.unknown) == (9, 3)
    acc = s.acceptance()
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 4 / 3)
    # per position: accepted at i over drafts (2/3, 1/3, 1/3); conditional: over the position before (2/3, 1/2, 1)
    assert acc["num_speculative_tokens"] == 3 and acc["accepted_per_pos"] == [2, 1, 1]
    assert acc["per_position"] == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert acc["conditional"] == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert acc["acceptance_rate"] == pytest.approx(4 / 9)
    s.error = "it fails"
    assert s.acceptance() is None and s.mean_acceptance_length is None


# --------------------------------------------------------------------------------- score_reading end to end ---

@pytest.fixture(scope="module")
def control(tmp_path_factory):
    root = tmp_path_factory.mktemp("control")
    draft, z = constant_proposer(root / "eagle3")
    checked, steps = hand_pattern(z, z + 1)
    trace = pattern_trace(root / "t", checked, avoid={z, z + 1})
    d = read_draft(open_checkpoint(str(draft)))
    reading = engine_reading(d, VLLM, 8, V)
    return d, reading, open_trace(trace), steps


def _weights(d):
    return WeightCache(d, torch.float32, torch.device("cpu"))


def test_score_reading_walks_the_hand_derived_steps(control):
    import time

    d, reading, tr, steps = control
    seen = []
    t0 = time.perf_counter()
    out = score_reading(d, reading, tr, _weights(d), k=3, mode="replay", progress=lambda a, b: seen.append((a, b)))
    assert 0 < out.seconds <= time.perf_counter() - t0
    assert out.error is None and out.reading is reading and (out.k, out.mode) == (3, "replay")
    assert [s.steps for s in out.sequences] == steps
    assert [s.index for s in out.sequences] == [0, 1, 2]
    assert out.counters() == HAND_COUNTERS
    assert seen == [(1, 3), (2, 3), (3, 3)]
    # replay drafts at cursors P - 1 .. stop - 3 = 3 .. 13: 11 a sequence
    assert out.positions == 33 and out.unknown == 0
    assert out.flops > 0 and out.seconds > 0
    # chained steps run only where the chain is still accepted: at step s of a sequence (cursor s + 3) the chain
    # runs step 1 if u[s] == z and step 2 if u[s] == u[s + 1] == z, for s = 0..10:
    #   seq 0  u = z z z w z w w z z w z z ...: 2 2 1 0 1 0 0 2 1 0 2 = 11;  seq 1 (w): 0;  seq 2 (z): 11 x 2 = 22
    assert out.chained_rows == 11 + 0 + 22


def test_score_reading_with_one_drafted_token(control):
    d, reading, tr, _ = control
    # k = 1, hand_pattern's seq 0  u = z z z w z w w z z w z z z z w: a step accepts u[s] == z, then s += a + 1,
    # while s < 11: s=0 z 1; s=2 z 1; s=4 z 1; s=6 w 0; s=7 z 1; s=9 w 0; s=10 z 1; s=12 stop
    # seq 1 (all w): 11 steps of 0; seq 2 (all z): s = 0, 2, 4, 6, 8, 10: 6 steps of 1
    out = score_reading(d, reading, tr, _weights(d), k=1, mode="replay")
    assert [s.steps for s in out.sequences] == [[1, 1, 1, 0, 1, 0, 1], [0] * 11, [1] * 6]
    # 7 + 11 + 6 = 24 drafts of one token, 5 + 0 + 6 = 11 accepted
    assert out.k == 1 and out.counters() == {"drafts": 24, "draft_tokens": 24, "accepted": 11,
                                             "accepted_per_pos": [11]}
    with pytest.raises(UsageError, match="^-k must be at least 1$"):
        score_reading(d, reading, tr, _weights(d), k=0, mode="replay")


def test_score_reading_every_position_by_hand(control):
    d, reading, tr, _ = control
    # pattern_trace: prompt 4, the target's label y[t] = x[t + 1] from t = 3 on, u = x[5:]; every-position
    # cursors 3 .. min(stop - 2, length - 2) = 3 .. 14, all the target's own; drafted token j at cursor c must be
    # y[c + 1 + j] = u[c - 3 + j]: at s = c - 3 the step is the run of z's from u[s], at most 3
    #   seq 0  u = z z z w z w w z z w z z z z w: s=0..11: 3 2 1 0 1 0 0 2 1 0 3 3
    #   seq 1  (w): 0 x 12;  seq 2 (z): 3 x 12
    out = score_reading(d, reading, tr, _weights(d), k=3, mode="every-position")
    assert out.mode == "every-position"
    assert [s.steps for s in out.sequences] == [[3, 2, 1, 0, 1, 0, 0, 2, 1, 0, 3, 3], [0] * 12, [3] * 12]
    assert out.positions == 36 and out.unknown == 0


def test_score_reading_with_a_reselected_head(tmp_path, control):
    # the factory draft without lm_head, its rows re-selected from a full head whose every row is 0: every logit
    # 0, argmax draft id 0 (torch: the first maximal index), mapped through the factory's d2t to the same z as
    # constant_proposer (the same factory draft, whose lm_head it zeroes)
    _, _, tr, steps = control
    d = _draft(tmp_path, tensors=lambda t: t.pop("lm_head.weight"))
    r = engine_reading(d, VLLM, 8, V).with_(lm_head="reselected", lm_head_source="full")
    out = score_reading(d, r, tr, _weights(d), k=3, mode="replay", lm_head_source=lambda p: torch.zeros(V, 64))
    assert out.error is None and [s.steps for s in out.sequences] == steps


def test_score_reading_of_sequences_with_nothing_to_draft(tmp_path, control):
    from tests.score_factories import meta, write_trace

    d, reading, _, _ = control
    g = torch.Generator().manual_seed(0)
    m = meta(lookahead=2)
    seqs = []
    for _ in range(2):  # output 1: the prefill emits the one token, no verify step
        ids = torch.randint(20, V, (7,), generator=g).tolist()
        seqs.append({"ids": ids, "next": ids[1:] + [21], "prompt_len": 4, "output_len": 1,
                     "hidden": {k: torch.randn(7, 64, generator=g) for k in m.layers}})
    t = open_trace(write_trace(tmp_path / "t", seqs, m, torch.randn(V, 64, generator=g)))
    out = score_reading(d, reading, t, _weights(d), k=3, mode="replay")
    assert out.error is None and [(s.index, s.steps, s.positions) for s in out.sequences] == [(0, [], 0), (1, [], 0)]
    assert out.counters()["drafts"] == 0 and out.chained_rows == 0


def test_score_reading_of_some_sequences_in_small_batches(control, monkeypatch):
    d, reading, tr, steps = control
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 20)  # 14 positions a sequence: one sequence a batch
    out = score_reading(d, reading, tr, _weights(d), k=3, mode="replay", sequences=[2, 0])
    assert [s.index for s in out.sequences] == [2, 0]
    assert [s.steps for s in out.sequences] == [steps[2], steps[0]]


def test_batches_hold_up_to_batch_rows_positions_a_longer_sequence_alone(control, monkeypatch):
    d, reading, tr, _ = control
    # each pattern_trace sequence: prompt 4, output 12: replay needs positions 0 .. stop - 3 = 13, 14 rows
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 28)
    groups = list(score_walk._batches(tr, [0, 1, 2], reading.aux_ids, "replay", 3))
    assert [[g[0].index for g in grp] for grp in groups] == [[0, 1], [2]]  # 14 + 14 = 28 fits, + 14 does not
    assert [g[2] for grp in groups for g in grp] == [3, 3, 3]  # the first cursor, P - 1
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 27)
    groups = list(score_walk._batches(tr, [0, 1, 2], reading.aux_ids, "replay", 3))
    assert [[g[0].index for g in grp] for grp in groups] == [[0], [1], [2]]
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 10)  # shorter than a sequence: each alone, none empty
    groups = list(score_walk._batches(tr, [0, 1, 2], reading.aux_ids, "replay", 3))
    assert [[g[0].index for g in grp] for grp in groups] == [[0], [1], [2]]
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 42)
    groups = list(score_walk._batches(tr, [0, 1, 2, 0], reading.aux_ids, "replay", 3))
    assert [[g[0].index for g in grp] for grp in groups] == [[0, 1, 2], [0]]
    # the reference tokens of each sequence go with it: replay's x[c + 2 + j] (pattern_trace: u = x[5:])
    ref = groups[0][2][1].reference
    assert ref.tolist()[0] == tr.sequence(2).input_ids[5:8].tolist()


def test_a_sequence_with_nothing_to_draft_keeps_its_place(tmp_path, control):
    from tests.score_factories import meta, write_trace

    d, reading, tr, _ = control
    # three sequences of prompt 4; the middle one has output 1: the prefill emits it, no verify step runs
    g = torch.Generator().manual_seed(0)
    m = meta(lookahead=2)
    seqs = []
    for out_len in (3, 1, 3):
        n = 4 + out_len + 2
        ids = torch.randint(20, V, (n,), generator=g).tolist()
        seqs.append({"ids": ids, "next": ids[1:] + [21], "prompt_len": 4, "output_len": out_len,
                     "hidden": {k: torch.randn(n, 64, generator=g) for k in m.layers}})
    t = open_trace(write_trace(tmp_path / "t", seqs, m, torch.randn(V, 64, generator=g)))
    groups = list(score_walk._batches(t, [0, 1, 2], reading.aux_ids, "replay", 3))
    assert [[(x[0].index, x[1] is None) for x in grp] for grp in groups] == [[(0, False), (1, True), (2, False)]]
    out = score_reading(d, reading, t, _weights(d), k=3, mode="replay")
    # output 3: the engine emitted x4 after the prefill; it verifies at cursors 3 and (after a rejection) 4:
    # the constant draft token z is not among the random ids (>= 20 > z), so 0 accepted, 2 steps
    assert [s.index for s in out.sequences] == [0, 1, 2]
    assert [s.steps for s in out.sequences] == [[0, 0], [], [0, 0]]
    assert [s.positions for s in out.sequences] == [2, 0, 2]


def test_score_reading_names_the_layers_a_trace_lacks(control):
    d, reading, tr, _ = control
    r = reading.with_(aux_ids=(2, 5, 77))
    with pytest.raises(UsageError) as e:
        score_reading(d, r, tr, _weights(d), k=3, mode="replay")
    assert str(e.value) == (f"the reading feeds target layers [2, 5, 77], the trace holds {tr.meta.layers} "
                            "(missing [77]); record the trace with --layers including them")


def test_score_reading_keeps_a_draft_failure_as_the_readings_error(control):
    d, reading, tr, _ = control
    # two aux layers into an fc made for three: vLLM's loader fails on the shape (fc is [64, 3 x 64])
    import time

    t0 = time.perf_counter()
    out = score_reading(d, reading.with_(aux_ids=(2, 5)), tr, _weights(d), k=3, mode="replay")
    assert 0 < out.seconds <= time.perf_counter() - t0
    assert out.error == ("fc.weight is [64, 192] but the reading feeds 2 aux states of width 64 ([2, 5]): vLLM "
                         "fails to load it (shape mismatch)")
    assert out.sequences == [] and out.acceptance() is None and out.seconds > 0


# -------------------------------------------------------------------------------- names and shapes vLLM loads ---

def test_required_weights_are_the_tensors_vllms_eagle3_layers_read():
    # vllm/model_executor/models/llama_eagle3.py: LlamaModel has fc, norm and layers; each LlamaDecoderLayer has
    # self_attn (qkv_proj stacked from q/k/v_proj, o_proj), mlp (gate_up_proj from gate/up_proj, down_proj),
    # input_layernorm, post_attention_layernorm; hidden_norm is read in forward only when layer_idx == 0
    layer = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
             "input_layernorm.weight", "post_attention_layernorm.weight"]
    assert required_weights("llama", 2, False) == (
        ["fc.weight", "norm.weight"] + [f"layers.0.{n}" for n in layer] + ["layers.0.hidden_norm.weight"]
        + [f"layers.1.{n}" for n in layer])
    # vllm qwen3.py Qwen3Attention: q_norm and k_norm after the projections
    q3 = required_weights("qwen3", 1, False)
    assert q3[:6] == ["fc.weight", "norm.weight", "layers.0.self_attn.q_proj.weight",
                      "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight",
                      "layers.0.self_attn.o_proj.weight"]
    assert q3[6:8] == ["layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"]
    assert len(q3) == 2 + 9 + 2 + 1
    # deepseek_v2.py DeepseekV2MLAAttention: q_a_proj / q_a_layernorm / q_b_proj with q_lora_rank, else q_proj;
    # kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj
    mla = ["self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight",
           "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
           "input_layernorm.weight", "post_attention_layernorm.weight"]
    assert required_weights("mla", 1, True) == (
        ["fc.weight", "norm.weight"] + [f"layers.0.self_attn.{n}.weight" for n in ("q_a_proj", "q_a_layernorm",
                                                                                   "q_b_proj")]
        + [f"layers.0.{n}" for n in mla] + ["layers.0.hidden_norm.weight"])
    assert required_weights("mla", 1, False)[2:4] == ["layers.0.self_attn.q_proj.weight",
                                                      "layers.0.self_attn.kv_a_proj_with_mqa.weight"]


def _spec(**kw):
    base = dict(hidden_size=64, family="llama", num_heads=4, num_kv_heads=2, head_dim=16, qk_nope_head_dim=16,
                qk_rope_head_dim=8, v_head_dim=12, kv_lora_rank=32, q_lora_rank=24)
    return SimpleNamespace(**{**base, **kw})


def test_expected_shapes_are_vllms_allocations():
    # H = 64, 4 heads of 16, 2 KV heads; layer 0's q/k/v take 2H = 128 (llama_eagle3.py qkv_input_size),
    # later layers H; nn.Linear weights are [out, in]
    s = _spec()
    want = {"norm.weight": (64,), "fc.weight": None, "lm_head.weight": None,
            "layers.0.self_attn.q_proj.weight": (64, 128), "layers.0.self_attn.k_proj.weight": (32, 128),
            "layers.0.self_attn.v_proj.weight": (32, 128), "layers.0.self_attn.o_proj.weight": (64, 64),
            "layers.1.self_attn.q_proj.weight": (64, 64), "layers.1.self_attn.k_proj.weight": (32, 64),
            "layers.0.self_attn.q_norm.weight": (16,), "layers.0.self_attn.k_norm.weight": (16,),
            "layers.0.input_layernorm.weight": (64,), "layers.0.post_attention_layernorm.weight": (64,),
            "layers.0.hidden_norm.weight": (64,),
            "layers.0.mlp.gate_proj.weight": (96, 64), "layers.0.mlp.up_proj.weight": (96, 64),
            "layers.0.mlp.down_proj.weight": (64, 96), "layers.0.mlp.other.weight": None,
            "layers.0.self_attn.other.weight": None}
    assert {n: expected_shape(n, s, 96) for n in want} == want
    assert expected_shape("layers.0.mlp.gate_proj.weight", s, None) is None
    # MLA (deepseek_v2.py): q_a_proj [q_lora, in], q_a_layernorm [q_lora], q_b_proj [heads x (nope + rope),
    # q_lora], kv_a_proj_with_mqa [kv_lora + rope, in], kv_a_layernorm [kv_lora], kv_b_proj
    # [heads x (nope + v), kv_lora], o_proj [H, heads x v]; qk = 16 + 8 = 24
    m = _spec(family="mla")
    mla = {"layers.0.self_attn.q_a_proj.weight": (24, 128), "layers.1.self_attn.q_a_proj.weight": (24, 64),
           "layers.0.self_attn.q_a_layernorm.weight": (24,), "layers.0.self_attn.q_b_proj.weight": (96, 24),
           "layers.0.self_attn.kv_a_proj_with_mqa.weight": (40, 128),
           "layers.1.self_attn.kv_a_proj_with_mqa.weight": (40, 64),
           "layers.0.self_attn.kv_a_layernorm.weight": (32,), "layers.0.self_attn.kv_b_proj.weight": (112, 32),
           "layers.0.self_attn.o_proj.weight": (64, 48), "layers.0.self_attn.q_proj.weight": None,
           "layers.0.input_layernorm.weight": (64,)}
    assert {n: expected_shape(n, m, 96) for n in mla} == mla
    q3 = _spec(family="qwen3")  # a Qwen3 layer is the Llama layer plus per-head q/k norms (vLLM qwen3.py)
    assert expected_shape("layers.0.self_attn.q_proj.weight", q3, 96) == (64, 128)
    assert expected_shape("layers.0.self_attn.k_norm.weight", q3, 96) == (16,)
    m0 = _spec(family="mla", q_lora_rank=None)
    assert expected_shape("layers.0.self_attn.q_proj.weight", m0, 96) == (96, 128)  # heads x qk, 2H
    assert expected_shape("layers.1.self_attn.q_proj.weight", m0, 96) == (96, 64)
    assert expected_shape("layers.0.self_attn.q_a_proj.weight", m0, 96) is None


# --------------------------------------------------------------------------------------- reading bytes ---

def _st_file(tmp_path, tensors):
    from safetensors.torch import save_file

    from kconvert.source.safetensors_header import read_header

    f = tmp_path / "m.safetensors"
    save_file(tensors, str(f))
    return f, read_header(f, "m.safetensors").tensors


def test_read_span_refuses_what_it_cannot_read_in_the_users_words(tmp_path):
    f, infos = _st_file(tmp_path, {"a": torch.arange(300 * 7, dtype=torch.float32).reshape(300, 7),
                                   "d": torch.zeros(3, dtype=torch.float64)})
    with pytest.raises(InputError) as e:
        tensor_read.read_span(f, infos["d"])
    assert str(e.value) == "d: dtype F64 is not one score reads"
    with pytest.raises(InputError) as e:
        tensor_read.read_span(f, infos["a"], 5, 296)
    assert str(e.value) == "a: rows 5..301 outside 0..300"
    with pytest.raises(InputError) as e:
        tensor_read.read_span(f, infos["a"], 301)
    assert str(e.value) == "a: rows 301..300 outside 0..300"
    with pytest.raises(InputError) as e:
        tensor_read.read_span(tmp_path / "gone.safetensors", infos["a"])
    assert str(e.value) == f"m.safetensors [a]: cannot read: {os.strerror(errno.ENOENT)}"
    with open(f, "r+b") as fh:
        fh.truncate(infos["a"].start + 1000)
    with pytest.raises(InputError) as e:
        tensor_read.read_span(f, infos["a"])
    assert str(e.value) == "m.safetensors [a]: only 1000 of 8400 bytes (truncated)"  # 300 x 7 x 4 bytes
    with pytest.raises(InputError) as e:
        tensor_read.read_span(f, infos["a"], as_dtype=torch.bfloat16)
    assert str(e.value) == "m.safetensors [a]: only 1000 of 8400 bytes (truncated)"


def test_read_span_of_zero_rows_and_the_last_rows(tmp_path):
    a = torch.arange(300 * 7, dtype=torch.float32).reshape(300, 7)
    f, infos = _st_file(tmp_path, {"a": a, "i": torch.arange(5, dtype=torch.int32)})
    got = tensor_read.read_span(f, infos["a"], 300)
    assert got.shape == (0, 7) and got.dtype == torch.float32
    got = tensor_read.read_span(f, infos["a"], 10, 0, as_dtype=torch.bfloat16)
    assert got.shape == (0, 7) and got.dtype == torch.bfloat16
    assert torch.equal(tensor_read.read_span(f, infos["a"], 298), a[298:])
    assert torch.equal(tensor_read.read_span(f, infos["a"], 298, as_dtype=torch.float64), a[298:].double())
    got = tensor_read.read_span(f, infos["i"], 1, 3, as_dtype=torch.float32)  # integers stay integers
    assert got.dtype == torch.int32 and got.tolist() == [1, 2, 3]
    got = tensor_read.read_span(f, infos["i"], 5)  # no rows left: an empty tensor of the stored dtype
    assert got.shape == (0,) and got.dtype == torch.int32
    got = tensor_read.read_span(f, infos["a"], 0, 2, as_dtype=torch.float64)
    assert got.dtype == torch.float64 and got.tolist() == a[:2].tolist()


def test_read_span_rows_of_a_three_dimensional_tensor(tmp_path):
    # a row of a [2, 3, 4] tensor is 3 x 4 = 12 elements (the safetensors layout is row-major, C order)
    t = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    f, infos = _st_file(tmp_path, {"t": t})
    got = tensor_read.read_span(f, infos["t"], 1, 1)
    assert got.shape == (1, 3, 4) and got.flatten().tolist() == list(range(12, 24))


def test_read_span_survives_short_reads(tmp_path, monkeypatch):
    # POSIX pread may return fewer bytes than asked: read_span keeps reading from where it stopped
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(1)
    a = torch.randn(50, 9, generator=g).to(torch.float16)
    f, infos = _st_file(tmp_path, {"a": a})
    want = load_file(str(f))["a"]
    real = os.preadv

    def short(fd, bufs, offset):
        (b,) = bufs
        return real(fd, [b[:7]], offset)  # 7 bytes at most a call, odd: a call ends inside an element

    monkeypatch.setattr(os, "preadv", lambda fd, bufs, offset: real(fd, [bufs[0][:1]], offset))  # 1 byte a call
    assert torch.equal(tensor_read.read_span(f, infos["a"], 10, 2), want[10:12])
    monkeypatch.setattr(os, "preadv", short)
    monkeypatch.setattr(tensor_read, "READ_CHUNK", 101)  # chunks of 100 bytes (a whole number of 2-byte elements)
    assert torch.equal(tensor_read.read_span(f, infos["a"]), want)
    assert torch.equal(tensor_read.read_span(f, infos["a"], as_dtype=torch.float32), want.float())
    assert torch.equal(tensor_read.read_span(f, infos["a"], 3, 40, as_dtype=torch.float32), want[3:43].float())
    # 4-byte elements and a chunk of 1001 bytes: chunks of 1000 (250 elements), never ending inside an element
    b = torch.randn(30, 33, generator=g)
    (tmp_path / "b").mkdir()
    f2, infos2 = _st_file(tmp_path / "b", {"b": b})
    monkeypatch.setattr(tensor_read, "READ_CHUNK", 1001)
    got = tensor_read.read_span(f2, infos2["b"], as_dtype=torch.float64)
    assert got.dtype == torch.float64 and torch.equal(got, load_file(str(f2))["b"].double())


# ---------------------------------------------------------------------------------------- settings ---

def test_threads_device_and_dtype_settings_in_the_users_words(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    torch_device.set_threads(None)
    torch_device.set_threads(1)
    torch_device.set_threads(3)
    assert calls == [1, 3]
    with pytest.raises(UsageError) as e:
        torch_device.set_threads(0)
    assert str(e.value) == "--threads must be at least 1"
    assert torch_device.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(UsageError) as e:
        torch_device.resolve_device("tpu-ish")
    assert str(e.value) == "--device 'tpu-ish': cpu, cuda or cuda:N"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_device.resolve_device(None) == torch.device("cpu") and torch_device.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(UsageError) as e:
        torch_device.resolve_device("cuda:1")
    assert str(e.value) == "--device cuda: no GPU is visible to torch"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch_device.resolve_device("auto") == torch.device("cuda")
    assert torch_device.resolve_device("cuda:1") == torch.device("cuda", 1)
    tr = SimpleNamespace(meta=SimpleNamespace(dtype="bfloat16"))
    assert score_weights.resolve_dtype(None, tr) is torch.bfloat16
    assert score_weights.resolve_dtype("float16", tr) is torch.float16
    with pytest.raises(UsageError) as e:
        score_weights.resolve_dtype("fp8", tr)
    assert str(e.value) == "--dtype 'fp8': choose bfloat16, float16 or float32"


# ------------------------------------------------------------------------ where vLLM cannot load the draft ---
# The factory draft (tests/factories.py TINY, torchspec layout): hidden 64, 2 heads of 32 (1 KV head),
# intermediate 128, draft vocabulary 128 of the target's 512, fc [64, 3 x 64] for three aux layers.

def _draft(tmp_path, tensors=None, config=None, producer="torchspec", family="llama"):
    from tests.factories import make_draft

    return read_draft(open_checkpoint(str(make_draft(tmp_path / "d", producer, tensors=tensors, config=config,
                                                     family=family))))


def _build(d, tr, loader=None, **kw):
    """A runner for draft d on trace tr under vLLM 0.32's reading, with the choices in kw changed; `loader`: the
    --lm-head-from reader."""
    reading = engine_reading(d, VLLM, 8, V)
    return score_runner.build_runner(d, reading.with_(**kw) if kw else reading, tr, _weights(d), loader)


def _failure(d, tr, **kw) -> str:
    from kconvert.score.draft import DraftFailure

    with pytest.raises(DraftFailure) as e:
        _build(d, tr, **kw)
    return str(e.value)


def _usage(d, tr, loader=None, **kw) -> str:
    with pytest.raises(UsageError) as e:
        _build(d, tr, loader, **kw)
    return str(e.value)


def _set(name, shape, data=None):
    def f(t):
        dt = t[name][0] if name in t else "BF16"
        t[name] = (dt, shape, np.zeros(shape, np.float32) if data is None else data)
    return f


def test_build_runner_refuses_a_draft_without_fc_or_with_an_fc_for_another_target(tmp_path, control):
    tr = control[2]
    d = _draft(tmp_path, tensors=lambda t: t.pop("fc.weight"))
    assert _failure(d, tr) == "the draft has no fc.weight: vLLM would leave it uninitialised (EAGLE-3 needs it)"
    # target_hidden_size 96 (192 = 2 x 96 fits fc): the draft was made for a target of hidden size 96
    d = _draft(tmp_path / "b", config=lambda c: c.update(target_hidden_size=96))
    assert _failure(d, tr) == "the draft expects target hidden size 96, the trace's target has 64"


def test_build_runner_names_missing_and_misshapen_layer_tensors(tmp_path, control):
    tr = control[2]

    def drop(t):
        for n in ("mlp.down_proj", "mlp.up_proj", "self_attn.o_proj", "input_layernorm", "hidden_norm"):
            t.pop(f"midlayer.{n}.weight")

    # names in required_weights order (attention, MLP, norms), the first four
    assert _failure(_draft(tmp_path, tensors=drop), tr) == (
        "the draft lacks layers.0.self_attn.o_proj.weight, layers.0.mlp.up_proj.weight, "
        "layers.0.mlp.down_proj.weight, layers.0.input_layernorm.weight: vLLM leaves missing tensors "
        "uninitialised, score does not guess them")
    d = _draft(tmp_path / "b", tensors=_set("midlayer.self_attn.o_proj.weight", (64, 32)))
    assert _failure(d, tr) == ("layers.0.self_attn.o_proj.weight is [64, 32], the config implies [64, 64]: vLLM "
                               "fails to load it")
    d = _draft(tmp_path / "c")
    assert _failure(d, tr, norm_before_fc=True) == "norm_before_fc is set but input_norm.weight is missing"
    assert _failure(d, tr, fc_norm=True) == "fc_norm is set but fc_norm.0.weight is missing"
    d = _draft(tmp_path / "e", tensors=lambda t: [_set(f"fc_norm.{i}.weight", (64,), np.ones(64, np.float32))(t)
                                                  for i in (0, 1)])
    assert _failure(d, tr, fc_norm=True) == "fc_norm is set but fc_norm.2.weight is missing"
    # with the input norm and all three fc norms present the runner builds and holds them
    d = _draft(tmp_path / "f", tensors=lambda t: [_set(n, (192,) if n == "input_norm.weight" else (64,),
                                                       np.ones(192 if n == "input_norm.weight" else 64, np.float32))(t)
                                                  for n in ("input_norm.weight", "fc_norm.0.weight",
                                                            "fc_norm.1.weight", "fc_norm.2.weight")])
    r = _build(d, tr, norm_before_fc=True, fc_norm=True)
    assert torch.equal(r.w["input_norm.weight"], torch.ones(192))
    assert all(torch.equal(r.w[f"fc_norm.{i}.weight"], torch.ones(64)) for i in range(3))
    assert r.nbf and r.fc_norm


def test_build_runner_of_an_mla_draft_reads_the_low_rank_query(tmp_path, control):
    # TINY's MLA draft has q_lora_rank 32: vLLM's DeepseekV2MLAAttention reads q_a_proj / q_a_layernorm / q_b_proj
    d = _draft(tmp_path, tensors=None, config=None, producer="torchspec", family="mla")
    r = _build(d, control[2])
    assert r.w["layers.0.self_attn.q_a_proj.weight"].shape == (32, 128)
    assert "layers.0.self_attn.q_proj.weight" not in r.w


def test_logit_scale_sign_from_the_config(tmp_path, control):
    # vLLM's LogitsProcessor multiplies the logits by the config's logit_scale: a negative one turns argmax into
    # argmin. Logits [1, -1, 0, ...] (row 0 = +e0, row 1 = -e0): draft id 0 wins, or 1 with a negative scale
    tr = control[2]
    normed = torch.zeros(1, 64)
    normed[0, 0] = 1.0
    head = torch.zeros(128, 64)
    head[0, 0], head[1, 0] = 1.0, -1.0
    for scale, want in ((-2.0, 1), (0.5, 0), (-1, 1), (True, 0), ("-1", 0), (None, 0)):
        cfg = (lambda c, s=scale: c.update(logit_scale=s)) if scale is not None else None
        d = _draft(tmp_path / f"s{scale}", config=cfg)
        r = _build(d, tr, d2t="absolute")
        r.lm_head = head
        r.target_ids = torch.arange(128)
        assert int(r.greedy(normed)[0]) == want, scale


def test_build_runner_lm_head_choices(tmp_path, control):
    from safetensors import safe_open

    tr = control[2]
    d = _draft(tmp_path, tensors=lambda t: t.pop("lm_head.weight"))
    # without lm_head vLLM 0.32 shares the target's (engine_reading); read as stored, there is none
    assert _failure(d, tr, lm_head="stored") == "the draft has no lm_head.weight"
    assert _usage(d, tr, lm_head="target") == (
        "the draft has no lm_head, so the engine shares the target's; this trace does not hold it: record the "
        "trace with --lm-head")
    assert _usage(d, tr, lm_head="reselected") == (
        "re-selecting lm_head rows needs --lm-head-from DIR (a full-vocabulary head)")
    assert _usage(d, tr, lm_head="reselected", lm_head_source="x") == (
        "re-selecting lm_head rows needs --lm-head-from DIR (a full-vocabulary head)")  # no loader given
    short = torch.zeros(100, 64)
    assert _usage(d, tr, lambda p: short, lm_head="reselected", lm_head_source="x") == (
        "--lm-head-from: its lm_head has 100 rows; re-selection needs the full target vocabulary (512) and d2t "
        "offsets inside it")
    # re-selected: rows d2t[i] + i of the full head (vLLM's offsets), d2t read back with safetensors
    full = torch.arange(512 * 64, dtype=torch.float32).reshape(512, 64)
    r = _build(d, tr, lambda p: {"x": full}[p], lm_head="reselected", lm_head_source="x")
    with safe_open(str(tmp_path / "d" / "model.safetensors"), "pt") as f:
        sel = f.get_tensor("d2t").long() + torch.arange(128)
    assert torch.equal(r.lm_head, full[sel]) and r.lm_head.dtype == torch.float32
    assert torch.equal(r.target_ids, sel)
    bad = _draft(tmp_path / "b", tensors=lambda t: (t.pop("lm_head.weight"), t.pop("d2t")))
    assert _usage(bad, tr, lambda p: full, lm_head="reselected", lm_head_source="x") == (
        "re-selecting lm_head rows needs the draft's d2t")
    far = _draft(tmp_path / "c", tensors=lambda t: (t.pop("lm_head.weight"), _set("d2t", (128,), np.full(
        128, 400, np.int64))(t)))
    assert "re-selection needs the full target vocabulary (512)" in _usage(
        far, tr, lambda p: full, lm_head="reselected", lm_head_source="x")  # 400 + 127 is past 511
    edge = np.zeros(128, np.int64)
    edge[127] = 385  # row 127 + 385 = 512: one past the full head's last row
    one_past = _draft(tmp_path / "h", tensors=lambda t: (t.pop("lm_head.weight"), _set("d2t", (128,), edge)(t)))
    assert "re-selection needs the full target vocabulary (512)" in _usage(
        one_past, tr, lambda p: full, lm_head="reselected", lm_head_source="x")
    neg = _draft(tmp_path / "e", tensors=lambda t: (t.pop("lm_head.weight"), _set("d2t", (128,), np.full(
        128, -1, np.int64))(t)))
    assert "re-selection needs the full target vocabulary (512)" in _usage(
        neg, tr, lambda p: full, lm_head="reselected", lm_head_source="x")  # -1 + 0 is below 0
    # d2t all zeros: rows 0..127, the first row of the full head included
    zero = _draft(tmp_path / "z", tensors=lambda t: (t.pop("lm_head.weight"), _set("d2t", (128,), np.zeros(
        128, np.int64))(t)))
    assert torch.equal(_build(zero, tr, lambda p: full, lm_head="reselected", lm_head_source="x").lm_head,
                       full[:128])
    d = _draft(tmp_path / "f", tensors=_set("lm_head.weight", (128, 32)))
    assert _failure(d, tr) == "lm_head is [128, 32]; the draft's hidden size is 64"


def test_build_runner_shares_the_targets_lm_head_from_the_trace(tmp_path, control):
    from tests.score_factories import meta, write_trace

    g = torch.Generator().manual_seed(3)
    m = meta(lookahead=2)
    ids = torch.randint(20, V, (9,), generator=g).tolist()
    head = torch.randn(V, 64, generator=g)
    t = open_trace(write_trace(tmp_path / "t", [{"ids": ids, "next": ids[1:] + [21], "prompt_len": 4,
                                                 "output_len": 3,
                                                 "hidden": {k: torch.randn(9, 64, generator=g) for k in m.layers}}],
                               m, torch.randn(V, 64, generator=g), lm_head=head))
    d = _draft(tmp_path, tensors=lambda t: t.pop("lm_head.weight"))
    r = score_runner.build_runner(d, engine_reading(d, VLLM, 8, V), t, WeightCache(d, torch.float64, torch.device("cpu")))
    # the target's [512, 64] head in the compute dtype, no d2t mapping (the full vocabulary)
    assert r.lm_head.dtype == torch.float64 and torch.equal(r.lm_head, head.double())
    assert r.target_ids is None


def test_build_runner_d2t_readings(tmp_path, control):
    from safetensors import safe_open

    tr = control[2]
    d = _draft(tmp_path)
    with safe_open(str(tmp_path / "d" / "model.safetensors"), "pt") as f:
        d2t = f.get_tensor("d2t").long()
    assert torch.equal(_build(d, tr).target_ids, d2t + torch.arange(128))  # offsets: id + d2t[id]
    assert torch.equal(_build(d, tr, d2t="absolute").target_ids, d2t)
    assert _failure(d, tr, d2t="none") == (
        "lm_head has 128 rows but no draft-to-target mapping applies (the draft vocabulary equals the target's "
        "512): vLLM fails its logits shape check")
    # no d2t in the files: vLLM keeps its zero-initialised draft_id_to_target_id (llama_eagle3.py), so ids map to
    # themselves as offsets
    nod = _draft(tmp_path / "b", tensors=lambda t: t.pop("d2t"))
    assert torch.equal(_build(nod, tr).target_ids, torch.arange(128))
    short = _draft(tmp_path / "c", tensors=_set("d2t", (100,), np.zeros(100, np.int64)))
    assert _failure(short, tr) == "d2t is [100], expected [128]: vLLM fails to load it"
    off = np.zeros(128, np.int64)
    off[3], off[5] = -10, 600
    far = _draft(tmp_path / "e", tensors=_set("d2t", (128,), off))
    # ids 3 - 10 = -7 and 5 + 600 = 605 are outside 0..511; the first in draft order is named
    assert _failure(far, tr) == (
        "d2t read as offsets maps draft ids to target ids outside 0..511 (e.g. -7): vLLM indexes past the "
        "vocabulary ('index -7 is out of bounds for dimension 0 with size 512')")
    big = np.zeros(128, np.int64)
    big[127] = 385  # 127 + 385 = 512: one past the last id
    assert "(e.g. 512)" in _failure(_draft(tmp_path / "f", tensors=_set("d2t", (128,), big)), tr)
    # draft_vocab_size 100 in the config against a head of 128 rows
    dv = _draft(tmp_path / "g", config=lambda c: c.update(draft_vocab_size=100))
    assert _failure(dv, tr) == "lm_head has 128 rows, draft_vocab_size is 100: vLLM fails to load it"


def test_build_runner_embeddings(tmp_path, control):
    tr = control[2]
    d = _draft(tmp_path)
    assert _usage(d, tr, embeddings="draft") == "reading embeddings=draft: the draft has no embed_tokens"
    bad = _draft(tmp_path / "b", tensors=_set("embed_tokens.weight", (500, 64)))
    assert _failure(bad, tr, embeddings="draft") == "embed_tokens is [500, 64], expected [512, 64]"
    # small integers: exact in bfloat16 (8 significant bits), so the rows read back are these numbers
    rows = (np.arange(512 * 64, dtype=np.float32).reshape(512, 64) % 97) - 48
    own = _draft(tmp_path / "c", tensors=_set("embed_tokens.weight", (512, 64), rows))
    r = _build(own, tr, embeddings="draft")
    assert torch.equal(r.embed(torch.tensor([7, 300])), torch.from_numpy(rows[[7, 300]]))
    # the target's rows as the trace keeps them
    ids, trows = tr.embedding_rows()
    r = _build(d, tr)
    assert torch.equal(r.embed(torch.from_numpy(ids[:3].astype(np.int64))), trows[:3].float())


def test_d2t_stored_as_floats_is_read_as_the_integers_it_holds(tmp_path, control):
    # a d2t saved as F32 (exact integers up to 2^24) scored in bfloat16: the ids are not rounded to bfloat16's 8
    # significant bits (301 would become 300 or 302 there)
    tr = control[2]
    off = np.zeros(128, np.float32)
    off[0], off[1] = 301.0, 299.0
    d = _draft(tmp_path, tensors=lambda t: t.update(d2t=("F32", (128,), off)))
    w = WeightCache(d, torch.bfloat16, torch.device("cpu"))
    r = score_runner.build_runner(d, engine_reading(d, VLLM, 8, V), tr, w)
    assert r.target_ids[:3].tolist() == [301, 300, 2] and r.target_ids.dtype == torch.long
    full = torch.arange(512, dtype=torch.float32)[:, None].repeat(1, 64)
    nolm = _draft(tmp_path / "b", tensors=lambda t: (t.pop("lm_head.weight"), t.update(d2t=("F32", (128,), off))))
    w = WeightCache(nolm, torch.bfloat16, torch.device("cpu"))
    r = score_runner.build_runner(nolm, engine_reading(nolm, VLLM, 8, V).with_(lm_head="reselected", lm_head_source="x"),
                         tr, w, lambda p: full)
    assert r.lm_head[:3, 0].tolist() == [300.0, 300.0, 2.0]  # rows 301, 300, 2; 301 in bfloat16 is 300
    assert r.target_ids[:3].tolist() == [301, 300, 2]  # d2t as read for the re-selection: not rounded either


def test_lm_head_from_a_full_vocabulary_draft(tmp_path):
    from safetensors import safe_open

    from tests.factories import make_draft

    full = make_draft(tmp_path / "full", "torchspec", full_vocab=True)
    load = score_weights.lm_head_loader()
    got = load(str(full))
    with safe_open(str(full / "model.safetensors"), "pt") as f:
        want = f.get_tensor("lm_head.weight")
    assert torch.equal(got, want) and got.shape == (512, 64)
    assert load(str(full)) is got  # read once
    bare = make_draft(tmp_path / "bare", "torchspec", tensors=lambda t: t.pop("lm_head.weight"))
    with pytest.raises(UsageError) as e:
        load(str(bare))
    assert str(e.value) == f"--lm-head-from {bare}: no lm_head.weight there"


def test_weight_cache_counts_the_bytes_it_reads_once(tmp_path):
    d = _draft(tmp_path)
    w = _weights(d)
    assert w.bytes_read == 0
    w.get("fc.weight")
    assert w.bytes_read == 64 * 192 * 2  # [64, 192] bfloat16: 24576 bytes
    w.get("norm.weight")
    w.get("fc.weight")  # already read
    assert w.bytes_read == 64 * 192 * 2 + 64 * 2
    assert w.get("nope.weight") is None and w.bytes_read == 64 * 192 * 2 + 64 * 2


def test_read_tensor_by_name_in_the_users_words(tmp_path):
    from safetensors import safe_open

    d = _draft(tmp_path)
    with safe_open(str(tmp_path / "d" / "model.safetensors"), "pt") as f:
        want = f.get_tensor("fc.weight")
    got = score_weights.read_tensor(d, "fc.weight", as_dtype=torch.float32)  # a floating tensor in as_dtype when given
    assert got.dtype == torch.float32 and torch.equal(got, want.float())
    assert score_weights.read_tensor(d, "fc.weight").dtype == torch.bfloat16  # else as stored
    with pytest.raises(InputError) as e:
        score_weights.read_tensor(d, "nope.weight")
    assert str(e.value) == "nope.weight: not in the draft's files"
    d.checkpoint.local_path = lambda f: None  # a Hub draft whose files were not downloaded
    with pytest.raises(UsageError) as e:
        score_weights.read_tensor(d, "fc.weight")
    assert str(e.value) == (f"{tmp_path / 'd'}: score needs the draft's weights on disk (model.safetensors is not "
                            "local); download the draft first")


def test_the_runners_tensors_are_on_the_chosen_device_in_the_chosen_dtype(tmp_path, control):
    # torch's "meta" device stands in for a GPU here: every tensor the runner computes with must be moved there
    tr = control[2]
    meta = torch.device("meta")
    d = _draft(tmp_path)
    r = score_runner.build_runner(d, engine_reading(d, VLLM, 8, V), tr, WeightCache(d, torch.float64, meta))
    assert {t.device for t in r.w.values()} == {meta}
    assert (r.lm_head.device, r.target_ids.device, r.embed.rows.device, r.embed.index.device) == (meta,) * 4
    assert r.embed.rows.dtype == torch.float64 and r.lm_head.dtype == torch.float64
    nolm = _draft(tmp_path / "b", tensors=lambda t: t.pop("lm_head.weight"))
    full = torch.zeros(V, 64)
    r = score_runner.build_runner(nolm, engine_reading(nolm, VLLM, 8, V).with_(lm_head="reselected", lm_head_source="x"),
                         tr, WeightCache(nolm, torch.float64, meta), lambda p: full)
    assert r.lm_head.device == meta and r.lm_head.dtype == torch.float64
    rows = (np.arange(512 * 64, dtype=np.float32).reshape(512, 64) % 97) - 48
    own = _draft(tmp_path / "c", tensors=_set("embed_tokens.weight", (512, 64), rows))
    r = score_runner.build_runner(own, engine_reading(own, VLLM, 8, V).with_(embeddings="draft"), tr,
                         WeightCache(own, torch.float64, meta))
    assert r.embed.rows.device == meta and r.embed.rows.dtype == torch.float64


def test_a_draft_of_another_width_cannot_share_the_targets_embeddings(tmp_path):
    from tests.score_factories import meta, write_trace

    # a target of hidden size 32 feeding 6 aux states (6 x 32 = 192, fc's input); the draft's hidden size is 64
    g = torch.Generator().manual_seed(0)
    m = meta(hidden=32, lookahead=2)
    ids = torch.randint(20, V, (9,), generator=g).tolist()
    t = open_trace(write_trace(tmp_path / "t", [{"ids": ids, "next": ids[1:] + [21], "prompt_len": 4,
                                                 "output_len": 3,
                                                 "hidden": {k: torch.randn(9, 32, generator=g) for k in m.layers}}],
                               m, torch.randn(V, 32, generator=g)))
    d = _draft(tmp_path, config=lambda c: c.update(target_hidden_size=32))
    assert _failure(d, t, aux_ids=(1, 2, 3, 4, 5, 6)) == (
        "the draft's hidden size 64 differs from the target's 32: it cannot share the target's embeddings and has "
        "none of its own")


def test_build_runner_refuses_prefixed_names_as_written(tmp_path, control):
    from tests.factories import rename_all

    d = _draft(tmp_path, producer="speculators",
               tensors=lambda t: rename_all(t, lambda n: n if n == "lm_head.weight" else "model." + n))
    # llama_eagle3.py load_weights adds `model.` to every name but lm_head: `model.model.layers...` is unknown
    msg = _failure(d, control[2])
    assert msg == ("tensor names carry the prefix 'model.' (e.g. model.layers.0.hidden_norm.weight): vLLM's "
                   "EAGLE-3 loader raises on names it does not know")


def test_a_layer_past_the_first_is_found_by_the_files_own_name(tmp_path):
    """layer_raw_name for a canonical `layers.<i>.<rest>` the reader did not map: the name the file itself holds,
    `layers.1.self_attn.q_proj.weight` as tests/factories.py writes a second layer, or SpecForge-style
    `midlayers.1.<rest>`; a canonical of no layer, or absent from the file, has none."""
    import dataclasses

    from kconvert.source import open_checkpoint
    from tests.factories import make_draft
    from tests.factories import layers

    d = read_draft(open_checkpoint(str(make_draft(tmp_path / "d", "specforge", tensors=layers((1, True)),
                                                  config=lambda c: c.update(num_hidden_layers=2)))))
    unmapped = dataclasses.replace(d, raw_names={k: v for k, v in d.raw_names.items() if not k.startswith("layers.1.")})
    assert score_weights.layer_raw_name(unmapped, "layers.1.self_attn.q_proj.weight") == \
        "layers.1.self_attn.q_proj.weight"
    assert score_weights.layer_raw_name(unmapped, "layers.2.self_attn.q_proj.weight") is None
    assert score_weights.layer_raw_name(unmapped, "fc.bias") is None
    tensors = {k.replace("layers.1.", "midlayers.1."): v for k, v in unmapped.checkpoint.tensors.items()}
    mid = dataclasses.replace(unmapped, checkpoint=dataclasses.replace(unmapped.checkpoint, tensors=tensors))
    assert score_weights.layer_raw_name(mid, "layers.1.mlp.down_proj.weight") == "midlayers.1.mlp.down_proj.weight"


# ------------------------------------------------------------- walk, runner and weights: details pinned by hand ---

def test_reference_tokens_token_0_is_a_token_not_a_stop():
    # token id 0 is a token like any other (the vocabulary is 0..V-1); only -1 means "none can be accepted".
    # every position, cursor 0, k = 3: j=0 y1 = 0; j=1 x2 = 0 == y1 (the trace is the target's own): y2 = 13;
    # j=2 x3 = 13 == y2: y3 = 14
    x = [10, 11, 0, 13, 14]
    y = [11, 0, 13, 14, 99]
    assert reference_tokens(_seq(x, y, 1, 4), np.array([0]), 3, "every-position").tolist() == [[0, 13, 14]]


class _TraceOf(_FakeTrace):
    """_FakeTrace holding the given sequences."""

    def __init__(self, seqs):
        self.seqs = seqs

    def sequence(self, i):
        return self.seqs[i]


def test_batches_give_each_sequence_the_reference_tokens_of_the_mode():
    # labels y that are nowhere the continuation (all 99): replay checks drafts against the trace's own tokens
    # x[c + 2 + j] only; every position would check them against y (99, then nothing: x2 != 99)
    # prompt 3, output 4 (stop 7), 9 tokens: replay cursors 2 .. stop - 3 = 4, positions 0..4
    x = list(range(10, 19))
    tr = _TraceOf([_seq(x, [99] * 9, 3, 4)])
    (group,) = list(score_walk._batches(tr, [0], (1,), "replay", 2))
    ((seq, inp, first),) = group
    assert first == 2 and inp.cursors.tolist() == [2, 3, 4]
    assert inp.reference.tolist() == [[14, 15], [15, 16], [16, 17]]  # x[c + 2], x[c + 3]
    (group,) = list(score_walk._batches(tr, [0], (1,), "every-position", 2))
    assert group[0][1] is None  # no position's next token is the target's (y is 99 everywhere): nothing to draft


def test_batches_start_counting_afresh_after_each_flush(control, monkeypatch):
    d, reading, tr, _ = control
    # 14 positions a sequence (prompt 4, output 12, replay: 0 .. stop - 3 = 13); 28 rows a batch:
    # [0, 1] = 28 fits; 2 opens a new batch of 14, and 0 again makes it 28: fits, [2, 0]
    monkeypatch.setattr(score_walk, "BATCH_ROWS", 28)
    groups = list(score_walk._batches(tr, [0, 1, 2, 0], reading.aux_ids, "replay", 3))
    assert [[g[0].index for g in grp] for grp in groups] == [[0, 1], [2, 0]]


def test_build_runner_names_a_midlayer_name_as_the_example_of_a_prefixed_torchspec_draft(tmp_path, control):
    from tests.factories import rename_all

    # torchspec's layer is `midlayer.` (no `layers.` in its names): with every name but lm_head prefixed `model.`
    # the prefix is refused, and the example is the first prefixed layer name in sorted order:
    # model.midlayer.hidden_norm.weight (model.d2t and model.fc.weight sort first but are not a layer's)
    d = _draft(tmp_path, tensors=lambda t: rename_all(t, lambda n: n if n == "lm_head.weight" else "model." + n))
    assert _failure(d, control[2]) == ("tensor names carry the prefix 'model.' (e.g. model.midlayer.hidden_norm."
                                       "weight): vLLM's EAGLE-3 loader raises on names it does not know")


def test_build_runner_names_the_first_prefixed_name_when_no_layer_name_is_mapped(tmp_path, control):
    from tests.factories import rename_all

    # a prefixed draft whose layer is named neither `layers.N.` nor `midlayer.` (a made-up `block.`): read_draft maps
    # no canonical name to model.block.* (they are unmapped), so the example is the first prefixed name it maps, in
    # sorted order: model.d2t (< model.fc.weight < model.norm.weight < model.t2d)
    def rename(n):
        return n if n == "lm_head.weight" else "model." + n.replace("midlayer.", "block.")

    d = _draft(tmp_path, tensors=lambda t: rename_all(t, rename))
    assert _failure(d, control[2]) == ("tensor names carry the prefix 'model.' (e.g. model.d2t): vLLM's EAGLE-3 "
                                       "loader raises on names it does not know")


def test_draft_vocabulary_without_draft_vocab_size_is_the_drafts_vocab_size(tmp_path, control):
    # vLLM llama_eagle3.py: a config without draft_vocab_size drafts over its vocab_size (128 here, the lm_head's
    # rows), not the target's 512
    d = _draft(tmp_path, config=lambda c: (c.pop("draft_vocab_size"), c.update(vocab_size=128)))
    r = _build(d, control[2])
    assert (r.spec.draft_vocab_size, r.spec.vocab_size, r.lm_head.shape[0]) == (128, 512, 128)
    assert r.target_ids.shape == (128,)


def test_build_runner_hands_the_draft_spec_the_targets_shape(tmp_path, control):
    # TINY draft: hidden 64, fc [64, 192] = three aux states of the target's width 64, draft vocabulary 128 of 512
    r = _build(_draft(tmp_path), control[2])
    s = r.spec
    assert (s.vocab_size, s.draft_vocab_size, s.num_aux, s.target_hidden_size, s.hidden_size) == (512, 128, 3, 64, 64)
    # a config target_hidden_size of 100 does not divide fc's 192 inputs: the trace's target width (64, 3 x 64 =
    # 192) is the one fc was made for
    r = _build(_draft(tmp_path / "b", config=lambda c: c.update(target_hidden_size=100)), control[2])
    assert r.spec.target_hidden_size == 64


def test_build_runner_carries_the_readings_norm_choices(tmp_path, control):
    d = _draft(tmp_path)
    r = _build(d, control[2], norm_before_residual=True, norm_output=True)
    assert (r.nbr, r.norm_output) == (True, True)
    r = _build(d, control[2])
    assert (r.nbr, r.norm_output) == (False, False)


def test_build_runner_checks_the_mlp_shapes_against_intermediate_size(tmp_path, control):
    # TINY intermediate_size 128: vLLM allocates gate_proj / up_proj [128, 64], down_proj [64, 128]
    d = _draft(tmp_path, tensors=_set("midlayer.mlp.gate_proj.weight", (100, 64)))
    assert _failure(d, control[2]) == ("layers.0.mlp.gate_proj.weight is [100, 64], the config implies [128, 64]: "
                                       "vLLM fails to load it")
    d = _draft(tmp_path / "b", tensors=_set("midlayer.mlp.down_proj.weight", (64, 100)))
    assert _failure(d, control[2]) == ("layers.0.mlp.down_proj.weight is [64, 100], the config implies [64, 128]: "
                                       "vLLM fails to load it")


def test_the_runner_its_shared_lm_head_and_own_embeddings_are_on_the_chosen_device(tmp_path, control):
    # torch's "meta" device stands in for a GPU: the target's lm_head from the trace, the draft's own embedding
    # table and the runner itself must be on it
    from tests.score_factories import meta as trace_meta, write_trace

    dev = torch.device("meta")
    g = torch.Generator().manual_seed(3)
    m = trace_meta(lookahead=2)
    ids = torch.randint(20, V, (9,), generator=g).tolist()
    t = open_trace(write_trace(tmp_path / "t", [{"ids": ids, "next": ids[1:] + [21], "prompt_len": 4,
                                                 "output_len": 3,
                                                 "hidden": {k: torch.randn(9, 64, generator=g) for k in m.layers}}],
                               m, torch.randn(V, 64, generator=g), lm_head=torch.randn(V, 64, generator=g)))
    d = _draft(tmp_path, tensors=lambda t: t.pop("lm_head.weight"))
    r = score_runner.build_runner(d, engine_reading(d, VLLM, 8, V), t, WeightCache(d, torch.float64, dev))
    assert (r.lm_head.device, r.lm_head.dtype, r.lm_head.shape) == (dev, torch.float64, (512, 64))
    assert r.device == dev and r.embed.device == dev
    rows = (np.arange(512 * 64, dtype=np.float32).reshape(512, 64) % 97) - 48
    own = _draft(tmp_path / "c", tensors=_set("embed_tokens.weight", (512, 64), rows))
    r = score_runner.build_runner(own, engine_reading(own, VLLM, 8, V).with_(embeddings="draft"), control[2],
                                  WeightCache(own, torch.float64, dev))
    assert r.embed.device == dev and r.embed.rows.device == dev and r.device == dev


def test_the_attention_inputs_are_computed_on_the_chosen_device(control):
    # was a bug: Rope.inv_freq stayed on the CPU while the positions were on the runner's device, so
    # `score --device cuda` failed in Rope.tables (same-device check); the meta device stands for cuda here
    d, reading, tr, _ = control
    dev = torch.device("meta")
    r = score_runner.build_runner(d, reading, tr, WeightCache(d, torch.float32, dev))
    # layer 0 of five positions: input 2 x 64 wide; TINY 2 query heads of 32, 1 KV head repeated to 2
    q, k, v = r._qkv(0, torch.zeros(5, 128, device=dev), torch.arange(5, device=dev))
    assert {q.device, k.device, v.device} == {dev}
    assert (q.shape, k.shape, v.shape) == ((5, 2, 32),) * 3


def test_weight_cache_reads_floating_tensors_in_the_compute_dtype(tmp_path, monkeypatch):
    # weights.py: each tensor read "in the compute dtype" (read_span's as_dtype: converted chunk by chunk while
    # reading, never the file's bytes whole beside the result); an integer tensor (d2t) as stored
    d = _draft(tmp_path)
    asked = []
    real = score_weights.read_span
    monkeypatch.setattr(score_weights, "read_span", lambda p, info, **kw: (asked.append((info.name, kw)),
                                                                            real(p, info, **kw))[1])
    w = WeightCache(d, torch.float64, torch.device("cpu"))
    assert w.get("fc.weight").dtype == torch.float64
    assert w.get("d2t", float_=False).dtype == torch.int64
    assert asked == [("fc.weight", {"as_dtype": torch.float64}), ("d2t", {"as_dtype": None})]
