"""SpecForge (sgl-project/SpecForge): `LlamaForCausalLMEagle3`, `midlayer.*`, `d2t` offsets and `t2d`,
aux ids in `eagle_config.eagle_aux_hidden_state_layer_ids` in SGLang's output-of-layer convention."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint

NAME = "specforge"
LAYOUT = KeyLayout(prefix="", layer="midlayer.")


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    archs = cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []
    ev: list[str] = []
    score = 0.0
    if "LlamaForCausalLMEagle3" in archs:
        ev.append("architectures LlamaForCausalLMEagle3")
        score += 0.4
    if layout.layer == "midlayer.":
        ev.append("tensor names midlayer.*")
        score += 0.15
    if "d2t" in ckpt.tensors and "t2d" in ckpt.tensors:
        ev.append("d2t and t2d tensors")
        score += 0.15
    ec = cfg.get("eagle_config")
    if isinstance(ec, dict) and "eagle_aux_hidden_state_layer_ids" in ec:
        ev.append("eagle_config.eagle_aux_hidden_state_layer_ids")
        score += 0.15
    if "embed_tokens.weight" not in ckpt.tensors:
        score += 0.05
    if "LlamaForCausalLMEagle3" not in archs:
        return None
    return FormatGuess(NAME, round(min(score, 0.9), 2), ev)


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "input", "ids at the top-level key that only vLLM reads"
    return "output", "SpecForge writes SGLang's output-of-layer ids (default [1, L/2-1, L-4])"
