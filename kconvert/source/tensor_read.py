"""Tensors by byte range from a validated safetensors header (kconvert.source.safetensors_header.TensorInfo): the
rows asked for, read with pread, never the whole file. Shared by `score` (a draft's weights) and `trace` (a target's
embedding rows and lm_head, an offline dump's states), so it sits with the header reader it trusts.

torch is imported at module level: only code that knows torch is there imports this module (kconvert.score after
require_torch(), the trace recorders after theirs).
"""
from __future__ import annotations

import os
from typing import Any

import torch

from kconvert.errors import InputError

FLOAT_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}

READ_CHUNK = 32 << 20  # bytes read at a time when converting while reading


def read_span(path: Any, info: Any, first_row: int = 0, rows: int | None = None, *,
              as_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Rows `first_row .. first_row + rows` (all by default) of a tensor whose span a validated safetensors
    header gave (kconvert.source.safetensors_header.TensorInfo), read with pread. A floating tensor is returned
    in `as_dtype` when given: read in chunks of READ_CHUNK bytes into one reused buffer and converted into the
    result, so the file's bytes are never held whole beside it (a Kimi-shaped draft: 1.8 GB of bf16 beside 3.6
    GB of float32). Buffers are torch.empty, not zero-filled: every byte is read or the read fails."""
    shape = tuple(info.shape)
    row_elems = 1
    for n in shape[1:]:
        row_elems *= n
    if info.dtype in FLOAT_DTYPES:
        dt = FLOAT_DTYPES[info.dtype]
    else:
        dt = {"I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool}.get(info.dtype)
        if dt is None:
            raise InputError(f"{info.name}: dtype {info.dtype} is not one score reads")
    size = torch.empty(0, dtype=dt).element_size()
    total_rows = shape[0] if shape else 1
    count = total_rows - first_row if rows is None else rows
    if not 0 <= first_row <= first_row + count <= total_rows:
        raise InputError(f"{info.name}: rows {first_row}..{first_row + count} outside 0..{total_rows}")
    start = info.start + first_row * row_elems * size
    nbytes = count * row_elems * size if shape else info.nbytes
    out_shape = (count,) + shape[1:] if shape else ()
    convert = as_dtype is not None and dt.is_floating_point and as_dtype != dt
    if not nbytes:
        return torch.empty(out_shape, dtype=as_dtype if convert else dt)
    if convert:
        out = torch.empty(nbytes // size, dtype=as_dtype)
        buf = torch.empty(min(nbytes, READ_CHUNK - READ_CHUNK % size), dtype=torch.uint8)
    else:
        out = buf = torch.empty(nbytes, dtype=torch.uint8)
    view = memoryview(buf.numpy())
    got = 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            while got < nbytes:
                want = min(len(view), nbytes - got) if convert else nbytes - got
                part = view[:want] if convert else view[got:]
                filled = 0
                while filled < want:
                    n = os.preadv(fd, [part[filled:]], start + got + filled)
                    if n <= 0:
                        break
                    filled += n
                if convert and filled:
                    e0 = got // size
                    out[e0:e0 + filled // size].copy_(buf[:filled].view(dt))
                got += filled
                if filled < want:
                    break
        finally:
            os.close(fd)
    except OSError as e:
        raise InputError(f"{info.file} [{info.name}]: cannot read: {e.strerror or e}") from None
    if got != nbytes:
        raise InputError(f"{info.file} [{info.name}]: only {got} of {nbytes} bytes (truncated)")
    return (out if convert else buf.view(dt)).reshape(out_shape)

