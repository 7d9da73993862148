"""TorchSpec (lightseekorg/TorchSpec): stamps `_torchspec_version`; Llama-layer (`LlamaForCausalLMEagle3`)
or MLA-layer (`Eagle3DeepseekV2ForCausalLM`) drafts; `midlayer.*`, or `layers.0.*` in its vLLM export, which
adds +1 to the ids only for `model_type kimi_k2`; full-vocabulary drafts carry no d2t/t2d."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.config_fields import config_architectures

NAME = "torchspec"
LAYOUT = KeyLayout(prefix="", layer="midlayer.")
MLA_ARCHS = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    archs = config_architectures(cfg)
    stamps = [k for k in cfg if k.startswith("_torchspec")]
    if stamps:
        return FormatGuess(NAME, 0.99, [f"config stamp '{k}'" for k in stamps])
    if any(a in MLA_ARCHS for a in archs):
        return FormatGuess(NAME, 0.6, [f"MLA draft architecture {archs[0]} (TorchSpec writes MLA drafts)"])
    full_vocab = ("d2t" not in ckpt.tensors and "lm_head.weight" in ckpt.tensors
                  and cfg.get("vocab_size") and ckpt.tensors["lm_head.weight"].shape[:1] == (cfg.get("vocab_size"),))
    if "LlamaForCausalLMEagle3" in archs and full_vocab and "eagle_config" not in cfg:
        # Above SpecForge's bare architecture + midlayer score (0.6): SpecForge always writes d2t/t2d and
        # eagle_config, so this signature (lightseekorg/kimi-k2.5-eagle3) was misreported as SpecForge at 0.55.
        return FormatGuess(NAME, 0.65, ["full-vocabulary lm_head without d2t/t2d",
                                        "no eagle_config (TorchSpec's Llama template)"])
    return None


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    if "eagle_aux_hidden_state_layer_ids" in cfg:
        return "input", "ids at the top-level key that only vLLM reads"
    if layout.layer == "layers.0." and cfg.get("model_type") == "kimi_k2":
        return "input", "TorchSpec's vLLM export (layers.0.*) adds +1 for model_type kimi_k2"
    if layout.layer == "layers.0.":
        return "output", "TorchSpec's vLLM export adds +1 only for kimi_k2; these ids stay in SGLang's convention"
    return "output", "TorchSpec's native layout (midlayer.*) writes SGLang's output-of-layer ids"
