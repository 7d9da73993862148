"""A speculators-format EAGLE-3 draft for Llama-3.1-8B-Instruct (the format of RedHatAI's *.speculator.eagle3
repos), as vllm-project/speculators writes it: Eagle3SpeculatorConfig serialised with every field
(norm_before_residual false, norm_before_fc/fc_norm/norm_output false), the auto_map speculators writes itself,
ids resolved to the verifier's defaults [2, 16, 29] (resolve_target_layer_ids), layers.0.* tensors, embed_tokens
saved (frozen copy of the verifier's), d2t/t2d, lm_head [32000, 4096]."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, reduced_vocab, write

TARGET = "llama-3.1-8b"
H, HEADS, KV, HD, INTER, VOCAB, DRAFT_VOCAB = 4096, 32, 8, 128, 14336, 128256, 32000


def config(*, layers: int = 1, ids: list[int] | None = None, **eagle31) -> dict:
    layer = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
             "intermediate_size": INTER, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
             "num_hidden_layers": layers, "vocab_size": VOCAB, "max_position_embeddings": 131072,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": False,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}, "torch_dtype": "bfloat16"}
    cfg = {"architectures": ["Eagle3Speculator"], "auto_map": {"": "eagle3.Eagle3SpeculatorConfig"},
           "speculators_model_type": "eagle3", "speculators_version": "0.3.0", "draft_vocab_size": DRAFT_VOCAB,
           "norm_before_residual": False, "target_hidden_size": None,
           "eagle_aux_hidden_state_layer_ids": ids or [2, 16, 29], "norm_before_fc": False, "fc_norm": False,
           "norm_output": False, "embed_requires_grad": False, "transformer_layer_config": layer,
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct",
                                               "architectures": ["LlamaForCausalLM"]}},
           "torch_dtype": "bfloat16"}
    cfg.update(eagle31)
    return cfg


def tensors(*, layers: int = 1) -> dict:
    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    for i in range(1, layers):
        t.update(llama_layer(f"layers.{i}.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16", first=False))
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", DRAFT_VOCAB, H)
    t["embed_tokens.weight"] = hole("BF16", VOCAB, H)
    t.update(reduced_vocab(VOCAB, DRAFT_VOCAB, seed=31))
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors(), embed_std=0.02)
