"""Producers → one DraftModel. Adding a producer means adding one module here and listing it below."""
from __future__ import annotations

from typing import Any

from kconvert.formats import eagle, modelopt, specforge, speculators, torchspec
from kconvert.errors import KConvertError
from kconvert.formats.layouts import detect_layout, known_canonical, to_canonical
from kconvert.formats.model import AuxIds, DraftModel, FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint, read_provenance
from kconvert.source.names import PROVENANCE_NAME

# Most specific first: stamps and nested configs beat architecture guesses.
PRODUCERS = (speculators, torchspec, modelopt, specforge, eagle)
BY_NAME = {m.NAME: m for m in PRODUCERS}

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
# Every place a config may hold aux ids, in the order vLLM 0.32's V1 runner consults them.
AUX_PATHS: tuple[tuple[str, ...], ...] = (
    (AUX_KEY,),
    ("eagle_config", AUX_KEY),
    ("eagle_config", "layer_ids"),
)

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
    trained (K101 says so and names the fix)."""
    if any("kv_a_proj_with_mqa" in n for n in tensor_names) or any("Deepseek" in a or "DeepSeek" in a for a in archs) \
            or all(k in config for k in MLA_KEYS):
        return "mla"
    if any(n.startswith("layers.") for n in tensor_names):
        return "qwen3" if any(n.endswith(QWEN3_QK_NORM_SUFFIXES) for n in tensor_names) else "llama"
    if layer_model_type == "qwen3" or any(a in QWEN3_ARCHS for a in archs):
        return "qwen3"
    return "llama"


# Detection confidence from which a producer's known convention counts as evidence (SpecForge's full signature
# scores 0.85, TorchSpec's and speculators' stamps 0.99, ModelOpt's flags 0.8+; an architecture name alone 0.6).
PRODUCER_EVIDENCE_CONFIDENCE = 0.8


def get_path(cfg: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def detect_format(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess:
    guesses = [g for m in PRODUCERS if (g := m.detect(ckpt, layout)) is not None]
    if not guesses:
        recorded = _recorded_producer(ckpt)
        if recorded is not None:
            return FormatGuess(recorded, 0.5, [f"kconvert.json: written by `kconvert fix` from a checkpoint of "
                                               f"producer {recorded} (its config now follows the engine's layout)"])
        return FormatGuess("unknown", 0.0, ["no producer's keys, stamps or architecture matched"])
    return max(guesses, key=lambda g: g.confidence)


def _read_provenance(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The record of a `kconvert fix` output; an unreadable one is evidence of nothing, not an error here."""
    if PROVENANCE_NAME not in ckpt.files or ckpt.root is None:
        return None
    try:
        return read_provenance(ckpt.root)
    except KConvertError:
        return None


def _recorded_producer(ckpt: Checkpoint) -> str | None:
    """The producer of the checkpoint a `kconvert fix` output was made from (e.g. an EAGLE-reference draft
    gains an `eagle_config` in the fix, so it no longer looks like one)."""
    prov = _read_provenance(ckpt)
    inp = prov.get("input") if prov else None
    producer = inp.get("producer") if isinstance(inp, dict) else None
    return producer if isinstance(producer, str) and producer in BY_NAME else None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _recorded_convention(ckpt: Checkpoint, ids: list[int] | None) -> tuple[str, str] | None:
    """A checkpoint written by `kconvert fix` records which streams its ids name (kconvert.json)."""
    if ids is None:
        return None
    prov = _read_provenance(ckpt)
    rec = prov.get("aux_ids") if prov else None
    if not isinstance(rec, dict) or rec.get("written") != ids or not isinstance(rec.get("physical"), list):
        return None
    phys = rec["physical"]
    if phys == ids:
        return "input", "kconvert.json records these ids as vLLM's input-of-layer ids"
    if phys == [i + 1 for i in ids]:
        return "output", "kconvert.json records these ids in the output-of-layer convention"
    return None


def read_draft(ckpt: Checkpoint) -> DraftModel:
    """Describe the draft canonically; never raises on odd content (rules judge it), only on unreadable input."""
    raw = sorted(ckpt.tensors)
    layout = detect_layout(raw)
    fmt = detect_format(ckpt, layout)
    spec = speculators.is_speculators(ckpt.config)
    cfg = speculators.flatten(ckpt.config) if spec else dict(ckpt.config)

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

    archs = [a for a in (cfg.get("architectures") if isinstance(cfg.get("architectures"), list) else []) if isinstance(a, str)]
    # The speculators format's own `architectures` (Eagle3Speculator) says nothing of the layer: read the family
    # from the unflattened config, whose transformer_layer_config names it.
    inner = ckpt.config.get("transformer_layer_config") if spec else None
    family = layer_family(cfg, [a for a in archs if a not in speculators.ARCHITECTURES], list(tensors),
                          inner.get("model_type") if isinstance(inner, dict) else None)

    locations = {".".join(p): v for p in AUX_PATHS if (v := get_path(cfg, p)) is not None}
    ids = None
    source = None
    for p in AUX_PATHS:
        v = get_path(cfg, p)
        if v is not None:
            ids, source = v, ".".join(p)
            break
    if ids is not None and not (isinstance(ids, list) and all(_int_or_none(i) is not None for i in ids)):
        ids_list = None
    else:
        ids_list = ids
    module = BY_NAME.get(fmt.producer)
    strength: str | None = None
    if module is not None:
        conv, conv_ev = module.aux_convention(cfg, layout)
        # A producer recognised by a stamp or its full signature fixes the convention by its code; one guessed
        # from the architecture name alone (LlamaForCausalLMEagle3 is written by half the ecosystem) does not.
        strength = "producer" if fmt.confidence >= PRODUCER_EVIDENCE_CONFIDENCE else "weak"
        if conv is not None and conv_ev.startswith("ids at the top-level key"):
            strength = "weak"
    elif AUX_KEY in cfg:
        conv, conv_ev, strength = "input", "ids at the top-level key that only vLLM reads", "weak"
    else:
        conv, conv_ev = None, "unknown producer: the convention of its ids is not recorded"
    if conv is None:
        strength = None
    recorded = _recorded_convention(ckpt, ids_list)
    if recorded is not None:
        (conv, conv_ev), strength = recorded, "record"
    aux = AuxIds(ids=ids_list, source=source, locations=locations, convention=conv, convention_evidence=conv_ev,
                 convention_strength=strength)
    if ids is not None and ids_list is None:
        aux.locations["_invalid"] = ids

    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    norm_flags = {}
    for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        if k in cfg:
            norm_flags[k] = cfg[k]
        if k in ec:
            norm_flags[f"eagle_config.{k}"] = ec[k]
    extra = {k: ec[k] for k in modelopt.FLAGS if k in ec}
    rope = {k: cfg[k] for k in ("rope_theta", "rope_scaling", "rope_parameters") if k in cfg}
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
    )
