"""nvidia/gpt-oss-120b-Eagle3-long-context: ids [1, 17, 32] (sglang PR #32334's table;
docs/formats-and-engines.md#aux-layer-ids), otherwise the layout of the v3 replica without norm_before_fc."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.nvidia_gpt_oss_120b_eagle3_v3.build import config, tensors
from tests.zoo.replica import write

TARGET = "gpt-oss-120b"


def build(folder: Path) -> Path:
    return write(folder, config(ids=[1, 17, 32]), tensors())
