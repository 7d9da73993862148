"""The draft alone, in torch, computed the way vLLM 0.32 runs it next to the target.

Shaped after `vllm/model_executor/models/llama_eagle3.py` and `deepseek_eagle3.py` (the layers) and
`vllm/v1/spec_decode/llm_base_proposer.py` (the proposer):

- the target's aux states of a position, concatenated in layer order, go through `fc` (after `input_norm` /
  `fc_norm` when the draft has them) to the draft's hidden size;
- layer 0 takes `cat(input_layernorm(embed(token t+1)), hidden_norm(h_t))` (2H wide) with the residual taken
  before `hidden_norm` (or after it with `norm_before_residual`); later layers take H, with vLLM's fused
  add-and-norm; the final `norm` gives the logits' input and the pre-norm sum is fed to the next step;
- the first pass runs over every verified position with the target's states (so the draft's KV cache of
  verified positions always comes from the target); each chained step j runs one token at position c + j,
  input the previous step's draft token and pre-norm output, attending to the verified positions 0..c and to
  its own earlier chained steps;
- greedy: the argmax over the draft vocabulary, mapped to a target id through `d2t` (`id + d2t[id]` as
  offsets, the way vLLM reads it).

Numerics follow vLLM's where they decide rounding: RMSNorm in float32 and cast back, the weight multiply in
the model dtype, rope tables computed in float32 and cast to the model dtype, attention softmax in float32.
All predictions for every cursor of a sequence are computed at once (the draft's computation at cursor c
depends only on the verified positions and its own chain, never on which cursors an engine visits), so the
acceptance walk afterwards is integer work.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kconvert.errors import InputError, UsageError

# torch is imported lazily by callers through `torch_or_die`; this module is only imported once it exists.
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
MAX_SCORE_ELEMENTS = 1 << 24  # attention scores held at once (chunking bound), ~64 MB in float32


class DraftFailure(Exception):
    """The engine could not run the draft as read (it would crash or refuse); the message says why."""


# ------------------------------------------------------------------------------------------------ norms ---

def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is None:
        return xf.to(x.dtype)
    return (xf.to(w.dtype) * w).to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float):
    xf = x.float() + residual.float()
    res = xf.to(x.dtype)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf.to(w.dtype) * w).to(x.dtype), res


# ------------------------------------------------------------------------------------------------- rope ---

def _yarn_find_correction_dim(num_rot: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (num_rot * 2 * math.pi))) / (2 * math.log(base))


def _yarn_range(beta_fast: float, beta_slow: float, dim: int, base: float, max_pos: int, truncate: bool = True):
    low = _yarn_find_correction_dim(beta_fast, dim, base, max_pos)
    high = _yarn_find_correction_dim(beta_slow, dim, base, max_pos)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_inv_freq(dim: int, base: float, factor: float, beta_fast: float, beta_slow: float, max_pos: int,
                   truncate: bool = True) -> torch.Tensor:
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)
    extra = 1.0 / pos_freqs
    inter = 1.0 / (factor * pos_freqs)
    low, high = _yarn_range(beta_fast, beta_slow, dim, base, max_pos, truncate)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float) - low) / (high - low), 0, 1)
    mask = 1 - ramp
    return inter * (1 - mask) + extra * mask


@dataclass
class Rope:
    """cos/sin tables for the positions a sequence needs, built like vLLM's rotary embeddings."""

    rotary_dim: int
    neox: bool
    inv_freq: torch.Tensor
    mscale: float = 1.0

    def tables(self, positions: torch.Tensor, dtype: torch.dtype):
        # inv_freq is built on the CPU; the positions live on the runner's device (`score --device cuda`)
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq.to(positions.device)[None, :]
        # vLLM caches cos/sin in the model dtype (RotaryEmbeddingBase: cache.to(dtype))
        return (freqs.cos() * self.mscale).to(dtype), (freqs.sin() * self.mscale).to(dtype)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [..., T, heads, d]; cos/sin [T, rotary_dim/2]."""
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        if self.neox:
            c = torch.cat((cos, cos), dim=-1).unsqueeze(-2)
            s = torch.cat((sin, sin), dim=-1).unsqueeze(-2)
            x1, x2 = rot[..., : self.rotary_dim // 2], rot[..., self.rotary_dim // 2:]
            rotated = torch.cat((-x2, x1), dim=-1)
        else:
            c = cos.repeat_interleave(2, dim=-1).unsqueeze(-2)
            s = sin.repeat_interleave(2, dim=-1).unsqueeze(-2)
            x1, x2 = rot[..., ::2], rot[..., 1::2]
            rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
        out = rot * c + rotated * s
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out


def rope_parameters(cfg: dict[str, Any]) -> dict[str, Any]:
    """The rope settings as vLLM normalises them (`rope_parameters`, or legacy `rope_scaling` + `rope_theta`)."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and rp:
        params = dict(rp)
    else:
        rs = cfg.get("rope_scaling")
        params = dict(rs) if isinstance(rs, dict) else {}
        if "type" in params and "rope_type" not in params:
            params["rope_type"] = params.pop("type")
    params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    params.setdefault("rope_type", "default")
    if cfg.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", cfg["partial_rotary_factor"])
    return params


def build_rope(params: dict[str, Any], head_size: int, neox: bool, *, mla: bool) -> tuple[Rope, float]:
    """(Rope, softmax-scale multiplier) for vLLM's get_rope with these parameters."""
    base = float(params.get("rope_theta", 10000.0))
    rtype = params.get("rope_type", "default")
    rotary_dim = int(params.get("rope_dim") or int(head_size * float(params.get("partial_rotary_factor", 1.0))))
    default_inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    if rtype == "default":
        return Rope(rotary_dim, neox, default_inv), 1.0
    if rtype == "linear":
        return Rope(rotary_dim, neox, default_inv / float(params["factor"])), 1.0
    if rtype == "llama3":
        factor, lo, hi = float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"])
        orig = float(params["original_max_position_embeddings"])
        wave = 2 * math.pi / default_inv
        smooth = (orig / wave - lo) / (hi - lo) if lo != hi else torch.zeros_like(wave)
        inv = torch.where(wave < orig / hi, default_inv,
                          torch.where(wave > orig / lo, default_inv / factor,
                                      (1 - smooth) * default_inv / factor + smooth * default_inv))
        return Rope(rotary_dim, neox, inv), 1.0
    if rtype == "yarn" and mla and params.get("attention_factor") != 1.0:
        # deepseek_v2.DeepseekV2MLAAttention turns yarn into deepseek_yarn and scales softmax by mscale^2
        factor = float(params["factor"])
        orig = int(params["original_max_position_embeddings"])
        inv = _yarn_inv_freq(rotary_dim, base, factor, float(params.get("beta_fast", 32)),
                             float(params.get("beta_slow", 1)), orig)
        ms = yarn_get_mscale(factor, float(params.get("mscale", 1))) / \
            yarn_get_mscale(factor, float(params.get("mscale_all_dim", 0)))
        m_all = yarn_get_mscale(factor, float(params.get("mscale_all_dim", False) or 0.0))
        return Rope(rotary_dim, neox, inv, ms), m_all * m_all
    if rtype == "yarn":
        factor = float(params["factor"])
        orig = int(params["original_max_position_embeddings"])
        inv = _yarn_inv_freq(rotary_dim, base, factor, float(params.get("beta_fast", 32)),
                             float(params.get("beta_slow", 1)), orig, bool(params.get("truncate", True)))
        if params.get("attention_factor") is not None:
            ms = float(params["attention_factor"])
        elif params.get("mscale") and params.get("mscale_all_dim"):
            ms = yarn_get_mscale(factor, float(params["mscale"])) / yarn_get_mscale(factor, float(params["mscale_all_dim"]))
        else:
            ms = yarn_get_mscale(factor)
        return Rope(rotary_dim, neox, inv, ms), 1.0
    raise UsageError(f"rope type {rtype!r} of the draft is not modelled by score (default, linear, llama3, yarn "
                     "are)")


# ---------------------------------------------------------------------------------------------- weights ---

@dataclass
class DraftSpec:
    """The draft's shape and settings, from its DraftModel and the reading."""

    family: str  # llama | qwen3 | mla
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    eps: float
    rope: Rope
    scale: float
    vocab_size: int  # the target's
    draft_vocab_size: int
    num_aux: int
    target_hidden_size: int
    # MLA
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _cfg_int(cfg: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = cfg.get(key, default)
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def draft_spec(cfg: dict[str, Any], family: str, *, target_vocab: int, target_hidden: int, num_aux: int,
               draft_vocab: int, fc_in: int | None) -> DraftSpec:
    H = _cfg_int(cfg, "hidden_size")
    heads = _cfg_int(cfg, "num_attention_heads")
    if not H or not heads:
        raise InputError("the draft's config lacks hidden_size or num_attention_heads")
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise UsageError(f"hidden_act {act!r} is not modelled by score (silu is)")
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    n_layers = _cfg_int(cfg, "num_hidden_layers", 1) or 1
    params = rope_parameters(cfg)
    tH = _cfg_int(cfg, "target_hidden_size") or H
    if fc_in is not None and fc_in % tH:
        tH = target_hidden
    if family == "mla":
        nope = _cfg_int(cfg, "qk_nope_head_dim", 0) or 0
        rope_d = _cfg_int(cfg, "qk_rope_head_dim", 0) or 0
        v = _cfg_int(cfg, "v_head_dim", 0) or 0
        kv_lora = _cfg_int(cfg, "kv_lora_rank", 0) or 0
        if not (rope_d and kv_lora and v):
            raise InputError("the MLA draft's config lacks kv_lora_rank, qk_rope_head_dim or v_head_dim")
        rope, mult = build_rope(params, rope_d, neox=False, mla=True)
        return DraftSpec("mla", H, n_layers, heads, heads, nope + rope_d, eps, rope,
                         (nope + rope_d) ** -0.5 * mult, target_vocab, draft_vocab, num_aux, tH,
                         q_lora_rank=_cfg_int(cfg, "q_lora_rank"), kv_lora_rank=kv_lora, qk_nope_head_dim=nope,
                         qk_rope_head_dim=rope_d, v_head_dim=v)
    head_dim = _cfg_int(cfg, "head_dim") or H // heads
    kv = _cfg_int(cfg, "num_key_value_heads") or heads
    rope, _ = build_rope(params, head_dim, neox=True, mla=False)
    # A Qwen3 layer is the Llama layer plus per-head q/k norms (vLLM qwen3.py Qwen3Attention): same rope, same
    # projections.
    return DraftSpec("qwen3" if family == "qwen3" else "llama", H, n_layers, heads, kv, head_dim, eps, rope,
                     head_dim ** -0.5, target_vocab, draft_vocab, num_aux, tH)


# ----------------------------------------------------------------------------------------------- layers ---

@dataclass
class LayerKV:
    """One layer's draft KV cache for a batch of sequences: verified positions (first pass, the sequences' rows
    one after another) and chained steps (rows: the chains still drafting)."""

    k0: torch.Tensor  # [sum T, heads, dk]
    v0: torch.Tensor  # [sum T, heads, dv]
    chain_k: list[torch.Tensor] = field(default_factory=list)  # per step: [alive, heads, dk]
    chain_v: list[torch.Tensor] = field(default_factory=list)


class DraftRunner:
    """Runs one draft reading over trace sequences. `weights` are canonical names (vLLM layout, no prefix)."""

    def __init__(self, spec: DraftSpec, weights: dict[str, torch.Tensor], *, dtype: torch.dtype,
                 device: torch.device, embed: "EmbeddingTable", lm_head: torch.Tensor,
                 target_ids: torch.Tensor | None, norm_before_residual: bool, norm_before_fc: bool,
                 fc_norm: bool, norm_output: bool, logit_scale: float = 1.0):
        self.spec = spec
        self.w = weights
        self.dtype = dtype
        self.device = device
        self.embed = embed
        self.lm_head = lm_head
        self.target_ids = target_ids  # draft id -> target id (None: the same vocabulary)
        self.nbr = norm_before_residual
        self.nbf = norm_before_fc
        self.fc_norm = fc_norm
        self.norm_output = norm_output
        self.logit_sign = 1.0 if logit_scale >= 0 else -1.0
        self.flops = 0  # multiply-adds x 2 of every matmul run (bench/score_speed.py's FLOP bound)
        self.chained_rows = 0  # chains run, summed over the chained steps

    # -- pieces ---------------------------------------------------------------------------------------------
    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w = self.w[name]
        self.flops += 2 * (x.numel() // x.shape[-1]) * w.shape[0] * w.shape[1]
        return F.linear(x, w)

    def combine(self, aux: torch.Tensor) -> torch.Tensor:
        s = self.spec
        x = aux.to(self.dtype)
        if self.nbf:
            x = rms_norm(x, self.w["input_norm.weight"], s.eps)
        if self.fc_norm:
            chunks = x.chunk(s.num_aux, dim=-1)
            x = torch.cat([rms_norm(c, self.w[f"fc_norm.{i}.weight"], s.eps) for i, c in enumerate(chunks)], dim=-1)
        return self._lin(x, "fc.weight")

    def _qkv(self, l: int, x: torch.Tensor, positions: torch.Tensor, q_rows: torch.Tensor | None = None):
        """q [Nq, heads, dk], k [N, heads, dk], v [N, heads, dv] for inputs x [N, in] at positions [N]: keys and
        values of every row, queries of the rows `q_rows` (all by default)."""
        s = self.spec
        p = f"layers.{l}.self_attn."
        cos, sin = s.rope.tables(positions, self.dtype)
        N = x.shape[0]
        xq, qcos, qsin = (x, cos, sin) if q_rows is None else (x[q_rows], cos[q_rows], sin[q_rows])
        Nq = xq.shape[0]
        if s.family in ("llama", "qwen3"):
            q = self._lin(xq, p + "q_proj.weight").view(Nq, s.num_heads, s.head_dim)
            k = self._lin(x, p + "k_proj.weight").view(N, s.num_kv_heads, s.head_dim)
            v = self._lin(x, p + "v_proj.weight").view(N, s.num_kv_heads, s.head_dim)
            if s.family == "qwen3":
                # vLLM qwen3.py Qwen3Attention.forward: q_norm/k_norm over each head, before the rotary embedding
                q = rms_norm(q, self.w[p + "q_norm.weight"], s.eps)
                k = rms_norm(k, self.w[p + "k_norm.weight"], s.eps)
            q = s.rope.apply(q, qcos, qsin)
            k = s.rope.apply(k, cos, sin)
            if s.num_kv_heads != s.num_heads:
                rep = s.num_heads // s.num_kv_heads
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            return q, k, v
        nope, rd, vd, H = s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim, s.num_heads
        if s.q_lora_rank:
            qc = rms_norm(self._lin(xq, p + "q_a_proj.weight"), self.w[p + "q_a_layernorm.weight"], s.eps)
            q = self._lin(qc, p + "q_b_proj.weight")
        else:
            q = self._lin(xq, p + "q_proj.weight")
        q = q.view(Nq, H, nope + rd)
        kv = self._lin(x, p + "kv_a_proj_with_mqa.weight")
        latent, k_pe = kv.split([s.kv_lora_rank, rd], dim=-1)
        latent = rms_norm(latent, self.w[p + "kv_a_layernorm.weight"], s.eps)
        kvb = self._lin(latent, p + "kv_b_proj.weight").view(N, H, nope + vd)
        k_nope, v = kvb.split([nope, vd], dim=-1)
        q_pe = s.rope.apply(q[..., nope:], qcos, qsin)
        k_pe = s.rope.apply(k_pe.unsqueeze(1), cos, sin)
        q = torch.cat([q[..., :nope], q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(N, H, rd)], dim=-1)
        return q, k, v

    def _mlp(self, l: int, x: torch.Tensor) -> torch.Tensor:
        p = f"layers.{l}.mlp."
        return self._lin(F.silu(self._lin(x, p + "gate_proj.weight")) * self._lin(x, p + "up_proj.weight"),
                         p + "down_proj.weight")

    def _o(self, l: int, o: torch.Tensor) -> torch.Tensor:
        return self._lin(o.reshape(o.shape[0], -1).to(self.dtype), f"layers.{l}.self_attn.o_proj.weight")

    def _layer_in(self, l: int, embeds: torch.Tensor | None, hidden: torch.Tensor, residual: torch.Tensor | None):
        s = self.spec
        p = f"layers.{l}."
        if l == 0:
            e = rms_norm(embeds, self.w[p + "input_layernorm.weight"], s.eps)
            if self.nbr:
                h = rms_norm(hidden, self.w[p + "hidden_norm.weight"], s.eps)
                residual = h
            else:
                residual = hidden
                h = rms_norm(hidden, self.w[p + "hidden_norm.weight"], s.eps)
            return torch.cat([e, h], dim=-1), residual
        return add_rms_norm(hidden, residual, self.w[p + "input_layernorm.weight"], s.eps)

    def _layer_out(self, l: int, attn: torch.Tensor, residual: torch.Tensor):
        s = self.spec
        h, residual = add_rms_norm(attn, residual, self.w[f"layers.{l}.post_attention_layernorm.weight"], s.eps)
        return self._mlp(l, h), residual

    def _final(self, hidden: torch.Tensor, residual: torch.Tensor):
        normed, prenorm = add_rms_norm(hidden, residual, self.w["norm.weight"], self.spec.eps)
        return normed, (normed if self.norm_output else prenorm)

    def greedy(self, normed: torch.Tensor) -> torch.Tensor:
        self.flops += 2 * normed.shape[0] * self.lm_head.shape[0] * self.lm_head.shape[1]
        logits = F.linear(normed, self.lm_head).float() * self.logit_sign
        top = logits.argmax(dim=-1)
        return top if self.target_ids is None else self.target_ids[top]

    # -- attention ------------------------------------------------------------------------------------------
    def _attend_causal(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       qpos: torch.Tensor | None = None) -> torch.Tensor:
        """First pass of one sequence: queries at positions qpos (ascending; 0..T-1 by default) over its keys
        0..T-1, causal."""
        n, H, _ = q.shape
        T = k.shape[0]
        if qpos is None:
            qpos = torch.arange(n, device=q.device)
        out = torch.empty(n, H, v.shape[-1], dtype=torch.float32, device=q.device)
        kf = k.float().transpose(0, 1)  # [H, T, dk]
        vf = v.float().transpose(0, 1)
        step = max(1, MAX_SCORE_ELEMENTS // max(1, T * H))
        for a in range(0, n, step):
            e = min(n, a + step)
            b = int(qpos[e - 1]) + 1  # keys the chunk's last query sees
            qf = q[a:e].float().transpose(0, 1)  # [H, n, dk]
            self.flops += 2 * H * (e - a) * b * (q.shape[-1] + v.shape[-1])
            sc = torch.matmul(qf, kf[:, :b].transpose(1, 2)) * self.spec.scale  # [H, n, b]
            mask = torch.arange(b, device=q.device)[None, :] > qpos[a:e, None]
            sc = sc.masked_fill(mask[None], float("-inf"))
            out[a:e] = torch.matmul(sc.softmax(-1), vf[:, :b]).transpose(0, 1)
        return out.to(self.dtype)

    def _attend_chain(self, q: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor, ck: torch.Tensor,
                      cv: torch.Tensor, cursors: torch.Tensor) -> torch.Tensor:
        """Chained step of one sequence: query of cursor c over its verified keys 0..c (k0, v0 [T, heads, d])
        plus its own chained keys, this one included (ck, cv [C, heads, j, d])."""
        C, H, _ = q.shape
        out = torch.empty(C, H, v0.shape[-1], dtype=torch.float32, device=q.device)
        T = int(cursors.max().item()) + 1
        k0 = k0[:T].float().transpose(0, 1)
        v0 = v0[:T].float().transpose(0, 1)
        ck, cv = ck.float(), cv.float()
        step = max(1, MAX_SCORE_ELEMENTS // max(1, T * H))
        for a in range(0, C, step):
            b = min(C, a + step)
            qf = q[a:b].float()  # [n, H, dk]
            self.flops += 2 * (b - a) * H * (T + ck.shape[2]) * (q.shape[-1] + v0.shape[-1])
            s0 = torch.einsum("nhd,htd->nht", qf, k0) * self.spec.scale
            mask = torch.arange(T, device=q.device)[None, :] > cursors[a:b, None]
            s0 = s0.masked_fill(mask[:, None, :], float("-inf"))
            s1 = torch.einsum("nhd,nhjd->nhj", qf, ck[a:b]) * self.spec.scale
            p = torch.cat([s0, s1], dim=-1).softmax(-1)
            out[a:b] = torch.einsum("nht,htd->nhd", p[..., :T], v0) + torch.einsum("nhj,nhjd->nhd", p[..., T:],
                                                                                    cv[a:b])
        return out.to(self.dtype)

    # -- the proposer ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, tokens_next: torch.Tensor, aux: torch.Tensor, cursors: torch.Tensor, k: int,
                reference: torch.Tensor | None = None) -> torch.Tensor:
        """Draft tokens (target ids) [C, k] for every cursor c of one sequence: the first from the first pass over
        positions 0..T-1 (token t+1 and the target's aux states of t at position t), the rest chained.

        tokens_next [T]: the token following each position; aux [T, num_aux * target_hidden]; cursors [C] < T.
        With `reference` [C, k] (the tokens a verify step accepts), chained step j runs only for the cursors whose
        drafts 0..j-1 all matched: later drafts of a rejected chain never change what an engine counts. Those not
        computed are -1.
        """
        return self.propose_many([SequenceInput(tokens_next, aux, cursors, reference)], k)[0]

    @torch.no_grad()
    def propose_many(self, items: list["SequenceInput"], k: int) -> list[torch.Tensor]:
        """`propose` for several sequences at once: every matmul runs over the rows of all of them (the first
        pass over all their positions, each chained step over all their chains still drafting); attention stays
        within each sequence. A row's result depends only on its own sequence, so this drafts what `propose`
        drafts for each, sequence by sequence."""
        b = _Batch(items, self.device)
        hidden, caches = self._first_pass(b)
        normed, fed = hidden
        C = b.cursors.shape[0]
        out = torch.full((C, k), -1, dtype=torch.long)
        alive = torch.arange(C, device=self.device)  # rows of `out` still drafting
        last = self.greedy(normed)
        out[:, 0] = last.cpu()
        h = fed
        for j in range(1, k):
            if b.reference is not None:
                keep = last == b.reference[alive, j - 1]
                if not bool(keep.all()):
                    alive, last, h = alive[keep], last[keep], h[keep]
                    for c in caches:
                        c.chain_k = [t[keep] for t in c.chain_k]
                        c.chain_v = [t[keep] for t in c.chain_v]
                if alive.numel() == 0:
                    break
            h, last = self._chained_step(b, caches, alive, last, h, j)
            self.chained_rows += int(alive.numel())
            out[alive.cpu(), j] = last.cpu()
        return list(out.split(b.counts))

    def _first_pass(self, b: "_Batch"):
        """((normed, fed) [cursors, H], per-layer KV of every position) over the batch's sequences.

        Every layer's keys and values are computed at every position (the verified positions' KV); a layer
        below the last also runs its output there (the next layer's input). The last layer's output is needed
        only at the cursors (what the draft drafts from), so its queries, attention, o_proj and MLP run there
        only: row by row the same arithmetic, on fewer rows."""
        hidden = self.combine(b.aux)
        embeds = self.embed(b.tokens)
        residual = None
        caches: list[LayerKV] = []
        L = self.spec.num_layers
        for l in range(L):
            x, residual = self._layer_in(l, embeds, hidden, residual)
            if l < L - 1:
                q, kk, v = self._qkv(l, x, b.positions)
                attn = torch.cat([self._attend_causal(q[a:e], kk[a:e], v[a:e]) for a, e in b.spans])
            else:
                q, kk, v = self._qkv(l, x, b.positions, b.cursor_rows)
                attn = torch.cat([self._attend_causal(q[r:t], kk[a:e], v[a:e], b.cursors[r:t])
                                  for (a, e), (r, t) in zip(b.spans, b.cursor_spans)])
                residual = residual[b.cursor_rows]
            caches.append(LayerKV(kk, v))
            hidden, residual = self._layer_out(l, self._o(l, attn), residual)
        return self._final(hidden, residual), caches

    def _chained_step(self, b: "_Batch", caches: list[LayerKV], alive: torch.Tensor, last: torch.Tensor,
                      h: torch.Tensor, j: int):
        """Step j for the chains `alive` (rows of b.cursors): input their previous draft token and pre-norm
        output, at position cursor + j. Returns (pre-norm output, draft token) per chain."""
        cur = b.cursors[alive]
        seq = b.cursor_seq[alive]
        # the alive rows stay in sequence order: one block of rows per sequence
        ids, counts = torch.unique_consecutive(seq, return_counts=True)
        blocks = list(zip(ids.tolist(), counts.tolist()))
        emb = self.embed(last)
        hidden, residual = h, None
        for l in range(self.spec.num_layers):
            x, residual = self._layer_in(l, emb, hidden, residual)
            q, kk, v = self._qkv(l, x, cur + j)
            kv = caches[l]
            kv.chain_k.append(kk)
            kv.chain_v.append(v)
            ck = torch.stack(kv.chain_k, dim=2)  # [alive, H, j, dk]
            cv = torch.stack(kv.chain_v, dim=2)
            parts, r = [], 0
            for i, n in blocks:
                a, e = b.spans[i]
                parts.append(self._attend_chain(q[r:r + n], kv.k0[a:e], kv.v0[a:e], ck[r:r + n], cv[r:r + n],
                                                cur[r:r + n]))
                r += n
            hidden, residual = self._layer_out(l, self._o(l, torch.cat(parts)), residual)
        normed, h = self._final(hidden, residual)
        return h, self.greedy(normed)


@dataclass
class SequenceInput:
    """What the draft needs of one sequence: tokens_next [T], aux [T, num_aux * target_hidden], cursors [C] (the
    positions it drafts at) and optionally the reference tokens [C, k] a verify step accepts."""

    tokens_next: torch.Tensor
    aux: torch.Tensor
    cursors: torch.Tensor
    reference: torch.Tensor | None = None


class _Batch:
    """Several sequences' inputs as one: their rows one after another, positions restarting at 0 for each."""

    def __init__(self, items: list[SequenceInput], device: torch.device):
        lens = [it.tokens_next.shape[0] for it in items]
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        self.spans = list(zip(starts[:-1], starts[1:]))
        self.counts = [it.cursors.shape[0] for it in items]
        first = [0]
        for c in self.counts:
            first.append(first[-1] + c)
        self.cursor_spans = list(zip(first[:-1], first[1:]))  # each sequence's rows of `cursors`
        self.tokens = torch.cat([it.tokens_next for it in items]).to(device)
        self.aux = torch.cat([it.aux for it in items]).to(device)
        self.positions = torch.cat([torch.arange(n) for n in lens]).to(device)
        self.cursors = torch.cat([it.cursors for it in items]).to(device)  # position within its sequence
        self.cursor_seq = torch.cat([torch.full((c,), i, dtype=torch.long) for i, c in enumerate(self.counts)]
                                    ).to(device)
        self.cursor_rows = self.cursors + torch.tensor(starts[:-1], device=device)[self.cursor_seq]
        refs = [it.reference for it in items]
        if any(r is None for r in refs) and not all(r is None for r in refs):
            raise ValueError("propose_many: give reference tokens for every sequence or for none")
        self.reference = None if refs[0] is None else torch.cat(refs).to(device)


class EmbeddingTable:
    """Token id -> embedding row: the draft's own table, or the target's rows kept in the trace.

    The trace keeps the target's rows for every token it holds. A chained draft token outside that set cannot be
    the target's next token (every reference token is in the trace), so acceptance stops at it whatever the
    next step computes; its row is zero."""

    def __init__(self, rows: torch.Tensor, ids: torch.Tensor | None, vocab: int, device: torch.device):
        self.rows = rows.to(device)
        self.device = device
        if ids is None:
            self.index = None
        else:
            index = torch.full((vocab,), rows.shape[0], dtype=torch.long)
            index[ids] = torch.arange(ids.shape[0])
            self.index = index.to(device)
            self.rows = torch.cat([self.rows, torch.zeros(1, rows.shape[1], dtype=rows.dtype, device=device)])

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if self.index is None:
            return self.rows[ids]
        return self.rows[self.index[ids]]
