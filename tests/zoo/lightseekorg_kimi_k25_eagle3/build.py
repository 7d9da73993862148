"""lightseekorg/kimi-k2.5-eagle3 as published before TorchSpec PR #39: TorchSpec's Llama-layer template
(configs/draft_models/kimi_k25_eagle3.json at its initial release), full vocabulary, no aux ids, and the
randomly initialised embed_tokens its exporter saved (TorchSpec issue #38)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, write

TARGET = "kimi-k2.5"
H, HEADS, KV, HD, INTER, VOCAB = 7168, 64, 64, 128, 12288, 163840


def config() -> dict:
    # TorchSpec's template as written (no eagle_config, no draft_vocab_size: the full vocabulary), with the dtype
    # pair the published config carries (docs/formats-and-engines.md#producers-and-their-layouts: torch_dtype float16 next to dtype bfloat16).
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 163584, "eos_token_id": 163585, "head_dim": HD, "hidden_act": "silu", "hidden_size": H,
        "initializer_range": 0.02, "intermediate_size": INTER, "max_position_embeddings": 262144,
        "max_window_layers": 36, "model_type": "llama", "num_attention_heads": HEADS, "num_hidden_layers": 1,
        "num_key_value_heads": KV, "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 50000.0, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "float16",
        "dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def tensors() -> dict:
    t = llama_layer("midlayer.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="BF16")
    t["fc.weight"] = hole("BF16", H, 3 * H)
    t["norm.weight"] = norm("BF16", H, 9)
    t["lm_head.weight"] = hole("BF16", VOCAB, H)
    t["embed_tokens.weight"] = hole("BF16", VOCAB, H)
    return t


def build(folder: Path, *, embed_std: float = 1.0) -> Path:
    # nn.Embedding's init is N(0, 1): the rows tests/zoo/replica.py draws hold such values, the rest is a hole.
    return write(folder, config(), tensors(), shards=2, embed_std=embed_std)
