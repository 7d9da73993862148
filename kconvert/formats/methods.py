"""Which speculative method a checkpoint is for: EAGLE-3, or one of the methods users mistake for it (DFlash,
DSpark, P-EAGLE, a DeepSeek/Kimi MTP layer). Read from the config and the tensor names only.

The signatures are the engines' own (vLLM 0.32.0 as installed):
- `transformers_utils/configs/speculators/algos.py` registers the speculators types `eagle3`, `peagle`, `dflash`,
  `dflash2` and `dspark`; `speculators/base.py build_vllm_speculative_config` turns `peagle` into method `eagle3`
  with `parallel_drafting: true` and `dflash2` into `dflash`.
- `model_executor/models/registry.py` maps `DFlashDraftModel`, `DFlash2DraftModel`, `DFlashLagunaForCausalLM` and
  `MuseGlimmerAssistantModel` to the DFlash drafters (qwen3_dflash.py, laguna_dflash.py), the `*DSpark*` names
  to the DSpark drafters (qwen3_dspark.py, gemma4_dspark.py, deepseek_v4), `PEagleDraftModel` /
  `PeagleLlamaForCausalLM` / `PeagleQwen3ForCausalLM` to the EAGLE-3 classes (parallel drafting).
- `config/speculative.py` detects `dflash` from `DFlashDraftModel`-style names and reads `dflash_config`
  (`mask_token_id`, `target_layer_ids`); a DeepSeek MTP layer is `enorm`, `hnorm`, `eh_proj` and `shared_head`
  around one decoder layer (`model_executor/models/deepseek_mtp.py`), counted by `num_nextn_predict_layers`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kconvert.source.config_fields import config_architectures

EAGLE3 = "eagle3"
METHODS = (EAGLE3, "dflash", "dspark", "peagle", "mtp")

# speculators_model_type -> method (vLLM 0.32 speculators/algos.py SUPPORTED_SPECULATORS_TYPES)
SPECULATORS_TYPES = {"eagle3": EAGLE3, "peagle": "peagle", "dflash": "dflash", "dflash2": "dflash",
                     "dspark": "dspark"}
# vLLM 0.32 registry.py (_SPECULATIVE_DECODING_MODELS)
DFLASH_ARCHS = ("DFlashDraftModel", "DFlash2DraftModel", "DFlashLagunaForCausalLM", "MuseGlimmerAssistantModel",
                "DFlashMuseGlimmerAssistantModel")
DSPARK_ARCHS = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel", "DSparkDraftModel",
                "DSparkV41DraftModel", "K3DSparkModel")
PEAGLE_ARCHS = ("PEagleDraftModel", "PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM")
# deepseek_mtp.py DeepSeekMultiTokenPredictorLayer: enorm, hnorm, eh_proj, shared_head (+ the decoder layer)
MTP_TENSOR_SUFFIXES = (".eh_proj.weight", ".enorm.weight", ".hnorm.weight")


@dataclass(frozen=True)
class MethodGuess:
    method: str  # one of METHODS
    evidence: list[str] = field(default_factory=list)


def _archs(cfg: dict[str, Any]) -> list[str]:
    return config_architectures(cfg)  # the one reading of `architectures` (kconvert.source.config_fields)


def detect_method(config: dict[str, Any], tensor_names: list[str]) -> MethodGuess:
    """The method the checkpoint's own config and tensors name; EAGLE-3 when none of the others' signatures is
    present (an EAGLE-3 draft's defects are the rules' to judge, not this function's)."""
    st = config.get("speculators_model_type")
    if isinstance(st, str) and st in SPECULATORS_TYPES and SPECULATORS_TYPES[st] != EAGLE3:
        return MethodGuess(SPECULATORS_TYPES[st], [f"speculators_model_type {st!r}"])
    archs = _archs(config)
    for names, method in ((DSPARK_ARCHS, "dspark"), (DFLASH_ARCHS, "dflash"), (PEAGLE_ARCHS, "peagle")):
        hit = [a for a in archs if a in names]
        if hit:
            return MethodGuess(method, [f"architectures {hit}"])
    if isinstance(config.get("dflash_config"), dict):
        return MethodGuess("dflash", ["config key 'dflash_config'"])
    mtp = sorted(n for n in tensor_names if n.endswith(MTP_TENSOR_SUFFIXES))
    if mtp:
        ev = [f"MTP-layer tensors ({', '.join(mtp[:3])}{', ...' if len(mtp) > 3 else ''})"]
        n = config.get("num_nextn_predict_layers")
        if n is None and isinstance(config.get("text_config"), dict):
            n = config["text_config"].get("num_nextn_predict_layers")
        if n is not None:
            ev.append(f"num_nextn_predict_layers {n}")
        return MethodGuess("mtp", ev)
    return MethodGuess(EAGLE3, [])
