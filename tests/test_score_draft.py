"""kconvert/score/draft.py (the draft's layers in torch) against transformers' own layers and rope code, and
figures derived by hand:

- RMSNorm: transformers' LlamaRMSNorm (models/llama/modeling_llama.py: normalise in float32, cast back, times the
  weight); the fused add-and-norm by hand (vLLM layernorm.py RMSNorm.forward_static: the float32 sum is the new
  residual, cast to the input dtype, and is what gets normalised);
- rotary embeddings: transformers' apply_rotary_pos_emb (neox halves) and DeepSeek-V3's
  apply_rotary_pos_emb_interleave (pairs (x0, x1), (x2, x3) ...; its output de-interleaved), the inverse
  frequencies and attention factor of transformers' modeling_rope_utils (_compute_default_rope_parameters,
  _compute_linear_scaling_rope_parameters, _compute_yarn_parameters);
- the softmax scale: transformers' LlamaAttention.scaling and DeepseekV3Attention.scaling (yarn_apply_mscale);
- the messages a user reads, spelled out here.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    DeepseekV3Attention, apply_rotary_pos_emb_interleave)
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention, LlamaRMSNorm, apply_rotary_pos_emb)

from kconvert.errors import InputError, UsageError  # noqa: E402
from kconvert.score import draft  # noqa: E402
from kconvert.score.draft import add_rms_norm, build_rope, draft_spec, rms_norm, rope_parameters  # noqa: E402

torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------------ norms ---

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rms_norm_is_transformers_llama_rms_norm(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 16, generator=g) * 0.01).to(dtype)  # small: eps 1e-4 matters against mean(x^2) ~ 1e-4
    w = (1 + torch.randn(16, generator=g) * 0.3).to(dtype)
    ref = LlamaRMSNorm(16, eps=1e-4).to(dtype)
    with torch.no_grad():
        ref.weight.copy_(w)
        want = ref(x)
    got = rms_norm(x, w, 1e-4)
    assert got.dtype == dtype and torch.equal(got, want)
    # no weight: LlamaRMSNorm with a weight of ones (1 x a value is the value)
    with torch.no_grad():
        ref.weight.fill_(1)
        assert torch.equal(rms_norm(x, None, 1e-4), ref(x))


def test_add_rms_norm_by_hand():
    # x + residual = [4, 3]: mean of squares 12.5; with eps 12.5 the divisor is sqrt(25) = 5: [0.8, 0.6];
    # times the weight [1, 2]: [0.8, 1.2]; the new residual is the sum [4, 3]
    x = torch.tensor([[3.0, 4.0]])
    r = torch.tensor([[1.0, -1.0]])
    out, res = add_rms_norm(x, r, torch.tensor([1.0, 2.0]), 12.5)
    assert torch.allclose(out, torch.tensor([[0.8, 1.2]]), rtol=0, atol=1e-7)
    assert res.tolist() == [[4.0, 3.0]]
    # in bfloat16 the sum is taken in float32 and normalised there; the residual is that sum cast back:
    # 1 + 2^-9 has no bfloat16 (8 significant bits: 1 + 2^-7 is the next after 1), the residual is 1.0, while
    # the output is [1 + 2^-9] / sqrt((1 + 2^-9)^2 + 0) = 1 exactly either way; use two entries to see it:
    # [1 + 2^-9, -1]: mean square (1.00391 + 1) / 2, the normalised first entry 1.001953 / 1.000976 = 1.000975
    xb = torch.tensor([[1.0, -1.0]], dtype=torch.bfloat16)
    rb = torch.tensor([[2.0 ** -9, 0.0]], dtype=torch.bfloat16)
    out, res = add_rms_norm(xb, rb, torch.ones(2, dtype=torch.bfloat16), 0.0)
    assert res.dtype == torch.bfloat16 and res.tolist() == [[1.0, -1.0]]
    s = 1 + 2.0 ** -9
    rms = math.sqrt((s * s + 1) / 2)
    want = torch.tensor([[s / rms, -1 / rms]]).to(torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want)


# ------------------------------------------------------------------------------------------------- rope ---

def _q(T=6, heads=3, d=16, seed=1):
    return torch.randn(T, heads, d, generator=torch.Generator().manual_seed(seed))


def test_neox_rope_is_transformers_apply_rotary_pos_emb():
    d = 16
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float) / d))
    rope = draft.Rope(d, True, inv)
    pos = torch.tensor([0, 1, 5, 9, 100, 2047])
    cos, sin = rope.tables(pos, torch.float32)
    q = _q(d=d)
    freqs = pos[:, None].float() * inv[None]
    emb = torch.cat([freqs, freqs], -1)  # transformers' LlamaRotaryEmbedding: cat(freqs, freqs)
    want, _ = apply_rotary_pos_emb(q.transpose(0, 1)[None], q.transpose(0, 1)[None], emb.cos()[None],
                                   emb.sin()[None])
    torch.testing.assert_close(rope.apply(q, cos, sin), want[0].transpose(0, 1), rtol=1e-6, atol=1e-6)


def test_partial_rope_leaves_the_rest_of_the_head_alone():
    # rotary_dim 8 of a 16-wide head: the first 8 rotate (as an 8-wide head would), the last 8 pass through
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
    q = _q(d=16)
    pos = torch.arange(6)
    for neox in (True, False):
        rope = draft.Rope(8, neox, inv)
        cos, sin = rope.tables(pos, torch.float32)
        got = rope.apply(q, cos, sin)
        assert torch.equal(got[..., 8:], q[..., 8:])
        assert torch.equal(got[..., :8], rope.apply(q[..., :8].contiguous(), cos, sin))
        assert not torch.allclose(got[1:, :, :8], q[1:, :, :8])


def test_interleaved_rope_is_deepseeks_pairs():
    # DeepSeek's pairs (x0, x1), (x2, x3), ...: transformers computes them and returns the evens' results then the
    # odds' (de-interleaved); vLLM's non-neox rotary keeps the pairs in place: got[..., 0::2] is the first half
    d = 16
    inv = 1.0 / (50000.0 ** (torch.arange(0, d, 2, dtype=torch.float) / d))
    rope = draft.Rope(d, False, inv, mscale=1.0)
    pos = torch.tensor([0, 3, 8, 31, 500, 4000])
    cos, sin = rope.tables(pos, torch.float32)
    q = _q(d=d)
    freqs = pos[:, None].float() * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    want, _ = apply_rotary_pos_emb_interleave(q.transpose(0, 1)[None], q.transpose(0, 1)[None], emb.cos()[None],
                                              emb.sin()[None])
    want = want[0].transpose(0, 1)
    got = rope.apply(q, cos, sin)
    torch.testing.assert_close(got[..., 0::2], want[..., : d // 2], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got[..., 1::2], want[..., d // 2:], rtol=1e-6, atol=1e-6)


def test_rope_tables_carry_the_mscale_and_the_model_dtype():
    inv = torch.tensor([1.0, 0.5])
    rope = draft.Rope(4, True, inv, mscale=2.0)
    cos, sin = rope.tables(torch.tensor([0, 1]), torch.bfloat16)
    # position 0: cos 1, sin 0 times 2; position 1: 2 cos(1), 2 cos(0.5), 2 sin(1), 2 sin(0.5), in bfloat16
    assert cos.dtype == torch.bfloat16 and sin.dtype == torch.bfloat16
    want_c = torch.tensor([[2.0, 2.0], [2 * math.cos(1), 2 * math.cos(0.5)]]).to(torch.bfloat16)
    want_s = torch.tensor([[0.0, 0.0], [2 * math.sin(1), 2 * math.sin(0.5)]]).to(torch.bfloat16)
    assert torch.equal(cos, want_c) and torch.equal(sin, want_s)


def _hf(kind: str, params: dict, head_dim: int = 64):
    """transformers' inverse frequencies and attention factor for these rope parameters (a LlamaConfig with a
    head of `head_dim`). Its default rope has no partial rotary: the rotated part is a head of
    int(head_dim x partial_rotary_factor), the width _compute_yarn_parameters also takes."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if kind == "default":
        head_dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=params.get("max_position_embeddings", 8192),
                      rope_parameters={k: v for k, v in params.items() if k != "partial_rotary_factor"})
    if kind == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    return ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")


@pytest.mark.parametrize("params", [
    {"rope_type": "default", "rope_theta": 12345.0},
    {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768,
     "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False},
    {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
     "mscale": 1.0, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
     "mscale": 1.0},  # mscale without mscale_all_dim: transformers ignores it (get_mscale(factor))
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0, "original_max_position_embeddings": 4096,
     "attention_factor": 0.75},
], ids=["default", "partial", "linear", "yarn", "yarn-betas-untruncated", "yarn-mscales", "yarn-mscale-only",
        "yarn-attention-factor"])
def test_build_rope_is_transformers_rope_init(params):
    inv_want, factor_want = _hf(params["rope_type"], params)
    rope, mult = build_rope(params, 64, True, mla=False)
    assert rope.rotary_dim == int(64 * params.get("partial_rotary_factor", 1.0)) and rope.neox
    torch.testing.assert_close(rope.inv_freq, inv_want, rtol=1e-6, atol=0)
    assert rope.mscale == pytest.approx(factor_want, rel=1e-12) and mult == 1.0


def test_build_rope_of_an_mla_draft_is_deepseeks_yarn_with_its_softmax_scale():
    # DeepseekV3Config with yarn: transformers' DeepseekV3RotaryEmbedding (the inverse frequencies and the
    # attention factor of _compute_yarn_parameters over qk_rope_head_dim) and DeepseekV3Attention.scaling
    # (yarn_apply_mscale: qk_head_dim^-0.5 x mscale(factor, mscale_all_dim)^2)
    rs = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
          "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.707, "rope_theta": 10000.0}
    dc = DeepseekV3Config(hidden_size=128, num_attention_heads=2, qk_rope_head_dim=32, kv_lora_rank=64,
                          q_lora_rank=32, qk_nope_head_dim=64, v_head_dim=32, rope_parameters=dict(rs),
                          max_position_embeddings=163840)
    inv_want, att = ROPE_INIT_FUNCTIONS["yarn"](dc, "cpu")
    attn = DeepseekV3Attention(dc, layer_idx=0)
    rope, mult = build_rope(rs, 32, False, mla=True)
    torch.testing.assert_close(rope.inv_freq, inv_want, rtol=1e-6, atol=0)
    assert rope.mscale == pytest.approx(att, rel=1e-12) and not rope.neox
    assert (64 + 32) ** -0.5 * mult == pytest.approx(attn.scaling, rel=1e-12)
    spec = draft_spec({"hidden_size": 128, "num_attention_heads": 2, "qk_rope_head_dim": 32, "kv_lora_rank": 64,
                       "q_lora_rank": 32, "qk_nope_head_dim": 64, "v_head_dim": 32, "rope_scaling": dict(rs)},
                      "mla", target_vocab=512, target_hidden=128, num_aux=3, draft_vocab=128, fc_in=384)
    assert spec.scale == pytest.approx(attn.scaling, rel=1e-12)
    # attention_factor 1.0 on an MLA draft: vLLM keeps plain yarn (no deepseek mscale^2 on the softmax)
    rope1, mult1 = build_rope({**rs, "attention_factor": 1.0}, 32, False, mla=True)
    assert mult1 == 1.0 and rope1.mscale == 1.0


def test_rope_parameters_as_vllm_normalises_them():
    # legacy rope_scaling with `type` becomes `rope_type`; rope_theta and partial_rotary_factor are moved in;
    # absent, theta 10000 and type default (vLLM/transformers defaults)
    assert rope_parameters({}) == {"rope_theta": 10000.0, "rope_type": "default"}
    assert rope_parameters({"rope_theta": 5e5, "rope_scaling": {"type": "yarn", "factor": 4.0},
                            "partial_rotary_factor": 0.5}) == {
        "rope_type": "yarn", "factor": 4.0, "rope_theta": 5e5, "partial_rotary_factor": 0.5}
    assert rope_parameters({"rope_scaling": {"type": "linear", "rope_type": "llama3"}}) == {
        "type": "linear", "rope_type": "llama3", "rope_theta": 10000.0}
    # rope_parameters wins over the legacy keys; its own theta is kept
    assert rope_parameters({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 7.0},
                            "rope_scaling": {"type": "yarn"}, "rope_theta": 9.0}) == {
        "rope_type": "linear", "factor": 2.0, "rope_theta": 7.0}
    assert rope_parameters({"rope_parameters": {}, "rope_theta": 9.0}) == {"rope_theta": 9.0,
                                                                           "rope_type": "default"}
    assert rope_parameters({"rope_scaling": "yarn"}) == {"rope_theta": 10000.0, "rope_type": "default"}


def test_unknown_rope_type_is_refused_in_the_users_words():
    with pytest.raises(UsageError) as e:
        build_rope({"rope_type": "dynamic", "factor": 2.0}, 64, True, mla=False)
    assert str(e.value) == ("rope type 'dynamic' of the draft is not modelled by score (default, linear, llama3, "
                            "yarn are)")


# ------------------------------------------------------------------------------------------------- spec ---

def _llama_cfg(**kw):
    return {"hidden_size": 64, "num_attention_heads": 4, **kw}


def test_draft_spec_of_a_llama_draft_takes_vllms_defaults():
    s = draft_spec(_llama_cfg(), "llama", target_vocab=512, target_hidden=64, num_aux=3, draft_vocab=128,
                   fc_in=192)
    # head_dim = hidden / heads = 16; KV heads = heads; one layer; eps 1e-6 (LlamaConfig's rms_norm_eps default)
    assert (s.family, s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim) == (
        "llama", 64, 1, 4, 4, 16)
    assert s.eps == 1e-6 and (s.vocab_size, s.draft_vocab_size, s.num_aux, s.target_hidden_size) == (512, 128, 3, 64)
    lc = LlamaConfig(hidden_size=64, num_attention_heads=4)
    assert s.scale == LlamaAttention(lc, layer_idx=0).scaling  # head_dim^-0.5
    s = draft_spec(_llama_cfg(head_dim=32, num_key_value_heads=2, num_hidden_layers=3, rms_norm_eps=1e-5,
                              hidden_act="swish"), "qwen3", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=192)
    assert (s.family, s.num_layers, s.num_kv_heads, s.head_dim, s.eps) == ("qwen3", 3, 2, 32, 1e-5)
    assert s.scale == 32 ** -0.5 and s.rope.rotary_dim == 32
    # target_hidden_size in the config is the width of one aux state when fc's input is a multiple of it
    s = draft_spec(_llama_cfg(target_hidden_size=96), "llama", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=288)
    assert s.target_hidden_size == 96
    # fc's input is no multiple of it: the trace's target width is what vLLM's fc reads
    s = draft_spec(_llama_cfg(target_hidden_size=100), "llama", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=192)
    assert s.target_hidden_size == 64
    s = draft_spec(_llama_cfg(target_hidden_size=100), "llama", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=None)
    assert s.target_hidden_size == 100
    # num_hidden_layers: true is not a count (a bool is no int here)
    s = draft_spec(_llama_cfg(num_hidden_layers=True), "llama", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=192)
    assert s.num_layers == 1


def test_draft_spec_refuses_what_it_cannot_model_in_the_users_words():
    kw = dict(target_vocab=512, target_hidden=64, num_aux=3, draft_vocab=128, fc_in=192)
    for cfg in ({"num_attention_heads": 4}, {"hidden_size": 64}, {"hidden_size": 64, "num_attention_heads": 0},
                {"hidden_size": True, "num_attention_heads": 4}):
        with pytest.raises(InputError) as e:
            draft_spec(cfg, "llama", **kw)
        assert str(e.value) == "the draft's config lacks hidden_size or num_attention_heads"
    with pytest.raises(UsageError) as e:
        draft_spec(_llama_cfg(hidden_act="gelu"), "llama", **kw)
    assert str(e.value) == "hidden_act 'gelu' is not modelled by score (silu is)"
    for missing in ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
        cfg = _llama_cfg(kv_lora_rank=32, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16)
        del cfg[missing]
        with pytest.raises(InputError) as e:
            draft_spec(cfg, "mla", **kw)
        assert str(e.value) == "the MLA draft's config lacks kv_lora_rank, qk_rope_head_dim or v_head_dim"


def test_draft_spec_of_an_mla_draft():
    s = draft_spec(_llama_cfg(kv_lora_rank=32, qk_rope_head_dim=8, v_head_dim=12, qk_nope_head_dim=16,
                              q_lora_rank=24), "mla", target_vocab=512, target_hidden=64, num_aux=3,
                   draft_vocab=128, fc_in=192)
    # MLA: every head is its own KV head; head_dim = nope + rope = 24; softmax scale 24^-0.5 (no yarn)
    assert (s.family, s.num_heads, s.num_kv_heads, s.head_dim) == ("mla", 4, 4, 24)
    assert (s.q_lora_rank, s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim) == (
        24, 32, 16, 8, 12)
    assert s.scale == pytest.approx(24 ** -0.5, rel=1e-15) and s.rope.rotary_dim == 8 and not s.rope.neox
    s = draft_spec(_llama_cfg(kv_lora_rank=32, qk_rope_head_dim=8, v_head_dim=12), "mla", target_vocab=512,
                   target_hidden=64, num_aux=3, draft_vocab=128, fc_in=192)
    assert s.q_lora_rank is None and s.qk_nope_head_dim == 0 and s.head_dim == 8


# ----------------------------------------------------------------------------------------------- runner ---

@pytest.mark.parametrize("case", ["norm_before_residual", "small_chunks"])
def test_runner_drafts_what_the_eagle3_definition_drafts(tmp_path, monkeypatch, case):
    """The runner against tests/eagle3_reference.py (vLLM llama_eagle3.py written out on transformers' Llama
    helpers, weights read with safetensors): with the residual taken after hidden_norm (norm_before_residual), and
    with the attention cut into chunks of a few rows (MAX_SCORE_ELEMENTS made tiny)."""
    import json

    from kconvert.engines.expectations import engine_rules
    from kconvert.formats.canonical import read_draft
    from kconvert.score.reading import engine_reading
    from kconvert.score.runner import build_runner
    from kconvert.score.weights import WeightCache
    from kconvert.trace.format import open_trace
    from kconvert.source import open_checkpoint
    from tests.eagle3_reference import ReferenceDraft
    from tests.factories import make_draft
    from tests.score_factories import V, random_trace, reference_proposals

    path = make_draft(tmp_path / "d", "torchspec", family="llama")
    d = read_draft(open_checkpoint(str(path)))
    nbr = case == "norm_before_residual"
    reading = engine_reading(d, engine_rules("vllm", "0.32/v1"), 8, V).with_(norm_before_residual=nbr)
    if case == "small_chunks":
        monkeypatch.setattr(draft, "MAX_SCORE_ELEMENTS", 40)  # 2 heads: a chunk of 1-2 query rows
    tr = open_trace(random_trace(tmp_path / "t", seqs=((6, 12), (3, 9))))
    runner = build_runner(d, reading, tr, WeightCache(d, torch.float64, torch.device("cpu")))
    for name in list(runner.w):
        runner.w[name] = runner.w[name] * 40  # sharper logits: no near-ties in argmax
    runner.embed.rows = runner.embed.rows.double()
    ids, rows = tr.embedding_rows()
    table = torch.zeros(V, rows.shape[1], dtype=torch.float64)
    table[torch.from_numpy(ids.astype("int64"))] = rows.double()
    cfg = json.loads((path / "config.json").read_text())
    ref = ReferenceDraft(path, cfg, table, scale=40, norm_before_residual=nbr)
    items, want = reference_proposals(tr, reading.aux_ids, ref, 3)
    assert [g.tolist() for g in runner.propose_many(items, 3)] == want
    assert len({t for row in want[0] for t in row}) > 3  # the proposals vary
