"""vLLM's `speculators` format: `Eagle3Speculator`, nested `transformer_layer_config`, `layers.0.*` keys,
top-level `eagle_aux_hidden_state_layer_ids` in vLLM's input-of-layer convention.
Source: vllm-project/speculators; vLLM vllm/transformers_utils/configs/speculators/algos.py."""
from __future__ import annotations

from typing import Any

from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.config_fields import config_architectures

NAME = "speculators"
LAYOUT = KeyLayout(prefix="", layer="layers.0.")
ARCHITECTURES = ("Eagle3Speculator",)


def is_speculators(config: dict[str, Any]) -> bool:
    return "speculators_model_type" in config or "speculators_config" in config


def detect(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess | None:
    cfg = ckpt.config
    ev = [f"config key '{k}'" for k in ("speculators_model_type", "speculators_config", "speculators_version",
                                        "transformer_layer_config") if k in cfg]
    if any(a in ARCHITECTURES for a in config_architectures(cfg)):
        ev.append("architectures contains Eagle3Speculator")
    if not ev:
        return None
    habits = conversion_habits(ckpt)
    return FormatGuess(NAME, 0.99 if len(ev) >= 2 else 0.8, ev + habits,
                       converted_by=CONVERTER if habits else None, conversion_evidence=habits)


CONVERTER = "speculators convert"


# What `speculators convert` does, with its source: the rule that weighs a converted draft's ids (K404) cites it in
# its `why`; the habits below name what the files show of it.
CONVERTER_SOURCE = ("speculators 0.9.0 convert (speculators/convert/eagle/eagle3_converter.py) saves the legacy "
                    "class Eagle3Speculator (:12, :195; speculators' trainer saves Eagle3DraftModel), casts the "
                    "weights to the source's torch_dtype only (:184, :223-225), so a source naming `dtype` (a "
                    "transformers-5 export such as SpecForge 0.2.0's bf16 one) comes out float32 with no dtype in "
                    "transformer_layer_config, and copies the ids it is given unshifted (:146)")


def conversion_habits(ckpt: Checkpoint) -> list[str]:
    """What `speculators convert` leaves in a draft it converted from another producer's checkpoint (read in
    speculators 0.9.0 `speculators/convert/eagle/eagle3_converter.py`; CONVERTER_SOURCE cites the lines):

    - it saves the legacy model class `Eagle3Speculator` (imported at line 12 from
      `speculators/convert/eagle/eagle3_legacy_model.py`, built at line 195), whose name transformers'
      `save_pretrained` writes as `architectures`; speculators 0.9.0's own trainer saves `Eagle3DraftModel`
      (`speculators/models/eagle3/core.py`). Drafts published in the speculators format before that carry
      `Eagle3Speculator` as well (the zoo's speculators_llama31_8b_eagle3), so the class alone says "converted, or
      written by an older speculators", which is why it only ever unsettles ids, never settles them;
    - it casts the weights to `transformer_layer_config.torch_dtype` (lines 223-225), set from the source's
      `torch_dtype` only (line 184): a source that names `dtype` (transformers 5 exports, SpecForge 0.2.0's) comes
      out float32 with no dtype in `transformer_layer_config` (tests/data/producers/speculators-from-specforge).

    Each habit as the files show it, in a few words (the finding that weighs them prints them whole)."""
    cfg = ckpt.config
    if cfg.get("architectures") != list(ARCHITECTURES):
        return []
    ev = ["architectures ['Eagle3Speculator'], the legacy class the converter saves"]
    inner = cfg.get("transformer_layer_config")
    declared = cfg.get("dtype") or cfg.get("torch_dtype")
    floats = {t.dtype for n, t in ckpt.tensors.items() if n.rsplit(".", 1)[-1] not in ("d2t", "t2d")}
    if declared == "float32" and floats == {"F32"} and isinstance(inner, dict) \
            and not (inner.get("torch_dtype") or inner.get("dtype")):
        ev.append("float32 weights and no dtype in transformer_layer_config, as the converter casts a source "
                  "naming `dtype`")
    return ev


def flatten(config: dict[str, Any]) -> dict[str, Any]:
    """The draft's effective config: the nested layer config, overridden by top-level eagle fields."""
    inner = config.get("transformer_layer_config")
    out: dict[str, Any] = dict(inner) if isinstance(inner, dict) else {}
    for k, v in config.items():
        if k != "transformer_layer_config":
            out[k] = v
    return out


def aux_convention(cfg: dict[str, Any], layout: KeyLayout) -> tuple[str | None, str]:
    return "input", "the format writes vLLM's input-of-layer ids"


# Keys the speculators format keeps at top level (everything else of the layer belongs in
# transformer_layer_config). Mirrors speculators' Eagle3SpeculatorConfig fields.
TOP_LEVEL = ("draft_vocab_size", "norm_before_residual", "target_hidden_size", "eagle_aux_hidden_state_layer_ids",
             "torch_dtype", "dtype")
SPECULATORS_ONLY = ("speculators_model_type", "speculators_config", "speculators_version",
                    "transformer_layer_config")


def to_flat(config: dict[str, Any], *, architecture: str = "LlamaForCausalLMEagle3") -> dict[str, Any]:
    """speculators → the flat SpecForge/vLLM layout: the nested layer config becomes the top level, the EAGLE-3
    fields stay, ids are also written into eagle_config (where vLLM sizes fc and SGLang reads them)."""
    out = dict(config.get("transformer_layer_config") or {})
    for k, v in config.items():
        if k not in SPECULATORS_ONLY and k != "architectures":
            out[k] = v
    out["architectures"] = [architecture]
    out.setdefault("model_type", "llama")
    # A multi-layer draft keeps its layers (vLLM PR #26164); one layer is the EAGLE-3 default.
    inner = config.get("transformer_layer_config") if isinstance(config.get("transformer_layer_config"), dict) else {}
    n = inner.get("num_hidden_layers")
    out["num_hidden_layers"] = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    # The speculators format's default (Eagle3SpeculatorConfig) is false; say it where flat readers look.
    out.setdefault("norm_before_residual", False)
    ids = out.get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        ec = dict(out.get("eagle_config") or {})
        # Ids already in eagle_config were written there by fix's aux rules (K404/K405) in the chosen engine's
        # convention; the top-level key holds vLLM's. Overwriting them fed SGLang (pre-25454, or with
        # --aux-ids/--aux-convention) the wrong layers and made fix non-idempotent.
        ec.setdefault("eagle_aux_hidden_state_layer_ids", ids)
        out["eagle_config"] = ec
    return out


# The layer config speculators writes per draft architecture (vllm-project/speculators: scripts/train.py DRAFT_ARCH_CONFIGS: LlamaConfig,
# Qwen3Config), and that vLLM's algos.py maps by model_type.
LAYER_CONFIGS = {"llama": ("LlamaForCausalLM", "llama"), "qwen3": ("Qwen3ForCausalLM", "qwen3")}


def to_speculators(config: dict[str, Any], *, verifier: str | None = None,
                   verifier_architectures: list[str] | None = None, version: str = "0.3.0",
                   layer: str = "llama") -> dict[str, Any]:
    """flat SpecForge/vLLM layout → speculators (ids expected in vLLM's input convention already)."""
    layer_cfg = layer
    layer = {k: v for k, v in config.items() if k not in TOP_LEVEL and k not in ("architectures", "eagle_config")
             and not k.startswith("_")}
    layer["architectures"], layer["model_type"] = [LAYER_CONFIGS[layer_cfg][0]], LAYER_CONFIGS[layer_cfg][1]
    n = config.get("num_hidden_layers")
    layer["num_hidden_layers"] = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
    ec = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    out: dict[str, Any] = {"architectures": list(ARCHITECTURES), "speculators_model_type": "eagle3"}
    for k in TOP_LEVEL:
        if k in config:
            out[k] = config[k]
    if "eagle_aux_hidden_state_layer_ids" not in out and "eagle_aux_hidden_state_layer_ids" in ec:
        out["eagle_aux_hidden_state_layer_ids"] = ec["eagle_aux_hidden_state_layer_ids"]
    out.setdefault("norm_before_residual", bool(config.get("norm_before_residual", False)))
    out["transformer_layer_config"] = layer
    out["speculators_config"] = {
        "algorithm": "eagle3",
        "default_proposal_method": "greedy",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
        "verifier": {"name_or_path": verifier, "architectures": verifier_architectures or []},
    }
    out["speculators_version"] = version
    return out
