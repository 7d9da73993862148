"""An EAGLE 3.1 draft as speculators writes it after PR #610 (`--norm-before-fc --norm-output`): the
speculators-format Llama-3.1-8B draft with norm_before_fc true and its `input_norm.weight` (one RMSNorm over the
concatenated states, speculators PR #337) and norm_output true (post-norm states fed forward)."""
from __future__ import annotations

from pathlib import Path

from tests.zoo.replica import norm, write
from tests.zoo.speculators_llama31_8b_eagle3.build import H, config, tensors

TARGET = "llama-3.1-8b"


def build(folder: Path) -> Path:
    t = tensors()
    t["input_norm.weight"] = norm("BF16", 3 * H, 11)
    return write(folder, config(norm_before_fc=True, norm_output=True), t, embed_std=0.02)
