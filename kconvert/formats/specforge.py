"""SpecForge (sgl-project/SpecForge): `LlamaForCausalLMEagle3`, `midlayer.*`, `d2t` offsets and `t2d`,
aux ids in `eagle_config.eagle_aux_hidden_state_layer_ids` in SGLang's output-of-layer convention."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout, ProducerLayers
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.config_fields import config_architectures

NAME = "specforge"
LAYOUT = KeyLayout(prefix="", layer="midlayer.")
# The layers SpecForge 0.2.0 trains on when no ids are given, in the output-of-layer numbering it captures in
# (`resolve_eagle_capture_layers`: the run's ids, else the draft config's eagle_config ids, else [1, L//2-1, L-4]);
# its exporter rebuilds the config from the user's draft JSON, so a default build ships no ids.
DEFAULT_LAYERS = ("SpecForge 0.2.0 specforge/algorithms/model_providers.py resolve_eagle_capture_layers",
                  lambda L: [1, L // 2 - 1, L - 4])


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    archs = config_architectures(cfg)
    ev: list[str] = []
    score = 0.0
    if "LlamaForCausalLMEagle3" in archs:
        ev.append("architectures LlamaForCausalLMEagle3")
        score += 0.4
    if layout.layer == "midlayer.":
        ev.append("tensor names midlayer.*")
        score += 0.15
    # (under the layout's prefix: a `model.`-prefixed SpecForge draft is still SpecForge's)
    if all(n in ckpt.tensors or layout.prefix + n in ckpt.tensors for n in ("d2t", "t2d")):
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
    # SpecForge (scripts/train_eagle3.py, specforge/modeling/target/eagle3_target_model.py as of 2026-02): the HF
    # backend registers forward hooks on layers[idx] (outputs), the SGLang backend calls
    # set_eagle3_layers_to_capture, which adds +1; default [1, L//2-1, L-4].
    return "output", "SpecForge captures the outputs of layers[i] (default [1, L//2-1, L-4])"


def trained_layers(ckpt: Checkpoint, cfg: dict[str, Any]) -> ProducerLayers:
    source, layers = DEFAULT_LAYERS
    return ProducerLayers(ids=None, default=layers, convention="output", evidence=source)
