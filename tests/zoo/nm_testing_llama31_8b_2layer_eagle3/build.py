"""nm-testing/random-weights-llama3.1.8b-2layer-eagle3, the smoke-test draft of vLLM PR #26164 (multi-layer
EAGLE-3): a speculators-format Llama-3.1-8B draft with num_hidden_layers 2; layer 0 takes 2H inputs, layer 1 H,
and only layer 0 has hidden_norm (vLLM llama_eagle3.py LlamaDecoderLayer(layer_idx))."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import write
from tests.zoo.speculators_llama31_8b_eagle3.build import config, tensors

TARGET = "llama-3.1-8b"


def build(folder: Path) -> Path:
    # Random weights (HF initializer_range 0.02) throughout, embed_tokens included.
    return write(folder, config(layers=2), tensors(layers=2), embed_std=0.02)
