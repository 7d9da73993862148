"""Tensor-name layouts, declared as data (in the manner of vLLM's WeightsMapper).

Canonical names are vLLM's, without prefix. A layout says how a producer or an engine writes them; the
rename between two layouts is derived from the two tables, never hand-written per pair.
"""
from __future__ import annotations

from collections.abc import Sequence

from kconvert.formats.model import KeyLayout, layer_index

# Tensors of the single decoder layer (relative to the layer prefix).
LLAMA_LAYER = (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight",
)
# Qwen3's decoder layer adds a per-head RMSNorm on q and k (vLLM 0.32 model_executor/models/qwen3.py
# Qwen3Attention.q_norm/k_norm, built for drafts by qwen3_eagle3.Qwen3Eagle3DecoderLayer).
QWEN3_QK_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")
QWEN3_LAYER = LLAMA_LAYER + QWEN3_QK_NORMS
MLA_ATTN_LORA_Q = ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight")
MLA_ATTN_PLAIN_Q = ("self_attn.q_proj.weight",)
MLA_ATTN = ("self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_layernorm.weight",
            "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight")
LAYER_COMMON = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
TOP_REQUIRED = ("fc.weight", "norm.weight")
TOP_OPTIONAL = ("lm_head.weight", "embed_tokens.weight", "d2t", "t2d", "input_norm.weight")
# Decoder layers after the first (multi-layer drafts, vLLM PR #26164) take H inputs and need these besides the
# projections; hidden_norm is used by layer 0 only (vLLM llama_eagle3.py / deepseek_eagle3.py forward).
LATER_LAYER_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")
NORMS = ("layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight",
         "layers.0.post_attention_layernorm.weight", "norm.weight")

LAYER_PREFIXES = ("midlayer.", "layers.0.")


def required_layer_tensors(family: str, q_lora: bool, layer: int = 0) -> tuple[str, ...]:
    if family == "mla":
        q = MLA_ATTN_LORA_Q if q_lora else MLA_ATTN_PLAIN_Q
        names = q + MLA_ATTN + LAYER_COMMON
    elif family == "qwen3":
        names = QWEN3_LAYER
    else:
        names = LLAMA_LAYER
    if layer > 0:
        names = tuple(n for n in names if n.endswith("_proj.weight") or n in LATER_LAYER_NORMS
                      or n.startswith("self_attn."))
    return tuple(f"layers.{layer}.{n}" for n in names)


def known_canonical(name: str) -> bool:
    if name in TOP_REQUIRED or name in TOP_OPTIONAL:
        return True
    n = layer_index(name)
    if n is not None:
        rest = name.split(".", 2)[2]
        return rest in QWEN3_LAYER or rest in MLA_ATTN_LORA_Q + MLA_ATTN_PLAIN_Q + MLA_ATTN + LAYER_COMMON
    if name.startswith("fc_norm.") and name.endswith(".weight"):
        return True
    # P-EAGLE (speculators `peagle`, vLLM llama_eagle3.py load_weights): the parallel-drafting mask embedding.
    return name == "mask_hidden"


def detect_layout(raw_names: list[str]) -> KeyLayout:
    """Which prefix and layer name the files use (majority of names decide)."""
    prefixed = sum(1 for n in raw_names if n.startswith("model.") and n != "model.lm_head.weight")
    prefix = "model." if raw_names and prefixed >= max(1, (len(raw_names) - 2) // 2) else ""
    body = [n[len(prefix):] if n.startswith(prefix) else n for n in raw_names]
    mid = sum(1 for n in body if n.startswith("midlayer."))
    lay = sum(1 for n in body if n.startswith("layers."))
    layer = "midlayer." if mid > lay else "layers.0."
    return KeyLayout(prefix=prefix, layer=layer, lm_head_prefixed="model.lm_head.weight" in raw_names)


def to_canonical(raw: str, layout: KeyLayout) -> str:
    n = raw
    if layout.prefix and n.startswith(layout.prefix):
        n = n[len(layout.prefix):]
    if n.startswith("midlayer."):
        n = "layers.0." + n[len("midlayer."):]
    return n


def token_map_names(raw_names: Sequence[str]) -> list[str]:
    """The names of the vocabulary maps (d2t, t2d) among a checkpoint's tensor names, whatever their layout: the
    small tensors `kconvert.source` reads up front from the Hub."""
    layout = detect_layout(sorted(raw_names))  # as read_draft maps names
    return [n for n in raw_names if to_canonical(n, layout) in ("d2t", "t2d")]


def to_layout(canonical: str, layout: KeyLayout) -> str:
    n = canonical
    if n.startswith("layers.0.") and layout.layer == "midlayer.":
        n = "midlayer." + n[len("layers.0."):]
    if layout.prefix and (n != "lm_head.weight" or layout.lm_head_prefixed):
        n = layout.prefix + n
    return n


def renames(raw_names: dict[str, str], dst: KeyLayout) -> list[tuple[str, str]]:
    """(old, new) pairs turning the files' names into layout `dst`; `raw_names` is canonical -> raw."""
    out = []
    for canonical, raw in sorted(raw_names.items()):
        new = to_layout(canonical, dst)
        if new != raw:
            out.append((raw, new))
    return out
