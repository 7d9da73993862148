"""nvidia/gpt-oss-120b-Eagle3-short-context: the head that reads the final post-norm hidden state
(vLLM PR #27688; docs/formats-and-engines.md#the-draft): replicated as a no-aux head like v2."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.nvidia_gpt_oss_120b_eagle3_v2.build import build as build_v2

TARGET = "gpt-oss-120b"


def build(folder: Path) -> Path:
    return build_v2(folder)
