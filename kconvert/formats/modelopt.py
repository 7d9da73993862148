"""NVIDIA ModelOpt (`nvidia-modelopt`): the draft `export_speculative_decoding` writes (EagleExporter in
`modelopt/torch/export/plugins/hf_spec_export.py`, config from `hf_spec_configs.py`).

What 0.47.0's exporter writes (tests/data/producers-modelopt, made by its own code; tests/producers/build_modelopt.py):
- architectures `LlamaForCausalLMEagle3` (model_type llama) or `Eagle3DeepseekV2ForCausalLM` (kimi_k2), filled into
  `llama_eagle_template_config` / `kimik2_eagle_template_config`;
- `eagle_config` with the ids and the template's flags (use_aux_hidden_state, use_input_layernorm_in_first_layer,
  use_last_layernorm, use_mtp_layernorm, next_layer_regular, parallel_draft_step, parallel_draft_heads_num_layers);
- tensors `layers.N.*`, `fc`, `norm`, `lm_head`, `d2t` (offsets, `calibrate_frequent_vocab`); no t2d, no embeddings:
  `EagleExporter._extract_state_dict` strips `eagle_module.` from the model's state dict (EagleModule.layers), and
  `_check_valid_sd` checks the names against `LLAMA_EAGLE_SINGLE_LAYER` (`layers.0.self_attn.q_proj`, ...).
ModelOpt up to 0.42.0 renamed the layers to `midlayer.*` before export (hf_spec_export.py of the 0.42.0 wheel:
`model.eagle_module.midlayer = model.eagle_module._modules.pop("layers")[0]`, LLAMA_EAGLE_SINGLE_LAYER in
`midlayer.*`); 0.43.0 dropped the rename. Both layouts are ModelOpt's; LAYOUT is the current one.
"""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint

NAME = "modelopt"
# `layers.0.*`: EagleExporter._extract_state_dict (hf_spec_export.py, 0.43.0 .. 0.47.0); `midlayer.*` up to 0.42.0
LAYOUT = KeyLayout(prefix="", layer="layers.0.")
FLAGS = ("use_input_layernorm_in_first_layer", "use_last_layernorm", "use_mtp_layernorm")
# eagle_config keys only ModelOpt's export template writes (hf_spec_configs.py llama_eagle_template_config /
# kimik2_eagle_template_config): evidence, not flags an engine reads
TEMPLATE_KEYS = ("next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ev = [f"eagle_config.{f}" for f in FLAGS + TEMPLATE_KEYS if f in ec]
    ev += [f"config key '{k}'" for k in cfg if "modelopt" in k.lower()]
    if not ev:
        return None
    if "t2d" not in ckpt.tensors:
        ev.append("no t2d")
    if layout.layer == "layers.0.":
        ev.append("tensor names layers.N.* (ModelOpt >= 0.43 export)")
    elif layout.layer == "midlayer.":
        ev.append("tensor names midlayer.* (ModelOpt <= 0.42 export)")
    return FormatGuess(NAME, 0.95 if len(ev) > 1 else 0.8, ev)


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "input", "ids at the top-level key that only vLLM reads"
    # modelopt/torch/speculative/plugins/hf_eagle.py (0.47.0): HFEagleModel.modify registers
    # _collect_aux_hidden_states_forward_hook on base_model.layers[i] for every id i, and the hook keeps the
    # layer's *output*; with no ids given, _set_default_aux_hidden_state_layers uses default_eagle_aux_layer_ids,
    # sorted({1, max(0, L//2-1), max(0, L-4)}). The Megatron plugin hooks TransformerLayer outputs the same way.
    # EagleExporter._export_config (hf_spec_export.py) copies them into eagle_config unchanged, and only there.
    return "output", "ModelOpt hooks the outputs of layers[i] (default sorted({1, L//2-1, L-4}))"
