"""lightseekorg/kimi-k2.6-eagle3-mla: TorchSpec's MLA draft for Kimi-K2.6. Its config.json is quoted in public only
for `model_type: kimi_k2` (vllm-project/vllm issue #45760 and PR #45764, which add kimi_k2 to vLLM's MLA list for
it); the rest is TorchSpec's MLA template as its vLLM export writes it for kimi_k2 (the K2.5 replica beside it,
tests/zoo/lightseekorg_kimi_k25_eagle3_mla: `layers.0.*`, +1 on the ids, so [2, 30, 58]), K2.6 having K2.5's text
dimensions (kconvert/targets/profiles/kimi-k2.6.json)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.lightseekorg_kimi_k25_eagle3_mla.build import config as k25_config
from tests.zoo.lightseekorg_kimi_k25_eagle3_mla.build import tensors as k25_tensors
from tests.zoo.replica import write

TARGET = "kimi-k2.6"


def config() -> dict:
    return k25_config()


def tensors() -> dict:
    return k25_tensors()


def build(folder: Path) -> Path:
    # exported after TorchSpec PR #39: embed_tokens are the target's (a trained embedding's small rows)
    return write(folder, config(), tensors(), shards=2, embed_std=0.02)
