"""nvidia/Kimi-K2.5-Thinking-Eagle3: a ModelOpt export. ModelOpt's kimik2 template (hf_spec_export.py
kimik2_eagle_template_config): Eagle3DeepseekV2ForCausalLM, model_type kimi_k2, eagle_config with its layernorm
flags and the ids ModelOpt trained on, [1, 29, 57] (its default [1, L//2-1, L-4]); the MLA dimensions of the
published config (hidden 7168, intermediate 18432, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, 64 heads,
bf16); tensors named layers.0.* as the current exporter writes them, no t2d, no embeddings."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, mla_layer, norm, write

TARGET = "kimi-k2.5"
H, HEADS, INTER, VOCAB = 7168, 64, 18432, 163840


def config() -> dict:
    return {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2", "hidden_size": H,
        "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-05,
        "max_position_embeddings": 262144, "vocab_size": VOCAB, "draft_vocab_size": VOCAB, "torch_dtype": "bfloat16",
        "rope_theta": 50000.0, "tie_word_embeddings": False,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": False,
                         "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
                         "parallel_draft_heads_num_layers": 1},
    }


def tensors() -> dict:
    t = mla_layer("layers.0.", H=H, heads=HEADS, q_lora=1536, kv_lora=512, rope=64, nope=128, v=128, inter=INTER,
                  dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)  # ModelOpt copies the base lm_head when the draft has none
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors(), shards=2)
