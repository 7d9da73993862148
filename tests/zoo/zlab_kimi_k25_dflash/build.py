"""z-lab/Kimi-K2.5-DFlash: a DFlash block-diffusion drafter for Kimi-K2.5, not an EAGLE-3 draft. Only what its
public record states (RECORD.md): DFlashDraftModel, model_type qwen3, hidden 7168, vocabulary 163840, 6 draft
layers, block size 8, 61 target layers, dflash_config mask_token_id 163838 and target_layer_ids
[1, 12, 24, 35, 47, 58], YaRN rope factor 64 (mscale 1, mscale_all_dim 1, original 4096). Tensors: only those
whose names and shapes follow from the record and vLLM's loader: fc [7168, 6 x 7168] (qwen3_dflash.py
_get_dflash_fc_input_size: target hidden x number of target layers), hidden_norm and norm [7168]. The decoder
layers' head counts and MLP width are not in the record, so their tensors are left out (no guesses)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import hole, norm, write

TARGET = "kimi-k2.5"
# Not an EAGLE-3 draft (its record: a DFlash drafter): the SGLang oracle, which runs EAGLE-3 loaders, skips it.
METHOD = "dflash"
H, VOCAB, LAYER_IDS = 7168, 163840, [1, 12, 24, 35, 47, 58]


def config() -> dict:
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "vocab_size": VOCAB,
        "num_hidden_layers": 6, "num_target_layers": 61, "block_size": 8,
        "dflash_config": {"mask_token_id": 163838, "target_layer_ids": LAYER_IDS},
        "rope_scaling": {"rope_type": "yarn", "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096},
    }


def tensors() -> dict:
    return {"fc.weight": hole("BF16", H, len(LAYER_IDS) * H), "hidden_norm.weight": norm("BF16", H, 3),
            "norm.weight": norm("BF16", H, 9)}


def build(folder: Path) -> Path:
    return write(folder, config(), tensors())
