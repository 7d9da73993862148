"""NVIDIA ModelOpt: `LlamaForCausalLM` with `model_type llama` or `kimi_k2`, `eagle_config` with extra
layernorm flags, no t2d, no embeddings."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint

NAME = "modelopt"
LAYOUT = KeyLayout(prefix="", layer="midlayer.")
FLAGS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm")


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ev = [f"eagle_config.{f}" for f in FLAGS if f in ec]
    ev += [f"config key '{k}'" for k in cfg if "modelopt" in k.lower()]
    if not ev:
        return None
    if "t2d" not in ckpt.tensors:
        ev.append("no t2d")
    return FormatGuess(NAME, 0.95 if len(ev) > 1 else 0.8, ev)


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "input", "ids at the top-level key that only vLLM reads"
    # modelopt/torch/speculative/plugins/transformers.py registers _collect_aux_hidden_states_forward_hook on
    # layers[i] for every id i (the *output* of layer i) and defaults to [1, L//2-1, L-4]; the Megatron plugin
    # hooks TransformerLayer outputs the same way (layer_number - 1 in ids). hf_spec_export.py writes them
    # into eagle_config unchanged.
    return "output", "ModelOpt hooks the outputs of layers[i] (default [1, L//2-1, L-4])"
