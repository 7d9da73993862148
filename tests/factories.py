"""Drafts of every producer, built by small functions: tiny ones with real bytes, and ones at Kimi-K2.5 shapes
whose large tensors are holes in sparse files (a header declaring [163840, 7168] over no disk).

`make_draft(folder, producer=..., shape="tiny"|"kimi", family="llama"|"mla", mutate=...)` writes config.json and
the safetensors; `make_target(folder, shape)` writes a target's config.json only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tests.writer_factories import write_safetensors


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    vocab: int
    draft_vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    # MLA
    q_lora: int
    kv_lora: int
    rope: int
    nope: int
    v_head: int
    max_pos: int
    real: bool  # fill every tensor with bytes (tiny) or leave big ones as holes (kimi)


TINY = Shape(layers=8, hidden=64, vocab=512, draft_vocab=128, heads=2, kv_heads=1, head_dim=32, inter=128,
             q_lora=32, kv_lora=64, rope=16, nope=16, v_head=16, max_pos=4096, real=True)
KIMI = Shape(layers=61, hidden=7168, vocab=163840, draft_vocab=32000, heads=64, kv_heads=8, head_dim=128,
             inter=18432, q_lora=1536, kv_lora=512, rope=64, nope=128, v_head=128, max_pos=262144, real=False)
SHAPES = {"tiny": TINY, "kimi": KIMI}


def target_config(shape: Shape) -> dict[str, Any]:
    text = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": shape.layers,
        "hidden_size": shape.hidden, "vocab_size": shape.vocab, "num_attention_heads": shape.heads,
        "max_position_embeddings": shape.max_pos, "kv_lora_rank": shape.kv_lora, "q_lora_rank": shape.q_lora,
        "qk_rope_head_dim": shape.rope, "qk_nope_head_dim": shape.nope, "v_head_dim": shape.v_head,
        "rope_theta": 50000, "torch_dtype": "bfloat16",
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    }
    return {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": text,
            "vision_config": {"hidden_size": 64}}


def make_target(folder: Path, shape: str = "tiny") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(target_config(SHAPES[shape]), indent=2))
    return folder


def _vocab_map(s: Shape, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(s.vocab, size=s.draft_vocab, replace=False)).astype(np.int64)
    d2t = ids - np.arange(s.draft_vocab, dtype=np.int64)
    t2d = np.zeros(s.vocab, dtype=bool)
    t2d[ids] = True
    return d2t, t2d


def draft_tensors(s: Shape, family: str = "llama", *, full_vocab: bool = False, layer: str = "midlayer.",
                  n_aux: int = 3, embeddings: bool = False, seed: int = 0) -> dict[str, tuple]:
    H = s.hidden
    rng = np.random.default_rng(seed)

    def w(*shape: int):
        return ("BF16", shape, rng.normal(0, 0.02, size=shape).astype(np.float32) if s.real else None)

    def norm(n: int):
        return ("BF16", (n,), (1 + rng.normal(0, 0.1, size=n)).astype(np.float32))

    t: dict[str, tuple] = {}
    if family == "llama":
        t[f"{layer}self_attn.q_proj.weight"] = w(s.heads * s.head_dim, 2 * H)
        t[f"{layer}self_attn.k_proj.weight"] = w(s.kv_heads * s.head_dim, 2 * H)
        t[f"{layer}self_attn.v_proj.weight"] = w(s.kv_heads * s.head_dim, 2 * H)
        t[f"{layer}self_attn.o_proj.weight"] = w(H, s.heads * s.head_dim)
    else:
        t[f"{layer}self_attn.q_a_proj.weight"] = w(s.q_lora, 2 * H)
        t[f"{layer}self_attn.q_a_layernorm.weight"] = norm(s.q_lora)
        t[f"{layer}self_attn.q_b_proj.weight"] = w(s.heads * (s.nope + s.rope), s.q_lora)
        t[f"{layer}self_attn.kv_a_proj_with_mqa.weight"] = w(s.kv_lora + s.rope, 2 * H)
        t[f"{layer}self_attn.kv_a_layernorm.weight"] = norm(s.kv_lora)
        t[f"{layer}self_attn.kv_b_proj.weight"] = w(s.heads * (s.nope + s.v_head), s.kv_lora)
        t[f"{layer}self_attn.o_proj.weight"] = w(H, s.heads * s.v_head)
    t[f"{layer}mlp.gate_proj.weight"] = w(s.inter, H)
    t[f"{layer}mlp.up_proj.weight"] = w(s.inter, H)
    t[f"{layer}mlp.down_proj.weight"] = w(H, s.inter)
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        t[f"{layer}{n}.weight"] = norm(H)
    t["fc.weight"] = w(H, n_aux * H)
    t["norm.weight"] = norm(H)
    if full_vocab:
        t["lm_head.weight"] = w(s.vocab, H)
    else:
        t["lm_head.weight"] = w(s.draft_vocab, H)
        d2t, t2d = _vocab_map(s, seed)
        t["d2t"] = ("I64", (s.draft_vocab,), d2t)
        t["t2d"] = ("BOOL", (s.vocab,), t2d)
    if embeddings:
        t["embed_tokens.weight"] = ("BF16", (s.vocab, H), rng.normal(0, 0.02, size=(s.vocab, H)).astype(np.float32)
                                    if s.real else None)
    return t


def draft_config(s: Shape, producer: str, family: str, *, full_vocab: bool = False) -> dict[str, Any]:
    L = s.layers
    base: dict[str, Any] = {
        "hidden_size": s.hidden, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "intermediate_size": s.inter, "num_hidden_layers": 1, "vocab_size": s.vocab, "rms_norm_eps": 1e-5,
        "max_position_embeddings": s.max_pos, "rope_theta": 50000, "torch_dtype": "bfloat16",
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
        "hidden_act": "silu", "tie_word_embeddings": False,
    }
    if family == "llama":
        base["head_dim"] = s.head_dim
        base["model_type"] = "llama"
    else:
        base.update({"kv_lora_rank": s.kv_lora, "q_lora_rank": s.q_lora, "qk_rope_head_dim": s.rope,
                     "qk_nope_head_dim": s.nope, "v_head_dim": s.v_head, "model_type": "kimi_k2",
                     "first_k_dense_replace": 1, "n_routed_experts": 4, "moe_intermediate_size": 32})
    if not full_vocab:
        base["draft_vocab_size"] = s.draft_vocab
    out_ids = [1, L // 2 - 1, L - 4]  # SGLang/SpecForge output convention defaults
    in_ids = [2, L // 2, L - 3]
    if producer == "specforge":
        return {"architectures": ["LlamaForCausalLMEagle3"], **base,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": out_ids, "use_aux_hidden_state": True}}
    if producer == "torchspec":
        arch = "LlamaForCausalLMEagle3" if family == "llama" else "Eagle3DeepseekV3ForCausalLM"
        return {"architectures": [arch], **base, "_torchspec_version": "0.4.1",
                "eagle_aux_hidden_state_layer_ids": in_ids,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": in_ids}}
    if producer == "eagle":
        return {"architectures": ["LlamaForCausalLM"], **base}
    if producer == "modelopt":
        # ModelOpt hooks the outputs of layers[i] and writes its ids as they are (hf_spec_export.py): [1, L//2-1, L-4].
        # The shape of 0.47.0's export (tests/data/producers-modelopt): llama_eagle_template_config's architectures
        # and eagle_config keys, `layers.0.*` names (LAYER_PREFIX)
        return {"architectures": ["LlamaForCausalLMEagle3"], **base,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": out_ids, "use_aux_hidden_state": True,
                                 "use_input_layernorm_in_first_layer": True, "use_last_layernorm": False,
                                 "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                                 "parallel_draft_heads_num_layers": 1}}
    if producer == "speculators":
        layer = {k: v for k, v in base.items() if k not in ("draft_vocab_size",)}
        layer["architectures"] = ["LlamaForCausalLM"]
        return {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
                "transformer_layer_config": layer, "draft_vocab_size": s.draft_vocab,
                "norm_before_residual": False, "target_hidden_size": None,
                "eagle_aux_hidden_state_layer_ids": in_ids,
                "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                       "verifier": {"name_or_path": "moonshotai/Kimi-K2.5",
                                                    "architectures": ["KimiK25ForConditionalGeneration"]}},
                "speculators_version": "0.3.0", "torch_dtype": "bfloat16"}
    if producer == "unknown":
        return {"architectures": ["Eagle3LlamaForCausalLM"], **base,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": out_ids}}
    raise ValueError(producer)


# modelopt: `layers.0.*` since 0.43.0 (hf_spec_export.py EagleExporter._extract_state_dict; <= 0.42.0 wrote midlayer.*)
LAYER_PREFIX = {"specforge": "midlayer.", "torchspec": "midlayer.", "eagle": "midlayer.", "modelopt": "layers.0.",
                "speculators": "layers.0.", "unknown": "layers.0."}


def make_draft(folder: Path, producer: str = "specforge", *, shape: str = "tiny", family: str = "llama",
               full_vocab: bool = False, embeddings: bool = False, shards: int = 1,
               config: Callable[[dict], None] | None = None,
               tensors: Callable[[dict], None] | None = None) -> Path:
    s = SHAPES[shape]
    cfg = draft_config(s, producer, family, full_vocab=full_vocab)
    t = draft_tensors(s, family, full_vocab=full_vocab, layer=LAYER_PREFIX[producer], embeddings=embeddings)
    if producer == "eagle":
        t.pop("embed_tokens.weight", None)
    if config:
        config(cfg)
    if tensors:
        tensors(t)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    names = list(t)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", t, {"format": "pt"})
    else:
        per = -(-len(names) // shards)
        wm = {}
        for i in range(shards):
            part = {n: t[n] for n in names[i * per:(i + 1) * per]}
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(folder / fn, part, {"format": "pt"})
            wm.update({n: fn for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return folder


def rename_all(t: dict, fn: Callable[[str], str]) -> None:
    items = list(t.items())
    t.clear()
    for k, v in items:
        t[fn(k)] = v


# --- multi-layer drafts (vLLM PR #26164): later decoder layers, complete or stray -------------------------------

def later_layer(t, i: int, *, complete: bool = True, mla: bool = False):
    """A later decoder layer (vLLM PR #26164: layers after the first take H inputs): every projection and both
    norms (complete), or only mlp.gate_proj (a stray)."""
    s, H = TINY, TINY.hidden
    if mla:
        attn = {"q_a_proj": (s.q_lora, H), "q_b_proj": (s.heads * (s.nope + s.rope), s.q_lora),
                "kv_a_proj_with_mqa": (s.kv_lora + s.rope, H), "kv_b_proj": (s.heads * (s.nope + s.v_head), s.kv_lora),
                "o_proj": (H, s.heads * s.v_head)}
    else:
        attn = {"q_proj": (s.heads * s.head_dim, H), "k_proj": (s.kv_heads * s.head_dim, H),
                "v_proj": (s.kv_heads * s.head_dim, H), "o_proj": (H, s.heads * s.head_dim)}
    w = {f"self_attn.{k}": v for k, v in attn.items()}
    w.update({"mlp.gate_proj": (s.inter, H), "mlp.up_proj": (s.inter, H), "mlp.down_proj": (H, s.inter)})
    if not complete:
        w = {"mlp.gate_proj": w["mlp.gate_proj"]}
    for n, shape in w.items():
        t[f"layers.{i}.{n}.weight"] = ("BF16", shape, np.zeros(shape, np.float32))
    if complete:
        norms = ["input_layernorm", "post_attention_layernorm"]
        if mla:
            norms += ["self_attn.q_a_layernorm", "self_attn.kv_a_layernorm"]
        for n in norms:
            n_ = {"self_attn.q_a_layernorm": s.q_lora, "self_attn.kv_a_layernorm": s.kv_lora}.get(n, H)
            t[f"layers.{i}.{n}.weight"] = ("BF16", (n_,), np.ones(n_, np.float32))


def layers(*spec: tuple[int, bool], mla: bool = False):
    """A `tensors=` edit for make_draft: the first layer under `layers.0.`, then later layers (index, complete)."""
    def mut(t):
        rename_all(t, lambda k: k.replace("midlayer.", "layers.0."))
        for i, complete in spec:
            later_layer(t, i, complete=complete, mla=mla)
    return mut


# --- one rule at a time: a draft read as inspect reads it, and one rule's findings on an engine row ---------------

def read_folder(folder):
    """The DraftModel of a checkpoint folder, read as `kconvert inspect` reads it."""
    from kconvert.formats.canonical import read_draft
    from kconvert.source import open_checkpoint

    return read_draft(open_checkpoint(str(folder)))


def one_rule(rid: str, d, *, target=None, engine: str = "vllm", version: str = "0.32/v1", decisions=None,
             **choices) -> list:
    """One rule's findings for a read draft on an engine row, against a target profile (None: no target), under
    `decisions` (a Decisions) or one made of the choices given (tp=, draft_tp=, ...)."""
    from kconvert.engines.expectations import engine_rules
    from kconvert.rules import Context, Decisions
    from kconvert.rules.base import REGISTRY

    return list(REGISTRY[rid].fn(Context(d, target, engine_rules(engine, version), decisions or Decisions(**choices))))
