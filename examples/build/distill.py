"""Distil EAGLE-3 drafts from the tiny target (CPU, one thread, deterministic given the seed).

Data: the target continues every training prompt greedily (fp32 compute on the saved bf16 weights);
one more forward over prompt + continuation gives the aux states hidden_states[k] (k in vLLM's
input-of-layer convention, rounded to bf16 as vLLM hands them over) and the target's argmax labels.

Training: "training-time test" over 3 steps, imitating vLLM's EAGLE-3 proposer: step 0 at row t takes
the target aux states of position t and the embedding of token t+1 (rope position t); step j takes the
previous step's pre-norm output, the embedding of token t+1+j and rope position t+j, and attends to the
step-0 keys of rows 0..t plus its own steps' keys of row t (the draft KV cache vLLM builds). Step j is
weighted 0.8**j. The draft predicts the target's argmax at position t+1+j over the FULL target vocab;
the pruned head is the rows of the draft vocabulary (`full[d2t + arange]`).

Both drafts (NUMERIC_VIEWS) train on two numeric views of the same sequences: the bf16 forward and an fp32
forward (aux states and argmax labels from fp32 compute). Live acceptance depends on the kernels the engine
runs (bf16 rounding differs between machines, TP sizes and kernel paths); a draft that has seen both views
is less tied to one of them. TTT step j is trained only where the input tokens are the view's own argmax
labels (CONSISTENT_ONLY): live, the draft always sees the target's own greedy tokens. On the earlier 2-head
example these choices moved the Llama draft from AL 2.39 to 2.43 (one run each); the figures of the shipped
8-head example are in examples/tiny/README.md.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import build_target as BT
import common as C

TTT_STEPS = 3
# numeric views each draft family trains on (see the module docstring)
NUMERIC_VIEWS = {"mla": ("bf16", "fp32"), "llama": ("bf16", "fp32")}
# train only on positions whose input tokens are the data's own argmax (train_draft)
CONSISTENT_ONLY = {"mla": True, "llama": True}


# ---------------------------------------------------------------- data ---------------------------------
@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new: int, batch: int) -> list[list[int]]:
    from transformers import DynamicCache

    eos, pad = C.TOK_ID["<|im_end|>"], C.TOK_ID["[PAD]"]
    outs: list[list[int]] = [None] * len(prompts)  # type: ignore[list-item]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for s in range(0, len(order), batch):
        idx = order[s: s + batch]
        P = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), P), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), P), dtype=torch.long)
        for b, i in enumerate(idx):
            ids[b, P - len(prompts[i]):] = torch.tensor(prompts[i])
            mask[b, P - len(prompts[i]):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        gen = [[] for _ in idx]
        done = torch.zeros(len(idx), dtype=torch.bool)
        cur_ids, cur_pos = ids, pos
        for _ in range(max_new):
            out = model(input_ids=cur_ids, attention_mask=mask, position_ids=cur_pos,
                        past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1)
            for b in range(len(idx)):
                if not done[b]:
                    gen[b].append(int(nxt[b]))
            done |= nxt == eos
            if bool(done.all()):
                break
            cur_ids = nxt[:, None]
            cur_pos = cur_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(idx), 1), dtype=torch.long)], dim=1)
        for b, i in enumerate(idx):
            outs[i] = gen[b]
    return outs


@torch.no_grad()
def target_states(model, seqs: list[list[int]], batch: int):
    """Aux states (bf16-rounded, [n, T, 3H]) and argmax labels [n, T] for right-padded sequences."""
    pad = C.TOK_ID["[PAD]"]
    n, T = len(seqs), max(len(s) for s in seqs)
    aux = torch.zeros((n, T, 3 * C.HIDDEN), dtype=torch.bfloat16)
    labels = torch.full((n, T), -100, dtype=torch.long)
    ids_all = torch.full((n, T), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids_all[i, : len(s)] = torch.tensor(s)
    cos_sims = {k: [] for k in range(1, C.NUM_LAYERS)}
    for s in range(0, n, batch):
        ids = ids_all[s: s + batch]
        out = model(input_ids=ids, output_hidden_states=True)
        hs = out.hidden_states
        aux[s: s + batch] = torch.cat([hs[k] for k in C.AUX_IDS_VLLM], dim=-1).to(torch.bfloat16)
        lab = out.logits.argmax(-1)
        for b in range(ids.shape[0]):
            L = len(seqs[s + b])
            labels[s + b, :L] = lab[b, :L]
            for k in cos_sims:
                cos_sims[k].append(F.cosine_similarity(hs[k][b, :L].float(), hs[k + 1][b, :L].float(), dim=-1).mean().item())
    cos = {k: sum(v) / len(v) for k, v in cos_sims.items()}
    return ids_all, aux, labels, cos


# ---------------------------------------------------------------- draft model --------------------------
class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttn(nn.Module):
    def __init__(self, H: int, heads: int, head_dim: int, theta: float):
        super().__init__()
        self.heads, self.hd = heads, head_dim
        self.q_proj = nn.Linear(2 * H, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(2 * H, heads * head_dim, bias=False)
        self.v_proj = nn.Linear(2 * H, heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, H, bias=False)
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim),
                             persistent=False)
        self.scale = head_dim ** -0.5

    def _rope(self, x, pos):  # x [B, h, T, d], pos [T]
        f = pos.float()[:, None] * self.inv_freq[None]
        emb = torch.cat([f, f], dim=-1)
        return x * emb.cos() + rotate_half(x) * emb.sin()

    def qkv(self, x, pos):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.heads, self.hd).transpose(1, 2)
        return self._rope(q, pos), self._rope(k, pos), v

    def out(self, o):
        B, h, T, d = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, h * d))


class MLAAttn(nn.Module):
    """DeepSeek MLA with 2H input, computed in the expanded (non-absorbed) form, rope interleaved."""

    def __init__(self, H: int, hf_cfg):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
            DeepseekV3RotaryEmbedding, yarn_apply_mscale)

        c = hf_cfg
        self.heads, self.nope, self.rope_d, self.vd = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        self.kv_lora = c.kv_lora_rank
        self.q_a_proj = nn.Linear(2 * H, c.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_norm_eps)
        self.q_b_proj = nn.Linear(c.q_lora_rank, self.heads * (self.nope + self.rope_d), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(2 * H, c.kv_lora_rank + self.rope_d, bias=False)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_norm_eps)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, self.heads * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(self.heads * self.vd, H, bias=False)
        self.rotary = DeepseekV3RotaryEmbedding(c)
        self.scale = yarn_apply_mscale(c.rope_parameters, (self.nope + self.rope_d) ** -0.5)

    def _rope(self, x, pos):  # interleaved pairs, x [B, h, T, d]
        cos, sin = self.rotary(x, pos[None].long())
        cos = cos[0, :, : cos.shape[-1] // 2]
        sin = sin[0, :, : sin.shape[-1] // 2]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def qkv(self, x, pos):
        B, T, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, self.heads, -1).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope_d], dim=-1)
        kv = self.kv_a_proj_with_mqa(x)
        latent, k_pe = kv.split([self.kv_lora, self.rope_d], dim=-1)
        kvb = self.kv_b_proj(self.kv_a_layernorm(latent)).view(B, T, self.heads, -1).transpose(1, 2)
        k_nope, v = kvb.split([self.nope, self.vd], dim=-1)
        k_pe = self._rope(k_pe[:, None], pos).expand(-1, self.heads, -1, -1)
        q = torch.cat([q_nope, self._rope(q_pe, pos)], dim=-1)
        k = torch.cat([k_nope, k_pe], dim=-1)
        return q, k, v

    def out(self, o):
        B, h, T, d = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, h * d))


class Draft(nn.Module):
    def __init__(self, kind: str, embed: torch.Tensor, hf_cfg, inter: int):
        super().__init__()
        H, eps = C.HIDDEN, hf_cfg.rms_norm_eps
        self.kind = kind
        self.register_buffer("embed", embed.float(), persistent=False)
        self.fc = nn.Linear(3 * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.self_attn = MLAAttn(H, hf_cfg) if kind == "mla" else LlamaAttn(H, C.NUM_HEADS, C.LLAMA_HEAD_DIM, 10000.0)
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)
        self.norm = RMSNorm(H, eps)
        self.lm_head = nn.Linear(H, C.VOCAB, bias=False)

    def step_inputs(self, hidden, tok):
        residual = hidden  # norm_before_residual = false (SpecForge/EAGLE layout)
        x = torch.cat([self.input_layernorm(self.embed[tok]), self.hidden_norm(hidden)], dim=-1)
        return x, residual

    def tail(self, a, residual):
        r2 = a + residual
        m = self.down_proj(F.silu(self.gate_proj(self.post_attention_layernorm(r2))) * self.up_proj(
            self.post_attention_layernorm(r2)))
        pre = m + r2
        return self.lm_head(self.norm(pre)), pre

    def ttt(self, aux, toks, steps: int):
        """aux [B, T, 3H]; toks [B, T+steps] (token t+1+j at column t+j). Returns logits per step."""
        B, T, _ = aux.shape
        hidden = self.fc(aux.float())
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        pos0 = torch.arange(T)
        keys, vals = [], []
        outs = []
        q0k0 = None
        for j in range(steps):
            x, residual = self.step_inputs(hidden, toks[:, 1 + j: 1 + j + T])
            q, k, v = self.self_attn.qkv(x, pos0 + j)
            if j == 0:
                k0, v0 = k, v
            else:
                keys.append(k)
                vals.append(v)
            s0 = (q @ k0.transpose(-1, -2)) * self.self_attn.scale
            s0 = s0.masked_fill(~causal, float("-inf"))
            diag = [((q * kk).sum(-1, keepdim=True)) * self.self_attn.scale for kk in keys]
            s = torch.cat([s0] + diag, dim=-1).softmax(-1)
            o = s[..., :T] @ v0
            for i, vv in enumerate(vals):
                o = o + s[..., T + i: T + i + 1] * vv
            logits, hidden = self.tail(self.self_attn.out(o), residual)
            outs.append(logits)
        return outs


def train_draft(kind: str, data, embed, seed: int, steps: int, batch: int, lr: float,
                consistent_only: bool = False):
    """consistent_only: train step j at row t only where the input tokens t+1..t+1+j equal the data's own
    argmax labels at t..t+j (live, the draft always sees the target's own greedy tokens)."""
    ids, aux, labels, loss_from = data
    torch.manual_seed(seed)
    hf_cfg = BT.hf_text_config()
    model = Draft(kind, embed, hf_cfg, inter=256)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(seed + 17)
    N, T = ids.shape
    pad = C.TOK_ID["[PAD]"]
    # token at column c of toks_ext: ids[c]; extra pad columns so step j can read t+1+j
    toks_ext = torch.cat([ids, torch.full((N, TTT_STEPS + 1), pad, dtype=torch.long)], dim=1)
    lab_ext = torch.cat([labels, torch.full((N, TTT_STEPS + 1), -100, dtype=torch.long)], dim=1)
    col = torch.arange(T)[None]
    cons_ext = torch.cat([toks_ext[:, 1:T + 1] == labels, torch.zeros((N, TTT_STEPS + 1), dtype=torch.bool)], 1)
    t0 = time.time()
    for step in range(steps):
        warm = 20
        f = (step + 1) / warm if step < warm else 0.5 * (1 + math.cos(math.pi * (step - warm) / (steps - warm)))
        for pg in opt.param_groups:
            pg["lr"] = lr * max(f, 0.02)
        idx = torch.randint(N, (batch,), generator=g)
        Tb = int((labels[idx] != -100).sum(1).max())
        a, tk, lb, lf = aux[idx, :Tb], toks_ext[idx, : Tb + TTT_STEPS + 1], lab_ext[idx], loss_from[idx]
        outs = model.ttt(a, tk, TTT_STEPS)
        loss = 0.0
        accs = []
        for j, lg in enumerate(outs):
            y = lb[:, 1 + j: 1 + j + Tb].clone()
            y[col[:, :Tb] < lf[:, None]] = -100
            if consistent_only:
                ok = torch.ones_like(y, dtype=torch.bool)
                for i in range(j + 1):
                    ok &= cons_ext[idx, i: i + Tb]
                y[~ok] = -100
            loss = loss + (0.8 ** j) * F.cross_entropy(lg.reshape(-1, C.VOCAB), y.reshape(-1), ignore_index=-100)
            m = y != -100
            accs.append(((lg.argmax(-1) == y) & m).sum().item() / max(m.sum().item(), 1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 40 == 0 or step == steps - 1:
            print(f"  {kind} step {step:4d} loss {loss.item():.4f} acc {[round(x, 3) for x in accs]} "
                  f"({time.time() - t0:.0f}s)", flush=True)
    return model


def draft_tensors(model: Draft, prefix: str) -> dict[str, torch.Tensor]:
    """Full-vocab tensors in the SpecForge key layout (`midlayer.*`), or `layers.0.*` with prefix."""
    sd = {}
    a = model.self_attn
    names = (["q_proj", "k_proj", "v_proj", "o_proj"] if model.kind == "llama" else
             ["q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"])
    for n in names:
        sd[f"{prefix}.self_attn.{n}.weight"] = getattr(a, n).weight
    for n in ["gate_proj", "up_proj", "down_proj"]:
        sd[f"{prefix}.mlp.{n}.weight"] = getattr(model, n).weight
    for n in ["input_layernorm", "hidden_norm", "post_attention_layernorm"]:
        sd[f"{prefix}.{n}.weight"] = getattr(model, n).weight
    sd["fc.weight"] = model.fc.weight
    sd["norm.weight"] = model.norm.weight
    sd["lm_head.weight"] = model.lm_head.weight
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}


def build(seed: int, work: Path, n_prompts: int, steps: int, batch: int, lr: float, kinds: list[str]) -> dict:
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    t0 = time.time()
    cache = work / f"distill-data-{seed}.pt"
    tok = AutoTokenizer.from_pretrained(str(C.TARGET_DIR))
    model = BT.load_hf_target(C.TARGET_DIR, torch.float32)
    embed = model.model.embed_tokens.weight.detach().to(torch.bfloat16)
    rows = C.read_jsonl(work / "train.jsonl")[:n_prompts]
    prompts = [tok(C.render_prompt(r["prompt"]), add_special_tokens=False)["input_ids"] for r in rows]
    conts = generate(model, prompts, max_new=72, batch=64)
    print(f"  generated {sum(map(len, conts))} tokens for {len(prompts)} prompts ({time.time() - t0:.0f}s)")
    seqs = [p + c for p, c in zip(prompts, conts)]
    fp32_view = None
    if any("fp32" in NUMERIC_VIEWS[k] for k in kinds):
        # second numeric view: aux states (bf16-rounded) and labels of an fp32 forward
        ids32, aux32, labels32, _ = target_states(model, seqs, batch=64)
        fp32_view = (ids32, aux32, labels32)
        print(f"  fp32 view ({time.time() - t0:.0f}s)")
    # aux states and labels from a bf16 forward: vLLM runs the target in bf16, and this target is chaotic
    # enough that fp32 labels and states drift from what the engine produces.
    model = model.to(torch.bfloat16)
    ids, aux, labels, cos = target_states(model, seqs, batch=64)
    loss_from = torch.tensor([len(p) - 1 for p in prompts])
    print(f"  target states ({time.time() - t0:.0f}s); adjacent cosine " +
          ", ".join(f"h{k}/h{k + 1} {v:.3f}" for k, v in cos.items()))
    # draft vocabulary: the most frequent target labels over the trained positions
    counts = torch.zeros(C.VOCAB, dtype=torch.long)
    for i, s in enumerate(seqs):
        counts += torch.bincount(labels[i, len(prompts[i]) - 1: len(s)], minlength=C.VOCAB)
    top = torch.topk(counts, C.DRAFT_VOCAB, sorted=True).indices  # ties broken by torch deterministically
    draft_ids = torch.sort(top).values
    coverage = counts[draft_ids].sum().item() / counts.sum().item()
    print(f"  draft vocab {C.DRAFT_VOCAB} covers {coverage:.4f} of trained labels")
    d2t = (draft_ids - torch.arange(C.DRAFT_VOCAB)).to(torch.int64)
    t2d = torch.zeros(C.VOCAB, dtype=torch.bool)
    t2d[draft_ids] = True
    results = {"cos": cos, "coverage": coverage, "d2t": d2t, "t2d": t2d, "draft_ids": draft_ids,
               "n_tokens": int(sum(map(len, conts))), "conts": conts, "prompts": prompts}
    for kind in kinds:
        data = (ids, aux, labels, loss_from)
        if "fp32" in NUMERIC_VIEWS[kind] and fp32_view is not None:
            assert torch.equal(fp32_view[0], ids)
            data = (torch.cat([ids, fp32_view[0]]), torch.cat([aux, fp32_view[1]]),
                    torch.cat([labels, fp32_view[2]]), torch.cat([loss_from, loss_from]))
        m = train_draft(kind, data, embed, seed, steps, batch, lr,
                        consistent_only=CONSISTENT_ONLY[kind])
        results[kind] = draft_tensors(m, "midlayer")
    print(f"distill done in {time.time() - t0:.0f}s")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=C.DEFAULT_WORK)
    ap.add_argument("--n-prompts", type=int, default=600)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--kinds", default="mla,llama")
    a = ap.parse_args()
    r = build(a.seed, a.work_dir, a.n_prompts, a.steps, a.batch, a.lr, a.kinds.split(","))
