"""An EAGLE-3 Llama draft's greedy proposals, written out from the definition, for checking kconvert's score runner.

Nothing here imports kconvert.score: the weights are read from the draft's safetensors with safetensors, the
rotary embedding, RMSNorm and attention helpers are transformers' Llama ones (LlamaRotaryEmbedding, which also
gives YaRN's mscale, apply_rotary_pos_emb, repeat_kv), and the layer follows vLLM's llama_eagle3.py:

- first step: hidden = fc(concat(aux states)); layer 0 takes input_layernorm(embeds) and hidden_norm(hidden)
  concatenated (2H wide q/k/v), residual = hidden before its norm (after it with norm_before_residual); later are
  plain Llama layers (fused add-RMSNorm on the residual);
- output: normed = norm(hidden + residual), the token is argmax(lm_head(normed)), a draft id mapped to a target id
  by target = id + d2t[id] (d2t as offsets, vLLM's reading);
- step j > 0: the token embedding of the previous proposal, hidden = the previous step's hidden + residual (the
  pre-norm state, not through fc again), position cursor + j, attending to every cached key.

Checked itself against transformers' own LlamaDecoderLayer in tests/test_score.py.
"""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class ReferenceDraft:
    def __init__(self, folder: Path, cfg: dict, embed: torch.Tensor, *, scale: float = 1.0,
                 dtype: torch.dtype = torch.float64, norm_before_residual: bool = False):
        """`embed`: the target's embedding table [V, H] (the draft has none); `scale` multiplies every weight but
        lm_head (the tests sharpen the logits this way on both sides)."""
        raw: dict[str, torch.Tensor] = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(str(f), "pt") as st:
                for k in st.keys():
                    raw[k] = st.get_tensor(k)
        self.w = {}
        for k, t in raw.items():
            name = "layers.0." + k[len("midlayer."):] if k.startswith("midlayer.") else k
            if t.is_floating_point():
                t = t.to(dtype) * (1.0 if name == "lm_head.weight" else scale)
            self.w[name] = t
        cfg = {**cfg, **cfg.get("transformer_layer_config", {})}  # speculators keeps the layer config there
        self.cfg = cfg
        self.norm_before_residual = norm_before_residual
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.heads, self.kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads",
                                                                        cfg["num_attention_heads"])
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.layers = cfg.get("num_hidden_layers", 1)
        self.embed = embed.to(dtype)
        lc = LlamaConfig(hidden_size=cfg["hidden_size"], num_attention_heads=self.heads,
                         num_key_value_heads=self.kv_heads, head_dim=self.hd,
                         rope_theta=cfg.get("rope_theta", 10000.0), rope_scaling=cfg.get("rope_scaling"),
                         max_position_embeddings=cfg.get("max_position_embeddings", 2048))
        self.rope = LlamaRotaryEmbedding(lc)
        d2t = self.w.get("d2t")
        n = self.w["lm_head.weight"].shape[0]
        self.target_ids = torch.arange(n) + (d2t.long() if d2t is not None else 0)

    def _attn(self, l: int, x: torch.Tensor, pos: torch.Tensor, cache: list) -> torch.Tensor:
        p = f"layers.{l}.self_attn."
        T = x.shape[0]
        q = (x @ self.w[p + "q_proj.weight"].T).view(1, T, self.heads, self.hd).transpose(1, 2)
        k = (x @ self.w[p + "k_proj.weight"].T).view(1, T, self.kv_heads, self.hd).transpose(1, 2)
        v = (x @ self.w[p + "v_proj.weight"].T).view(1, T, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.rope(v.float(), pos[None])
        q, k = apply_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))
        if cache[l] is not None:
            k = torch.cat([cache[l][0], k], 2)
            v = torch.cat([cache[l][1], v], 2)
        cache[l] = (k, v)
        kk, vv = repeat_kv(k, self.heads // self.kv_heads), repeat_kv(v, self.heads // self.kv_heads)
        att = (q @ kk.transpose(-1, -2)) * self.hd ** -0.5
        S = kk.shape[2]
        # causal: query i (absolute position S - T + i) sees keys 0..S - T + i
        mask = torch.arange(S)[None, :] > (torch.arange(T)[:, None] + (S - T))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        o = (att @ vv).transpose(1, 2).reshape(T, self.heads * self.hd)
        return o @ self.w[p + "o_proj.weight"].T

    def _mlp(self, l: int, x: torch.Tensor) -> torch.Tensor:
        p = f"layers.{l}.mlp."
        g = torch.nn.functional.silu(x @ self.w[p + "gate_proj.weight"].T)
        return (g * (x @ self.w[p + "up_proj.weight"].T)) @ self.w[p + "down_proj.weight"].T

    def _forward(self, emb: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor, cache: list):
        residual = None
        for l in range(self.layers):
            p = f"layers.{l}."
            if l == 0:
                e = rms(emb, self.w[p + "input_layernorm.weight"], self.eps)
                normed_hidden = rms(hidden, self.w[p + "hidden_norm.weight"], self.eps)
                # vLLM: norm_before_residual puts the normed state on the residual, else the raw one
                residual = normed_hidden if self.norm_before_residual else hidden
                x = torch.cat([e, normed_hidden], -1)
            else:
                residual = hidden + residual
                x = rms(residual, self.w[p + "input_layernorm.weight"], self.eps)
            a = self._attn(l, x, pos, cache)
            residual = a + residual
            hidden = self._mlp(l, rms(residual, self.w[p + "post_attention_layernorm.weight"], self.eps))
        pre = hidden + residual
        return rms(pre, self.w["norm.weight"], self.eps), pre

    def _token(self, normed_last: torch.Tensor) -> int:
        return int(self.target_ids[int((normed_last @ self.w["lm_head.weight"].T).argmax())])

    def propose(self, tokens_next: torch.Tensor, aux: torch.Tensor, cursor: int, k: int) -> list[int]:
        """k greedy proposals at `cursor`: the draft sees tokens_next[:cursor + 1] (the token after each position)
        and aux[:cursor + 1] (the target's aux states at each position, concatenated)."""
        T = cursor + 1
        cache: list = [None] * self.layers
        hidden = aux[:T].to(self.embed.dtype) @ self.w["fc.weight"].T
        normed, pre = self._forward(self.embed[tokens_next[:T].long()], hidden, torch.arange(T), cache)
        toks = [self._token(normed[-1])]
        h = pre[-1:]
        for j in range(1, k):
            normed, h = self._forward(self.embed[torch.tensor([toks[-1]])], h, torch.tensor([cursor + j]), cache)
            toks.append(self._token(normed[-1]))
        return toks
