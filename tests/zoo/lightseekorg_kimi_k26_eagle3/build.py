"""lightseekorg/kimi-k2.6-eagle3: TorchSpec's Llama-layer draft for Kimi-K2.6 (a Llama layer next to an MLA
target). Its config is not quoted in public; the replica is TorchSpec's Llama-layer template as the K2.5 draft of
the same name carried it (tests/zoo/lightseekorg_kimi_k25_eagle3: full vocabulary, no aux ids), exported after
TorchSpec PR #39 (embed_tokens the target's)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.lightseekorg_kimi_k25_eagle3.build import build as build_k25_template

TARGET = "kimi-k2.6"


def build(folder: Path) -> Path:
    return build_k25_template(folder, embed_std=0.02)
