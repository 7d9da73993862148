"""kconvert/score/draft.py's runner and helpers against values from outside it (the survivors of the mutation run
saved as bench/mutation-runs/score-draft-after.json):

- the whole draft (first pass and chained steps, 1-3 layers, GQA, Qwen3 q/k norms, MLA with and without q_lora,
  norm_before_residual, input_norm, fc_norm, norm_output, logit_scale, d2t, the trace's embedding rows) against a
  reference built here from transformers' own modules: LlamaAttention / Qwen3Attention / DeepseekV3Attention for
  the projections, q/k norms and rotary embedding (LlamaRotaryEmbedding / DeepseekV3RotaryEmbedding), LlamaRMSNorm,
  LlamaMLP, with the attention itself torch's scaled_dot_product_attention under an explicit causal mask; the
  chained step j of cursor c is the reference run over rows 0..c plus the j chained rows (causal), which is the
  EAGLE-3 definition (the chained query sees the verified positions 0..c and its own chain);
- the FLOP count against torch's own FlopCounterMode over the same run;
- the rope tables and inverse frequencies against transformers' ROPE_INIT_FUNCTIONS / rotary modules, also with
  torch's default dtype changed (transformers computes them in float32 whatever the default);
- small cases derived by hand where no library has the rule (each derivation in a comment).
"""
from __future__ import annotations

import contextlib
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import LlamaConfig, Qwen3Config  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3.configuration_deepseek_v3 import DeepseekV3Config  # noqa: E402
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (  # noqa: E402
    DeepseekV3Attention, DeepseekV3RotaryEmbedding, apply_rotary_pos_emb_interleave)
from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_get_mscale as hf_yarn_get_mscale  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv)
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention  # noqa: E402

from kconvert.score import draft  # noqa: E402
from kconvert.score.draft import (  # noqa: E402
    DraftRunner, EmbeddingTable, Rope, SequenceInput, add_rms_norm, build_rope, draft_spec, rms_norm,
    rope_parameters, yarn_get_mscale)



@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread while these tests run (the bit-for-bit bfloat16 comparisons assume one reduction order),
    restored after, so the rest of the session keeps its setting."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

CPU = torch.device("cpu")


# ------------------------------------------------------------------------------------- the reference ---

def _sdpa(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
    """transformers' attention-interface signature, computed by torch's own scaled_dot_product_attention with the
    boolean mask given (True: may attend); key/value heads repeated with transformers' repeat_kv."""
    k = repeat_kv(key, module.num_key_value_groups)
    v = repeat_kv(value, module.num_key_value_groups)
    out = F.scaled_dot_product_attention(query, k, v, attn_mask=attention_mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


ALL_ATTENTION_FUNCTIONS.register("kconvert_test_sdpa", _sdpa)


def _param(t):
    return nn.Parameter(t.clone(), requires_grad=False)


def _load(module: nn.Module, w: dict, prefix: str, eps: float):
    """Every Linear / RMSNorm of `module` takes the weight named prefix + its own name (its shape whatever the
    module was built with: layer 0's projections read 2H)."""
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Linear):
            sub.weight = _param(w[prefix + name + ".weight"])
        elif hasattr(sub, "variance_epsilon"):
            sub.weight = _param(w[prefix + name + ".weight"])
            sub.variance_epsilon = eps


def _norm(weight, eps):
    n = LlamaRMSNorm(weight.shape[0], eps=eps)
    n.weight = _param(weight)
    return n


class Reference:
    """An EAGLE-3 draft (vLLM llama_eagle3.py / deepseek_eagle3.py's layer wiring, as tests/eagle3_reference.py
    writes it) on transformers' modules; float64."""

    def __init__(self, case: dict, w: dict, lm_head, target_ids, table):
        self.c, self.w, self.lm_head, self.target_ids, self.table = case, w, lm_head, target_ids, table
        H, eps, fam = case["H"], case["eps"], case["family"]
        self.eps = eps
        if fam == "mla":
            cfg = DeepseekV3Config(hidden_size=H, num_attention_heads=case["heads"], num_key_value_heads=case["heads"],
                                   q_lora_rank=case.get("q_lora_rank"), kv_lora_rank=case["kv_lora_rank"],
                                   qk_nope_head_dim=case["nope"], qk_rope_head_dim=case["rope_d"],
                                   v_head_dim=case["v"], rms_norm_eps=eps, rope_parameters=dict(case["rope"]),
                                   max_position_embeddings=163840, intermediate_size=case["I"])
            self.rope = DeepseekV3RotaryEmbedding(cfg)
            make = lambda l: DeepseekV3Attention(cfg, layer_idx=l)  # noqa: E731
        else:
            kw = dict(hidden_size=H, num_attention_heads=case["heads"], num_key_value_heads=case["kv"],
                      head_dim=case["hd"], rms_norm_eps=eps, intermediate_size=case["I"], attention_bias=False)
            cfg = Qwen3Config(**kw) if fam == "qwen3" else LlamaConfig(**kw)
            self.rope = LlamaRotaryEmbedding(cfg)
            make = (lambda l: Qwen3Attention(cfg, layer_idx=l)) if fam == "qwen3" else (  # noqa: E731
                lambda l: LlamaAttention(cfg, layer_idx=l))
        cfg._attn_implementation = "kconvert_test_sdpa"
        mcfg = LlamaConfig(hidden_size=H, intermediate_size=case["I"], num_attention_heads=1)
        self.layers = []
        for l in range(case["layers"]):
            p = f"layers.{l}."
            attn = make(l).double()
            _load(attn, w, p + "self_attn.", eps)
            mlp = LlamaMLP(mcfg).double()
            _load(mlp, w, p + "mlp.", eps)
            self.layers.append(dict(attn=attn, mlp=mlp, in_norm=_norm(w[p + "input_layernorm.weight"], eps),
                                    post=_norm(w[p + "post_attention_layernorm.weight"], eps),
                                    hid=_norm(w[p + "hidden_norm.weight"], eps) if l == 0 else None))
        self.norm = _norm(w["norm.weight"], eps)

    def hidden(self, aux):
        """fc over the aux states: input_norm over the whole concatenation, or fc_norm over each state (both
        LlamaRMSNorm), first when the draft has them."""
        x = aux.double()
        if self.c.get("nbf"):
            x = _norm(self.w["input_norm.weight"], self.eps)(x)
        if self.c.get("fc_norm"):
            x = torch.cat([_norm(self.w[f"fc_norm.{i}.weight"], self.eps)(ch)
                           for i, ch in enumerate(x.chunk(self.c["num_aux"], dim=-1))], dim=-1)
        return x @ self.w["fc.weight"].T

    def forward(self, emb, hidden, pos):
        """(normed, pre-norm) of every row; row i attends rows 0..i."""
        R = emb.shape[0]
        mask = torch.ones(R, R, dtype=torch.bool).tril()[None, None]
        cos, sin = self.rope(emb[None], pos[None])
        h, residual = hidden, None
        for l, L in enumerate(self.layers):
            if l == 0:
                hn = L["hid"](h)
                residual = hn if self.c.get("nbr") else h
                x = torch.cat([L["in_norm"](emb), hn], dim=-1)
            else:
                residual = h + residual
                x = L["in_norm"](residual)
            a, _ = L["attn"](x[None], position_embeddings=(cos, sin), attention_mask=mask)
            residual = a[0] + residual
            h = L["mlp"](L["post"](residual))
        pre = h + residual
        return self.norm(pre), pre

    def token(self, normed_row):
        # vLLM's LogitsProcessor: logits * logit_scale, greedy argmax; a draft id maps to id + d2t[id]
        logits = (normed_row @ self.lm_head.T) * self.c.get("logit_scale", 1.0)
        i = int(logits.argmax())
        return i if self.target_ids is None else int(self.target_ids[i])

    def propose(self, tokens_next, aux, c, k):
        """k drafts at cursor c and the state fed to each next step."""
        emb = self.table[tokens_next[: c + 1]]
        hid = self.hidden(aux[: c + 1])
        pos = torch.arange(c + 1)
        toks, fed = [], []
        for j in range(k):
            if j:
                emb = torch.cat([emb, self.table[toks[-1]][None]])
                hid = torch.cat([hid, fed[-1][None]])
                pos = torch.cat([pos, torch.tensor([c + j])])
            normed, pre = self.forward(emb, hid, pos)
            toks.append(self.token(normed[-1]))
            fed.append(normed[-1] if self.c.get("norm_output") else pre[-1])
        return toks, fed


def _weights(case: dict, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)

    def lin(o, i):
        return torch.randn(o, i, generator=g, dtype=torch.float64) / math.sqrt(i)

    def nw(n):
        return 1 + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)

    H, I = case["H"], case["I"]
    A = case["num_aux"] * case["tH"]
    w = {"fc.weight": lin(H, A), "norm.weight": nw(H), "input_norm.weight": nw(A)}
    for i in range(case["num_aux"]):
        w[f"fc_norm.{i}.weight"] = nw(case["tH"])
    for l in range(case["layers"]):
        p, a = f"layers.{l}.", f"layers.{l}.self_attn."
        inp = 2 * H if l == 0 else H
        w[p + "input_layernorm.weight"] = nw(H)
        w[p + "post_attention_layernorm.weight"] = nw(H)
        if l == 0:
            w[p + "hidden_norm.weight"] = nw(H)
        if case["family"] == "mla":
            heads, nope, rd, v, r = case["heads"], case["nope"], case["rope_d"], case["v"], case["kv_lora_rank"]
            if case.get("q_lora_rank"):
                w[a + "q_a_proj.weight"] = lin(case["q_lora_rank"], inp)
                w[a + "q_a_layernorm.weight"] = nw(case["q_lora_rank"])
                w[a + "q_b_proj.weight"] = lin(heads * (nope + rd), case["q_lora_rank"])
            else:
                w[a + "q_proj.weight"] = lin(heads * (nope + rd), inp)
            w[a + "kv_a_proj_with_mqa.weight"] = lin(r + rd, inp)
            w[a + "kv_a_layernorm.weight"] = nw(r)
            w[a + "kv_b_proj.weight"] = lin(heads * (nope + v), r)
            w[a + "o_proj.weight"] = lin(H, heads * v)
        else:
            heads, kv, hd = case["heads"], case["kv"], case["hd"]
            w[a + "q_proj.weight"] = lin(heads * hd, inp)
            w[a + "k_proj.weight"] = lin(kv * hd, inp)
            w[a + "v_proj.weight"] = lin(kv * hd, inp)
            w[a + "o_proj.weight"] = lin(H, heads * hd)
            if case["family"] == "qwen3":
                w[a + "q_norm.weight"] = nw(hd)
                w[a + "k_norm.weight"] = nw(hd)
        w[p + "mlp.gate_proj.weight"] = lin(I, H)
        w[p + "mlp.up_proj.weight"] = lin(I, H)
        w[p + "mlp.down_proj.weight"] = lin(H, I)
    return w


def _config(case: dict) -> dict:
    """The draft's config.json as draft_spec reads it."""
    cfg = {"hidden_size": case["H"], "num_attention_heads": case["heads"], "num_hidden_layers": case["layers"],
           "rms_norm_eps": case["eps"]}
    if case["family"] == "mla":
        cfg.update(kv_lora_rank=case["kv_lora_rank"], qk_nope_head_dim=case["nope"], qk_rope_head_dim=case["rope_d"],
                   v_head_dim=case["v"], rope_scaling=dict(case["rope"]))
        if case.get("q_lora_rank"):
            cfg["q_lora_rank"] = case["q_lora_rank"]
    else:
        if case["kv"] != case["heads"]:
            cfg["num_key_value_heads"] = case["kv"]
        if case["hd"] != case["H"] // case["heads"]:
            cfg["head_dim"] = case["hd"]
    return cfg


V, VD = 64, 40  # target vocabulary, draft vocabulary


def _setup(case: dict, seed: int = 0, dtype=torch.float64):
    """(runner, reference, sequences) for one case."""
    w = _weights(case, seed)
    g = torch.Generator().manual_seed(seed + 100)
    H = case["H"]
    lm_head = torch.randn(VD, H, generator=g, dtype=torch.float64) * 3
    target_ids = None if case.get("same_vocab") else torch.randperm(V, generator=g)[:VD]
    # the trace keeps the target's rows of 48 of the 64 tokens; a draft token outside them embeds as zeros
    table = torch.randn(V, H, generator=g, dtype=torch.float64)
    if case.get("own_table"):
        ids = None
    else:
        ids = torch.randperm(V, generator=g)[:48].sort().values
        keep = torch.zeros(V, dtype=torch.bool)
        keep[ids] = True
        table[~keep] = 0
    spec = draft_spec(_config(case), case["family"], target_vocab=V, target_hidden=case["tH"], num_aux=case["num_aux"],
                      draft_vocab=VD, fc_in=case["num_aux"] * case["tH"])
    rows = table if ids is None else table[ids]
    runner = DraftRunner(spec, {n: t.to(dtype) for n, t in w.items()}, dtype=dtype, device=CPU,
                         embed=EmbeddingTable(rows.to(dtype), ids, V, CPU), lm_head=lm_head.to(dtype),
                         target_ids=target_ids, norm_before_residual=bool(case.get("nbr")),
                         norm_before_fc=bool(case.get("nbf")), fc_norm=bool(case.get("fc_norm")),
                         norm_output=bool(case.get("norm_output")), logit_scale=case.get("logit_scale", 1.0))
    ref = Reference(case, w, lm_head, target_ids, table)
    pool = ids if ids is not None else torch.arange(V)
    seqs = []
    for T, cursors in case.get("seqs", ((9, (0, 3, 8)), (5, (1, 4)), (7, (2, 6)))):
        toks = pool[torch.randint(0, pool.shape[0], (T,), generator=g)]
        aux = torch.randn(T, case["num_aux"] * case["tH"], generator=g)  # float32, as a trace keeps them
        seqs.append((toks, aux, torch.tensor(cursors)))
    return runner, ref, seqs


BASE = dict(family="llama", H=32, heads=4, kv=4, hd=8, I=48, layers=1, eps=1e-5, num_aux=3, tH=16)
CASES = {
    "llama-3layers-gqa": dict(BASE, layers=3, kv=2),
    "llama-2layers-nbr-normout-headdim": dict(BASE, layers=2, hd=12, nbr=True, norm_output=True),
    "llama-input-norm-negative-scale": dict(BASE, nbf=True, logit_scale=-0.5, same_vocab=True, own_table=True),
    "llama-fc-norm-half-scale": dict(BASE, fc_norm=True, logit_scale=0.5),
    "qwen3-2layers-gqa": dict(BASE, family="qwen3", layers=2, kv=2, hd=12),
    "mla-qlora-2layers": dict(family="mla", H=32, heads=2, I=40, layers=2, eps=1e-6, num_aux=3, tH=16,
                              q_lora_rank=24, kv_lora_rank=20, nope=8, rope_d=8, v=12,
                              rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                    "beta_fast": 8.0, "beta_slow": 2.0, "mscale": 0.9, "mscale_all_dim": 0.7,
                                    "rope_theta": 10000.0}),
    "mla-no-qlora": dict(family="mla", H=32, heads=2, I=40, layers=1, eps=1e-6, num_aux=3, tH=16,
                         kv_lora_rank=20, nope=8, rope_d=8, v=12,
                         rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                               "rope_theta": 10000.0}),
}


class _Record:
    """Wraps the runner's first pass and chained steps to keep what they return (rows of the cursors alive)."""

    def __init__(self, runner, monkeypatch):
        self.first, self.steps = None, []
        fp, cs = runner._first_pass, runner._chained_step

        def first_pass(b):
            out = fp(b)
            self.first = out[0]
            return out

        def chained_step(b, caches, alive, last, h, j):
            out = cs(b, caches, alive, last, h, j)
            self.steps.append((alive.clone(), out[0]))
            return out

        monkeypatch.setattr(runner, "_first_pass", first_pass)
        monkeypatch.setattr(runner, "_chained_step", chained_step)


@pytest.mark.parametrize("name", list(CASES))
def test_runner_is_the_eagle3_definition_on_transformers_modules(name, monkeypatch):
    """propose_many over three sequences (k = 4) against the Reference above (transformers' attention, norm, MLP
    and rotary modules, torch SDPA with a causal mask): the same draft tokens, the same state fed to every next
    step (1e-5: the runner takes attention in float32), the FLOPs torch's FlopCounterMode counts over the run, the
    chains run."""
    case = CASES[name]
    runner, ref, seqs = _setup(case)
    k = 4
    rec = _Record(runner, monkeypatch)
    items = [SequenceInput(t, a, c) for t, a, c in seqs]
    with FlopCounterMode(display=False) as fc:
        got = runner.propose_many(items, k)
    # FlopCounterMode counts every matmul torch runs, 2 x multiply-adds; one it cannot see: at chained step 1 the
    # chain's own value (p[..., T:] @ cv with one chained key) contracts a dimension of 1, which torch lowers to a
    # multiply, not a matmul: 2 x chains x heads x 1 x dv per layer, added here by hand
    dv = case["v"] if case["family"] == "mla" else case["hd"]
    chains = sum(int(c.shape[0]) for _, _, c in seqs)
    unseen = case["layers"] * 2 * chains * case["heads"] * dv
    assert type(runner.flops) is int and runner.flops == fc.get_total_flops() + unseen
    want_toks, want_fed = [], []
    for t, a, cs in seqs:
        rows = [ref.propose(t, a, int(c), k) for c in cs]
        want_toks.append([r[0] for r in rows])
        want_fed += [r[1] for r in rows]
    assert [g.tolist() for g in got] == want_toks
    normed, fed = rec.first
    torch.testing.assert_close(fed, torch.stack([f[0] for f in want_fed]), rtol=1e-5, atol=1e-5)
    assert len(rec.steps) == k - 1
    for j, (alive, h) in enumerate(rec.steps, start=1):
        assert alive.tolist() == list(range(len(want_fed)))
        torch.testing.assert_close(h, torch.stack([f[j] for f in want_fed]), rtol=1e-5, atol=1e-5)
    assert runner.chained_rows == (k - 1) * len(want_fed)
    assert len({t for g in want_toks for row in g for t in row}) > 4  # the drafts vary


def test_chains_stop_where_the_reference_rejects(monkeypatch):
    """With reference tokens, chained step j runs only for the chains whose drafts 0..j-1 all equal the reference
    (propose's docstring: later drafts of a rejected chain never change what an engine counts), the rest -1.
    Drafts and fed states from the Reference; which chains run derived by hand from the references given."""
    case = CASES["llama-3layers-gqa"]
    runner, ref, seqs = _setup(case, seed=3)
    k = 4
    want = [[ref.propose(t, a, int(c), k) for c in cs] for t, a, cs in seqs]

    def refs(i, wrong_at):
        """the reference tokens of sequence i: the Reference's drafts, made wrong at draft wrong_at[r] of row r"""
        r = torch.tensor([w[0] for w in want[i]])
        for row, at in enumerate(wrong_at):
            if at is not None:
                r[row, at] = (r[row, at] + 1) % V
        return r

    # sequence 0 (cursors 0, 3, 8): row 0 all right, row 1 wrong at draft 0, row 2 wrong at draft 2;
    # sequence 1 (cursors 1, 4): wrong at draft 1 and all right; sequence 2 (cursors 2, 6): wrong at 0 and at 0
    wrong = [(None, 0, 2), (1, None), (0, 0)]
    rec = _Record(runner, monkeypatch)
    got = runner.propose_many([SequenceInput(t, a, c, refs(i, wrong[i])) for i, (t, a, c) in enumerate(seqs)], k)
    rows = [(i, r) for i in range(3) for r in range(len(wrong[i]))]
    flat = [want[i][r] for i, r in rows]
    ends = [k if wrong[i][r] is None else wrong[i][r] + 1 for i, r in rows]  # drafts computed per row
    want_out = [[t if j < e else -1 for j, t in enumerate(w[0])] for w, e in zip(flat, ends)]
    assert [row for g in got for row in g.tolist()] == want_out
    # step j runs the rows with ends > j: 4 rows at step 1 (rows 0, 2, 3, 4), 3 at step 2 (0, 2, 4), 2 at step 3
    assert [a.tolist() for a, _ in rec.steps] == [[n for n, e in enumerate(ends) if e > j] for j in range(1, k)]
    for j, (alive, h) in enumerate(rec.steps, start=1):
        torch.testing.assert_close(h, torch.stack([flat[n][1][j] for n in alive.tolist()]), rtol=1e-5, atol=1e-5)
    assert runner.chained_rows == 4 + 3 + 2

    # propose, one sequence: row 0 runs to the end alone at step 3; every chain rejected at draft 0: no step runs
    runner.chained_rows = 0
    t, a, c = seqs[0]
    one = runner.propose(t, a, c, k, refs(0, wrong[0]))
    assert one.tolist() == want_out[:3]
    assert runner.chained_rows == 2 + 2 + 1
    none = runner.propose(t, a, c, k, refs(0, (0, 0, 0)))
    assert none.tolist() == [[w[0][0], -1, -1, -1] for w in want[0]] and runner.chained_rows == 5
    # without references every draft is computed
    assert runner.propose(t, a, c, k).tolist() == [w[0] for w in want[0]]


def test_references_for_some_sequences_only_are_refused():
    """propose_many: reference tokens for every sequence or for none (its message, spelled out here)."""
    runner, _, seqs = _setup(CASES["llama-fc-norm-half-scale"])
    (t0, a0, c0), (t1, a1, c1) = seqs[:2]
    with pytest.raises(ValueError) as e:
        runner.propose_many([SequenceInput(t0, a0, c0, torch.zeros(3, 2, dtype=torch.long)),
                             SequenceInput(t1, a1, c1)], 2)
    assert str(e.value) == "propose_many: give reference tokens for every sequence or for none"


# ---------------------------------------------------------------------------------- q, k, v in bfloat16 ---

_SEEN: dict = {}


def _capture(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
    """transformers' attention interface that keeps the query, key and value it is given (after the module's
    projections, norms and rotary embedding)."""
    _SEEN.update(q=query, k=key, v=value, groups=module.num_key_value_groups)
    return torch.zeros_like(repeat_kv(value, module.num_key_value_groups)).transpose(1, 2).contiguous(), None


ALL_ATTENTION_FUNCTIONS.register("kconvert_test_capture", _capture)


@pytest.mark.parametrize("name", ["llama-3layers-gqa", "qwen3-2layers-gqa", "mla-qlora-2layers", "mla-no-qlora"])
def test_qkv_in_bfloat16_is_the_transformers_modules(name):
    """_qkv of layer 0 in bfloat16 against the query, key and value transformers' attention module computes from
    the same bfloat16 weights and input (captured at its attention interface): the cos/sin tables in bfloat16 as
    LlamaRotaryEmbedding / DeepseekV3RotaryEmbedding return them, the rotation in bfloat16, key/value heads
    repeated as repeat_kv does; bit for bit. DeepSeek's interleaved rotary returns the rotated part de-interleaved
    (evens then odds), vLLM's keeps the pairs in place: compared as such."""
    case = CASES[name]
    runner, ref, _ = _setup(case, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 2 * case["H"], generator=g).to(torch.bfloat16)
    pos = torch.tensor([0, 1, 2, 5, 40, 300])
    q, k, v = runner._qkv(0, x, pos)
    attn = ref.layers[0]["attn"]
    attn.to(torch.bfloat16)
    attn.config._attn_implementation = "kconvert_test_capture"
    try:
        cos, sin = ref.rope(x[None], pos[None])
        attn(x[None], position_embeddings=(cos, sin), attention_mask=None)
    finally:
        attn.config._attn_implementation = "kconvert_test_sdpa"
    wq, wk, wv = (_SEEN[n][0].transpose(0, 1) for n in "qkv")
    wk = repeat_kv(_SEEN["k"], _SEEN["groups"])[0].transpose(0, 1)
    wv = repeat_kv(_SEEN["v"], _SEEN["groups"])[0].transpose(0, 1)
    assert q.dtype == k.dtype == v.dtype == torch.bfloat16
    if case["family"] == "mla":
        n, rd = case["nope"], case["rope_d"]
        for got, want in ((q, wq), (k, wk)):
            assert torch.equal(got[..., :n], want[..., :n])
            assert torch.equal(got[..., n::2], want[..., n:n + rd // 2])
            assert torch.equal(got[..., n + 1::2], want[..., n + rd // 2:])
    else:
        assert torch.equal(q, wq) and torch.equal(k, wk)
    assert torch.equal(v, wv)
    # queries of some rows only (the last layer's, at the cursors): those rows of the same
    rows = torch.tensor([1, 4])
    q2, k2, v2 = runner._qkv(0, x, pos, rows)
    assert torch.equal(q2, q[rows]) and torch.equal(k2, k) and torch.equal(v2, v)


# ------------------------------------------------------------------------------------------- attention ---

class _Spec:
    scale = 0.3


def _bare(dtype=torch.float32, **kw):
    """A runner with nothing but what the attention and greedy read (spec.scale, dtype, flops)."""
    return DraftRunner(_Spec(), {}, dtype=dtype, device=CPU, embed=None, lm_head=kw.get("lm_head"),
                       target_ids=kw.get("target_ids"), norm_before_residual=False, norm_before_fc=False,
                       fc_norm=False, norm_output=False, logit_scale=kw.get("logit_scale", 1.0))


def _sdpa_rows(q, k, v, mask, scale):
    """torch's scaled_dot_product_attention in float64: q [n, H, d], k/v [T, H, d], mask [n, T] (True: attends)."""
    out = F.scaled_dot_product_attention(q.double().transpose(0, 1), k.double().transpose(0, 1),
                                         v.double().transpose(0, 1), attn_mask=mask, scale=scale)
    return out.transpose(0, 1)


def _qkv_rand(n, T, H=2, d=8, dv=6, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, H, d, generator=g), torch.randn(T, H, d, generator=g), torch.randn(T, H, dv, generator=g))


@contextlib.contextmanager
def _default_dtype(dt):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def _default_device(dev):
    torch.set_default_device(dev)
    try:
        yield
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("env", ["plain", "default-bfloat16", "default-meta-device"])
def test_attend_causal_is_sdpa_with_a_causal_mask(env):
    """_attend_causal against torch's scaled_dot_product_attention with the explicit mask key t <= query position:
    queries 0..T-1 (no positions given) and queries at some positions only; in float32 whatever torch's default
    dtype (the attention softmax in float32, vLLM's numerics) and on its inputs' device whatever the default."""
    q, k, v = _qkv_rand(6, 6)
    qpos = torch.tensor([1, 4, 5])
    r = _bare()
    ctx = {"plain": contextlib.nullcontext(), "default-bfloat16": _default_dtype(torch.bfloat16),
           "default-meta-device": _default_device("meta")}[env]
    with ctx:
        full = r._attend_causal(q, k, v)
        part = r._attend_causal(q[qpos], k, v, qpos)
    assert full.dtype == part.dtype == torch.float32 and full.device == part.device == CPU
    causal = torch.arange(6)[None, :] <= torch.arange(6)[:, None]
    torch.testing.assert_close(full.double(), _sdpa_rows(q, k, v, causal, 0.3), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(part.double(), _sdpa_rows(q[qpos], k, v, causal[qpos], 0.3), rtol=1e-5, atol=1e-6)


def _chain_inputs(seed=6):
    g = torch.Generator().manual_seed(seed)
    C, H, d, dv, T, j = 5, 2, 8, 6, 9, 3
    q = torch.randn(C, H, d, generator=g)
    k0, v0 = torch.randn(T, H, d, generator=g), torch.randn(T, H, dv, generator=g)
    ck, cv = torch.randn(C, H, j, d, generator=g), torch.randn(C, H, j, dv, generator=g)
    return q, k0, v0, ck, cv, torch.tensor([0, 2, 3, 5, 5])


def _chain_want(q, k0, v0, ck, cv, cursors, scale):
    """chain i: torch SDPA over the verified keys 0..cursor_i then its own chained keys, no mask."""
    rows = []
    for i, c in enumerate(cursors.tolist()):
        kk = torch.cat([k0[: c + 1], ck[i].transpose(0, 1)])
        vv = torch.cat([v0[: c + 1], cv[i].transpose(0, 1)])
        rows.append(_sdpa_rows(q[i:i + 1], kk, vv, None, scale)[0])
    return torch.stack(rows)


@pytest.mark.parametrize("env", ["plain", "default-bfloat16", "default-meta-device"])
def test_attend_chain_is_sdpa_over_the_verified_keys_and_the_chain(env):
    """_attend_chain against torch's scaled_dot_product_attention over keys 0..cursor of the first pass plus the
    chain's own keys; float32 and on the inputs' device whatever torch's defaults; the FLOPs FlopCounterMode
    counts (three chained keys: every product a matmul)."""
    args = _chain_inputs()
    r = _bare()
    ctx = {"plain": contextlib.nullcontext(), "default-bfloat16": _default_dtype(torch.bfloat16),
           "default-meta-device": _default_device("meta")}[env]
    with ctx:
        got = r._attend_chain(*args)
    assert got.dtype == torch.float32 and got.device == CPU
    torch.testing.assert_close(got.double(), _chain_want(*args, 0.3), rtol=1e-5, atol=1e-6)
    r = _bare()
    with FlopCounterMode(display=False) as fc:
        r._attend_chain(*args)
    assert r.flops == fc.get_total_flops()


def test_attention_returns_the_model_dtype():
    """In a bfloat16 runner both attentions return bfloat16: the float32 result of torch SDPA (float64 here)
    rounded to bfloat16, to one bfloat16 step."""
    r = _bare(torch.bfloat16)
    q, k, v = (t.to(torch.bfloat16) for t in _qkv_rand(6, 6))
    got = r._attend_causal(q, k, v)
    causal = torch.arange(6)[None, :] <= torch.arange(6)[:, None]
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), _sdpa_rows(q, k, v, causal, 0.3), rtol=1e-2, atol=1e-2)
    args = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in _chain_inputs())
    got = r._attend_chain(*args)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), _chain_want(*args, 0.3), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("bound, causal_rows, chain_rows", [
    # causal: 6 keys x 2 heads = 12 scores a query: 24 // 12 = 2 queries a chunk; 12 // 12 = 1; 5 < 12: still 1
    # chain: the verified keys of 5 chains, the largest cursor 5: 6 keys x 2 heads, the same counts over 5 chains
    (24, [2, 2, 2], [2, 2, 1]), (12, [1] * 6, [1] * 5), (5, [1] * 6, [1] * 5), (1 << 24, [6], [5])])
def test_attention_is_cut_into_chunks_of_the_score_bound(monkeypatch, bound, causal_rows, chain_rows):
    """MAX_SCORE_ELEMENTS is the number of attention scores held at once: a chunk of r queries over T keys and H
    heads holds r x T x H of them, so r = bound // (T x H), at least 1 (derived by hand above); the results do not
    change (torch SDPA) and the FLOPs are FlopCounterMode's."""
    monkeypatch.setattr(draft, "MAX_SCORE_ELEMENTS", bound)
    seen = []
    matmul, einsum = torch.matmul, torch.einsum

    def rec_matmul(a, b, *x, **kw):
        seen.append(("mm", a.shape[1]))
        return matmul(a, b, *x, **kw)

    def rec_einsum(eq, *ops):
        if eq.replace(" ", "").lower() == "nhd,htd->nht":  # the verified keys' scores
            seen.append(("ein", ops[0].shape[0]))
        return einsum(eq, *ops)

    monkeypatch.setattr(torch, "matmul", rec_matmul)
    monkeypatch.setattr(torch, "einsum", rec_einsum)
    q, k, v = _qkv_rand(6, 6)
    r = _bare()
    args = _chain_inputs()
    args = (args[0], args[1][:6], args[2][:6], *args[3:])
    with FlopCounterMode(display=False) as fc:  # chunk by chunk: what torch runs (three chained keys)
        got = r._attend_causal(q, k, v)
        got_chain = r._attend_chain(*args)
    monkeypatch.undo()
    assert r.flops == fc.get_total_flops()
    assert [n for kind, n in seen if kind == "mm"] == [n for n in causal_rows for _ in range(2)]
    assert [n for kind, n in seen if kind == "ein"] == chain_rows
    causal = torch.arange(6)[None, :] <= torch.arange(6)[:, None]
    torch.testing.assert_close(got.double(), _sdpa_rows(q, k, v, causal, 0.3), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_chain.double(), _chain_want(*args, 0.3), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------- runner pieces ---

def test_greedy_reads_the_logits_like_vllm():
    """greedy against vLLM's LogitsProcessor (logits x logit_scale, then argmax) worked by hand: lm_head rows
    [1e38, 1e38] and [1.5e38, 1.5e38] (float32) over the row [1, 1] give logits [2e38, 3e38], token 1 (doubling
    them would overflow both to inf and tie at token 0); with logit_scale -1 and the rows swapped, [-3e38, -2e38]:
    token 1 again. Without d2t the draft id is the token; with it, the mapped id; the FLOPs FlopCounterMode
    counts."""
    head = torch.tensor([[1e38, 1e38], [1.5e38, 1.5e38]])
    one = torch.ones(1, 2)
    r = _bare(lm_head=head)
    assert r.greedy(one).tolist() == [1]
    assert _bare(lm_head=head.flip(0), logit_scale=-1.0).greedy(one).tolist() == [1]
    assert _bare(lm_head=head, target_ids=torch.tensor([7, 9])).greedy(one).tolist() == [9]
    g = torch.Generator().manual_seed(2)
    head = torch.randn(11, 5, generator=g)
    r = _bare(lm_head=head)
    x = torch.randn(3, 5, generator=g)
    with FlopCounterMode(display=False) as fc:
        got = r.greedy(x)
    assert got.tolist() == (x @ head.T).argmax(-1).tolist() and r.flops == fc.get_total_flops()


def test_projection_flops_and_dtype_are_torchs():
    """_lin counts the FLOPs FlopCounterMode counts for the same F.linear, also over a [2, 3, in] input (rows =
    every leading index); _o takes attention output of any float dtype into the model's (float64 here), then
    o_proj: F.linear in float64."""
    runner, _, _ = _setup(CASES["llama-3layers-gqa"])
    g = torch.Generator().manual_seed(4)
    for shape in ((5, 64), (2, 3, 64), (1, 64)):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        runner.flops = 0
        with FlopCounterMode(display=False) as fc:
            y = runner._lin(x, "layers.0.self_attn.q_proj.weight")
        assert runner.flops == fc.get_total_flops() and type(runner.flops) is int
        assert torch.equal(y, F.linear(x, runner.w["layers.0.self_attn.q_proj.weight"]))
    o = torch.randn(5, 4, 8, generator=g)  # float32, as the attention computes it
    got = runner._o(1, o)
    assert got.dtype == torch.float64
    assert torch.equal(got, F.linear(o.reshape(5, 32).double(), runner.w["layers.1.self_attn.o_proj.weight"]))


@pytest.mark.parametrize("name", ["llama-input-norm-negative-scale", "llama-fc-norm-half-scale"])
def test_combine_of_batched_aux_is_the_reference(name):
    """combine over aux states with a leading batch index [2, T, A] is the Reference's fc (LlamaRMSNorm over the
    concatenation or over each state, then fc) row by row."""
    runner, ref, _ = _setup(CASES[name])
    aux = torch.randn(2, 5, 48, generator=torch.Generator().manual_seed(8))
    got = runner.combine(aux)
    torch.testing.assert_close(got, ref.hidden(aux), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(runner.combine(aux[1]), ref.hidden(aux[1]), rtol=1e-12, atol=1e-12)


def test_layer0_input_with_a_leading_batch_index():
    """layer 0's input for [1, N, H] rows: cat(input_layernorm(embeds), hidden_norm(hidden)) along the features,
    the residual the raw hidden state (vLLM llama_eagle3.py: torch.cat([embeds, hidden_states], dim=-1)); the norms
    are LlamaRMSNorm."""
    runner, ref, _ = _setup(CASES["llama-3layers-gqa"])
    g = torch.Generator().manual_seed(9)
    e, h = torch.randn(1, 4, 32, generator=g, dtype=torch.float64), torch.randn(1, 4, 32, generator=g,
                                                                                  dtype=torch.float64)
    x, res = runner._layer_in(0, e, h, None)
    L = ref.layers[0]
    torch.testing.assert_close(x, torch.cat([L["in_norm"](e), L["hid"](h)], dim=-1), rtol=1e-12, atol=1e-12)
    assert torch.equal(res, h)


def test_embedding_table_of_trace_rows():
    """EmbeddingTable: the trace's rows of the ids it keeps, one zero row for every other id (its docstring), in
    the rows' dtype; the draft's own table read as is. Values by hand."""
    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
    t = EmbeddingTable(rows, torch.tensor([5, 2]), 8, CPU)
    got = t(torch.tensor([2, 5, 0, 7]))
    assert got.dtype == torch.bfloat16 and got.tolist() == [[3.0, 4.0], [1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert t.rows.shape == (3, 2) and t.rows.dtype == torch.bfloat16
    own = EmbeddingTable(rows, None, 2, CPU)
    assert own.index is None and own(torch.tensor([1, 0])).tolist() == [[3.0, 4.0], [1.0, 2.0]]


# ----------------------------------------------------------------------------------------------- norms ---

def _llama_norm(w, eps, dtype):
    n = LlamaRMSNorm(w.shape[0], eps=eps).to(dtype)
    with torch.no_grad():
        n.weight.copy_(w)
    return n


def test_norms_over_the_last_dimension_of_any_rank():
    """rms_norm and add_rms_norm over [2, 3, 8] (per-head norms are 3-D): transformers' LlamaRMSNorm (the last
    dimension); add_rms_norm with a zero residual is the norm of x itself."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 8, generator=g)
    w = 1 + 0.3 * torch.randn(8, generator=g)
    want = _llama_norm(w, 1e-5, torch.float32)(x)
    assert torch.equal(rms_norm(x, w, 1e-5), want)
    out, res = add_rms_norm(x, torch.zeros_like(x), w, 1e-5)
    assert torch.equal(out, want) and torch.equal(res, x)


def test_norms_weight_multiply_in_bfloat16_and_the_input_dtype_back():
    """bfloat16 input and weight: LlamaRMSNorm (normalise in float32, cast to bfloat16, times the weight in
    bfloat16), bit for bit, for rms_norm and for add_rms_norm with a zero residual. A float32 input with a bfloat16
    weight comes back float32 (vLLM: the output in the input's dtype), to one bfloat16 step of LlamaRMSNorm."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(64, generator=g)).to(torch.bfloat16)
    want = _llama_norm(w, 1e-6, torch.bfloat16)(x)
    assert torch.equal(rms_norm(x, w, 1e-6), want)
    out, res = add_rms_norm(x, torch.zeros_like(x), w, 1e-6)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want) and torch.equal(res, x)
    xf = x.float()
    ref = _llama_norm(w.float(), 1e-6, torch.float32)(xf)
    got = rms_norm(xf, w, 1e-6)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
    out, res = add_rms_norm(xf, torch.zeros_like(xf), w, 1e-6)
    assert out.dtype == res.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------------------------------------ rope ---

def test_interleaved_rope_with_a_leading_batch_index():
    """Rope.apply over x [2, T, heads, d] (its docstring: x [..., T, heads, d]), interleaved pairs, against
    DeepSeek's apply_rotary_pos_emb_interleave (its output de-interleaved) per batch index; neox halves against
    apply_rotary_pos_emb."""
    d = 16
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float) / d))
    pos = torch.tensor([0, 2, 9, 33, 700])
    x = torch.randn(2, 5, 3, d, generator=torch.Generator().manual_seed(13))
    freqs = pos[:, None].float() * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    for neox in (False, True):
        rope = Rope(d, neox, inv)
        cos, sin = rope.tables(pos, torch.float32)
        got = rope.apply(x, cos, sin)
        assert got.shape == x.shape
        for b in range(2):
            xb = x[b].transpose(0, 1)[None]
            if neox:
                want, _ = apply_rotary_pos_emb(xb, xb, emb.cos()[None], emb.sin()[None])
                torch.testing.assert_close(got[b], want[0].transpose(0, 1), rtol=1e-6, atol=1e-6)
            else:
                want, _ = apply_rotary_pos_emb_interleave(xb, xb, emb.cos()[None], emb.sin()[None])
                want = want[0].transpose(0, 1)
                torch.testing.assert_close(got[b][..., 0::2], want[..., : d // 2], rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(got[b][..., 1::2], want[..., d // 2:], rtol=1e-6, atol=1e-6)


def test_partial_rope_of_empty_inputs_keeps_their_shape():
    """A partial rope (8 of 16) of no rows, or of no heads, returns the input's shape (nothing to rotate, the rest
    of the head kept): [2, 0, 3, 16] and [4, 0, 16]."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float) / 8))
    for neox in (True, False):
        rope = Rope(8, neox, inv)
        cos, sin = rope.tables(torch.arange(0), torch.float32)
        assert rope.apply(torch.zeros(2, 0, 3, 16), cos, sin).shape == (2, 0, 3, 16)
        cos, sin = rope.tables(torch.arange(4), torch.float32)
        assert rope.apply(torch.zeros(4, 0, 16), cos, sin).shape == (4, 0, 16)


def test_rope_tables_take_positions_to_float32_like_transformers():
    """Positions given as float64 are taken to float32 first: LlamaRotaryEmbedding (position_ids.float() times
    the float32 inverse frequencies, cos/sin then cast to the model dtype), bit for bit in float64."""
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters={"rope_type": "default",
                                                                                "rope_theta": 10000.0})
    hf = LlamaRotaryEmbedding(cfg)
    pos = torch.tensor([3.0, 1001.0, 4097.0, 65537.0, 123457.0], dtype=torch.float64)
    rope = Rope(16, True, hf.inv_freq.clone())
    cos, sin = rope.tables(pos, torch.float64)
    wc, ws = hf(torch.zeros(1, dtype=torch.float64), pos[None])
    assert torch.equal(cos, wc[0, :, :8]) and torch.equal(sin, ws[0, :, :8])


def _hf_rope(params: dict, head_dim: int = 64):
    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=params.get("max_position_embeddings", 8192),
                      rope_parameters=dict(params))
    if params.get("rope_type", "default") == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    return ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")


@pytest.mark.parametrize("default", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("params", [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 2048},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 2048},
], ids=["default", "yarn", "llama3"])
def test_rope_frequencies_are_float32_whatever_torchs_default_dtype(params, default):
    """The inverse frequencies are float32 whatever torch's default dtype: transformers' rope init (arange
    .to(float32)), computed under the same default, value for value (1e-6)."""
    with _default_dtype(default):
        inv_want, att = _hf_rope(params)
        rope, _ = build_rope(params, 64, True, mla=False)
    assert rope.inv_freq.dtype == inv_want.dtype == torch.float32
    torch.testing.assert_close(rope.inv_freq, inv_want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("params", [
    {},  # theta 10000 and the default rope (transformers' LlamaConfig defaults)
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 2048},
    {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
     "original_max_position_embeddings": 1024},
    # beta_fast 2048: the low correction dimension is negative (clamped to 0); beta_slow 0.01: the high one is past
    # the head (clamped to dim - 1)
    {"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "original_max_position_embeddings": 4096,
     "beta_fast": 2048.0, "beta_slow": 0.01},
    # untruncated, equal betas: the two correction dimensions are the same; the ramp's top moves by 0.001
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 4096,
     "beta_fast": 16.0, "beta_slow": 16.0, "truncate": False},
    {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
     "mscale": 0.8, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 4096,
     "truncate": False},
], ids=["empty", "llama3", "llama3-2", "yarn-clamped", "yarn-equal-betas", "yarn-mscales", "yarn-untruncated"])
def test_build_rope_is_transformers_rope_init_more(params):
    """build_rope against transformers' rope init (inverse frequencies and attention factor) for the parameter
    sets tests/test_score_draft.py leaves out."""
    inv_want, factor_want = _hf_rope(params)
    rope, mult = build_rope(params, 64, True, mla=False)
    assert rope.rotary_dim == 64 and rope.neox is True and mult == 1.0
    torch.testing.assert_close(rope.inv_freq, inv_want, rtol=1e-6, atol=0)
    assert rope.mscale == pytest.approx(factor_want, rel=1e-12)
    if params.get("rope_type") == "llama3":  # some frequencies fall between the two wavelengths (the smooth part)
        default = LlamaRotaryEmbedding.compute_default_rope_parameters(
            LlamaConfig(hidden_size=256, num_attention_heads=4, rope_theta=params["rope_theta"]))[0]
        mid = (inv_want != default) & (inv_want != default / params["factor"])
        assert int(mid.sum()) >= 2


def test_llama3_rope_with_equal_frequency_factors():
    """low_freq_factor == high_freq_factor: vLLM's Llama3RotaryEmbedding takes smooth = 0 (its `if low != high`
    guard), so a frequency whose wavelength is exactly original_max / factor is divided by the factor, those below
    kept, those above divided (by hand: the wavelengths are 2 pi / inv, float32). transformers' formula would
    divide 0 by 0 there."""
    inv = LlamaRotaryEmbedding.compute_default_rope_parameters(
        LlamaConfig(hidden_size=256, num_attention_heads=4, rope_theta=10000.0))[0]
    wave = 2 * math.pi / inv
    b = float(wave[10])
    params = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 2.0,
              "high_freq_factor": 2.0, "original_max_position_embeddings": b * 2}
    rope, _ = build_rope(params, 64, True, mla=False)
    want = torch.where(torch.arange(32) < 10, inv, inv / 8.0)
    torch.testing.assert_close(rope.inv_freq, want, rtol=1e-7, atol=0)


def test_yarn_helpers_are_deepseeks():
    """yarn_get_mscale against transformers' DeepSeek-V3 yarn_get_mscale (defaults scale 1, mscale 1), and the
    correction range by hand: dims 64, base 10000, 4096 positions, betas 32 and 1: low = 64 ln(4096 / (32 x 2 pi))
    / (2 ln 10000) = 10.47, floored to 10; high = 64 ln(4096 / (2 pi)) / (2 ln 10000) = 22.51, ceiled to 23
    (truncated by default, as vLLM's _yarn_find_correction_range does)."""
    assert yarn_get_mscale() == hf_yarn_get_mscale()
    for scale in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 40.0):
        assert yarn_get_mscale(scale) == pytest.approx(hf_yarn_get_mscale(scale), rel=1e-15)
        for m in (0.707, 1.0, 2.0):
            assert yarn_get_mscale(scale, m) == pytest.approx(hf_yarn_get_mscale(scale, m), rel=1e-15)
    # at scale 1 the mscale is 1 whatever the mscale given (transformers returns early), an infinite one too
    assert yarn_get_mscale(1.0, math.inf) == hf_yarn_get_mscale(1.0, math.inf) == 1.0
    assert draft._yarn_range(32, 1, 64, 10000, 4096) == (10, 23)
    low, high = draft._yarn_range(32, 1, 64, 10000, 4096, truncate=False)
    assert low == pytest.approx(64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(10000)), rel=1e-12)
    assert high == pytest.approx(64 * math.log(4096 / (2 * math.pi)) / (2 * math.log(10000)), rel=1e-12)


@pytest.mark.parametrize("rs", [
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0},
    {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
     "beta_fast": 8.0, "beta_slow": 2.0, "mscale": 0.9, "mscale_all_dim": 0.6},
    # 6359 positions: the low correction dimension of beta_fast 32 is 6.0002 (floored to 6; 33 would give 5.95)
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 6359, "rope_theta": 10000.0},
], ids=["no-betas-no-mscales", "betas-and-mscales", "no-betas-at-a-floor"])
def test_mla_rope_is_deepseeks_for_absent_and_given_keys(rs):
    """An MLA draft's yarn against transformers' DeepseekV3Config: the inverse frequencies and attention factor of
    its rope init and DeepseekV3Attention.scaling (qk_head_dim^-0.5 x mscale(factor, mscale_all_dim)^2), with the
    optional keys absent (transformers' defaults: betas 32 and 1, mscale 1, mscale_all_dim 0) and given."""
    dc = DeepseekV3Config(hidden_size=128, num_attention_heads=2, qk_rope_head_dim=32, kv_lora_rank=64,
                          q_lora_rank=32, qk_nope_head_dim=64, v_head_dim=32, rope_parameters=dict(rs),
                          max_position_embeddings=163840)
    inv_want, att = ROPE_INIT_FUNCTIONS["yarn"](dc, "cpu")
    scaling = DeepseekV3Attention(dc, layer_idx=0).scaling
    rope, mult = build_rope(rs, 32, False, mla=True)
    torch.testing.assert_close(rope.inv_freq, inv_want, rtol=1e-6, atol=0)
    assert rope.rotary_dim == 32 and rope.mscale == pytest.approx(att, rel=1e-12)
    assert (64 + 32) ** -0.5 * mult == pytest.approx(scaling, rel=1e-12)
    assert rope.neox is False
    # the rotation style is get_rope's is_neox_style, whatever the scaling: neox halves asked, neox halves kept
    assert build_rope(rs, 32, True, mla=True)[0].neox is True


def test_rope_parameters_that_are_no_dict_are_ignored():
    """rope_parameters that is not a mapping is not read (the legacy keys are): by hand."""
    assert rope_parameters({"rope_parameters": "yarn", "rope_theta": 9.0}) == {"rope_theta": 9.0,
                                                                               "rope_type": "default"}
    assert rope_parameters({"rope_parameters": [("rope_type", "linear")],
                            "rope_scaling": {"type": "yarn", "factor": 2.0}}) == {
        "rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0}


# ------------------------------------------------------------------------------------------------ spec ---

def test_draft_spec_of_an_mla_draft_keeps_every_field():
    """Every field of an MLA draft's spec from its config (by hand: the values given; head_dim nope + rope; fc's
    input 240 is no multiple of the hidden size 64, so one aux state is the trace's 80 wide)."""
    cfg = {"hidden_size": 64, "num_attention_heads": 3, "num_hidden_layers": 2, "rms_norm_eps": 1e-5,
           "kv_lora_rank": 32, "qk_rope_head_dim": 8, "v_head_dim": 12, "qk_nope_head_dim": 16}
    s = draft_spec(cfg, "mla", target_vocab=512, target_hidden=80, num_aux=3, draft_vocab=128, fc_in=240)
    assert (s.family, s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.head_dim, s.eps) == (
        "mla", 64, 2, 3, 3, 24, 1e-5)
    assert (s.vocab_size, s.draft_vocab_size, s.num_aux, s.target_hidden_size) == (512, 128, 3, 80)
    assert (s.q_lora_rank, s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim) == (
        None, 32, 16, 8, 12)


def test_draft_spec_of_a_llama_draft_with_yarn_is_transformers():
    """A Llama draft's yarn is plain yarn (never DeepSeek's), whatever attention_factor: transformers' rope init
    and LlamaAttention.scaling (head_dim^-0.5); head_dim an int (hidden / heads)."""
    rs = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
          "attention_factor": 0.75}
    s = draft_spec({"hidden_size": 256, "num_attention_heads": 4, "rope_scaling": dict(rs)}, "llama",
                   target_vocab=512, target_hidden=256, num_aux=3, draft_vocab=128, fc_in=768)
    inv_want, att = _hf_rope(rs)
    assert type(s.head_dim) is int and s.head_dim == 64
    torch.testing.assert_close(s.rope.inv_freq, inv_want, rtol=1e-6, atol=0)
    assert s.rope.mscale == pytest.approx(att, rel=1e-12) and att == 0.75
    lc = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters=dict(rs))
    assert s.scale == LlamaAttention(lc, layer_idx=0).scaling


def test_chains_at_position_0_with_one_head_are_one_chunk(monkeypatch):
    """Three chains at cursor 0 with one head: one verified key x one head = 1 score a chain, so a bound of 3
    holds all three chains in one chunk (r = 3 // 1, by hand); torch SDPA gives the values."""
    monkeypatch.setattr(draft, "MAX_SCORE_ELEMENTS", 3)
    q, k0, v0, ck, cv, _ = _chain_inputs()
    args = (q[:3, :1], k0[:1, :1], v0[:1, :1], ck[:3, :1], cv[:3, :1], torch.tensor([0, 0, 0]))
    seen = []
    einsum = torch.einsum

    def rec_einsum(eq, *ops):
        if eq.replace(" ", "").lower() == "nhd,htd->nht":  # the verified keys' scores
            seen.append(ops[0].shape[0])
        return einsum(eq, *ops)

    monkeypatch.setattr(torch, "einsum", rec_einsum)
    got = _bare()._attend_chain(*args)
    monkeypatch.undo()
    assert seen == [3]
    torch.testing.assert_close(got.double(), _chain_want(*args, 0.3), rtol=1e-5, atol=1e-6)


def test_llama3_rope_at_the_low_frequency_wavelength():
    """A wavelength exactly original_max / low_freq_factor is in the smooth part (transformers: medium unless
    wavelen > low_freq_wavelen), where the float32 smooth formula does not give inv / factor exactly: transformers'
    llama3 rope init, bit for bit (original_max = 3 x the 16th wavelength, low 3, high 12)."""
    inv = LlamaRotaryEmbedding.compute_default_rope_parameters(
        LlamaConfig(hidden_size=256, num_attention_heads=4, rope_theta=10000.0))[0]
    orig = float((2 * math.pi / inv)[15]) * 3.0
    params = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 3.0,
              "high_freq_factor": 12.0, "original_max_position_embeddings": orig}
    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, head_dim=64, max_position_embeddings=10 ** 7,
                      rope_parameters=dict(params))
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    rope, _ = build_rope(params, 64, True, mla=False)
    assert torch.equal(rope.inv_freq, want)
    assert float(want[15]) != float(inv[15] / 8.0)  # the boundary frequency is not simply divided


def test_batch_and_embedding_table_live_on_the_device_asked_for():
    """_Batch and EmbeddingTable put every tensor they hold on the device given: torch's "meta" device (shapes, no
    data, no hardware) stands for a second device here; shapes by hand (two sequences of 3 and 2 positions)."""
    meta = torch.device("meta")
    ref = torch.zeros(2, 2, dtype=torch.long)
    items = [SequenceInput(torch.tensor([1, 2, 3]), torch.zeros(3, 4), torch.tensor([0, 2]), ref),
             SequenceInput(torch.tensor([4, 5]), torch.zeros(2, 4), torch.tensor([1]), ref[:1])]
    b = draft._Batch(items, meta)
    for name in ("tokens", "aux", "positions", "cursors", "cursor_seq", "cursor_rows", "reference"):
        assert getattr(b, name).device == meta, name
    assert (b.tokens.shape, b.aux.shape, b.positions.shape, b.cursor_rows.shape, b.reference.shape) == (
        (5,), (5, 4), (5,), (3,), (3, 2))
    assert b.spans == [(0, 3), (3, 5)] and b.cursor_spans == [(0, 2), (2, 3)] and b.counts == [2, 1]
    t = EmbeddingTable(torch.ones(2, 3), torch.tensor([4, 1]), 6, meta)
    assert t.rows.device == meta and t.index.device == meta and t.rows.shape == (3, 3)
    assert t(torch.tensor([1, 0], device=meta)).shape == (2, 3)
    own = EmbeddingTable(torch.ones(2, 3), None, 2, meta)
    assert own.rows.device == meta


# ---------------------------------------------------------------------- survivors of the score mutation run ---

def test_yarn_with_an_odd_rotary_dim_fails_like_vllms():
    """vLLM's YaRN _compute_inv_freq (yarn_scaling_rope.py, deepseek_scaling_rope.py) takes its frequencies over
    `arange(0, rotary_dim, 2)` (ceil(dim / 2) of them) and its ramp mask `yarn_linear_ramp_mask(low, high,
    rotary_dim // 2)`: for an odd dim (7: 4 frequencies, a mask of 3) the two do not broadcast and torch raises;
    an even dim gives dim / 2 frequencies."""
    with pytest.raises(RuntimeError, match="must match the size"):
        draft._yarn_inv_freq(7, 10000.0, 4.0, 32.0, 1.0, 4096)
    assert draft._yarn_inv_freq(8, 10000.0, 4.0, 32.0, 1.0, 4096).shape == (4,)


def test_build_rope_takes_an_explicit_rope_dim():
    """A `rope_dim` in the parameters is the rotary dimension whatever the head size: 16 of a 32-wide head, so 8
    default frequencies 10000^(-i/16), i = 0, 2, .., 14 (by hand)."""
    rope, mult = build_rope({"rope_theta": 10000.0, "rope_type": "default", "rope_dim": 16}, 32, True, mla=False)
    assert rope.rotary_dim == 16 and mult == 1.0
    torch.testing.assert_close(rope.inv_freq, torch.tensor([10000.0 ** (-i / 16) for i in range(0, 16, 2)]),
                               rtol=1e-6, atol=0)


def test_draft_spec_reads_zero_layers_as_one():
    """num_hidden_layers 0 is no draft an engine runs (EAGLE-3's layer 0 is the one taking the 2H input): read
    as a single-layer draft, as an absent num_hidden_layers is."""
    cfg = {"hidden_size": 64, "num_attention_heads": 2}
    kw = dict(target_vocab=512, target_hidden=64, num_aux=3, draft_vocab=128, fc_in=192)
    assert draft_spec({**cfg, "num_hidden_layers": 0}, "llama", **kw).num_layers == 1
    assert draft_spec(cfg, "llama", **kw).num_layers == 1


def test_greedy_with_a_logit_scale_of_0_is_vllms_argmax():
    """vLLM's LogitsProcessor multiplies the logits by logit_scale: by 0 every logit is 0 and torch's argmax of
    ties is the first index, 0. Rows [1, -1] over [1] give logits [1, -1]: draft id 0 is also their argmax
    (an argmin would give 1)."""
    head = torch.tensor([[1.0], [-1.0]])
    assert _bare(lm_head=head, logit_scale=0.0).greedy(torch.ones(1, 1)).tolist() == [0]


class _Stop(Exception):
    pass


def test_propose_many_puts_the_batch_and_its_chains_on_the_runners_device():
    """The batch's tensors and the rows still drafting live on the runner's device: torch's "meta" device stands
    for a GPU (where indexing rows on the CPU with a mask on the GPU raises). The first pass and the chained step
    are replaced by recorders (the device is what is checked, not the arithmetic)."""
    meta = torch.device("meta")
    r = DraftRunner(_Spec(), {}, dtype=torch.float32, device=meta, embed=None, lm_head=None, target_ids=None,
                    norm_before_residual=False, norm_before_fc=False, fc_norm=False, norm_output=False)
    assert r.device == meta
    seen = {}

    def first_pass(b):
        seen["batch"] = {n: getattr(b, n).device for n in ("tokens", "aux", "positions", "cursors")}
        C = b.cursors.shape[0]
        return (torch.zeros(C, 4), torch.zeros(C, 4)), []

    def chained_step(b, caches, alive, last, h, j):
        seen["alive"] = (alive.device, alive.shape)
        raise _Stop

    r._first_pass = first_pass
    r.greedy = lambda normed: torch.zeros(normed.shape[0], dtype=torch.long)
    r._chained_step = chained_step
    items = [SequenceInput(torch.tensor([1, 2, 3]), torch.zeros(3, 4), torch.tensor([0, 2]))]
    with pytest.raises(_Stop):
        r.propose_many(items, 2)
    assert seen == {"batch": {"tokens": meta, "aux": meta, "positions": meta, "cursors": meta},
                    "alive": (meta, (2,))}  # two cursors, both still drafting at step 1
