"""nvidia/Llama-3.3-70B-Instruct-Eagle3: the head whose config omits eagle_aux_hidden_state_layer_ids (vLLM PR
#50170). ModelOpt's llama template (LlamaForCausalLMEagle3, eagle_config with its layernorm flags), Llama-3.3-70B
dimensions (hidden 8192, 64 heads / 8 kv heads of 128, intermediate 28672), layers.0.* tensors, full-vocabulary
lm_head (ModelOpt copies the base model's when the draft has none), no d2t/t2d, no embeddings."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, write

TARGET = "llama-3.3-70b"
H, HEADS, KV, HD, INTER, VOCAB = 8192, 64, 8, 128, 28672, 128256


def config() -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 128000, "eos_token_id": 128009,
            "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02, "intermediate_size": INTER,
            "max_position_embeddings": 131072, "model_type": "llama", "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "num_hidden_layers": 1, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "vocab_size": VOCAB, "draft_vocab_size": VOCAB, "head_dim": HD,
            "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192},
            "eagle_config": {"use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                             "use_last_layernorm": False, "use_mtp_layernorm": False, "next_layer_regular": True}}


def tensors() -> dict:
    t = llama_layer("layers.0.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors(), shards=2)
