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
from typing import Any, Callable

import numpy as np

import kconvert.writer.rewrite as rewrite
from kconvert.errors import InputError, KConvertError, UsageError
from kconvert.guard.text import has_control
from kconvert.source import open_checkpoint
from kconvert.source.checkpoint import MAX_SMALL_TENSOR_BYTES, Checkpoint, load_folder
from kconvert.source.safetensors_header import DTYPE_SIZES, TensorInfo
from kconvert.writer.ops import (
    CastTensor,
    DeleteConfig,
    DropTensor,
    RebuildT2D,
    RenameTensor,
    ReselectLmHead,
    RewriteD2TOffsets,
    SetConfig,
)


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
    chunks: rewrite.ChunkSource | None = None
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
    return isinstance(name, str) and bool(name) and name != "__metadata__" and not has_control(name)


class _Tensors:
    """The output tensors as the ops so far left them (name -> tensor), and what a handler needs to act on them."""

    def __init__(self, ckpt: Checkpoint):
        self.ckpt = ckpt
        self.cur: dict[str, OutTensor] = {}
        for info in sorted(ckpt.tensors.values(), key=lambda t: (t.file, t.start, t.name)):
            self.cur[info.name] = OutTensor(info.name, info.dtype, info.shape, info.file, float(info.start),
                                            copy_of=info)
        self.created = 0

    def need(self, name: str, op: Any) -> OutTensor:
        if name not in self.cur:
            raise UsageError(f"op '{op.kind}' names tensor {name!r}, which the checkpoint does not hold "
                             "(at this point of the plan)")
        return self.cur[name]

    def get_or_create(self, name: str, dtype: str, shard: str, what: str) -> OutTensor:
        """The tensor `name`, or a new one placed after every input tensor of `shard`."""
        t = self.cur.get(name)
        if t is None:
            if not _valid_name(name):
                raise UsageError(f"{what}: {name!r} is not a valid tensor name")
            self.created += 1
            t = self.cur[name] = OutTensor(name, dtype, (), shard, math.inf, tiebreak=self.created)
        return t

    def int_values(self, t: OutTensor, op: Any) -> np.ndarray:
        """The integer values of a small 1-D tensor (a token map), as the ops so far left them."""
        if t.values is not None:
            return t.values
        if len(t.shape) != 1:
            raise UsageError(f"op '{op.kind}': {t.name} has shape {list(t.shape)}, expected a 1-D tensor")
        if t.nbytes > MAX_SMALL_TENSOR_BYTES:
            raise UsageError(f"op '{op.kind}': {t.name} is {t.nbytes} bytes, too large for a token map")
        data = b"".join(bytes(c) for c in t.chunks()) if t.chunks else self.ckpt.read_bytes(t.copy_of)
        return rewrite.decode_ints(data, t.dtype)


# One handler per op type: each checks its op against the tensors as the ops before it left them.


def _config_op(ts: _Tensors, op: SetConfig | DeleteConfig) -> None:
    """Config ops change config.json only (`writer.config`)."""


def _rename(ts: _Tensors, op: RenameTensor) -> None:
    t = ts.need(op.old, op)
    if not _valid_name(op.new):
        raise UsageError(f"rename {op.old!r}: new name {op.new!r} is not a valid tensor name")
    if op.new == op.old:
        return
    if op.new in ts.cur:
        raise UsageError(f"rename {op.old!r} -> {op.new!r}: a tensor of that name already exists")
    del ts.cur[op.old]
    t.name = op.new
    ts.cur[op.new] = t


def _drop(ts: _Tensors, op: DropTensor) -> None:
    ts.need(op.name, op)
    del ts.cur[op.name]


def _d2t_offsets(ts: _Tensors, op: RewriteD2TOffsets) -> None:
    t = ts.need(op.name, op)
    values = ts.int_values(t, op)
    if values.size and values.min() < 0:
        raise UsageError(f"rewrite {op.name}: holds negative ids ({int(values.min())}), not absolute target ids")
    offsets = rewrite.d2t_offsets(values)
    _set_bytes(t, rewrite.encode_ints(offsets, t.dtype), values=offsets)


def _rebuild_t2d(ts: _Tensors, op: RebuildT2D) -> None:
    d2t = ts.need(op.d2t_name, op)
    if not isinstance(op.target_vocab_size, int) or op.target_vocab_size <= 0:
        raise UsageError(f"rebuild {op.name}: target_vocab_size must be a positive integer")
    offsets = ts.int_values(d2t, op)
    rewrite.target_ids(offsets, op.target_vocab_size, f"rebuild {op.name} from {op.d2t_name}")
    mask = rewrite.t2d_mask(offsets, op.target_vocab_size)
    t = ts.get_or_create(op.name, "BOOL", d2t.shard, "rebuild")
    t.dtype, t.shape = "BOOL", (op.target_vocab_size,)
    _set_bytes(t, mask.astype(np.uint8).tobytes())


def _reselect_lm_head(ts: _Tensors, op: ReselectLmHead) -> None:
    d2t = ts.need(op.d2t_name, op)
    offsets = ts.int_values(d2t, op)
    src_info, src_path = _source_tensor(op)
    if len(src_info.shape) != 2:
        raise UsageError(f"re-select {op.name}: source {op.source_tensor} has shape {list(src_info.shape)}, "
                         "expected [vocab, hidden]")
    ids = rewrite.target_ids(offsets, src_info.shape[0], f"re-select {op.name} from {op.source}")
    existing = op.name in ts.cur
    t = ts.get_or_create(op.name, src_info.dtype, d2t.shard, "re-select")
    if existing and len(t.shape) == 2 and t.shape[1] != src_info.shape[1]:
        raise UsageError(f"re-select {op.name}: hidden size {t.shape[1]} != source's {src_info.shape[1]}")
    t.dtype, t.shape = src_info.dtype, (len(ids), src_info.shape[1])
    t.copy_of, t.values = None, None
    t.chunks = rewrite.reselect_rows(src_path, src_info, ids)


def _cast(ts: _Tensors, op: CastTensor) -> None:
    t = ts.need(op.name, op)
    if op.dtype not in rewrite.FLOAT_DTYPES or t.dtype not in rewrite.FLOAT_DTYPES:
        raise UsageError(f"cast {op.name}: only F32, F16 and BF16 convert ({t.dtype} -> {op.dtype})")
    if op.dtype == t.dtype:
        return
    assert ts.ckpt.root is not None
    upstream = t.chunks if t.copy_of is None else rewrite.range_chunks(
        ts.ckpt.root / t.copy_of.file, t.copy_of.start, t.copy_of.end, f"{t.copy_of.file} [{t.copy_of.name}]")
    t.chunks = rewrite.cast_chunks(upstream, t.dtype, op.dtype)
    t.copy_of, t.values, t.dtype = None, None, op.dtype


HANDLERS: dict[type, Callable[[_Tensors, Any], None]] = {
    SetConfig: _config_op,
    DeleteConfig: _config_op,
    RenameTensor: _rename,
    DropTensor: _drop,
    RewriteD2TOffsets: _d2t_offsets,
    RebuildT2D: _rebuild_t2d,
    ReselectLmHead: _reselect_lm_head,
    CastTensor: _cast,
}


def build_layout(ckpt: Checkpoint, ops: list[Any]) -> Layout:
    """Check `ops` against `ckpt` and return the output layout; raises UsageError/InputError."""
    if ckpt.root is None:
        raise InputError(f"{ckpt.ref}: fix needs the checkpoint's files locally (download it first)")
    for rel in ckpt.safetensors_files:
        if ckpt.local_path(rel) is None:
            raise InputError(f"{rel}: not available locally; fix needs every shard on disk")
    ts = _Tensors(ckpt)
    for op in ops:
        handler = HANDLERS.get(type(op))
        if handler is None:
            raise UsageError(f"unknown op {type(op).__name__}")
        handler(ts, op)
    return _shards(ckpt, ts.cur)


def _shards(ckpt: Checkpoint, tensors: dict[str, OutTensor]) -> Layout:
    """The output tensors by shard, in data order: the input's shards, less those every tensor of which went."""
    layout = Layout(sharded=ckpt.index is not None)
    input_shards = sorted({i.file for i in ckpt.tensors.values()} | set(ckpt.shard_metadata))
    for shard in input_shards:
        layout.shards[shard] = []
        layout.shard_metadata[shard] = dict(ckpt.shard_metadata.get(shard, {}))
    for t in tensors.values():
        layout.shards.setdefault(t.shard, []).append(t)
    for ts in layout.shards.values():
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
