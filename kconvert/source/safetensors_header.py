"""Validated reading of safetensors headers and indexes, without touching the weights.

Hand-written rather than `safetensors.safe_open` because kconvert must (a) never map or read tensor data to
inspect a checkpoint, (b) name the offending file *and tensor* in one line for every violation, and (c) cap
what a hostile header may make it allocate. The checks mirror the format's own rules
(https://github.com/huggingface/safetensors, "Format"): 8-byte little-endian header length, a JSON object
of tensors with dtype, shape and data_offsets relative to the end of the header, plus `__metadata__`.
"""
from __future__ import annotations

import math
import os
import posixpath
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import HeaderError
from kconvert.guard.paths import lone_surrogate as _lone_surrogate
from kconvert.guard.paths import loads_json
from kconvert.guard.text import has_control
from kconvert.source.names import INDEX_NAME  # noqa: F401  (re-exported: older imports name it here)

# safetensors itself refuses headers above 100 MB; a draft's header is a few KB.
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_INDEX_BYTES = 64 * 1024 * 1024
MAX_TENSORS = 1_000_000
MAX_RANK = 8

DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype, shape and absolute byte span in that file."""

    name: str
    file: str  # path relative to the checkpoint folder, '/'-separated
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class SafetensorsHeader:
    file: str
    header_len: int
    data_start: int
    file_size: int | None
    metadata: dict[str, str]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


def _serde_int(text: str) -> Any:
    # serde_json reads `-0` as the float -0.0, so safetensors refuses it where an integer is due; Python's json
    # reads it as the integer 0. Kept a float here, it fails the integer checks as it fails in safetensors.
    return -0.0 if text == "-0" else int(text)


def loads_strict_json(raw: bytes, what: str, *, max_depth: int = 64, serde: bool = False) -> Any:
    """Parse JSON strictly, the one reader of JSON kconvert did not write (configs, headers, indexes, reports,
    trace metadata): `kconvert.guard.paths.loads_json` (duplicate keys, invalid UTF-8, nesting counted before
    parsing, NaN/Infinity and numbers beyond a double, lone UTF-16 surrogate escapes: all refused), which the file
    options below the checkpoint readers (prompts, continuations) read through too. `what` names the document in
    the message ("header is not valid JSON"); "" leaves it to a caller that names the file itself. `serde`: also
    read `-0` as serde_json, the parser of safetensors' Rust reader, does (a float, so not an integer); a header's
    lone surrogate is worded as safetensors' refusal by parse_header_json, remote headers too."""
    return loads_json(raw, what, max_depth=max_depth, parse_int=_serde_int if serde else None, surrogates=not serde)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_header_json(file: str, header: Any, *, data_start: int, file_size: int | None) -> SafetensorsHeader:
    """Validate a decoded header object; `file_size` None means the size is unknown (remote metadata)."""
    if not isinstance(header, dict):
        raise HeaderError(file, "header is not a JSON object")
    bad = _lone_surrogate(header)
    if bad is not None:
        raise HeaderError(file, f"header is not valid JSON for safetensors: the string {bad!r:.60} holds a lone "
                                "UTF-16 surrogate escape, which serde_json (safetensors' parser) refuses")
    if len(header) > MAX_TENSORS:
        raise HeaderError(file, f"header lists {len(header)} entries (cap {MAX_TENSORS})")
    meta = header.get("__metadata__", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise HeaderError(file, "__metadata__ must map strings to strings")
    out = SafetensorsHeader(file=file, header_len=data_start - 8, data_start=data_start,
                            file_size=file_size, metadata=dict(meta))
    data_len = None if file_size is None else file_size - data_start
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not name or has_control(name):
            raise HeaderError(file, "tensor name is empty or holds control characters", tensor=repr(name))
        if not isinstance(entry, dict):
            raise HeaderError(file, "entry is not an object", tensor=name)
        extra = set(entry) - {"dtype", "shape", "data_offsets"}
        if extra or len(entry) != 3:
            raise HeaderError(file, f"entry must hold exactly dtype, shape, data_offsets (has {sorted(entry)})",
                              tensor=name)
        dtype = entry["dtype"]
        if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
            raise HeaderError(file, f"unknown dtype {dtype!r}", tensor=name)
        shape = entry["shape"]
        if (not isinstance(shape, list) or len(shape) > MAX_RANK
                or not all(_is_int(d) and 0 <= d < 2**40 for d in shape)):
            raise HeaderError(file, f"invalid shape {shape!r}", tensor=name)
        offs = entry["data_offsets"]
        if (not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) and o >= 0 for o in offs)
                or offs[0] > offs[1]):
            raise HeaderError(file, f"invalid data_offsets {offs!r}", tensor=name)
        begin, end = offs
        expected = math.prod(shape) * DTYPE_SIZES[dtype]
        if end - begin != expected:
            raise HeaderError(file, f"byte span {end - begin} != shape {shape} x {dtype} = {expected} bytes",
                              tensor=name)
        if data_len is not None and end > data_len:
            raise HeaderError(file, f"data ends at byte {data_start + end}, past the end of the file "
                                    f"({file_size} bytes): truncated or lying header", tensor=name)
        spans.append((begin, end, name))
        out.tensors[name] = TensorInfo(name=name, file=file, dtype=dtype, shape=tuple(shape),
                                       start=data_start + begin, end=data_start + end)
    _check_tiling(file, spans, data_len)
    return out


def _check_tiling(file: str, spans: list[tuple[int, int, str]], data_len: int | None) -> None:
    """The tensors tile the data section exactly, as safetensors' own reader demands (safetensors/src/tensor.rs,
    `Metadata::validate` and `read_metadata`): sorted by (begin, end), each begins where the previous one ended,
    the first at 0, and the last ends at the end of the file. A hole, an overlap or trailing bytes make
    `safe_open` refuse the shard ("invalid offset", "incomplete metadata, file not fully covered"), so the engine
    could not load what inspect passed; and bytes no tensor covers are a place to carry data no reader checks."""
    at, prev = 0, None
    for begin, end, name in sorted(spans):
        if begin < at:
            raise HeaderError(file, f"byte span [{begin}, {end}) overlaps that of {prev!r}", tensor=name)
        if begin > at:
            where = f"after {prev!r}" if prev is not None else "at the start of the data section"
            raise HeaderError(file, f"data_offsets begin at {begin}, leaving a hole of {begin - at} bytes {where}; "
                                    "safetensors requires the tensors to tile the data", tensor=name)
        at, prev = end, name
    if data_len is not None and data_len != at:
        raise HeaderError(file, f"the data section holds {data_len} bytes but its tensors cover {at}: "
                                f"{data_len - at} trailing bytes no tensor describes (safetensors refuses the file)")


def header_length(rel: str, first8: bytes, size: int | None) -> int:
    """The header length a file's first 8 bytes declare (little-endian u64), checked against the cap and, when
    known, the file size."""
    (n,) = struct.unpack("<Q", first8)
    if n > MAX_HEADER_BYTES:
        raise HeaderError(rel, f"header length {n} exceeds the {MAX_HEADER_BYTES} byte cap")
    if size is not None and 8 + n > size:
        raise HeaderError(rel, f"header length {n} runs past the end of the file ({size} bytes)")
    return n


def read_header(path: Path, rel: str) -> SafetensorsHeader:
    """Read and validate the header of one local safetensors file (only the header bytes are read)."""
    try:
        # O_NONBLOCK + S_ISREG: an index may name a FIFO or a device inside the folder; a plain open() of a
        # FIFO blocks forever (a hung CI gate). Refuse anything that is not a regular file before reading, by
        # `stat` before it is opened at all (as kconvert.guard.paths.open_regular: opening a device node can act
        # on the device, and a socket cannot be opened: "No such device or address"), then again by `fstat`.
        st0 = os.stat(path)
        if stat.S_ISDIR(st0.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st0.st_mode):
            raise HeaderError(rel, "is not a regular file (FIFO, device or socket)")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError
            raise HeaderError(rel, "is not a regular file (FIFO, device or socket)")
        with open(fd, "rb") as f:
            size = st.st_size
            if size < 8:
                raise HeaderError(rel, f"file is {size} bytes, too short for a safetensors header")
            n = header_length(rel, f.read(8), size)
            raw = f.read(n)
    except PermissionError:
        raise HeaderError(rel, "permission denied") from None
    except IsADirectoryError:
        raise HeaderError(rel, "is a directory, not a file") from None
    except OSError as e:
        raise HeaderError(rel, f"cannot read: {e.strerror or e}") from None
    if len(raw) != n:
        raise HeaderError(rel, "file shrank while reading its header")
    return parse_header_bytes(rel, raw, file_size=size)


def parse_header_bytes(rel: str, raw: bytes, *, file_size: int | None) -> SafetensorsHeader:
    """Validate the header JSON bytes of one safetensors file (the `n` bytes after its 8-byte length), local or
    read by range from the Hub: the same checks either way."""
    try:
        obj = loads_strict_json(raw.rstrip(b" "), "header", serde=True)
    except ValueError as e:
        raise HeaderError(rel, str(e)) from None
    return parse_header_json(rel, obj, data_start=8 + len(raw), file_size=file_size)


def check_relative_path(root: Path, rel: Any, what: str, *, allowed_root: Path | None = None) -> str:
    """An index or config path must stay inside the checkpoint folder: no absolute path, no '..',
    no symlink that resolves outside the folder (`allowed_root`: the Hub cache's repo folder, whose
    snapshots link into its blobs)."""
    if not isinstance(rel, str) or not rel:
        raise HeaderError(what, f"path {rel!r} is not a non-empty string")
    if "\x00" in rel or "\\" in rel:
        raise HeaderError(what, f"path {rel!r} holds a NUL or backslash")
    # A newline in a path would split the one-line refusal (and could forge a second 'error:' line); a C1 control
    # (U+009B is CSI) acts on a terminal as ESC does.
    if has_control(rel):
        raise HeaderError(what, f"path {rel!r} holds control characters")
    if rel.startswith("/") or posixpath.isabs(rel) or (len(rel) > 1 and rel[1] == ":"):
        raise HeaderError(what, f"path {rel!r} is absolute; only paths inside the checkpoint folder are read")
    parts = rel.split("/")
    if any(p in ("..", "") for p in parts):
        raise HeaderError(what, f"path {rel!r} leaves the checkpoint folder or is malformed")
    full = root / rel
    try:
        real = full.resolve(strict=False)
        real_root = (allowed_root or root).resolve(strict=True)
    except (OSError, RuntimeError) as e:
        raise HeaderError(what, f"path {rel!r} cannot be resolved: {e}") from None
    if real != real_root and real_root not in real.parents:
        raise HeaderError(what, f"path {rel!r} resolves outside the checkpoint folder (symlink escape)")
    return rel


def parse_index(raw: bytes, what: str = INDEX_NAME) -> dict[str, str]:
    """Validate the JSON of a sharded index; returns tensor name -> shard file."""
    if len(raw) > MAX_INDEX_BYTES:
        raise HeaderError(what, f"index is {len(raw)} bytes (cap {MAX_INDEX_BYTES})")
    try:
        obj = loads_strict_json(raw, "index")
    except ValueError as e:
        raise HeaderError(what, str(e)) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("weight_map"), dict):
        raise HeaderError(what, "index has no 'weight_map' object")
    wm = obj["weight_map"]
    for name, shard in wm.items():
        # Same rule as header tensor names: the name is printed in one-line refusals ("index [name]: ...").
        if not name or has_control(name):
            raise HeaderError(what, f"tensor name {name!r} is empty or holds control characters")
        if not isinstance(shard, str):
            raise HeaderError(what, f"shard of {name!r} is not a string")
    return dict(wm)
