"""nvidia/Kimi-K2.6-Eagle3: a ModelOpt export for Kimi-K2.6. Its config is not quoted in public; the replica is
ModelOpt's kimik2 template as its Kimi-K2.5 sibling's published config shows it (tests/zoo/nvidia_kimi_k25_thinking_eagle3:
Eagle3DeepseekV2ForCausalLM, model_type kimi_k2, eagle_config with ModelOpt's flags and its default ids [1, 29, 57],
`layers.0.*`, no t2d, no embeddings), K2.6 having K2.5's text dimensions."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.nvidia_kimi_k25_thinking_eagle3.build import build as build_k25_template

TARGET = "kimi-k2.6"


def build(folder: Path) -> Path:
    return build_k25_template(folder)
