"""Readings: how an engine reads a draft's files, as data.

A draft's bytes do not settle everything: which target layers feed `fc`, whether `d2t` holds offsets or
absolute ids, whose embeddings and which `lm_head` rows are used, whether the residual is taken before or after
`hidden_norm`. A `Reading` fixes each of those choices; `engine_reading` is the one vLLM 0.32 makes as it loads
the files (the sources are cited beside each choice), and `score --diagnose` tries others against a trace.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kconvert.engines.expectations import EngineRules
from kconvert.engines.fed_streams import declared_ids, fed_ids
from kconvert.formats.aux import AUX_KEY
from kconvert.formats.model import DraftModel

D2T_MODES = ("offsets", "absolute", "none")
EMBED_MODES = ("draft", "target")


@dataclass(frozen=True)
class Reading:
    aux_ids: tuple[int, ...]  # physical streams, input-of-layer numbering, in the order fc reads them
    d2t: str  # offsets | absolute | none (draft vocabulary = target vocabulary)
    embeddings: str  # draft | target
    lm_head: str = "stored"  # stored | reselected | target
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False
    lm_head_source: str | None = None  # folder of a full-vocabulary head for `reselected`
    keys: str = "as written"  # as written | canonical (the names an engine would need, e.g. without `model.`)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, Any]:
        return {"aux_ids": list(self.aux_ids), "d2t": self.d2t, "embeddings": self.embeddings,
                "lm_head": self.lm_head, "lm_head_source": self.lm_head_source,
                "norm_before_residual": self.norm_before_residual, "norm_before_fc": self.norm_before_fc,
                "fc_norm": self.fc_norm, "norm_output": self.norm_output, "keys": self.keys,
                "notes": list(self.notes)}

    def differs(self, other: "Reading") -> list[str]:
        """Names of the choices in which this reading departs from `other`."""
        out = []
        for f in ("aux_ids", "d2t", "embeddings", "lm_head", "norm_before_residual", "norm_before_fc", "fc_norm",
                  "norm_output", "keys"):
            if getattr(self, f) != getattr(other, f):
                out.append(f)
        return out

    def with_(self, **kw: Any) -> "Reading":
        return replace(self, **kw)


def _bool(v: Any, default: bool) -> bool:
    return v if isinstance(v, bool) else default


def engine_reading(d: DraftModel, engine: EngineRules, num_target_layers: int, target_vocab: int,
                   embeddings_equal_target: bool = False, target: Any = None) -> Reading:
    """What the engine does with these files, choice by choice (vLLM 0.32 unless `engine` says otherwise);
    `target`, the target's facts, where the engine's reading of the aux ids depends on its family (`fed_ids`)."""
    phys, note = fed_ids(d, engine, num_target_layers, target)
    notes: list[str] = [note] if note else []
    cfg = d.config
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    if d.is_speculators:
        # vLLM's speculators adapter (transformers_utils/configs/speculators/algos.py, update_eagle3) defaults
        # norm_before_residual to true for this format.
        nbr = _bool(cfg.get("norm_before_residual"), bool(engine.speculators_norm_before_residual_default))
    else:
        nbr = _bool(cfg.get("norm_before_residual"), False)
    # llama_eagle3.LlamaModel: eagle_config.norm_before_fc wins over the top-level key.
    # qwen3_eagle3.Qwen3Eagle3Model reads it the same way.
    nbf = (_bool(ec.get("norm_before_fc", cfg.get("norm_before_fc")), False) if d.layer_family in ("llama", "qwen3")
           else False)
    draft_vocab = d.draft_vocab_size or d.vocab_size or target_vocab
    if draft_vocab == target_vocab:
        d2t = "none"  # vLLM builds no draft_id_to_target_id when the vocabularies are equal
    else:
        d2t = "offsets"
        if "d2t" not in d.tensors:
            notes.append("draft vocabulary differs from the target's but there is no d2t: the engine keeps a zero "
                         "mapping (draft id = target id)")
    if d.has_embeddings and not embeddings_equal_target:
        emb = "draft"
    else:
        emb = "target"
        if d.has_embeddings:
            notes.append("the draft's embed_tokens equal the target's: the engine shares the target's")
    lm = "stored" if d.has_lm_head else "target"
    return Reading(aux_ids=phys, d2t=d2t, embeddings=emb, lm_head=lm, norm_before_residual=nbr,
                   norm_before_fc=nbf, fc_norm=_bool(cfg.get("fc_norm"), False),
                   norm_output=_bool(cfg.get("norm_output"), False), notes=tuple(notes))


__all__ = ["Reading", "engine_reading", "declared_ids", "AUX_KEY"]
