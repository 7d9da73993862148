"""kconvert score and kconvert trace without an engine: the trace format and its hostile variants, the draft
runner against an engine-style reference, the verify-step walk, the engine's reading of a draft, diagnosis of
broken drafts on traces they were built for, the recorder on a tiny transformers target, the offline-dump
reader, the CLI and fix --decided-by."""
from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kconvert.engines.expectations import engine_rules  # noqa: E402
from kconvert.errors import InputError, UsageError  # noqa: E402
from kconvert.formats.canonical import read_draft  # noqa: E402
from kconvert.schemas import validate  # noqa: E402
from kconvert.score import ScoreSettings, score  # noqa: E402
from kconvert.score.reading import engine_reading  # noqa: E402
from kconvert.score.runner import build_runner  # noqa: E402
from kconvert.score.walk import every_position, replay  # noqa: E402
from kconvert.score.weights import WeightCache  # noqa: E402
from kconvert.trace.format import Sequence, open_trace  # noqa: E402
from kconvert.source import open_checkpoint  # noqa: E402
from tests.factories import make_draft  # noqa: E402
from tests.eagle3_reference import ReferenceDraft  # noqa: E402
from tests.score_factories import (  # noqa: E402
    H, V, consistent_trace, meta, random_trace, reference_proposals, tiny_hf_target, write_trace)

# the CPU build's runner (Model Runner V1), which recorded the traces these tests read
VLLM = engine_rules("vllm", "0.32/v1")
# one thread: on a few shared cores torch's default thread pool spins against the other processes
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parent.parent


def _reading(path: Path, **kw):
    d = read_draft(open_checkpoint(str(path)))
    return d, engine_reading(d, VLLM, 8, V).with_(**kw) if kw else engine_reading(d, VLLM, 8, V)


# ------------------------------------------------------------------------------------------ the format ---

def test_trace_round_trips_tokens_labels_states_and_embedding_rows(tmp_path):
    path = random_trace(tmp_path / "t", seqs=((3, 5), (7, 2)), layers=[1, 2, 3], lookahead=3)
    tr = open_trace(path)
    doc = json.loads((path / "trace.json").read_text())
    validate(doc, "trace")
    assert tr.num_sequences == 2 and tr.meta.num_positions == (3 + 5 + 3) + (7 + 2 + 3)
    s = tr.sequence(1)
    assert (s.prompt_len, s.output_len, s.length, s.stop) == (7, 2, 12, 9)
    h = tr.hidden(s, 2)
    assert h.shape == (12, H) and h.dtype == torch.float32
    ids, rows = tr.embedding_rows()
    assert set(ids.tolist()) >= set(s.input_ids.tolist()) | set(s.next_token.tolist())
    with pytest.raises(UsageError, match="no hidden states for layer 5"):
        tr.hidden(s, 5)


def test_trace_writer_refuses_an_existing_folder_and_writes_nothing_half_done(tmp_path):
    random_trace(tmp_path / "t")
    with pytest.raises(UsageError, match="already exists"):
        random_trace(tmp_path / "t")
    with pytest.raises(ValueError):
        write_trace(tmp_path / "bad", [{"ids": [1, 2, 3], "next": [1, 2], "prompt_len": 1, "output_len": 1,
                                        "hidden": {k: torch.zeros(3, H) for k in range(9)}}], meta(), torch.zeros(V, H))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no temporary folder left behind


def _rewrite_data(path: Path, mutate) -> None:
    """Change trace.safetensors and keep trace.json's size and sha256 in step (so deeper checks are reached)."""
    data = bytearray((path / "trace.safetensors").read_bytes())
    data = mutate(data)
    (path / "trace.safetensors").write_bytes(bytes(data))
    doc = json.loads((path / "trace.json").read_text())
    doc["data"]["size"] = len(data)
    doc["data"]["sha256"] = hashlib.sha256(data).hexdigest()
    (path / "trace.json").write_text(json.dumps(doc))


def _header(data: bytearray) -> tuple[dict, int]:
    n = struct.unpack("<Q", bytes(data[:8]))[0]
    return json.loads(bytes(data[8:8 + n])), n


def _with_header(data: bytearray, header: dict) -> bytearray:
    _, n = _header(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return bytearray(struct.pack("<Q", len(raw)) + raw) + data[8 + n:]


def _set_i64(tensor: str, index: int, value: int):
    def mutate(data: bytearray) -> bytearray:
        h, n = _header(data)
        start = 8 + n + h[tensor]["data_offsets"][0] + 8 * index
        data[start:start + 8] = struct.pack("<q", value)
        return data
    return mutate


def _meta(fn):
    def apply(path: Path):
        doc = json.loads((path / "trace.json").read_text())
        fn(doc)
        (path / "trace.json").write_text(json.dumps(doc))
    return apply


HOSTILE = {
    "trace.json is not JSON": (lambda p: (p / "trace.json").write_text("{not json"), "trace.json"),
    "trace.json repeats a key": (lambda p: (p / "trace.json").write_text('{"format": 1, "format": 2}'), "duplicate"),
    "trace.json of another format": (_meta(lambda d: d.update(format="kconvert-other")), "format"),
    "layers outside the target": (_meta(lambda d: d.update(layers=d["layers"][:-1] + [99])), "layers"),
    "data file grew": (lambda p: (p / "trace.safetensors").open("ab").write(b"x"), "bytes"),
    "data file changed": (lambda p: _flip_last_byte(p), "sha256"),
    "no data file": (lambda p: (p / "trace.safetensors").unlink(), "trace.safetensors"),
    "hidden states of the wrong width": (
        lambda p: _rewrite_data(p, lambda d: _with_header(d, _reshape(_header(d)[0], "hidden.3", lambda s: [s[0] * 2,
                                                                                                        s[1] // 2]))),
        "hidden.3"),
    # a valid safetensors file without the tensor (safetensors itself writes it: dropping the header entry alone
    # would leave a hole, which the header reader refuses before the trace's own check is reached)
    "a tensor is missing": (lambda p: _rewrite_data(p, lambda d: _resave_without(d, "next_token")), "next_token"),
    "an unexpected tensor": (lambda p: _rewrite_data(p, lambda d: _with_header(d, _rename(_header(d)[0], "lm_head"))),
                             "missing|unexpected"),
    "sequence boundaries go backwards": (lambda p: _rewrite_data(p, _set_i64("seq_offsets", 1, 10**6)), "seq_offsets"),
    "a prompt longer than its sequence": (lambda p: _rewrite_data(p, _set_i64("prompt_lens", 0, 10**6)), "exceed"),
    "header offsets past the end of the file": (
        lambda p: _rewrite_data(p, lambda d: d[: len(d) - 64]), "past the end|truncated"),
}


def _flip_last_byte(p: Path) -> None:
    data = bytearray((p / "trace.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (p / "trace.safetensors").write_bytes(bytes(data))


def _reshape(h: dict, name: str, fn) -> dict:
    h[name]["shape"] = fn(h[name]["shape"])
    return h


def _resave_without(data: bytearray, name: str) -> bytearray:
    from safetensors.numpy import load, save

    meta = _header(data)[0].get("__metadata__")
    tensors = {k: v for k, v in load(bytes(data)).items() if k != name}
    return bytearray(save(tensors, metadata=meta))


def _rename(h: dict, new: str) -> dict:
    h[new] = h.pop("next_token")
    return h


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_trace_is_refused_in_one_line(tmp_path, case):
    path = random_trace(tmp_path / "t", layers=[2, 3, 4])
    mutate, pattern = HOSTILE[case]
    mutate(path)
    with pytest.raises(InputError) as e:
        open_trace(path)
    assert "\n" not in e.value.message
    import re
    assert re.search(pattern, e.value.message), e.value.message


def test_token_ids_outside_the_vocabulary_are_refused_when_read(tmp_path):
    path = random_trace(tmp_path / "t", layers=[2])
    _rewrite_data(path, _set_i64("input_ids", 2, V + 7))
    tr = open_trace(path)
    with pytest.raises(InputError, match="outside 0..511"):
        tr.sequence(0)


# -------------------------------------------------------------------------------------------- the walk ---

def _seq(x: list[int], P: int, out: int) -> Sequence:
    a = np.asarray(x, dtype=np.int64)
    return Sequence(0, 0, a, np.roll(a, -1), P, out)


def test_replay_walks_the_engines_verify_steps():
    # prompt 3, output 5, lookahead 3: the engine emits x3 after the prefill, then verifies from cursor 2
    x = list(range(100, 111))
    s = _seq(x, 3, 5)
    cursors = range(2, 6)  # cursors 2 .. stop - 3
    right = np.array([[x[c + 2], x[c + 3], x[c + 4]] for c in cursors])
    assert replay(s, right, 2, 3).steps == [3]  # 1 + 3 + 1 tokens: the request is done after one step
    wrong = np.full((4, 3), 1)
    assert replay(s, wrong, 2, 3).steps == [0, 0, 0, 0]  # one token a step: 4 steps after the prefill
    half = right.copy()
    half[:, 1] = 1
    assert replay(s, half, 2, 3).steps == [1, 1]  # cursor 2 -> 4, then 4 -> 6 (emitted 5): done


def test_replay_counts_accepted_drafts_past_the_output_and_flags_a_short_lookahead():
    x = list(range(100, 108))  # prompt 3, output 3 (x3..x5), lookahead 2
    r = replay(_seq(x, 3, 3), np.array([[x[4], x[5], x[6]], [0, 0, 0]]), 2, 3)
    assert r.steps == [3] and r.unknown == 0  # x6 lies past the output: accepted and counted, as vLLM does
    r = replay(_seq(x[:6], 3, 3), np.array([[x[4], x[5], 7], [0, 0, 0]]), 2, 3)  # no lookahead recorded
    assert r.steps == [2] and r.unknown == 1


def test_every_position_stops_where_the_trace_leaves_the_targets_own_tokens():
    x = np.array([5, 6, 7, 8, 9, 10, 11], dtype=np.int64)
    y = np.array([0, 7, 8, 9, 42, 11, 12], dtype=np.int64)  # x[5] = 10 is not the target's 42
    s = Sequence(0, 0, x, y, 1, 6)
    drafts = np.array([[8, 9, 42], [9, 42, 11]])
    r = every_position(s, drafts, np.array([1, 2]), 3)
    # cursor 1: all three drafted tokens are the target's; cursor 2: the third would follow x[5] = 10, which the
    # target did not emit (it would have emitted 42), so the trace cannot tell: counted as not accepted
    assert r.steps == [3, 2] and r.unknown == 1


# -------------------------------------------------------------------------------- the engine's reading ---

def test_engine_reading_follows_vllm_032(tmp_path):
    spec = make_draft(tmp_path / "spec", "speculators", config=lambda c: c.pop("norm_before_residual"))
    _, r = _reading(spec)
    assert r.norm_before_residual is True and r.aux_ids == (2, 4, 5) and r.d2t == "offsets"
    _, r = _reading(make_draft(tmp_path / "sf", "specforge"))
    assert r.aux_ids == (1, 3, 4) and r.norm_before_residual is False  # SGLang's convention, fed as written
    d = read_draft(open_checkpoint(str(tmp_path / "sf")))
    # Model Runner V2 does not read eagle_config.eagle_aux_hidden_state_layer_ids (eagle3_utils.py
    # get_eagle3_aux_layers_from_config): it feeds the defaults (2, L//2, L-3) of the 8-layer target
    assert engine_reading(d, engine_rules("vllm", "0.32"), 8, V).aux_ids == (2, 4, 5)
    _, r = _reading(make_draft(tmp_path / "none", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c.pop("eagle_config"))))
    assert r.aux_ids == (2, 4, 5) and "defaults" in r.notes[0]
    _, r = _reading(make_draft(tmp_path / "order", "torchspec", config=lambda c: c.update(
        eagle_aux_hidden_state_layer_ids=[5, 2, 4])))
    assert r.aux_ids == (2, 4, 5)  # vLLM collects the states in layer order
    _, r = _reading(make_draft(tmp_path / "full", "torchspec", full_vocab=True))
    assert r.d2t == "none" and r.lm_head == "stored"
    _, r = _reading(make_draft(tmp_path / "emb", "torchspec", embeddings=True))
    assert r.embeddings == "draft"


def test_draft_embeddings_equal_to_the_targets_are_shared_as_vllm_does(tmp_path):
    g = torch.Generator().manual_seed(3)
    # trained-looking rows (std 0.02): N(0, 1) rows are what K701 calls never trained, an error on vLLM
    E = (torch.randn(V, H, generator=g) * 0.02).to(torch.bfloat16).float()
    m = meta(layers=[2, 4, 5])
    n = 12
    seq = {"ids": list(range(20, 20 + n)), "next": list(range(21, 21 + n)), "prompt_len": 4, "output_len": 6,
           "hidden": {k: torch.randn(n, H, generator=g) for k in m.layers}}
    trace = write_trace(tmp_path / "t", [seq], m, E)

    def embed(table):
        return lambda t: t.__setitem__("embed_tokens.weight", ("BF16", (V, H), table.numpy()))

    same = make_draft(tmp_path / "same", "torchspec", embeddings=True, tensors=embed(E))
    other = make_draft(tmp_path / "other", "torchspec", embeddings=True, tensors=embed(E * 2))
    assert score(str(same), str(trace), settings=ScoreSettings(threads=1)).reading.embeddings == "target"
    assert score(str(other), str(trace), settings=ScoreSettings(threads=1)).reading.embeddings == "draft"


# --------------------------------------------------------------- the runner against an engine-style loop ---

def _embedding_table(tr) -> torch.Tensor:
    """The target's embedding as the trace keeps it (rows of the ids it holds), as a full [V, H] table."""
    ids, rows = tr.embedding_rows()
    table = torch.zeros(V, rows.shape[1], dtype=torch.float64)
    table[torch.from_numpy(ids.astype("int64"))] = rows.double()
    return table


def _second_layer(t: dict) -> None:
    """Add layers.1.* to a factory draft (multi-layer EAGLE-3: later layers take H, not 2H)."""
    for name, (dt, shape, data) in list(t.items()):
        if name.startswith("midlayer.") and "hidden_norm" not in name:
            new = "layers.1." + name[len("midlayer."):]
            if "self_attn." in name and len(shape) == 2 and shape[1] == 2 * H:
                shape = (shape[0], H)
                data = data[:, :H].copy() if data is not None else None
            t[new] = (dt, shape, data if data is None else data * 1.5)


@pytest.mark.parametrize("layers", [1, 2])
def test_batched_runner_drafts_what_the_eagle3_definition_drafts(tmp_path, layers):
    """score's batched runner against tests/eagle3_reference.py (vLLM llama_eagle3.py's computation written out
    on transformers' Llama helpers, weights read with safetensors). MLA drafts have no such reference here: their
    runner is checked against vLLM's own counters in tests/test_score_live.py."""
    kw = {}
    if layers == 2:
        kw = {"config": lambda c: c.update(num_hidden_layers=2), "tensors": _second_layer}
    draft = make_draft(tmp_path / "d", "torchspec", family="llama", **kw)
    d, reading = _reading(draft)
    # three sequences of different lengths, drafted in one batch (propose_many: one matmul over all their rows,
    # attention within each) and the first alone (propose)
    tr = open_trace(random_trace(tmp_path / "t", seqs=((6, 20), (3, 9), (5, 14))))
    w = WeightCache(d, torch.float64, torch.device("cpu"))
    runner = build_runner(d, reading, tr, w)
    for name in list(runner.w):
        runner.w[name] = runner.w[name] * 40  # larger weights: sharper logits, no near-ties in argmax
    runner.embed.rows = runner.embed.rows.double()
    cfg = json.loads((draft / "config.json").read_text())
    ref = ReferenceDraft(draft, cfg, _embedding_table(tr), scale=40)  # the same 40, every weight but lm_head
    assert reading.aux_ids == tuple(cfg["eagle_aux_hidden_state_layer_ids"])  # vLLM feeds the config's ids
    items, want = reference_proposals(tr, reading.aux_ids, ref, 3)
    assert [g.tolist() for g in runner.propose_many(items, 3)] == want
    first = items[0]
    assert runner.propose(first.tokens_next, first.aux, first.cursors, 3).tolist() == want[0]
    assert len({t for row in want[0] for t in row}) > 3  # the proposals vary: the comparison can tell readings apart


def test_reference_llama_layer_equals_transformers_llama_decoder_layer():
    """tests/eagle3_reference.py's plain Llama layer (the second layer of a multi-layer draft) against
    transformers' LlamaDecoderLayer with the same weights."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    from tests.eagle3_reference import rms

    torch.manual_seed(0)
    cfg = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
           "intermediate_size": 128, "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "num_hidden_layers": 2}
    lc = LlamaConfig(**cfg, attn_implementation="eager")
    layer = LlamaDecoderLayer(lc, layer_idx=1).double()
    ref = ReferenceDraft.__new__(ReferenceDraft)
    ref.cfg, ref.eps, ref.heads, ref.kv_heads, ref.hd, ref.layers = cfg, 1e-5, 2, 1, 32, 2
    ref.rope = LlamaRotaryEmbedding(lc)
    ref.w = {f"layers.1.{k}": v.detach() for k, v in layer.state_dict().items()}
    T = 7
    x = torch.randn(T, 64, dtype=torch.float64)
    pos = torch.arange(T)
    cos, sin = ref.rope(x[None].float(), pos[None])
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    want = layer(x[None], attention_mask=mask, position_ids=pos[None],
                 position_embeddings=(cos.double(), sin.double()))
    want = want[0] if isinstance(want, tuple) else want
    h = rms(x, ref.w["layers.1.input_layernorm.weight"], 1e-5)
    r = ref._attn(1, h, pos, [None, None]) + x
    got = ref._mlp(1, rms(r, ref.w["layers.1.post_attention_layernorm.weight"], 1e-5)) + r
    # transformers' LlamaRMSNorm normalises in float32 even for float64 inputs: agreement to float32 precision
    torch.testing.assert_close(got, want[0], rtol=1e-5, atol=1e-6)


def test_chained_steps_only_where_the_chain_is_still_accepted_count_the_same(tmp_path):
    from kconvert.score.walk import reference_tokens, sequence_inputs

    good, trace = _good_and_trace(tmp_path)
    d, reading = _reading(good)
    tr = open_trace(trace)
    runner = build_runner(d, reading, tr, WeightCache(d, torch.float32, torch.device("cpu")))
    pruned_any = False
    for i in range(tr.num_sequences):
        seq = tr.sequence(i)
        for mode, walk in (("replay", replay), ("every-position", None)):
            tokens_next, aux, cursors, first = sequence_inputs(tr, seq, reading.aux_ids, mode)
            ref = torch.from_numpy(reference_tokens(seq, cursors, 3, mode))
            full = runner.propose(tokens_next, aux, torch.from_numpy(cursors), 3)
            lazy = runner.propose(tokens_next, aux, torch.from_numpy(cursors), 3, ref)
            pruned_any |= bool((lazy < 0).any())
            if walk is replay:
                assert replay(seq, full.numpy(), first, 3).steps == replay(seq, lazy.numpy(), first, 3).steps
            else:
                assert (every_position(seq, full.numpy(), cursors, 3).steps
                        == every_position(seq, lazy.numpy(), cursors, 3).steps)
    assert pruned_any


def test_rope_tables_match_transformers():
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from kconvert.score.draft import build_rope

    del transformers
    pos = torch.arange(0, 3000, 7)
    lc = LlamaConfig(hidden_size=256, num_attention_heads=4, head_dim=64, rope_theta=500000.0,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    cos, sin = LlamaRotaryEmbedding(lc)(torch.zeros(1), pos[None])
    rope, _ = build_rope({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 64, True, mla=False)
    c, s = rope.tables(pos, torch.float32)
    assert torch.allclose(c, cos[0, :, :32], atol=2e-5) and torch.allclose(s, sin[0, :, :32], atol=2e-5)
    dc = DeepseekV3Config(hidden_size=128, num_attention_heads=2, qk_rope_head_dim=64, kv_lora_rank=64,
                          q_lora_rank=32, qk_nope_head_dim=32, v_head_dim=32, rope_theta=50000.0,
                          rope_scaling={"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                                        "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
    cos, sin = DeepseekV3RotaryEmbedding(dc)(torch.zeros(1), pos[None])
    rope, mult = build_rope({"rope_type": "yarn", "rope_theta": 50000.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "beta_fast": 1.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 1.0}, 64, False, mla=True)
    c, s = rope.tables(pos, torch.float32)
    assert torch.allclose(c, cos[0, :, :32], atol=2e-5) and torch.allclose(s, sin[0, :, :32], atol=2e-5)
    assert mult == pytest.approx((0.1 * math.log(32) + 1) ** 2)  # DeepSeek's yarn softmax scale, mscale_all_dim 1


# --------------------------------------------------------------------- scoring and diagnosis end to end ---

def _good_and_trace(tmp_path, family="llama", producer="torchspec", true_ids=(2, 5, 7), steps_out=None, **kw):
    # llama: the family tests/eagle3_reference.py writes out (the trace must not come from the runner under test).
    # steps_out ({aux ids or None: []}): the verify steps tests/score_factories.py derives from the reference's
    # own proposals (greedy_verify_steps), per sequence, for the draft fed those ids
    good = make_draft(tmp_path / "good", producer, family=family, config=lambda c: _ids(c, list(true_ids)), **kw)
    d, reading = _reading(good)
    assert reading.aux_ids == true_ids
    trace = consistent_trace(tmp_path / "trace", good, reading, work=tmp_path, steps_out=steps_out)
    return good, trace


def _al(steps: list[list[int]]) -> float:
    """vLLM's mean acceptance length of a list of verify steps: 1 + accepted / drafts (the bonus token)."""
    flat = [a for seq in steps for a in seq]
    return 1 + sum(flat) / len(flat)


def _ids(c: dict, ids: list[int]) -> None:
    if "eagle_aux_hidden_state_layer_ids" in c:
        c["eagle_aux_hidden_state_layer_ids"] = ids
    if isinstance(c.get("eagle_config"), dict):
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids


def test_score_reports_verify_fields_and_validates_against_the_report_schema(tmp_path):
    # the expected figures are derived by hand in tests/score_factories.py hand_pattern (vLLM's greedy verify
    # rule walked over a draft that proposes one token z everywhere), never by kconvert's counting code
    from tests.score_factories import HAND_COUNTERS, constant_proposer, hand_pattern, pattern_trace

    draft, z = constant_proposer(tmp_path / "z")
    w = z + 1 if z + 1 < V else z - 1
    checked, steps = hand_pattern(z, w)
    trace = pattern_trace(tmp_path / "trace", checked, avoid={z, w})
    sr = score(str(draft), str(trace), settings=ScoreSettings(threads=1))
    assert [s.steps for s in sr.result.sequences] == steps
    c = sr.result.counters()
    assert c == HAND_COUNTERS
    acc = sr.acceptance
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 18 / 19)
    assert acc["acceptance_rate"] == pytest.approx(18 / 57)
    assert acc["per_position"] == pytest.approx([7 / 19, 6 / 19, 5 / 19])
    assert sr.exit_code == 0
    doc = sr.to_dict()  # the library API docs/design.md names: every result's to_dict() is its --json
    validate(doc, "report")
    assert doc["command"] == "score" and doc["live"] is None and doc["score"]["counters"] == HAND_COUNTERS
    assert doc["score"]["acceptance"]["mean_acceptance_length"] == pytest.approx(1 + 18 / 19)
    assert doc["score"]["trace"]["sha256"] == sr.trace.meta_sha256


def test_score_reads_only_the_drafts_weights_by_byte_range(tmp_path):
    good, trace = _good_and_trace(tmp_path)
    sr = score(str(good), str(trace), settings=ScoreSettings(threads=1))
    files = sum(p.stat().st_size for p in good.glob("*.safetensors"))
    assert 0 < sr.timings["weights_bytes"] <= files


def _diagnose(draft, trace, **kw):
    from kconvert.score.diagnose_offline import run_diagnosis

    sr = score(str(draft), str(trace), settings=ScoreSettings(threads=1, skip_static=True,
                                                              lm_head_from=kw.get("lm_head_from")))
    sr.diagnosis = run_diagnosis(sr, asked=set(kw.get("asked", ())), lm_head_from=kw.get("lm_head_from"),
                                 search=kw.get("search"), draft_ref=str(draft), target_ref="T")
    return sr


def test_diagnose_names_the_aux_ids_in_the_other_convention(tmp_path):
    steps = {None: [], (1, 4, 6): []}
    good, trace = _good_and_trace(tmp_path, steps_out=steps)
    broken = make_draft(tmp_path / "b", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 4, 6])))
    sr = _diagnose(broken, trace)
    diag = sr.diagnosis
    assert diag["best"] == "aux ids [2, 5, 7]", diag
    assert "--aux-ids 2,5,7" in diag["fix_command"]
    al = {c["candidate"]: c["mean_acceptance_length"] for c in diag["candidates"]}
    # the figures the reference draft's own proposals give (tests/score_factories.py greedy_verify_steps): the
    # draft as loaded feeds [1, 4, 6], the candidate the trace's [2, 5, 7]
    assert diag["baseline"]["mean_acceptance_length"] == pytest.approx(_al(steps[(1, 4, 6)]))
    assert al["aux ids [2, 5, 7]"] == pytest.approx(_al(steps[None]))
    assert _al(steps[None]) > _al(steps[(1, 4, 6)]) + 0.5  # the trace tells the readings apart


def test_diagnose_names_d2t_as_absolute_ids_where_the_draft_as_loaded_cannot_run(tmp_path):
    good, trace = _good_and_trace(tmp_path)

    def absolute(t):
        dt, shape, d2t = t["d2t"]
        t["d2t"] = (dt, shape, d2t + np.arange(shape[0]))

    broken = make_draft(tmp_path / "b", "torchspec", config=lambda c: _ids(c, [2, 5, 7]),
                        tensors=absolute)
    sr = _diagnose(broken, trace)
    assert sr.result.error and "outside 0..511" in sr.result.error
    assert sr.diagnosis["best"] == "d2t as absolute" and "--d2t absolute" in sr.diagnosis["fix_command"]
    assert sr.exit_code == 1


def test_diagnose_names_norm_before_residual_false_for_a_speculators_draft_missing_the_key(tmp_path):
    good, trace = _good_and_trace(tmp_path, family="llama", producer="speculators")
    broken = make_draft(tmp_path / "b", "speculators", config=lambda c: (_ids(c, [2, 5, 7]),
                                                                        c.pop("norm_before_residual")))
    sr = _diagnose(broken, trace)
    assert sr.reading.norm_before_residual is True
    assert sr.diagnosis["best"] == "norm_before_residual false"
    assert sr.diagnosis["fix_command"].endswith("--target T")  # plain `kconvert fix` writes the flag (K602)


def test_diagnose_reselects_lm_head_rows_from_a_full_vocabulary_head(tmp_path):
    from safetensors.torch import load_file

    from tests.factories import TINY, _vocab_map

    full = make_draft(tmp_path / "full", "torchspec", full_vocab=True, config=lambda c: _ids(c, [2, 5, 7]))
    d2t, _ = _vocab_map(TINY, 0)  # the mapping make_draft writes
    head = load_file(str(full / "model.safetensors"))["lm_head.weight"].float().numpy()

    def pruned(sel):
        def fn(t):
            dt, _, _ = t["lm_head.weight"]
            t["lm_head.weight"] = (dt, (len(sel), H), head[sel].astype(np.float32))
        return fn

    good = make_draft(tmp_path / "good", "torchspec", config=lambda c: _ids(c, [2, 5, 7]),
                      tensors=pruned(d2t + np.arange(len(d2t))))
    _, reading = _reading(good)
    trace = consistent_trace(tmp_path / "trace", good, reading, work=tmp_path)
    broken = make_draft(tmp_path / "b", "torchspec", config=lambda c: _ids(c, [2, 5, 7]), tensors=pruned(d2t))
    sr = _diagnose(broken, trace, lm_head_from=str(full), asked=["lm-head"])
    assert sr.diagnosis["best"] == "lm_head re-selected"
    assert f"--lm-head-from {full}" in sr.diagnosis["fix_command"]


def test_diagnose_searches_the_recorded_layers_when_no_aux_ids_are_declared(tmp_path):
    good, trace = _good_and_trace(tmp_path)
    broken = make_draft(tmp_path / "b", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c.pop("eagle_config")))
    sr = _diagnose(broken, trace)
    assert sr.reading.aux_ids == (2, 4, 5)  # the engine's defaults for 8 layers
    assert sr.diagnosis["best"] == "aux ids [2, 5, 7]", sr.diagnosis["candidates"]
    assert sr.diagnosis["aux_search"]


def test_prefixed_tensor_names_do_not_run_as_loaded_and_diagnose_names_the_rename(tmp_path):
    from tests.factories import rename_all

    steps = {None: []}
    good, trace = _good_and_trace(tmp_path, family="llama", producer="speculators", steps_out=steps)
    broken = make_draft(tmp_path / "b", "speculators", config=lambda c: _ids(c, [2, 5, 7]),
                        tensors=lambda t: rename_all(t, lambda n: n if n == "lm_head.weight" else "model." + n))
    sr = _diagnose(broken, trace)
    assert "raises on names it does not know" in sr.result.error
    assert sr.diagnosis["best"] == "tensor names without the prefix"
    best = next(c for c in sr.diagnosis["candidates"] if c["candidate"] == sr.diagnosis["best"])
    # the reference draft's own figure on this trace (greedy_verify_steps), which the good draft scores too
    assert best["mean_acceptance_length"] == pytest.approx(_al(steps[None]))
    good_al = score(str(good), str(trace), settings=ScoreSettings(threads=1)).acceptance["mean_acceptance_length"]
    assert good_al == pytest.approx(_al(steps[None]))


def test_diagnose_keeps_the_draft_as_loaded_when_no_reading_is_resolvably_better(tmp_path):
    good, trace = _good_and_trace(tmp_path)
    sr = _diagnose(good, trace, asked=["all"])
    assert sr.diagnosis["best"] is None and sr.diagnosis["candidates"]


# ------------------------------------------------------------------------------------------ the recorder ---

@pytest.fixture(scope="module")
def hf_target(tmp_path_factory):
    pytest.importorskip("transformers")
    return tiny_hf_target(tmp_path_factory.mktemp("hf") / "target")


def _hf_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def test_recorded_trace_is_the_targets_greedy_continuation_with_its_own_states(tmp_path, hf_target):
    from tests.score_factories import prompts_file
    from kconvert.trace.record_hf import record_trace
    from kconvert.trace.request import TraceRequest

    prompts = prompts_file(tmp_path / "p.txt", 5)
    out = record_trace(TraceRequest(target=str(hf_target), out=str(tmp_path / "tr"), prompts=str(prompts),
                                    max_tokens=12, layers="all", dtype="float32", lookahead=3, batch_size=2,
                                    threads=1))
    tr = open_trace(out)
    assert tr.meta.layers == [0, 1, 2, 3] and tr.meta.prompt_set["chat_template_applied"]
    model = _hf_model(hf_target)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_target))
    for i in range(tr.num_sequences):
        s = tr.sequence(i)
        ids = torch.from_numpy(s.input_ids.copy())[None]
        with torch.no_grad():
            gen = model.generate(ids[:, : s.prompt_len], max_new_tokens=12, do_sample=False, pad_token_id=0)
            full = model(ids, output_hidden_states=True)
        emitted = gen[0, s.prompt_len:].tolist()
        assert s.input_ids[s.prompt_len: s.stop].tolist() == emitted[: s.output_len]
        assert s.output_len == 12 or s.input_ids[s.stop - 1] == tok.eos_token_id
        assert (s.next_token[s.prompt_len - 1: -1] == s.input_ids[s.prompt_len:]).all()  # self-consistent
        for k in range(3):
            assert torch.allclose(tr.hidden(s, k), full.hidden_states[k][0], atol=1e-4)
        final = model.model.norm(tr.hidden(s, 3))  # stream L is before the final norm
        assert torch.allclose(final, full.hidden_states[-1][0], atol=1e-4)


def test_recorder_never_reads_pickles_nor_runs_unknown_architectures(tmp_path, hf_target):
    import shutil

    from kconvert.trace.record_hf import record_trace
    from kconvert.trace.request import TraceRequest

    t = tmp_path / "target"
    shutil.copytree(hf_target, t)
    (t / "pytorch_model.bin").write_bytes(b"not a pickle: reading this file would fail")
    items = [{"prompt_token_ids": [2, 5, 6, 3], "output_token_ids": [7, 8, 9]}]
    out = record_trace(TraceRequest(target=str(t), out=str(tmp_path / "tr"), layers=[1, 2], dtype="float32",
                                    continuations=items, lookahead=2, threads=1))
    s = open_trace(out).sequence(0)
    assert s.input_ids[:7].tolist() == [2, 5, 6, 3, 7, 8, 9] and s.output_len == 3 and s.length == 9
    cfg = json.loads((t / "config.json").read_text())
    cfg["model_type"] = "my_custom_arch"
    (t / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="never runs a checkpoint's own code"):
        record_trace(TraceRequest(target=str(t), out=str(tmp_path / "tr2"), continuations=items, threads=1))


# ---------------------------------------------------------------------------------------- offline dumps ---

def _dump(folder: Path, model, n_files=2, streams=(1, 2, 3), T=9):
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(1)
    for i in range(n_files):
        ids = torch.randint(4, 64, (T,), generator=g)
        with torch.no_grad():
            hs = model(ids[None], output_hidden_states=True).hidden_states
        pre = [hs[k][0] for k in streams if k < 3]
        if 3 in streams:
            pre.append(_last_prenorm(model, ids))
        save_file({"token_ids": ids, "hidden_states": torch.stack(pre, dim=1).contiguous()},
                  str(folder / f"hs_{i}.safetensors"))
    return folder


def _last_prenorm(model, ids):
    out = {}
    h = model.model.layers[-1].register_forward_hook(lambda m, a, o: out.update(h=o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        model(ids[None])
    h.remove()
    return out["h"][0]


def test_speculators_dump_becomes_a_trace_with_the_targets_greedy_labels(tmp_path, hf_target):
    from kconvert.trace.from_dump import DumpRequest, trace_from_dump

    model = _hf_model(hf_target)
    dump = _dump(tmp_path / "dump", model)
    out = trace_from_dump(DumpRequest(target=str(hf_target), dump=str(dump), out=str(tmp_path / "tr"),
                                      aux_ids=[1, 2, 3], threads=1))
    tr = open_trace(out)
    assert tr.meta.continuation["source"] == "dataset" and tr.num_sequences == 2
    for i in range(2):
        s = tr.sequence(i)
        with torch.no_grad():
            logits = model(torch.from_numpy(s.input_ids.copy())[None]).logits[0]
        assert s.next_token.tolist() == logits.argmax(-1).tolist()
    ids, rows = tr.embedding_rows()
    assert torch.equal(rows, model.model.embed_tokens.weight[torch.from_numpy(ids.copy())].detach())


def test_dump_of_pickles_is_refused_with_the_way_out(tmp_path, hf_target):
    from kconvert.trace.from_dump import DumpRequest, trace_from_dump

    d = tmp_path / "specforge" / "rows_0-5000"
    d.mkdir(parents=True)
    (d / "data_0.ckpt").write_bytes(b"\x80\x04 a pickle that is never opened")
    with pytest.raises(InputError, match="pickle.*not read"):
        trace_from_dump(DumpRequest(target=str(hf_target), dump=str(tmp_path / "specforge"), out=str(tmp_path / "o")))


def test_dump_streams_must_match_what_the_user_says(tmp_path, hf_target):
    from kconvert.trace.from_dump import DumpRequest, trace_from_dump

    dump = _dump(tmp_path / "dump", _hf_model(hf_target), n_files=1)
    with pytest.raises(UsageError, match="holds 3 streams"):
        trace_from_dump(DumpRequest(target=str(hf_target), dump=str(dump), out=str(tmp_path / "o"), aux_ids=[1, 2]))


# --------------------------------------------------------------------------------------------- the CLI ---

def _cli(*args):
    """The real entry point in a child process (the exit code and stderr a CI job sees)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _main(capsys, *args) -> tuple[int, str, str]:
    from kconvert.cli import main

    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_score_json_exit_codes_and_fix_decided_by(tmp_path, capsys):
    steps = {None: []}
    good, trace = _good_and_trace(tmp_path, steps_out=steps)
    rc, out, err = _main(capsys, "score", str(good), "--trace", str(trace), "--json", "--threads", "1",
                         "--min-acceptance-length", "1.5")
    assert rc == 0, err
    doc = json.loads(out)
    validate(doc, "report")
    assert doc["verdict"] == "pass" and doc["thresholds"]["checks"][0]["passed"]
    # the figure the reference draft's own proposals give on this trace (greedy_verify_steps), above the 1.5 asked
    assert doc["score"]["acceptance"]["mean_acceptance_length"] == pytest.approx(_al(steps[None]))
    assert _al(steps[None]) > 1.5
    broken = make_draft(tmp_path / "b", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 4, 6])))
    rc, out, _ = _main(capsys, "score", str(broken), "--trace", str(trace), "--threads", "1", "--output-format", "full")
    assert rc == 1 and "nothing scored" in out
    # not a TTY: one line per finding and per figure, as for verify
    rc, out, _ = _main(capsys, "score", str(broken), "--trace", str(trace), "--threads", "1")
    assert rc == 1 and out.splitlines()[1].startswith("score: not run: static checks failed")
    rep = tmp_path / "score.json"
    rc, out, err = _main(capsys, "score", str(broken), "--trace", str(trace), "--threads", "1", "--diagnose",
                         "--report", str(rep), "--output-format", "full")
    assert rc == 1 and "best: aux ids [2, 5, 7]" in out, out + err
    rc, out, err = _main(capsys, "score", str(broken), "--trace", str(trace), "--threads", "1", "--diagnose",
                         "--output-format", "github")
    assert out.startswith("::error ") and "title=kconvert K404" in out.splitlines()[0]
    assert any(ln.startswith("score: ") and "mean acceptance length" in ln for ln in out.splitlines())
    assert any(ln.startswith("diagnose: best reading aux ids [2, 5, 7]") for ln in out.splitlines()), out
    bad = _cli("score", str(good), "--trace", str(tmp_path / "nope"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    # fix takes the decision from the report and records which trace decided
    fixed = tmp_path / "fixed"
    rc, _, err = _main(capsys, "fix", str(broken), "-o", str(fixed), "--decided-by", str(rep))
    assert rc == 0, err
    prov = json.loads((fixed / "kconvert.json").read_text())
    assert prov["decisions"]["aux_ids"] == [2, 5, 7]
    assert prov["decided_by"]["trace"]["sha256"] == open_trace(trace).meta_sha256
    assert prov["decided_by"]["chosen"]["candidate"] == "aux ids [2, 5, 7]"
    rc, _, err = _main(capsys, "fix", str(broken), "-o", str(tmp_path / "f2"), "--decided-by", str(rep),
                       "--aux-ids", "1,4,6")
    assert rc == 2 and "contradicts the score report" in err
    rc, _, err = _main(capsys, "fix", str(good), "-o", str(tmp_path / "f3"), "--decided-by", str(rep))
    assert rc == 2 and "other files" in err
    rescored = score(str(fixed), str(trace), settings=ScoreSettings(threads=1))
    # the fixed draft scores what the reference draft's own proposals give with the trace's ids [2, 5, 7]
    assert rescored.acceptance["mean_acceptance_length"] == pytest.approx(_al(steps[None]))


def test_cli_trace_records_and_summarises(tmp_path, hf_target, capsys):
    from tests.score_factories import prompts_file

    prompts = prompts_file(tmp_path / "p.txt", 3)
    rc, out, err = _main(capsys, "trace", str(hf_target), "--prompts", str(prompts), "-o", str(tmp_path / "tr"),
                         "--layers", "1,2", "--max-tokens", "6", "--dtype", "float32", "--threads", "1", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["layers"] == [1, 2] and doc["num_sequences"] == 3 and "config" not in doc["target"]
    rc, _, err = _main(capsys, "trace", str(hf_target), "--prompts", str(prompts), "-o", str(tmp_path / "tr"))
    assert rc == 2 and "already exists" in err
    dump = _dump(tmp_path / "dump", _hf_model(hf_target), n_files=2)
    rc, out, err = _main(capsys, "trace", str(hf_target), "--from-dump", str(dump), "--dump-aux-ids", "1,2,3",
                         "-o", str(tmp_path / "dtr"), "--threads", "1", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["continuation"]["source"] == "dataset" and doc["layers"] == [1, 2, 3] and doc["num_sequences"] == 2


def test_read_span_converts_while_reading_what_safetensors_reads(tmp_path, monkeypatch):
    """read_span against safetensors' own loader: whole tensors and row spans, as stored and converted chunk by
    chunk (READ_CHUNK made small so a tensor takes many chunks), and a truncated file refused."""
    from safetensors.torch import load_file, save_file

    import kconvert.source.tensor_read as run
    from kconvert.source.safetensors_header import read_header

    g = torch.Generator().manual_seed(0)
    t = {"a": torch.randn(300, 70, generator=g).to(torch.bfloat16), "b": torch.arange(10),
         "c": torch.tensor([True, False, True]), "s": torch.tensor(2.5, dtype=torch.float16)}
    f = tmp_path / "m.safetensors"
    save_file(t, str(f))
    want = load_file(str(f))
    infos = read_header(f, "m.safetensors").tensors
    monkeypatch.setattr(run, "READ_CHUNK", 1000)  # 140 bytes a row: a chunk ends inside a row
    for name, w in want.items():
        assert torch.equal(run.read_span(f, infos[name]), w)
        got = run.read_span(f, infos[name], as_dtype=torch.float32)
        assert got.dtype == (torch.float32 if w.is_floating_point() else w.dtype)
        assert torch.equal(got, w.float() if w.is_floating_point() else w)
    assert torch.equal(run.read_span(f, infos["a"], 17, 200, as_dtype=torch.float32), want["a"][17:217].float())
    assert torch.equal(run.read_span(f, infos["a"], 299, 1), want["a"][299:])
    with open(f, "r+b") as fh:
        fh.truncate(infos["a"].start + 5000)
    with pytest.raises(InputError, match="truncated"):
        run.read_span(f, infos["a"], as_dtype=torch.float32)
