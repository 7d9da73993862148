"""EAGLE reference code (SafeAILab/EAGLE): `LlamaForCausalLM`, `midlayer.*`, no recorded aux ids (hard-coded
input of layers 2, L/2, L-3, the same physical layers as both engines' defaults), no embeddings saved."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.config_fields import config_architectures

NAME = "eagle"
LAYOUT = KeyLayout(prefix="", layer="midlayer.")


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    archs = config_architectures(cfg)
    if archs != ["LlamaForCausalLM"] or layout.layer != "midlayer.":
        return None
    ec = cfg.get("eagle_config")
    if isinstance(ec, dict) and ec:
        return None  # ModelOpt writes eagle_config next to LlamaForCausalLM
    ev = ["architectures LlamaForCausalLM with midlayer.* tensors", "no eagle_config"]
    score = 0.6
    if "embed_tokens.weight" not in ckpt.tensors:
        ev.append("no embed_tokens saved")
        score += 0.1
    if "t2d" in ckpt.tensors:
        ev.append("t2d present")
        score += 0.1
    return FormatGuess(NAME, round(score, 2), ev)


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    return "input", "EAGLE hard-codes the input of layers 2, L/2, L-3 (vLLM's convention and defaults)"
