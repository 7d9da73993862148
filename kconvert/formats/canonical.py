"""A checkpoint described canonically: its tensors under canonical names, the decoder layer it describes, its aux
ids and convention, its norm, rope and size settings, as one `DraftModel` (`kconvert.formats.model`)."""
from __future__ import annotations

from typing import Any

from kconvert.formats import modelopt, speculators
from kconvert.formats.aux import int_or_none as _int_or_none
from kconvert.formats.aux import read_aux_ids
from kconvert.formats.detect import detect_format
from kconvert.formats.layouts import detect_layout, known_canonical, to_canonical
from kconvert.formats.methods import detect_method
from kconvert.formats.model import DraftModel, KeyLayout
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.config_fields import check_sizes, config_architectures
from kconvert.source.names import CONFIG_NAME
from kconvert.source.safetensors_header import TensorInfo

MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim")
# Flat-config architectures whose layer is Qwen3's (vLLM 0.32 registry.py: Eagle3Qwen3ForCausalLM and
# PeagleQwen3ForCausalLM -> qwen3_eagle3; a bare Qwen3ForCausalLM gets `Eagle3` prefixed by configs/eagle.py;
# Qwen3ForCausalLMEagle3 is SpecForge's training class, specforge/modeling/draft/qwen3_eagle.py).
QWEN3_ARCHS = ("Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM", "Qwen3ForCausalLM", "Qwen3ForCausalLMEagle3")
QWEN3_QK_NORM_SUFFIXES = (".self_attn.q_norm.weight", ".self_attn.k_norm.weight")


def layer_family(config: dict[str, Any], archs: list[str], tensor_names: list[str],
                 layer_model_type: str | None = None) -> str:
    """The decoder layer the draft's files describe: "mla", "qwen3" or "llama".

    The speculators format names it in `transformer_layer_config.model_type` (vLLM 0.32
    transformers_utils/configs/speculators/algos.py maps "qwen3" to Eagle3Qwen3ForCausalLM and "llama" to
    Eagle3LlamaForCausalLM); a flat config by its architecture (registry.py); the tensors by what only one layer
    has (MLA's kv_a_proj_with_mqa, Qwen3's q_norm/k_norm). Between Llama and Qwen3 the tensors decide where there
    are any: a config naming a Qwen3 layer over a Llama layer's tensors makes the engine build q/k norms nobody
    trained (K101 says so and names the fix). The tensors decide over any name: a DeepSeek architecture over a
    Llama layer's tensors is a Llama draft the engine would build as MLA (vLLM 0.34 raises building it), not an
    MLA draft."""
    if any("kv_a_proj_with_mqa" in n for n in tensor_names):
        return "mla"
    if any(n.startswith("layers.") for n in tensor_names):
        return "qwen3" if any(n.endswith(QWEN3_QK_NORM_SUFFIXES) for n in tensor_names) else "llama"
    if any("Deepseek" in a or "DeepSeek" in a for a in archs) or all(k in config for k in MLA_KEYS):
        return "mla"
    if layer_model_type == "qwen3" or any(a in QWEN3_ARCHS for a in archs):
        return "qwen3"
    return "llama"


def read_draft(ckpt: Checkpoint) -> DraftModel:
    """Describe the draft canonically; never raises on odd content (rules judge it), only on unreadable input."""
    # bounded sizes first (kconvert.source.config_fields): no rule, op or allocation ever sees a vocabulary of 10^10
    where = f"{ckpt.ref.rstrip('/')}/{CONFIG_NAME}" if ckpt.ref.strip("/") else CONFIG_NAME
    check_sizes(ckpt.config, where)
    raw = sorted(ckpt.tensors)
    layout = detect_layout(raw)
    fmt = detect_format(ckpt, layout)
    spec = speculators.is_speculators(ckpt.config)
    cfg = speculators.flatten(ckpt.config) if spec else dict(ckpt.config)
    if spec:
        check_sizes(cfg, f"{where} transformer_layer_config")
    tensors, raw_names, unmapped = canonical_tensors(ckpt, raw, layout)
    archs = config_architectures(cfg)
    # The speculators format's own `architectures` (Eagle3Speculator) says nothing of the layer: read the family
    # from the unflattened config, whose transformer_layer_config names it.
    inner = ckpt.config.get("transformer_layer_config") if spec else None
    family = layer_family(cfg, [a for a in archs if a not in speculators.ARCHITECTURES], list(tensors),
                          inner.get("model_type") if isinstance(inner, dict) else None)

    aux = read_aux_ids(ckpt, cfg, fmt, layout)
    norm_flags, extra = flags(cfg)
    rope = {k: cfg[k] for k in ("rope_theta", "rope_scaling", "rope_parameters") if k in cfg}
    method = detect_method(ckpt.config, raw)
    return DraftModel(
        checkpoint=ckpt,
        format=fmt,
        config=cfg,
        layer_family=family,
        architectures=archs,
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
        is_speculators=spec,
        key_layout=layout,
        tensors=tensors,
        raw_names=raw_names,
        unmapped=unmapped,
        aux=aux,
        hidden_size=_int_or_none(cfg.get("hidden_size")),
        target_hidden_size=_int_or_none(cfg.get("target_hidden_size")),
        num_attention_heads=_int_or_none(cfg.get("num_attention_heads")),
        num_key_value_heads=_int_or_none(cfg.get("num_key_value_heads")),
        head_dim=_int_or_none(cfg.get("head_dim")),
        intermediate_size=_int_or_none(cfg.get("intermediate_size")),
        num_hidden_layers=_int_or_none(cfg.get("num_hidden_layers")),
        vocab_size=_int_or_none(cfg.get("vocab_size")),
        draft_vocab_size=_int_or_none(cfg.get("draft_vocab_size")),
        max_position_embeddings=_int_or_none(cfg.get("max_position_embeddings")),
        torch_dtype=cfg.get("torch_dtype") if isinstance(cfg.get("torch_dtype"), str) else None,
        dtype=cfg.get("dtype") if isinstance(cfg.get("dtype"), str) else None,
        norm_flags=norm_flags,
        rope=rope,
        extra_flags=extra,
        method=method.method,
        method_evidence=method.evidence,
    )


def canonical_tensors(ckpt: Checkpoint, raw: list[str], layout: KeyLayout
                      ) -> tuple[dict[str, TensorInfo], dict[str, str], list[str]]:
    """The tensors under their canonical names, the raw name of each, and the raw names no canonical name takes
    (unknown, or a second tensor for the same name)."""
    tensors = {}
    raw_names: dict[str, str] = {}
    unmapped: list[str] = []
    for name in raw:
        c = to_canonical(name, layout)
        if c in tensors or not known_canonical(c):
            unmapped.append(name)
            continue
        tensors[c] = ckpt.tensors[name]
        raw_names[c] = name
    return tensors, raw_names, unmapped


def flags(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The norm flags where the config sets them (top level and `eagle_config`), and ModelOpt's extra flags."""
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    norm_flags = {}
    for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        if k in cfg:
            norm_flags[k] = cfg[k]
        if k in ec:
            norm_flags[f"eagle_config.{k}"] = ec[k]
    extra = {k: ec[k] for k in modelopt.FLAGS if k in ec}
    return norm_flags, extra
