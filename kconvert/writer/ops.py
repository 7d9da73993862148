"""Fix operations: what the writer can do to a checkpoint, and so the vocabulary in which rules say how to repair
what they find.

A rule emits ops; `kconvert.plan` orders and merges them; `kconvert.writer` applies them while streaming the
checkpoint (`writer.config` the config ops, `writer.layout` the tensor ops). They are defined beside what applies
them so that the writer needs nothing from the layers above it. Ops are plain data (JSON-serialisable through
`op_to_dict`) so that `--dry-run`, `kconvert.json` provenance and reports can list them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Config paths are tuples of keys: ("eagle_config", "eagle_aux_hidden_state_layer_ids").
ConfigPath = tuple[str, ...]


@dataclass(frozen=True)
class SetConfig:
    path: ConfigPath
    value: Any
    reason: str = ""
    kind: str = field(default="set-config", init=False)


@dataclass(frozen=True)
class DeleteConfig:
    path: ConfigPath
    reason: str = ""
    kind: str = field(default="delete-config", init=False)


@dataclass(frozen=True)
class RenameTensor:
    old: str
    new: str
    reason: str = ""
    kind: str = field(default="rename-tensor", init=False)


@dataclass(frozen=True)
class DropTensor:
    name: str
    reason: str = ""
    kind: str = field(default="drop-tensor", init=False)


@dataclass(frozen=True)
class RewriteD2TOffsets:
    """`d2t` holds absolute target ids: store d2t - arange(draft_vocab) (vLLM/SGLang read offsets)."""

    name: str = "d2t"
    reason: str = ""
    kind: str = field(default="d2t-absolute-to-offsets", init=False)


@dataclass(frozen=True)
class RebuildT2D:
    """Rebuild the boolean `t2d` mask over the target vocabulary from `d2t` (offsets)."""

    name: str = "t2d"
    d2t_name: str = "d2t"
    target_vocab_size: int = 0
    reason: str = ""
    kind: str = field(default="rebuild-t2d", init=False)


@dataclass(frozen=True)
class ReselectLmHead:
    """Replace `lm_head` rows with full_lm_head[d2t + arange] read from a full-vocabulary source."""

    name: str = "lm_head.weight"
    source: str = ""  # checkpoint folder holding the full-vocabulary lm_head
    source_tensor: str = "lm_head.weight"
    d2t_name: str = "d2t"
    reason: str = ""
    kind: str = field(default="reselect-lm-head", init=False)


@dataclass(frozen=True)
class CastTensor:
    name: str
    dtype: str  # safetensors dtype name, e.g. "BF16"
    reason: str = ""
    kind: str = field(default="cast-tensor", init=False)


Op = SetConfig | DeleteConfig | RenameTensor | DropTensor | RewriteD2TOffsets | RebuildT2D | ReselectLmHead | CastTensor


def op_to_dict(op: Op) -> dict[str, Any]:
    d = asdict(op)
    if "path" in d:
        d["path"] = ".".join(d["path"])
    return d


def describe(op: Op) -> str:
    if isinstance(op, SetConfig):
        return f"config {'.'.join(op.path)} = {op.value!r}"
    if isinstance(op, DeleteConfig):
        return f"config delete {'.'.join(op.path)}"
    if isinstance(op, RenameTensor):
        return f"rename {op.old} -> {op.new}"
    if isinstance(op, DropTensor):
        return f"drop {op.name}"
    if isinstance(op, RewriteD2TOffsets):
        return f"rewrite {op.name}: absolute target ids -> offsets"
    if isinstance(op, RebuildT2D):
        return f"rebuild {op.name} from {op.d2t_name} over {op.target_vocab_size} target ids"
    if isinstance(op, ReselectLmHead):
        return f"re-select {op.name} rows as {op.source}:{op.source_tensor}[{op.d2t_name} + arange]"
    if isinstance(op, CastTensor):
        return f"cast {op.name} to {op.dtype}"
    raise TypeError(op)
