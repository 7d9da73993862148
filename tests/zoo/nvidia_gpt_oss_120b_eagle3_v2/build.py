"""nvidia/gpt-oss-120b-Eagle3-v2: a head without aux states (eagle_config.use_aux_hidden_state false; vLLM PR
#27688, sglang PR #14920): no fc and no hidden_norm (ModelOpt hf_spec_export.py: "fc and hidden_norm are only
present when use_aux_hidden_state=True"), reading the target's last hidden state like EAGLE-1."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.nvidia_gpt_oss_120b_eagle3_v3.build import config, tensors
from tests.zoo.replica import write

TARGET = "gpt-oss-120b"


def build(folder: Path) -> Path:
    return write(folder, config(ids=None, use_aux=False), tensors(use_aux=False))
