"""AQ-MedAI's Kimi-K2 EAGLE-3 draft, as SpecForge's configs/kimi-k2-eagle3.json writes it (commit 8c227240,
2025-07-31, "Adapted the training of Kimi-K2"): a Llama layer under model_type kimi_k2, ids [2, 30, 58],
draft vocabulary 32000, rope_scaling null; tensors in SpecForge's layout."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.aqmedai_kimi_k25_eagle3.build import config as k25_config
from tests.zoo.aqmedai_kimi_k25_eagle3.build import tensors
from tests.zoo.replica import write

TARGET = "kimi-k2"


def build(folder: Path) -> Path:
    cfg = k25_config(model_type="kimi_k2")
    cfg.pop("dtype")
    cfg.update(torch_dtype="bfloat16", transformers_version="4.53.2")
    return write(folder, cfg, tensors())
