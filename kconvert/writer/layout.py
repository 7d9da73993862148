"""From a checkpoint and a list of ops to the layout of the output shards, checked before any write.

Every op is checked against the checkpoint as the ops before it left it (a rename's source exists, its new
name is free, a drop names a tensor that is there, a rewrite finds a tensor of the right dtype and rank);
the first op that does not fit raises `UsageError` with a one-line reason, so nothing is written for a plan
that cannot apply. The small tensors rewrites need (d2t) are read here; large ones are only described by
chunk sources that the streaming writer pulls later.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kconvert.errors import InputError, KConvertError, UsageError
from kconvert.plan.ops import (
    CastTensor,
    DeleteConfig,
    DropTensor,
    RebuildT2D,
    RenameTensor,
    ReselectLmHead,
    RewriteD2TOffsets,
    SetConfig,
)
from kconvert.source import open_checkpoint
from kconvert.source.checkpoint import MAX_SMALL_TENSOR_BYTES, Checkpoint, load_folder
from kconvert.source.safetensors_header import DTYPE_SIZES, TensorInfo
from kconvert.writer import rewrite
from kconvert.writer.rewrite import ChunkSource


@dataclass
class OutTensor:
    """One tensor of the output: either the unchanged bytes of an input tensor (`copy_of`, copied by byte
    range) or bytes produced by `chunks` (a rewrite)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: str
    order: float  # position in the shard: the input start offset it replaces, new tensors last
    copy_of: TensorInfo | None = None
    chunks: ChunkSource | None = None
    values: np.ndarray | None = None  # decoded integer values of small rewritten tensors (d2t)
    tiebreak: int = 0  # creation order among new tensors

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_SIZES[self.dtype]


@dataclass
class Layout:
    shards: dict[str, list[OutTensor]] = field(default_factory=dict)  # output shard -> tensors in data order
    sharded: bool = False  # write model.safetensors.index.json
    shard_metadata: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def tensors(self) -> dict[str, OutTensor]:
        return {t.name: t for ts in self.shards.values() for t in ts}

    @property
    def total_tensor_bytes(self) -> int:
        return sum(t.nbytes for ts in self.shards.values() for t in ts)


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and name != "__metadata__" and not any(ord(c) < 32 for c in name)


def build_layout(ckpt: Checkpoint, ops: list[Any]) -> Layout:
    """Check `ops` against `ckpt` and return the output layout; raises UsageError/InputError."""
    if ckpt.root is None:
        raise InputError(f"{ckpt.ref}: fix needs the checkpoint's files locally (download it first)")
    for rel in ckpt.safetensors_files:
        if ckpt.local_path(rel) is None:
            raise InputError(f"{rel}: not available locally; fix needs every shard on disk")
    cur: dict[str, OutTensor] = {}
    for info in sorted(ckpt.tensors.values(), key=lambda t: (t.file, t.start, t.name)):
        cur[info.name] = OutTensor(info.name, info.dtype, info.shape, info.file, float(info.start), copy_of=info)
    new_order = 0

    def need(name: str, op: Any) -> OutTensor:
        if name not in cur:
            raise UsageError(f"op '{op.kind}' names tensor {name!r}, which the checkpoint does not hold "
                             "(at this point of the plan)")
        return cur[name]

    def int_values(t: OutTensor, op: Any) -> np.ndarray:
        if t.values is not None:
            return t.values
        if len(t.shape) != 1:
            raise UsageError(f"op '{op.kind}': {t.name} has shape {list(t.shape)}, expected a 1-D tensor")
        if t.nbytes > MAX_SMALL_TENSOR_BYTES:
            raise UsageError(f"op '{op.kind}': {t.name} is {t.nbytes} bytes, too large for a token map")
        data = b"".join(bytes(c) for c in t.chunks()) if t.chunks else ckpt.read_bytes(t.copy_of)
        return rewrite.decode_ints(data, t.dtype)

    for op in ops:
        if isinstance(op, (SetConfig, DeleteConfig)):
            continue
        if isinstance(op, RenameTensor):
            t = need(op.old, op)
            if not _valid_name(op.new):
                raise UsageError(f"rename {op.old!r}: new name {op.new!r} is not a valid tensor name")
            if op.new == op.old:
                continue
            if op.new in cur:
                raise UsageError(f"rename {op.old!r} -> {op.new!r}: a tensor of that name already exists")
            del cur[op.old]
            t.name = op.new
            cur[op.new] = t
        elif isinstance(op, DropTensor):
            need(op.name, op)
            del cur[op.name]
        elif isinstance(op, RewriteD2TOffsets):
            t = need(op.name, op)
            values = int_values(t, op)
            if values.size and values.min() < 0:
                raise UsageError(f"rewrite {op.name}: holds negative ids ({int(values.min())}), not absolute "
                                 "target ids")
            offsets = rewrite.d2t_offsets(values)
            _set_bytes(t, rewrite.encode_ints(offsets, t.dtype), values=offsets)
        elif isinstance(op, RebuildT2D):
            d2t = need(op.d2t_name, op)
            if not isinstance(op.target_vocab_size, int) or op.target_vocab_size <= 0:
                raise UsageError(f"rebuild {op.name}: target_vocab_size must be a positive integer")
            offsets = int_values(d2t, op)
            rewrite.target_ids(offsets, op.target_vocab_size, f"rebuild {op.name} from {op.d2t_name}")
            mask = rewrite.t2d_mask(offsets, op.target_vocab_size)
            t = cur.get(op.name)
            if t is None:
                if not _valid_name(op.name):
                    raise UsageError(f"rebuild: {op.name!r} is not a valid tensor name")
                new_order += 1
                t = cur[op.name] = OutTensor(op.name, "BOOL", (), d2t.shard, math.inf, tiebreak=int(new_order))
            t.dtype, t.shape = "BOOL", (op.target_vocab_size,)
            _set_bytes(t, mask.astype(np.uint8).tobytes())
        elif isinstance(op, ReselectLmHead):
            d2t = need(op.d2t_name, op)
            offsets = int_values(d2t, op)
            src_info, src_path = _source_tensor(op)
            if len(src_info.shape) != 2:
                raise UsageError(f"re-select {op.name}: source {op.source_tensor} has shape "
                                 f"{list(src_info.shape)}, expected [vocab, hidden]")
            ids = rewrite.target_ids(offsets, src_info.shape[0], f"re-select {op.name} from {op.source}")
            t = cur.get(op.name)
            if t is None:
                if not _valid_name(op.name):
                    raise UsageError(f"re-select: {op.name!r} is not a valid tensor name")
                new_order += 1
                t = cur[op.name] = OutTensor(op.name, src_info.dtype, (), d2t.shard, math.inf,
                                             tiebreak=int(new_order))
            elif len(t.shape) == 2 and t.shape[1] != src_info.shape[1]:
                raise UsageError(f"re-select {op.name}: hidden size {t.shape[1]} != source's {src_info.shape[1]}")
            t.dtype, t.shape = src_info.dtype, (len(ids), src_info.shape[1])
            t.copy_of, t.values = None, None
            t.chunks = rewrite.reselect_rows(src_path, src_info, ids)
        elif isinstance(op, CastTensor):
            t = need(op.name, op)
            if op.dtype not in rewrite.FLOAT_DTYPES or t.dtype not in rewrite.FLOAT_DTYPES:
                raise UsageError(f"cast {op.name}: only F32, F16 and BF16 convert ({t.dtype} -> {op.dtype})")
            if op.dtype == t.dtype:
                continue
            upstream = t.chunks if t.copy_of is None else rewrite.range_chunks(
                ckpt.root / t.copy_of.file, t.copy_of.start, t.copy_of.end, f"{t.copy_of.file} [{t.copy_of.name}]")
            t.chunks = rewrite.cast_chunks(upstream, t.dtype, op.dtype)
            t.copy_of, t.values, t.dtype = None, None, op.dtype
        else:
            raise UsageError(f"unknown op {type(op).__name__}")

    layout = Layout(sharded=ckpt.index is not None)
    input_shards = sorted({i.file for i in ckpt.tensors.values()} | set(ckpt.shard_metadata))
    for shard in input_shards:
        layout.shards[shard] = []
        layout.shard_metadata[shard] = dict(ckpt.shard_metadata.get(shard, {}))
    for t in cur.values():
        layout.shards.setdefault(t.shard, []).append(t)
    for shard, ts in layout.shards.items():
        ts.sort(key=lambda t: (t.order, t.tiebreak))
    # A shard every tensor of which was dropped is not written (unless it is the only one).
    if len(layout.shards) > 1:
        for shard in [s for s, ts in layout.shards.items() if not ts]:
            del layout.shards[shard]
    if len(layout.shards) > 1:
        layout.sharded = True
    return layout


def _set_bytes(t: OutTensor, data: bytes, *, values: np.ndarray | None = None) -> None:
    t.copy_of = None
    t.values = values
    t.chunks = lambda: iter((data,))


def _source_tensor(op: ReselectLmHead) -> tuple[TensorInfo, Path]:
    if not op.source:
        raise UsageError(f"re-select {op.name}: no source checkpoint given")
    try:
        p = Path(op.source).expanduser()
        src = load_folder(p, ref=op.source) if p.is_dir() else open_checkpoint(op.source)
    except KConvertError as e:
        raise InputError(f"re-select {op.name}: source {op.source}: {e.message}") from None
    info = src.tensors.get(op.source_tensor)
    if info is None:
        raise UsageError(f"re-select {op.name}: source {op.source} has no tensor {op.source_tensor!r}")
    path = src.local_path(info.file)
    if path is None:
        raise InputError(f"re-select {op.name}: {op.source}/{info.file} is not available locally")
    return info, path
