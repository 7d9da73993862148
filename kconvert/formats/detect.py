"""Which producer wrote a checkpoint: each producer module's evidence (stamps, nested configs, architectures, key
layout), most specific first, and for a `kconvert fix` output the producer its record names. Adding a producer
means adding one module beside this one and listing it in `PRODUCERS`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kconvert.errors import KConvertError
from kconvert.formats import automodel, eagle, modelopt, specforge, speculators, torchspec
from kconvert.formats.model import FormatGuess, KeyLayout
from kconvert.source.checkpoint import Checkpoint, read_provenance
from kconvert.source.names import PROVENANCE_NAME

# Most specific first: stamps and nested configs beat architecture guesses.
PRODUCERS = (speculators, torchspec, modelopt, automodel, specforge, eagle)
BY_NAME = {m.NAME: m for m in PRODUCERS}

# Detection confidence from which a producer's known convention counts as evidence (SpecForge's full signature
# scores 0.85, TorchSpec's and speculators' stamps 0.99, ModelOpt's flags 0.8+; an architecture name alone 0.6).
PRODUCER_EVIDENCE_CONFIDENCE = 0.8


def detect_format(ckpt: Checkpoint, layout: KeyLayout) -> FormatGuess:
    guesses = [g for m in PRODUCERS if (g := m.detect(ckpt, layout)) is not None]
    best = max(guesses, key=lambda g: g.confidence) if guesses else None
    recorded = _recorded_producer(ckpt)
    if recorded == "unknown":
        # A `kconvert fix` output of a draft no producer matched looks like whatever fix wrote (the engine's
        # architectures), not like a producer: read by that, an unrecognised draft whose `architectures` fix
        # repaired to "LlamaForCausalLMEagle3" became SpecForge's, SpecForge's aux-id convention was assumed for ids
        # nobody had settled, and fix failed its own self-check (tests/test_fix_wrong_types.py). A known producer's
        # output keeps the format fix gave it (`--to-format speculators` writes the speculators format on purpose);
        # the ids fix wrote are settled by kconvert.json's aux_ids record either way.
        return FormatGuess("unknown", 0.0, ["kconvert.json: written by `kconvert fix` from a checkpoint no "
                                            "producer's keys, stamps or architecture matched"])
    if best is None:
        if recorded is not None:
            return FormatGuess(recorded, 0.5, [f"kconvert.json: written by `kconvert fix` from a checkpoint of "
                                               f"producer {recorded} (its config now follows the engine's layout)"])
        return FormatGuess("unknown", 0.0, ["no producer's keys, stamps or architecture matched"])
    return best


def read_fix_record(ckpt: Checkpoint) -> dict[str, Any] | None:
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
    prov = read_fix_record(ckpt)
    inp = prov.get("input") if prov else None
    producer = inp.get("producer") if isinstance(inp, dict) else None
    return producer if isinstance(producer, str) and (producer in BY_NAME or producer == "unknown") else None


def locate_draft(ref: str) -> str:
    """The draft folder a local path names: the path itself, or the draft inside a producer's checkpoint folder
    (a producer module's `locate`, e.g. NeMo Automodel's `epoch_E_step_S/` -> its `model/consolidated/`). A Hub id
    or a path no producer claims is returned unchanged; a producer's folder with nothing an engine loads is an
    InputError that says what to run."""
    p = Path(os.fsdecode(ref)).expanduser()
    try:
        if not p.is_dir():
            return ref
        for module in PRODUCERS:
            locate = getattr(module, "locate", None)
            found = locate(p) if locate is not None else None
            if found is not None:
                return str(found)
    except OSError:
        return ref  # a folder it cannot look into (permissions): the source layer refuses it with its own reason
    return ref
