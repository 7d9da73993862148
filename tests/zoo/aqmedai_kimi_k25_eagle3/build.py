"""AQ-MedAI/Kimi-K25-eagle3: a SpecForge draft. The config is SpecForge's configs/kimi-k25-eagle3.json as of
its Kimi-K2.5 commit (3f9b5fca, 2026-02-28): ids [2, 30, 58] in eagle_config, draft vocabulary 32000,
rope_theta 1e6 and rope_scaling null, max_position_embeddings 131072. Tensors in SpecForge's layout: midlayer.*,
d2t offsets and t2d, lm_head [32000, 7168], no embeddings (docs/formats-and-engines.md#producers-and-their-layouts)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, reduced_vocab, write

TARGET = "kimi-k2.5"
H, HEADS, KV, HD, INTER, VOCAB, DRAFT_VOCAB = 7168, 64, 64, 128, 18432, 163840, 32000


def config(model_type: str = "llama", ids: list[int] | None = None, max_pos: int = 131072) -> dict:
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 163584, "draft_vocab_size": DRAFT_VOCAB, "dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids or [2, 30, 58], "use_aux_hidden_state": True},
        "eos_token_id": 163585, "head_dim": HD, "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02,
        "intermediate_size": INTER, "max_position_embeddings": max_pos, "max_window_layers": 48, "mlp_bias": False,
        "model_type": model_type, "num_attention_heads": HEADS, "num_hidden_layers": 1, "num_key_value_heads": KV,
        "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
        "sliding_window": None, "tie_word_embeddings": False, "transformers_version": "4.57.0", "use_cache": True,
        "use_sliding_window": False, "vocab_size": VOCAB,
    }


def tensors() -> dict:
    t = llama_layer("midlayer.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", DRAFT_VOCAB, H)
    t.update(reduced_vocab(VOCAB, DRAFT_VOCAB, seed=25))
    return t


def build(folder: Path) -> Path:
    return write(folder, config(), tensors())
