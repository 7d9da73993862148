"""yuhuili/EAGLE3-LLaMA3.1-Instruct-8B as it ships: pytorch_model.bin. The EAGLE reference trainer
(SafeAILab/EAGLE eagle/traineagle3: config.json, cnets.py, main.py) saves with deepspeed's
save_16bit_model(exclude_frozen_parameters=True): fp16 midlayer.*, fc, norm, lm_head [32000, 4096] and the d2t/t2d
buffers, no embed_tokens (frozen) and no aux ids (hard-coded inputs of layers 2, L//2, L-3)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, llama_layer, norm, reduced_vocab, write_bin

TARGET = "llama-3.1-8b"
H, HEADS, KV, HD, INTER, VOCAB, DRAFT_VOCAB = 4096, 32, 8, 128, 14336, 128256, 32000


def config() -> dict:
    # eagle/traineagle3/config.json verbatim
    return {"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001,
            "hidden_act": "silu", "hidden_size": H, "initializer_range": 0.02, "intermediate_size": INTER,
            "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-05,
            "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.28.1",
            "use_cache": True, "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB}


def tensors() -> dict:
    t = llama_layer("midlayer.", H=H, heads=HEADS, kv=KV, hd=HD, inter=INTER, dtype="F16")
    t["fc.weight"] = hole("F16", H, 3 * H)
    t["norm.weight"] = norm("F16", H, 9)
    t["lm_head.weight"] = hole("F16", DRAFT_VOCAB, H)
    t.update(reduced_vocab(VOCAB, DRAFT_VOCAB, seed=8))
    return t


def build(folder: Path) -> Path:
    return write_bin(folder, config(), tensors())
