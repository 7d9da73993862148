"""Static reading of PyTorch zip checkpoints (`torch.save`: `pytorch_model.bin`, `*.pt`, `*.pth`): tensor names,
dtypes, shapes and byte spans, without unpickling anything.

A `torch.save` file is a zip archive: `<archive>/data.pkl` (a pickle whose tensors refer to storages by key) and
one member per storage, `<archive>/data/<key>`, holding the raw bytes. Unpickling runs whatever callables the
pickle names, so kconvert never does it here. It walks the opcodes with `pickletools.genops` and interprets only
what a state dict of tensors needs, the same short list torch's own weights-only unpickler allows for tensor
rebuilding: `collections.OrderedDict`, `torch._utils._rebuild_tensor_v2` (and `_rebuild_tensor`,
`_rebuild_parameter`), and the `torch.*Storage` dtype classes named by persistent ids. Any other global, any
opcode that builds arbitrary objects (INST, OBJ, NEWOBJ, EXT*, ...), or a REDUCE of anything but those callables
is refused with a one-line error (exit 2). Nothing named by the pickle is imported or called.

Every name, offset and size is validated like a safetensors header: member names stay inside one archive folder
(no absolute path, '..', backslash or control character), members are stored uncompressed (torch's writer never
compresses), each storage member lies inside the file and holds exactly numel x itemsize bytes, and every tensor
view (offset, shape, stride) stays inside its storage. What torch.load itself checks before it would load the
file is checked too, so inspect never passes a .bin the engine cannot open: the zip directory as torch's miniz reads
it, the small records torch reads (version, byteorder, .storage_alignment, ...) and requires_grad. Storage bytes are
never read whole (a .bin can be GBs), and CRCs are not compared (torch does not compare them either).
Contiguous little-endian tensors get absolute byte spans in the file, so inspect can read d2t/t2d and norms by
byte range as it does for safetensors.
"""
from __future__ import annotations

import math
import pickletools
import stat
import struct
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import HeaderError
from kconvert.guard.text import has_control
from kconvert.source.safetensors_header import MAX_RANK, MAX_TENSORS, TensorInfo

MAX_PICKLE_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 200_000
MAX_OPS = 20_000_000
MAX_DIRECTORY_BYTES = 64 * 1024 * 1024  # MAX_MEMBERS entries of ~300 bytes
MAX_STACK = 100_000

# torch.<Name>Storage -> (safetensors dtype, bytes per element)
STORAGE_DTYPES: dict[str, tuple[str, int]] = {
    "FloatStorage": ("F32", 4), "DoubleStorage": ("F64", 8), "HalfStorage": ("F16", 2),
    "BFloat16Storage": ("BF16", 2), "LongStorage": ("I64", 8), "IntStorage": ("I32", 4),
    "ShortStorage": ("I16", 2), "CharStorage": ("I8", 1), "ByteStorage": ("U8", 1), "BoolStorage": ("BOOL", 1),
}
_FLOAT_DTYPES = {"F32", "F64", "F16", "BF16"}
REBUILDERS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor"),
              ("torch._utils", "_rebuild_parameter")}
ALLOWED_GLOBALS = ({("collections", "OrderedDict")} | REBUILDERS
                   | {("torch", name) for name in STORAGE_DTYPES})

@dataclass(frozen=True)
class _Global:
    module: str
    name: str


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: str
    itemsize: int
    numel: int


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _OrderedDict(dict):
    """What the walker builds for collections.OrderedDict(): a plain dict (insertion-ordered anyway)."""


@dataclass
class TorchZipFile:
    file: str
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    # tensor -> why its bytes cannot be read by range (non-contiguous view, big-endian archive)
    unreadable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _refuse(file: str, msg: str, tensor: str | None = None) -> HeaderError:
    return HeaderError(file, msg, tensor=tensor)


def _check_member_name(file: str, name: str) -> None:
    if not name or "\x00" in name or "\\" in name or has_control(name):
        raise _refuse(file, f"zip member {name!r} holds a NUL, backslash or control character")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(file, f"zip member {name!r} is an absolute path")
    if any(p in ("..", "") for p in name.rstrip("/").split("/")):
        raise _refuse(file, f"zip member {name!r} leaves the archive folder or is malformed")


class _Machine:
    """The walker's state: the pickle stack, memo and mark positions of one data.pkl."""

    def __init__(self, file: str):
        self.file = file
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.marks: list[int] = []

    def refuse(self, msg: str) -> HeaderError:
        return _refuse(self.file, f"data.pkl: {msg}")

    def pop(self) -> Any:
        if not self.stack:
            raise self.refuse("stack underflow")
        return self.stack.pop()

    def top(self) -> Any:
        """The object on top of the stack (left there); an empty stack is an underflow."""
        return self.stack[-1] if self.stack else self.pop()

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.refuse("MARK expected")
        at = self.marks.pop()
        items = self.stack[at:]
        del self.stack[at:]
        return items

    def push(self, x: Any) -> None:
        self.stack.append(x)


# One small handler per opcode: (machine, decoded argument) -> None. Whatever is not in this table (nor PROTO,
# FRAME, STOP, handled by the loop) is refused before it could matter.
def _op_tuple_n(k: int):
    def op(m: _Machine, _arg: Any) -> None:
        if len(m.stack) < k:
            raise m.refuse("stack underflow")
        items = m.stack[-k:]
        del m.stack[-k:]
        m.push(tuple(items))
    return op


def _op_dict(m: _Machine, _arg: Any) -> None:
    items = m.pop_mark()
    if len(items) % 2:
        raise m.refuse("odd number of dict items")
    m.push(_to_dict(m.file, items))


def _op_get(m: _Machine, arg: Any) -> None:
    if int(arg) not in m.memo:
        raise m.refuse(f"memo {arg} read before written")
    m.push(m.memo[int(arg)])


def _op_put(m: _Machine, arg: Any) -> None:
    m.memo[int(arg)] = m.top()


def _op_memoize(m: _Machine, _arg: Any) -> None:
    m.memo[len(m.memo)] = m.top()


def _op_global(m: _Machine, arg: Any) -> None:
    module, _, attr = str(arg).partition(" ")
    m.push(_global(m.file, module, attr))


def _op_stack_global(m: _Machine, _arg: Any) -> None:
    attr, module = m.pop(), m.pop()
    if not (isinstance(module, str) and isinstance(attr, str)):
        raise m.refuse("STACK_GLOBAL of non-strings")
    m.push(_global(m.file, module, attr))


def _op_reduce(m: _Machine, _arg: Any) -> None:
    args = m.pop()
    fn = m.pop()
    m.push(_reduce(m.file, fn, args))


def _op_build(m: _Machine, _arg: Any) -> None:
    state = m.pop()
    obj = m.stack[-1] if m.stack else None
    # OrderedDict state dicts carry `_metadata` as instance state; it is data, and it is dropped.
    if not isinstance(obj, _OrderedDict) or not isinstance(state, (dict, tuple, type(None))):
        raise m.refuse("BUILD of an object other than an OrderedDict (refused, nothing executed)")


def _op_setitem(m: _Machine, _arg: Any) -> None:
    v, k = m.pop(), m.pop()
    d = m.stack[-1] if m.stack else None
    if not isinstance(d, dict):
        raise m.refuse("SETITEM on a non-dict")
    d[_key(m.file, k)] = v


def _op_setitems(m: _Machine, _arg: Any) -> None:
    items = m.pop_mark()
    d = m.stack[-1] if m.stack else None
    if not isinstance(d, dict) or len(items) % 2:
        raise m.refuse("SETITEMS on a non-dict")
    d.update(_to_dict(m.file, items))


def _op_append(m: _Machine, _arg: Any) -> None:
    v = m.pop()
    if not m.stack or not isinstance(m.stack[-1], list):
        raise m.refuse("APPEND on a non-list")
    m.stack[-1].append(v)


def _op_appends(m: _Machine, _arg: Any) -> None:
    items = m.pop_mark()
    if not m.stack or not isinstance(m.stack[-1], list):
        raise m.refuse("APPENDS on a non-list")
    m.stack[-1].extend(items)


def _op_const(value: Any):
    def op(m: _Machine, _arg: Any) -> None:
        m.push(value() if callable(value) else value)
    return op


def _op_arg(m: _Machine, arg: Any) -> None:
    """Strings, ints, floats, bytes: the decoded argument itself."""
    m.push(arg)


_OPS: dict[str, Any] = {
    "MARK": lambda m, _a: m.marks.append(len(m.stack)),
    "POP": lambda m, _a: m.pop(),
    "POP_MARK": lambda m, _a: m.pop_mark(),
    "DUP": lambda m, _a: m.push(m.top()),
    "EMPTY_DICT": _op_const(dict), "EMPTY_LIST": _op_const(list), "EMPTY_TUPLE": _op_const(()),
    "NONE": _op_const(None), "NEWTRUE": _op_const(True), "NEWFALSE": _op_const(False),
    "TUPLE1": _op_tuple_n(1), "TUPLE2": _op_tuple_n(2), "TUPLE3": _op_tuple_n(3),
    "TUPLE": lambda m, _a: m.push(tuple(m.pop_mark())),
    "LIST": lambda m, _a: m.push(list(m.pop_mark())),
    "DICT": _op_dict,
    "BINPUT": _op_put, "LONG_BINPUT": _op_put, "MEMOIZE": _op_memoize,
    "BINGET": _op_get, "LONG_BINGET": _op_get,
    "GLOBAL": _op_global, "STACK_GLOBAL": _op_stack_global,
    "BINPERSID": lambda m, _a: m.push(_storage(m.file, m.pop())),
    "REDUCE": _op_reduce, "BUILD": _op_build,
    "SETITEM": _op_setitem, "SETITEMS": _op_setitems, "APPEND": _op_append, "APPENDS": _op_appends,
    **{name: _op_arg for name in ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BININT", "BININT1", "BININT2",
                                  "LONG1", "LONG4", "BINFLOAT", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8")},
}
# Opcodes a state dict of tensors needs (torch.save writes protocol 2); everything else, the text opcodes of
# protocols 0/1 included, is refused.
_ALLOWED_OPS = set(_OPS) | {"PROTO", "FRAME", "STOP"}


def _walk_pickle(file: str, data: bytes) -> Any:
    """Interpret the pickle's opcodes for the allowed subset; returns the top-level object (never executes)."""
    m = _Machine(file)
    try:
        for n_ops, (op, arg, _pos) in enumerate(_quiet(pickletools.genops(data)), 1):
            if n_ops > MAX_OPS:
                raise m.refuse(f"more than {MAX_OPS} opcodes")
            if len(m.stack) > MAX_STACK or len(m.memo) > MAX_STACK * 20:
                raise m.refuse("stack or memo too large")
            name = op.name
            if name not in _ALLOWED_OPS:
                raise m.refuse(f"opcode {name} builds arbitrary objects; only tensor state dicts are read "
                               "(refused, nothing executed)")
            if name == "STOP":
                return m.pop()
            if name not in ("PROTO", "FRAME"):
                _OPS[name](m, arg)
    except HeaderError:
        raise
    except (ValueError, struct.error, IndexError, TypeError, KeyError) as e:
        raise m.refuse(f"not a readable pickle ({type(e).__name__}: {e})") from None
    raise m.refuse("no STOP opcode")


def _quiet(ops):
    """genops, lazily, with its argument decoders' warnings silenced: under -W error a decoder's warning would
    otherwise escape as something other than this reader's refusal."""
    it = iter(ops)
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def _to_dict(file: str, items: list[Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for i in range(0, len(items), 2):
        out[_key(file, items[i])] = items[i + 1]
    return out


def _key(file: str, k: Any) -> Any:
    if not isinstance(k, (str, int, bool, type(None), tuple)):
        raise _refuse(file, f"data.pkl: dict key of type {type(k).__name__}")
    return k


def _global(file: str, module: str, attr: str) -> _Global:
    if (module, attr) not in ALLOWED_GLOBALS:
        raise _refuse(file, f"data.pkl names global {module}.{attr}; only tensor rebuilding is allowed "
                            "(collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.*Storage): refused, "
                            "nothing imported or executed")
    return _Global(module, attr)


def _storage(file: str, pid: Any) -> _Storage:
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
        raise _refuse(file, f"data.pkl: persistent id {pid!r:.80} is not a tensor storage")
    _, cls, key, _location, numel = pid
    if not (isinstance(cls, _Global) and cls.module == "torch" and cls.name in STORAGE_DTYPES):
        raise _refuse(file, "data.pkl: storage of an unknown type")
    if not (isinstance(key, str) and key and all(c.isalnum() or c in "_-" for c in key)):
        raise _refuse(file, f"data.pkl: storage key {key!r:.40} is not a plain name")
    if not (isinstance(numel, int) and not isinstance(numel, bool) and numel >= 0):
        raise _refuse(file, f"data.pkl: storage {key} has an invalid size {numel!r:.40}")
    dtype, itemsize = STORAGE_DTYPES[cls.name]
    return _Storage(key, dtype, itemsize, numel)


def _ints(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, tuple) and all(isinstance(i, int) and not isinstance(i, bool) for i in x):
        return x
    return None


def _reduce(file: str, fn: Any, args: Any) -> Any:
    if not isinstance(fn, _Global) or not isinstance(args, tuple):
        raise _refuse(file, "data.pkl: REDUCE of something other than an allowed callable (refused, nothing "
                            "executed)")
    if (fn.module, fn.name) == ("collections", "OrderedDict"):
        if args not in ((), ([],)):
            raise _refuse(file, "data.pkl: OrderedDict built with arguments")
        return _OrderedDict()
    if fn.name == "_rebuild_parameter":
        # torch/_utils.py: _rebuild_parameter(data, requires_grad, backward_hooks) -> nn.Parameter(data, requires_grad)
        if len(args) != 3 or not isinstance(args[0], _Tensor):
            raise _refuse(file, "data.pkl: _rebuild_parameter without (tensor, requires_grad, hooks)")
        _requires_grad(file, args[0].storage, args[1])
        return args[0]
    if (fn.module, fn.name) in REBUILDERS:
        # torch/_utils.py: _rebuild_tensor(storage, storage_offset, size, stride) and _rebuild_tensor_v2(storage,
        # storage_offset, size, stride, requires_grad, backward_hooks, metadata=None): torch.load calls them with
        # these arguments, and any other count is a TypeError there.
        arity = (4,) if fn.name == "_rebuild_tensor" else (6, 7)
        if len(args) not in arity or not isinstance(args[0], _Storage):
            raise _refuse(file, f"data.pkl: {fn.name} called with {len(args)} arguments (takes "
                                f"{' or '.join(map(str, arity))}, the first a storage)")
        storage, offset, shape, stride = args[:4]
        if len(args) > 4:
            _requires_grad(file, storage, args[4])
        shape_t, stride_t = _ints(shape), _ints(stride)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or shape_t is None \
                or stride_t is None or len(shape_t) != len(stride_t) or len(shape_t) > MAX_RANK \
                or any(s < 0 for s in shape_t) or any(s < 0 for s in stride_t):
            raise _refuse(file, f"data.pkl: invalid tensor view on storage {storage.key} (offset {offset!r:.20}, "
                                f"shape {shape!r:.60}, stride {stride!r:.60})")
        return _Tensor(storage, offset, shape_t, stride_t)
    raise _refuse(file, f"data.pkl: REDUCE of {fn.module}.{fn.name} (refused, nothing executed)")


def _requires_grad(file: str, storage: _Storage, flag: Any) -> None:
    """The pickle's requires_grad, as torch sets it (`tensor.requires_grad = flag`): a bool, and True only on a
    floating point tensor, or torch.load raises "only Tensors of floating point and complex dtype can require
    gradients" and the engine cannot load the file."""
    if not isinstance(flag, bool):
        raise _refuse(file, f"data.pkl: requires_grad of storage {storage.key} is {flag!r:.20}, not a bool")
    if flag and storage.dtype not in _FLOAT_DTYPES:
        raise _refuse(file, f"data.pkl: requires_grad set on a {storage.dtype} tensor (storage {storage.key}); "
                            "torch.load refuses it: only floating point tensors can require gradients")


def _data_start(fh, file: str, info: zipfile.ZipInfo, size: int) -> int:
    """Absolute offset of a stored member's bytes, from its local header (validated against the file size)."""
    fh.seek(info.header_offset)
    head = fh.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise _refuse(file, f"zip member {info.filename}: no local header at offset {info.header_offset}")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.compress_size > size:
        raise _refuse(file, f"zip member {info.filename}: its data runs past the end of the file (truncated)")
    return start


# Small records torch.load reads besides data.pkl, relative to the archive folder: the C++ reader
# (caffe2/serialize/inline_container.cc, PyTorchStreamReader::init) reads `.data/serialization_id` and the version
# (`.data/version`, else `version`, which must exist); torch/serialization.py `_load` reads `.format_version`,
# `byteorder` and `.storage_alignment`. kconvert reads the same records (each at most MAX_RECORD_BYTES, a few
# bytes in practice) and checks them as torch does, so that a .bin torch.load cannot open is refused by inspect
# too. Storage members (the weights, up to GBs) are never read whole: only their local headers.
MAX_RECORD_BYTES = 4096
# caffe2/serialize/versions.h: kMinSupportedFileFormatVersion 0x1, kMaxSupportedFileFormatVersion 0xA
TORCH_FILE_VERSIONS = range(1, 11)


@dataclass
class _Archive:
    """The layout of a torch.save zip: its folder, its data.pkl, its storage members by key, its small records."""

    prefix: str
    pkl: zipfile.ZipInfo
    storages: dict[str, zipfile.ZipInfo]
    by_name: dict[str, zipfile.ZipInfo]

    def record(self, name: str) -> zipfile.ZipInfo | None:
        """The member `<archive>/<name>`, looked up as miniz does for torch: case-insensitively."""
        return self.by_name.get((self.prefix + name).lower())


def _regular_file_size(path: Path, rel: str) -> int:
    try:
        st = path.stat()
    except OSError as e:
        raise _refuse(rel, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(rel, "not a regular file")
    return st.st_size


def _open_zip(fh, rel: str) -> zipfile.ZipFile:
    if fh.read(4) != b"PK\x03\x04":
        raise _refuse(rel, "not a zip archive: the legacy (pre-1.6) torch.save format is not read statically; "
                           "re-save it with a current torch, or convert it with a trusted tool")
    try:
        return zipfile.ZipFile(fh)
    # NotImplementedError: an entry asks for a zip version or feature zipfile does not implement (found by the
    # differential fuzz: "version needed to extract" 6.4 escaped as an internal error, exit 70)
    except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError, EOFError, struct.error,
            OverflowError) as e:
        raise _refuse(rel, f"not a readable zip archive ({type(e).__name__}: {e})") from None


_U32 = 0xFFFFFFFF


def _check_directory(fh, rel: str, size: int) -> None:
    """The end-of-central-directory records and central directory entries, checked as torch's zip reader checks
    them before it reads anything (miniz, `mz_zip_reader_read_central_dir`, vendored by torch): Python's zipfile
    ignores fields miniz refuses (disk numbers, entry counts, sizes in the zip64 records), so a .bin damaged there
    passed inspect and failed torch.load ("unsupported multidisk archive", found by the differential fuzz at 5000
    examples). Reads the last 64 KB at most and the central directory (already read by zipfile); never the data.
    Not mirrored: miniz's search of an entry's extra field for zip64 sizes (torch.save writes none below 4 GB)."""
    def bad(why: str) -> HeaderError:
        return _refuse(rel, f"damaged zip directory: {why}; torch.load refuses it")

    tail_len = min(size, 22 + 0xFFFF)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise bad("no end of central directory record")
    eocd_pos = size - tail_len + at
    (num_disk, cdir_disk, on_disk, total, cdir_size, cdir_ofs) = struct.unpack("<HHHHII", tail[at + 4:at + 20])
    if eocd_pos >= 20 + 56:
        fh.seek(eocd_pos - 20)
        loc = fh.read(20)
        if loc[:4] == b"PK\x06\x07":
            _disk, z64_ofs, total_disks = struct.unpack("<IQI", loc[4:20])
            if z64_ofs > size - 56:
                raise bad("the zip64 locator points past the end of the file")
            fh.seek(z64_ofs)
            z64 = fh.read(56)
            if z64[:4] == b"PK\x06\x06":
                rec_size, _made, _need, num_disk, cdir_disk, on_disk, total, cdir_size, cdir_ofs = struct.unpack(
                    "<QHHIIQQQQ", z64[4:56])
                if rec_size < 44:
                    raise bad("zip64 end record too short")
                if total_disks != 1:
                    raise bad(f"the zip64 locator counts {total_disks} disks (a multi-disk archive)")
                if total > _U32 or on_disk > _U32 or cdir_size > _U32:
                    raise bad("zip64 entry count or directory size beyond miniz's limits")
    if total != on_disk or ((num_disk | cdir_disk) != 0 and (num_disk, cdir_disk) != (1, 1)):
        raise bad(f"disk numbers {num_disk}/{cdir_disk} or entry counts {on_disk}/{total} of a multi-disk archive")
    if cdir_size < total * 46 or cdir_ofs + cdir_size > size:
        raise bad("central directory size or offset out of bounds")
    if cdir_size > MAX_DIRECTORY_BYTES:
        raise _refuse(rel, f"the zip central directory is {cdir_size} bytes (cap {MAX_DIRECTORY_BYTES})")
    fh.seek(cdir_ofs)
    cd = fh.read(cdir_size)
    pos = 0
    for _ in range(total):
        if len(cd) - pos < 46 or cd[pos:pos + 4] != b"PK\x01\x02":
            raise bad("central directory entry without its signature")
        (flags, method, _t, _d, _crc, comp, decomp, name_len, extra_len, comment_len, disk_index, _ia, _ea,
         local_ofs) = struct.unpack("<HHHHIIIHHHHHII", cd[pos + 8:pos + 46])
        name = cd[pos + 46:pos + 46 + name_len]
        if comp != _U32 and decomp != _U32 and ((method == 0 and decomp != comp) or (decomp and not comp)):
            raise bad(f"entry {name[:60]!r}: stored sizes {comp} and {decomp} differ")
        if disk_index == 0xFFFF or (disk_index != num_disk and disk_index != 1):
            raise bad(f"entry {name[:60]!r} starts on disk {disk_index}")
        if comp != _U32 and local_ofs + 30 + comp > size:
            raise bad(f"entry {name[:60]!r} runs past the end of the file")
        if flags & 0x2000:
            raise bad(f"entry {name[:60]!r} has a masked (encrypted) local header")
        try:
            name.decode("utf-8")  # torch hands record names to Python as UTF-8 (get_all_records)
        except UnicodeDecodeError:
            raise bad(f"entry name {name[:60]!r} is not UTF-8") from None
        pos += 46 + name_len + extra_len + comment_len
        if pos > len(cd):
            raise bad(f"entry {name[:60]!r} runs past the central directory")


def _layout(rel: str, infos: list[zipfile.ZipInfo]) -> _Archive:
    """Check the member list (count, names, one archive folder, stored and unencrypted) and map it."""
    if len(infos) > MAX_MEMBERS:
        raise _refuse(rel, f"{len(infos)} zip members (cap {MAX_MEMBERS})")
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise _refuse(rel, "the zip archive holds two members of the same name")
    for n in names:
        _check_member_name(rel, n)
    pkls = [i for i in infos if i.filename.endswith("/data.pkl") and i.filename.count("/") == 1]
    if len(pkls) != 1:
        raise _refuse(rel, "not a torch.save archive: expected exactly one <archive>/data.pkl")
    prefix = pkls[0].filename[: -len("data.pkl")]
    stray = [n for n in names if not n.startswith(prefix) and not n.startswith(".data/")]
    if stray:
        raise _refuse(rel, f"zip member {stray[0]!r} lies outside the archive folder {prefix!r}")
    for i in infos:
        if i.compress_type != zipfile.ZIP_STORED or i.compress_size != i.file_size:
            raise _refuse(rel, f"zip member {i.filename} is compressed; torch.save stores members "
                               "uncompressed (refused)")
        # miniz (torch's zip reader), mz_zip_reader_is_file_supported: bit 0 (encrypted), bit 6 (strong
        # encryption) and bit 5 (compressed patched data) are refused before a member is read
        if i.flag_bits & 0x41:
            raise _refuse(rel, f"zip member {i.filename} is encrypted")
        if i.flag_bits & 0x20:
            raise _refuse(rel, f"zip member {i.filename} is flagged as compressed patched data")
    if pkls[0].file_size > MAX_PICKLE_BYTES:
        raise _refuse(rel, f"data.pkl is {pkls[0].file_size} bytes (cap {MAX_PICKLE_BYTES})")
    storages = {i.filename[len(prefix) + len("data/"):]: i for i in infos if i.filename.startswith(prefix + "data/")}
    by_name: dict[str, zipfile.ZipInfo] = {}
    for i in infos:
        by_name.setdefault(i.filename.lower(), i)
    return _Archive(prefix, pkls[0], storages, by_name)


def _read_member(fh, rel: str, info: zipfile.ZipInfo, size: int, cap: int) -> bytes:
    """A small member's bytes, located from its local header (the same header miniz reads for torch)."""
    what = info.filename
    if info.file_size > cap:
        raise _refuse(rel, f"zip member {what} is {info.file_size} bytes (cap {cap})")
    fh.seek(_data_start(fh, rel, info, size))
    data = fh.read(info.file_size)
    if len(data) != info.file_size:
        raise _refuse(rel, f"zip member {what} is truncated")
    return data


def _torch_version(raw: bytes) -> int | None:
    """The archive version as the C++ reader reads it (std::stoull: leading whitespace, a sign, decimal digits,
    the rest ignored), or None where torch cannot parse it."""
    text = raw.decode("latin-1").lstrip(" \t\n\v\f\r")
    sign = text[:1] if text[:1] in "+-" else ""
    digits = ""
    for c in text[len(sign):]:
        if not "0" <= c <= "9":
            break
        digits += c
    if not digits or int(digits) >= 2**64:
        return None
    return -int(digits) if sign == "-" else int(digits)


def _check_records(fh, rel: str, arc: _Archive, size: int) -> str:
    """Read and check the small records torch.load reads (see MAX_RECORD_BYTES); returns the byte order."""
    def read(name: str) -> bytes | None:
        info = arc.record(name)
        return None if info is None else _read_member(fh, rel, info, size, MAX_RECORD_BYTES)

    sid = read(".data/serialization_id")
    if sid is not None:
        try:
            sid.decode("utf-8")  # torch.load hands it to Python as a str: zip_file.serialization_id()
        except UnicodeDecodeError:
            raise _refuse(rel, f".data/serialization_id record {sid[:20]!r} is not UTF-8; torch.load refuses "
                               "it") from None
    version = read(".data/version")
    if version is None:
        version = read("version")
    if version is None:
        raise _refuse(rel, "the archive has no version record; torch.load refuses it")
    v = _torch_version(version)
    if v not in TORCH_FILE_VERSIONS:
        raise _refuse(rel, f"version record {version[:20]!r} is not a file version torch reads "
                           f"({TORCH_FILE_VERSIONS.start}..{TORCH_FILE_VERSIONS.stop - 1})")
    read(".format_version")
    byteorder = read("byteorder")
    if byteorder is not None and byteorder not in (b"little", b"big"):
        # torch/serialization.py _load: "Unknown endianness type" (it would otherwise be read as little-endian)
        raise _refuse(rel, f"byteorder record {byteorder[:20]!r} is neither 'little' nor 'big'; torch.load "
                           "refuses it")
    alignment = read(".storage_alignment")
    if alignment is not None:
        try:
            int(alignment)  # torch/serialization.py _load: int(zip_file.get_record(".storage_alignment"))
        except ValueError:
            raise _refuse(rel, f".storage_alignment record {alignment[:20]!r} is not an integer; torch.load "
                               "refuses it") from None
    return "little" if byteorder is None else byteorder.decode()


def _describe(fh, rel: str, top: Any, arc: _Archive, byteorder: str, size: int) -> TorchZipFile:
    """The tensors of the walked pickle, each checked against its storage member and given its byte span."""
    out = TorchZipFile(rel)
    if not isinstance(top, dict):
        raise _refuse(rel, "data.pkl does not hold a dict of tensors")
    if len(top) > MAX_TENSORS:
        raise _refuse(rel, f"{len(top)} entries (cap {MAX_TENSORS})")
    skipped = [str(k) for k, v in top.items() if not isinstance(v, _Tensor)]
    if skipped:
        out.notes.append(f"{rel}: {len(skipped)} entries that are not tensors were ignored "
                         f"({', '.join(skipped[:3])})")
    starts: dict[str, int] = {}
    for name, t in top.items():
        if not isinstance(t, _Tensor):
            continue
        if not isinstance(name, str) or not name or has_control(name):
            raise _refuse(rel, f"tensor name {name!r:.60} is not a plain string")
        s = t.storage
        member = arc.storages.get(s.key)
        if member is None:
            raise _refuse(rel, f"storage {s.key} is not in the archive", tensor=name)
        if member.file_size != s.numel * s.itemsize:
            raise _refuse(rel, f"storage {s.key} holds {member.file_size} bytes, the pickle declares "
                               f"{s.numel} x {s.itemsize}", tensor=name)
        numel = math.prod(t.shape)
        if numel:
            last = t.offset + sum((d - 1) * st_ for d, st_ in zip(t.shape, t.stride))
            if last >= s.numel:
                raise _refuse(rel, f"view (offset {t.offset}, shape {list(t.shape)}, stride "
                                   f"{list(t.stride)}) runs past storage {s.key} of {s.numel} elements",
                              tensor=name)
        if s.key not in starts:
            starts[s.key] = _data_start(fh, rel, member, size)
        begin = starts[s.key] + t.offset * s.itemsize
        contiguous = list(t.stride) == _row_major(t.shape)
        out.tensors[name] = TensorInfo(name, rel, s.dtype, t.shape, begin, begin + numel * s.itemsize)
        if numel and not contiguous:
            out.unreadable[name] = "a non-contiguous view in a PyTorch file (not readable by byte range)"
        elif byteorder != "little":
            out.unreadable[name] = f"a {byteorder}-endian PyTorch archive"
    return out


def read_torch_zip(path: Path, rel: str) -> TorchZipFile:
    """Describe a torch.save zip archive; HeaderError (one line, exit 2) on anything not a plain tensor dict."""
    size = _regular_file_size(path, rel)
    try:
        with open(path, "rb") as fh:
            zf = _open_zip(fh, rel)
            _check_directory(fh, rel, size)
            arc = _layout(rel, zf.infolist())
            # the pickle first: a hostile one is refused naming what it asked for, whatever else is wrong
            top = _walk_pickle(rel, _read_member(fh, rel, arc.pkl, size, MAX_PICKLE_BYTES))
            byteorder = _check_records(fh, rel, arc, size)
            return _describe(fh, rel, top, arc, byteorder, size)
    except HeaderError:
        raise
    except OSError as e:
        raise _refuse(rel, f"cannot read: {e.strerror or e}") from None


def _row_major(shape: tuple[int, ...]) -> list[int]:
    out = []
    acc = 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return list(reversed(out))


__all__ = ["ALLOWED_GLOBALS", "STORAGE_DTYPES", "TorchZipFile", "read_torch_zip"]
