"""The tensor rewrites of `kconvert fix`: the only places where the writer decodes tensor bytes.

Each rewrite yields the new tensor's bytes in bounded chunks, so that a cast or an lm_head re-selection of a
multi-GB tensor never holds more than one chunk in memory.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np

from kconvert.errors import InputError
from kconvert.source.safetensors_header import DTYPE_SIZES, TensorInfo

CHUNK_BYTES = 8 * 1024 * 1024

ChunkSource = Callable[[], Iterator[bytes | memoryview]]

_INT_DTYPES = {"I64": "<i8", "I32": "<i4", "U32": "<u4", "U64": "<u8", "I16": "<i2", "U16": "<u2"}
FLOAT_DTYPES = ("F32", "F16", "BF16")


def read_exact(fd: int, offset: int, length: int, what: str) -> bytes:
    out = bytearray(length)
    mv = memoryview(out)
    got = 0
    while got < length:
        n = os.preadv(fd, [mv[got:]], offset + got)
        if n == 0:
            raise InputError(f"{what}: file ended {length - got} bytes early (truncated while reading?)")
        got += n
    return bytes(out)


def range_chunks(path: os.PathLike[str] | str, start: int, end: int, what: str,
                 chunk: int = CHUNK_BYTES) -> ChunkSource:
    """Chunks of the byte span [start, end) of a file, read lazily when the source is iterated."""

    def gen() -> Iterator[bytes]:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = start
            while pos < end:
                n = min(chunk, end - pos)
                yield read_exact(fd, pos, n, what)
                pos += n
        finally:
            os.close(fd)

    return gen


def decode_ints(data: bytes, dtype: str) -> np.ndarray:
    if dtype not in _INT_DTYPES:
        raise InputError(f"expected an integer tensor, found {dtype}")
    return np.frombuffer(data, dtype=_INT_DTYPES[dtype]).astype(np.int64)


def encode_ints(values: np.ndarray, dtype: str) -> bytes:
    np_dtype = np.dtype(_INT_DTYPES[dtype])
    info = np.iinfo(np_dtype)
    if values.size and (values.min() < info.min or values.max() > info.max):
        raise InputError(f"values do not fit {dtype}")
    return values.astype(np_dtype).tobytes()


def d2t_offsets(absolute: np.ndarray) -> np.ndarray:
    """vLLM and SGLang map draft id i to target id i + d2t[i]; some trainers store the target id itself."""
    return absolute - np.arange(absolute.shape[0], dtype=np.int64)


def t2d_mask(offsets: np.ndarray, target_vocab_size: int) -> np.ndarray:
    ids = np.arange(offsets.shape[0], dtype=np.int64) + offsets
    mask = np.zeros(target_vocab_size, dtype=np.bool_)
    mask[ids] = True
    return mask


def target_ids(offsets: np.ndarray, vocab: int, what: str) -> np.ndarray:
    ids = np.arange(offsets.shape[0], dtype=np.int64) + offsets
    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{what}: draft id {i} maps to target id {int(ids[i])}, outside a vocabulary of {vocab}")
    return ids


def reselect_rows(path: os.PathLike[str] | str, info: TensorInfo, ids: np.ndarray,
                  chunk: int = CHUNK_BYTES) -> ChunkSource:
    """Rows `ids` of a 2-D tensor read by byte range (consecutive ids coalesced into one read), never the
    whole tensor: a target's lm_head is GBs, the draft keeps a few % of its rows."""
    row_bytes = (info.nbytes // info.shape[0]) if info.shape[0] else 0
    what = f"{info.file} [{info.name}]"

    def gen() -> Iterator[bytes]:
        fd = os.open(path, os.O_RDONLY)
        try:
            rows_per_chunk = max(1, chunk // max(row_bytes, 1))
            for c0 in range(0, len(ids), rows_per_chunk):
                sel = ids[c0:c0 + rows_per_chunk]
                buf = bytearray(len(sel) * row_bytes)
                mv = memoryview(buf)
                # Runs of consecutive target ids are one contiguous span in the file.
                breaks = np.flatnonzero(np.diff(sel) != 1) + 1
                starts = np.concatenate(([0], breaks))
                ends = np.concatenate((breaks, [len(sel)]))
                for s, e in zip(starts.tolist(), ends.tolist()):
                    off = info.start + int(sel[s]) * row_bytes
                    mv[s * row_bytes:e * row_bytes] = read_exact(fd, off, (e - s) * row_bytes, what)
                yield bytes(buf)
        finally:
            os.close(fd)

    return gen


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounding to nearest even; NaN stays a quiet NaN."""
    u = x.astype(np.float32, copy=False).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return rounded


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _to_f32(data: bytes | memoryview, dtype: str) -> np.ndarray:
    if dtype == "F32":
        return np.frombuffer(data, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(data, dtype="<f2").astype(np.float32)
    return bf16_to_f32(np.frombuffer(data, dtype="<u2"))


def _from_f32(x: np.ndarray, dtype: str) -> bytes:
    if dtype == "F32":
        return x.astype("<f4", copy=False).tobytes()
    if dtype == "F16":
        with np.errstate(over="ignore"):
            return x.astype("<f2").tobytes()
    return f32_to_bf16(x).astype("<u2", copy=False).tobytes()


def cast_chunks(upstream: ChunkSource, src: str, dst: str) -> ChunkSource:
    """Convert between F32, F16 and BF16 chunk by chunk (re-aligned to whole elements)."""
    size = DTYPE_SIZES[src]

    def gen() -> Iterator[bytes]:
        carry = b""
        for piece in upstream():
            data = carry + bytes(piece) if carry else piece
            whole = len(data) - len(data) % size
            carry = bytes(data[whole:])
            if whole:
                yield _from_f32(_to_f32(data[:whole], src), dst)
        if carry:
            raise InputError(f"cast {src}->{dst}: {len(carry)} trailing bytes are not a whole element")

    return gen
