"""nvidia/gpt-oss-120b-Eagle3-v3: ids [24, 30, 36] on the 36-layer target (36 = the final boundary) and
norm_before_fc with input_norm.weight over the three 2880-wide states (sglang PR #32334; llama.cpp PR #25794).
The record names those fields only; the rest follows the EAGLE-3 Llama layout vLLM and SGLang load
(LlamaForCausalLMEagle3, eagle_config, midlayer.*: the names both engines load in every version read) with gpt-oss-120b's dimensions from its config.json (hidden
2880, 64 heads / 8 kv heads of 64) and its intermediate size (2880), a full-vocabulary lm_head, bf16."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, write

TARGET = "gpt-oss-120b"
H, HEADS, KV, HD, INTER, VOCAB = 2880, 64, 8, 64, 2880, 201088


def config(*, ids: list[int] | None, use_aux: bool = True, norm_before_fc: bool = False) -> dict:
    ec: dict = {"use_aux_hidden_state": use_aux}
    if ids is not None:
        ec["eagle_aux_hidden_state_layer_ids"] = ids
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
           "num_hidden_layers": 1, "vocab_size": VOCAB, "draft_vocab_size": VOCAB, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-05, "rope_theta": 150000, "hidden_act": "silu", "tie_word_embeddings": False,
           "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                            "original_max_position_embeddings": 4096, "truncate": False},
           "torch_dtype": "bfloat16", "eagle_config": ec}
    if norm_before_fc:
        cfg["norm_before_fc"] = True
    return cfg


def tensors(*, use_aux: bool = True, input_norm: bool = False) -> dict:
    t = llama_layer("midlayer.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", hidden_norm=use_aux)
    if use_aux:
        t["fc.weight"] = hole("BF16", H, 3 * H)
    if input_norm:
        t["input_norm.weight"] = norm("BF16", 3 * H, 11)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)
    return t


def build(folder: Path) -> Path:
    return write(folder, config(ids=[24, 30, 36], norm_before_fc=True), tensors(input_norm=True))
