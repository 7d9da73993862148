"""PyTorch zip checkpoints built without torch: a hand-written pickle of the exact opcodes `torch.save` emits for
a state dict (protocol 2: OrderedDict, `_rebuild_tensor_v2`, persistent ids of `torch.*Storage`), and a zip
writer that stores members uncompressed like torch's and can leave large storages as holes of a sparse file.

The same writer builds hostile archives: any pickle bytes, any member names, storages of any size.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STORAGE = {"F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2), "BF16": ("BFloat16Storage", 2),
           "I64": ("LongStorage", 8), "I32": ("IntStorage", 4), "BOOL": ("BoolStorage", 1), "U8": ("ByteStorage", 1)}
_ZEROS = bytes(16 * 1024 * 1024)


def _unicode(s: str) -> bytes:
    b = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def _int(i: int) -> bytes:
    if 0 <= i < 256:
        return b"K" + bytes([i])
    if 0 <= i < 65536:
        return b"M" + struct.pack("<H", i)
    if -2**31 <= i < 2**31:
        return b"J" + struct.pack("<i", i)
    raw = i.to_bytes((i.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _tuple(items: list[bytes]) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


@dataclass
class Entry:
    name: str
    dtype: str
    key: str
    numel: int  # of the storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def state_dict_pickle(entries: list[Entry]) -> bytes:
    """The pickle torch.save writes for an OrderedDict of tensors (protocol 2)."""
    body = b"\x80\x02" + _global("collections", "OrderedDict") + b")R" + b"("
    for e in entries:
        cls, _ = STORAGE[e.dtype]
        pid = _tuple([_unicode("storage"), _global("torch", cls), _unicode(e.key), _unicode("cpu"), _int(e.numel)])
        args = _tuple([pid + b"Q", _int(e.offset), _tuple([_int(x) for x in e.shape]),
                       _tuple([_int(x) for x in e.stride]), b"\x89", _global("collections", "OrderedDict") + b")R"])
        body += _unicode(e.name) + _global("torch._utils", "_rebuild_tensor_v2") + args + b"R"
    return body + b"u."


def write_zip(path: Path, members: list[tuple[str, bytes | int]]) -> Path:
    """A zip of stored members; an int member is a hole of that many zero bytes (sparse on disk)."""
    central = b""
    with open(path, "wb") as f:
        for name, data in members:
            nb = name.encode("utf-8")
            size = data if isinstance(data, int) else len(data)
            if isinstance(data, int):
                crc = 0
                left = size
                while left:
                    n = min(left, len(_ZEROS))
                    crc = zlib.crc32(_ZEROS[:n], crc)
                    left -= n
            else:
                crc = zlib.crc32(data)
            off = f.tell()
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, size, size, len(nb), 0) + nb)
            if isinstance(data, int):
                f.seek(size, 1)
            else:
                f.write(data)
            central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, size, size, len(nb),
                                   0, 0, 0, 0, 0, off) + nb
        cd_off = f.tell()
        f.write(central)
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd_off, 0))
    return path


def save_state_dict(path: Path, tensors: dict[str, tuple], *, archive: str = "archive") -> Path:
    """tensors: name -> (dtype, shape, values or None); None leaves the storage as a hole (zeros)."""
    entries, members = [], []
    for i, (name, (dtype, shape, data)) in enumerate(tensors.items()):
        numel = int(np.prod(shape)) if shape else 1
        entries.append(Entry(name, dtype, str(i), numel, 0, tuple(shape), row_major(tuple(shape))))
        itemsize = STORAGE[dtype][1]
        if data is None:
            members.append((f"{archive}/data/{i}", numel * itemsize))
        else:
            arr = np.asarray(data)
            if dtype == "BF16":
                raw = (arr.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
            else:
                np_dt = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "BOOL": "?", "U8": "u1"}[dtype]
                raw = arr.astype(np_dt).tobytes()
            members.append((f"{archive}/data/{i}", raw))
    pkl = state_dict_pickle(entries)
    return write_zip(path, [(f"{archive}/data.pkl", pkl), (f"{archive}/byteorder", b"little")] + members
                     + [(f"{archive}/version", b"3\n")])
