"""Where a draft's config holds its aux layer ids, and in which convention they are written."""
from __future__ import annotations

from typing import Any

from kconvert.formats.detect import BY_NAME, PRODUCER_EVIDENCE_CONFIDENCE, read_fix_record
from kconvert.formats.model import AuxIds, FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
# Every place a config may hold aux ids, in the order vLLM 0.32's V1 runner consults them.
AUX_PATHS: tuple[tuple[str, ...], ...] = (
    (AUX_KEY,),
    ("eagle_config", AUX_KEY),
    ("eagle_config", "layer_ids"),
)

def get_path(cfg: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = cfg
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def read_aux_ids(ckpt: Checkpoint, cfg: dict[str, Any], fmt: FormatGuess, layout: KeyLayout) -> AuxIds:
    """The aux ids as written (the first place vLLM consults that holds them, and every place that does) and the
    convention they are written in: a `kconvert fix` record, else the producer's code (strong when the producer is
    recognised by a stamp or its full signature), else what the key alone suggests."""
    locations = {".".join(p): v for p in AUX_PATHS if (v := get_path(cfg, p)) is not None}
    ids = None
    source = None
    for p in AUX_PATHS:
        v = get_path(cfg, p)
        if v is not None:
            ids, source = v, ".".join(p)
            break
    if ids is not None and not (isinstance(ids, list) and all(int_or_none(i) is not None for i in ids)):
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
    recorded_streams = None
    if recorded is not None:
        (conv, conv_ev, recorded_streams), strength = recorded, "record"
    trained = getattr(module, "trained_layers", None)
    aux = AuxIds(ids=ids_list, source=source, locations=locations, convention=conv, convention_evidence=conv_ev,
                 convention_strength=strength, producer_layers=trained(ckpt, cfg) if trained is not None else None,
                 recorded_streams=recorded_streams)
    if ids is not None and ids_list is None:
        aux.locations["_invalid"] = ids
    return aux


def _recorded_convention(ckpt: Checkpoint, ids: list[int] | None) -> tuple[str, str, list[int]] | None:
    """A checkpoint written by `kconvert fix` records which streams its ids name (kconvert.json): the convention
    they are in, or "recorded" where they follow neither alone (tokenspeed's numbering: +1 below the last layer,
    id L as the final stream), with the streams."""
    if ids is None:
        return None
    prov = read_fix_record(ckpt)
    rec = prov.get("aux_ids") if prov else None
    if not isinstance(rec, dict) or rec.get("written") != ids or not isinstance(rec.get("physical"), list):
        return None
    phys = rec["physical"]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in phys) or len(phys) != len(ids):
        return None
    if phys == ids:
        return "input", "kconvert.json records these ids as vLLM's input-of-layer ids", list(phys)
    if phys == [i + 1 for i in ids]:
        return "output", "kconvert.json records these ids in the output-of-layer convention", list(phys)
    return "recorded", f"kconvert.json records these ids as streams {phys}", list(phys)
