"""The safetensors header kconvert writes: the one writer of that format's framing, for checkpoints and traces.

Framing (safetensors' format, its README "Format"): an 8-byte little-endian header length, then that many bytes of
JSON mapping each tensor name to its dtype, shape and `[begin, end)` data offsets, with an optional
`__metadata__` of strings; the data follows. The tensors are laid out in the order given, contiguously from
offset 0, and the JSON is padded with spaces to a multiple of 8 bytes so the data stays aligned (safetensors pads
the same way). Names are written as UTF-8, not \\u-escaped (`ensure_ascii=False`): the header is UTF-8 JSON either
way, and the unescaped form is the one safetensors itself writes (serde_json).
"""
from __future__ import annotations

import json
import struct
from typing import Any, Iterable, Mapping, Sequence


def safetensors_header(tensors: Iterable[tuple[str, str, Sequence[int], int]],
                       metadata: Mapping[str, str] | None = None) -> bytes:
    """The header bytes (length prefix included) for `(name, dtype, shape, nbytes)` tensors, laid out in order."""
    obj: dict[str, Any] = {}
    if metadata:
        obj["__metadata__"] = dict(metadata)
    off = 0
    for name, dtype, shape, nbytes in tensors:
        obj[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
