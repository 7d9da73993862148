"""lightseekorg/kimi-k2.5-eagle3-mla: TorchSpec's MLA draft (configs/draft_models/kimi_k25_eagle3_mla.json)
exported for vLLM (tools/convert_to_hf.py --vllm: `midlayer.` -> `layers.0.`, and +1 on the ids because
model_type is kimi_k2), so eagle_config holds [2, 30, 58]: the "convention-2" draft of sglang PR #25454."""
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
        "vocab_size": VOCAB, "draft_vocab_size": VOCAB, "torch_dtype": "bfloat16", "rope_theta": 50000.0,
        "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True,
                         "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                         "use_mtp_layernorm": False},
        "bos_token_id": 163584, "eos_token_id": 163585, "pad_token_id": 0, "tie_word_embeddings": False,
        "_torchspec_version": "0.1.0",
    }


def tensors() -> dict:
    t = mla_layer("layers.0.", H=H, heads=HEADS, q_lora=1536, kv_lora=512, rope=64, nope=128, v=128, inter=INTER,
                  dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)
    t["embed_tokens.weight"] = hole("BF16", VOCAB, H)
    return t


def build(folder: Path) -> Path:
    # Exported after TorchSpec PR #39 (the MLA support, #55, came later): embed_tokens are the target's.
    return write(folder, config(), tensors(), shards=2, embed_std=0.02)
