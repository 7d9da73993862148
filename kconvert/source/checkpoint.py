"""A checkpoint as kconvert sees it: its files, its config and its tensor headers, no weights; and the reading of a
local folder into one (`load_folder`). `kconvert.source.open_checkpoint` chooses between a folder and a Hub id.
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from kconvert.errors import HeaderError, InputError
from kconvert.guard.paths import node_kind, open_regular, read_bytes
from kconvert.guard.text import has_control
from kconvert.source.names import (
    CONFIG_NAME,
    INDEX_NAME,
    PROVENANCE_NAME,
    SAFETENSORS_SUFFIX,
    TORCH_INDEX_NAME,
    is_pickle,
    is_torch_weights,
)
from kconvert.source.safetensors_header import (
    DTYPE_SIZES,
    MAX_INDEX_BYTES,
    TensorInfo,
    check_relative_path,
    loads_strict_json,
    parse_index,
    read_header,
)

MAX_CONFIG_BYTES = 4 * 1024 * 1024
# Small tensors inspect may read (d2t, t2d, norms); anything larger is only described by its header.
MAX_SMALL_TENSOR_BYTES = 64 * 1024 * 1024


# Given the tensor names of a checkpoint, the names of the small tensors to read now rather than when first used.
Prefetch = Callable[[Sequence[str]], Iterable[str]]


@dataclass
class FileEntry:
    name: str  # relative, '/'-separated
    size: int | None
    sha256: str | None = None


@dataclass
class Checkpoint:
    ref: str  # as the user gave it
    kind: str  # "local" | "hub"
    root: Path | None  # local folder, or the Hub cache snapshot folder; None when nothing is local
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    # config.json's text as read (reports point at the line of a key); None when the config came from elsewhere
    config_text: str | None = None
    files: dict[str, FileEntry] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    shard_metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    index: dict[str, str] | None = None  # tensor -> shard, when sharded
    pickle_files: list[str] = field(default_factory=list)
    # PyTorch weight files whose tensors were described statically (kconvert.source.torch_zip), when the folder
    # holds no safetensors weights; and tensors among them whose bytes cannot be read by range.
    torch_files: list[str] = field(default_factory=list)
    unreadable_tensors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # For Hub checkpoints whose weights are not cached: how to read a byte range remotely.
    remote_reader: Any = None
    # Hub cache snapshots link into the repo's blobs: paths may resolve anywhere inside this folder.
    allowed_root: Path | None = None
    # The rows a check that samples a large 2-D tensor reads, given its row count (K701's embed_tokens rows); None:
    # the check's own seeded draw. Set by a caller that knows where a copy holds values (the tests' sparse replicas
    # of published drafts hold them only at rows the test chose) or wants a larger sample.
    row_sample: Callable[[int], list[int]] | None = None

    @property
    def safetensors_files(self) -> list[str]:
        listed = {f for f in self.files if f.endswith(SAFETENSORS_SUFFIX)}
        return sorted({t.file for t in self.tensors.values()} | listed)

    def local_path(self, rel: str) -> Path | None:
        if self.root is None:
            return None
        p = self.root / rel
        return p if p.exists() else None

    def read_bytes(self, info: TensorInfo) -> bytes:
        if info.file in self.torch_files and info.name in self.unreadable_tensors:
            raise InputError(f"{info.file} [{info.name}]: {self.unreadable_tensors[info.name]}")
        if info.nbytes > MAX_SMALL_TENSOR_BYTES:
            raise InputError(f"{info.file} [{info.name}]: {info.nbytes} bytes is more than inspect reads")
        p = self.local_path(info.file)
        if p is not None:
            # The shard's header was read, but the file may have changed since (permissions, replaced by a
            # folder): an OSError here must surface as a one-line refusal, not escape the rules.
            try:
                with open(p, "rb") as f:
                    f.seek(info.start)
                    data = f.read(info.nbytes)
            except OSError as e:
                raise HeaderError(info.file, f"cannot read: {e.strerror or e}", tensor=info.name) from None
        elif self.remote_reader is not None:
            data = self.remote_reader(info.file, info.start, info.end)
        else:
            raise InputError(f"{info.file}: not available locally")
        if len(data) != info.nbytes:
            raise HeaderError(info.file, f"only {len(data)} of {info.nbytes} bytes could be read (truncated)",
                              tensor=info.name)
        return data

    def read_array(self, name: str) -> np.ndarray:
        """Decode one small tensor into numpy (bf16 widened to float32, bool kept)."""
        info = self.tensors[name]
        return decode(self.read_bytes(info), info.dtype, info.shape)

    def sha256(self, rel: str) -> str:
        entry = self.files.get(rel)
        if entry is not None and entry.sha256:
            return entry.sha256
        p = self.local_path(rel)
        if p is None:
            raise InputError(f"{rel}: not available locally, cannot hash it")
        from kconvert.source import hashcache  # deferred: sqlite3 (~2 ms); only --hash and fix hash files

        digest = hashcache.lookup(p)
        if digest is None:
            started = time.time()
            digest = sha256_file(p)
            hashcache.store(p, digest, hashed_at=started)
        if entry is not None:
            entry.sha256 = digest
        return digest


# safetensors dtype -> numpy dtype name (names, not numpy objects: numpy is imported only when a tensor is decoded)
_NP_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
    "I32": "int32", "U32": "uint32", "F32": "float32", "I64": "int64", "U64": "uint64", "F64": "float64",
}


def decode(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    import numpy as np  # deferred: ~40 ms to import, and only a rule reading a tensor's values needs it

    # numpy has no bfloat16: widen by placing the 16 bits in the high half of a float32.
    if dtype == "BF16":
        raw = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return raw.view(np.float32).reshape(shape)
    if dtype not in _NP_DTYPES:
        raise InputError(f"cannot decode dtype {dtype} for inspection")
    return np.frombuffer(data, dtype=np.dtype(_NP_DTYPES[dtype]).newbyteorder("<")).reshape(shape)


def sha256_file(path: Path, chunk: int = 8 * 1024 * 1024) -> str:
    h = hashlib.sha256()
    # opened by the read guard: a file swapped for a FIFO since it was listed is refused, never waited on
    fd, _ = open_regular(path, str(path))
    with open(fd, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def read_json_file(path: Path, rel: str) -> Any:
    return parse_json_bytes(read_small_file(path, rel), rel)


def read_small_file(path: Path, rel: str) -> bytes:
    """A config-sized regular file's bytes, through the read guard (`kconvert.guard.paths.read_bytes`): a FIFO, a
    device, a folder or an oversized file is an InputError naming `rel`, and nothing is opened that is not a
    regular file."""
    return read_bytes(path, rel, max_bytes=MAX_CONFIG_BYTES)


def parse_json_bytes(raw: bytes, rel: str) -> Any:
    try:
        return loads_strict_json(raw, "")  # the message names the file once: "config.json: not valid JSON: ..."
    except ValueError as e:
        raise InputError(f"{rel}: {e}") from None


def read_provenance(folder: Path) -> dict[str, Any] | None:
    """The `kconvert.json` that `kconvert fix` wrote into `folder`, or None when there is none (or it is not an
    object). InputError when it cannot be read or is not strict JSON."""
    path = folder / PROVENANCE_NAME
    if not os.path.lexists(path):
        return None  # anything else named kconvert.json (a FIFO, a folder) is refused by the read guard
    doc = read_json_file(path, PROVENANCE_NAME)
    return doc if isinstance(doc, dict) else None


def list_files(root: Path, allowed_root: Path | None = None) -> dict[str, FileEntry]:
    out: dict[str, FileEntry] = {}
    real_root = (allowed_root or root).resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for fn in sorted(filenames):
            full = Path(dirpath) / fn
            rel = full.relative_to(root).as_posix()
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                raise InputError(f"{root}: a file name is not valid UTF-8 ({rel!r}); rename it") from None
            if has_control(rel):
                # the name would be printed raw in later one-line refusals; a newline would split them
                raise InputError(f"{root}: a file name holds control characters ({rel!r}); rename it")
            if rel.startswith(".") or "/." in rel:
                continue
            try:
                if full.is_symlink():
                    target = full.resolve()
                    if target != real_root and real_root not in target.parents:
                        raise HeaderError(rel, "symlink resolves outside the checkpoint folder")
                st = full.stat()
            except FileNotFoundError:
                raise InputError(f"{rel}: broken symlink") from None
            except PermissionError:
                raise InputError(f"{rel}: permission denied") from None
            except (OSError, RuntimeError) as e:
                # A symlink loop: Path.resolve raises RuntimeError (Python <= 3.12), stat() raises ELOOP.
                raise InputError(f"{rel}: cannot read: {getattr(e, 'strerror', None) or e}") from None
            if not stat.S_ISREG(st.st_mode):
                # Refused by name, not skipped: a skipped FIFO named model.safetensors.index.json or kconvert.json
                # left the checkpoint read without its index or provenance (issue #45), and fix dropped any other
                # from its copy. SECURITY.md: a checkpoint's files are regular files.
                raise InputError(f"{rel}: {node_kind(st.st_mode)}, not a regular file (kconvert never reads from "
                                 "FIFOs, devices or sockets)")
            out[rel] = FileEntry(rel, st.st_size)
    return out


def load_folder(root: Path, *, ref: str, kind: str = "local", allowed_root: Path | None = None,
                read_tensors: bool = True) -> Checkpoint:
    """Read a checkpoint folder: file list, config.json, index and every safetensors header (the latter two
    only with `read_tensors`; the Hub path reads them itself when the weights are not in the cache)."""
    if not root.exists():
        raise InputError(f"{ref}: no such folder")
    if not root.is_dir():
        raise InputError(f"{ref}: not a folder (give the checkpoint's folder, not a file)")
    if not os.access(root, os.R_OK | os.X_OK):
        raise InputError(f"{ref}: permission denied")
    ckpt = Checkpoint(ref=ref, kind=kind, root=root, allowed_root=allowed_root)
    ckpt.files = list_files(root, allowed_root)
    if CONFIG_NAME not in ckpt.files:
        raise InputError(f"{ref}: no {CONFIG_NAME} (is this a model folder?)")
    # the message names the folder too: `kconvert matrix 'runs/*'` reads many config.json files
    where = f"{ref.rstrip('/')}/{CONFIG_NAME}" if ref.strip("/") else CONFIG_NAME
    raw = read_small_file(root / CONFIG_NAME, where)
    try:
        cfg = parse_json_bytes(raw, where)
    except InputError as e:
        raise InputError(e.message, hint="fix the file (a JSON object of the model's settings), or download the "
                                         "draft again if it was cut short") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: not a JSON object", hint="config.json holds one JSON object {...} of the "
                                                             "model's settings")
    ckpt.config = cfg
    ckpt.config_text = raw.decode("utf-8", errors="replace")
    ckpt.pickle_files = sorted(f for f in ckpt.files if is_pickle(f))
    if read_tensors:
        load_tensors(ckpt, root)
    return ckpt


def read_index(ckpt: Checkpoint, root: Path, name: str = INDEX_NAME) -> dict[str, str]:
    """An index file (`model.safetensors.index.json`, `pytorch_model.bin.index.json`) of the checkpoint: capped
    before it is read, strict JSON, every shard path relative and inside the folder. Returns tensor -> file."""
    # Cap before reading: parse_index checks the length only after the whole file is in memory.
    size = ckpt.files[name].size
    if size is not None and size > MAX_INDEX_BYTES:
        raise HeaderError(name, f"index is {size} bytes (cap {MAX_INDEX_BYTES})")
    raw = read_bytes(root / name, name, max_bytes=MAX_INDEX_BYTES)
    index = parse_index(raw, name)
    for tensor, shard in index.items():
        check_relative_path(root, shard, f"{name} [{tensor}]", allowed_root=ckpt.allowed_root)
    return index


def add_tensors(ckpt: Checkpoint, file: str, tensors: dict[str, TensorInfo], placed: dict[str, str], *,
                sharded: bool) -> None:
    """Add one file's tensors; `placed` (tensor -> file, filled here) refuses a name that two files hold."""
    for name in tensors:
        if name in placed:
            where = "shards" if sharded else "files"
            raise HeaderError(file, f"tensor is also in {placed[name]} (a name in two {where})", tensor=name)
        placed[name] = file
    ckpt.tensors.update(tensors)


def check_placement(index: dict[str, str], placed: dict[str, str], name: str = INDEX_NAME) -> None:
    """The index and the files agree: every tensor is in the file the index names, and no file holds a tensor the
    index does not place there."""
    for tensor, file in index.items():
        if placed.get(tensor) != file:
            raise HeaderError(file, f"{name} places this tensor here but the shard lacks it", tensor=tensor)
    for tensor, file in placed.items():
        if index.get(tensor) != file:
            raise HeaderError(file, f"tensor is in the shard but not in {name}", tensor=tensor)


def load_tensors(ckpt: Checkpoint, root: Path) -> None:
    """The tensor headers of a local folder: the safetensors files (through their index when there is one), else
    the PyTorch weight files."""
    if INDEX_NAME in ckpt.files:
        index = ckpt.index = read_index(ckpt, root)
        files = sorted(set(index.values()))
        for shard in files:
            if not (root / shard).exists():
                raise HeaderError(shard, f"shard named in {INDEX_NAME} is missing")
    else:
        index = None
        files = sorted(f for f in ckpt.files if f.endswith(SAFETENSORS_SUFFIX))
        if not files:
            load_torch_tensors(ckpt, root)
            return
    placed: dict[str, str] = {}
    for rel in files:
        check_relative_path(root, rel, rel, allowed_root=ckpt.allowed_root)
        h = read_header(root / rel, rel)
        add_tensors(ckpt, rel, h.tensors, placed, sharded=index is not None)
        ckpt.shard_metadata[rel] = h.metadata
    if index is not None:
        check_placement(index, placed)
        unindexed = [f for f in ckpt.files if f.endswith(SAFETENSORS_SUFFIX) and f not in ckpt.shard_metadata]
        if unindexed:
            ckpt.notes.append(f"safetensors files not named by the index are ignored: {', '.join(unindexed)}")


def load_torch_tensors(ckpt: Checkpoint, root: Path) -> None:
    """No safetensors weights: describe the PyTorch weight files an engine would load instead (vLLM falls back to
    *.bin/*.pt), statically and validated, never unpickled (kconvert.source.torch_zip)."""
    # deferred: the pickle walker (zipfile, pickletools: ~10 ms); a safetensors draft never needs it
    from kconvert.source.torch_zip import read_torch_zip

    if TORCH_INDEX_NAME in ckpt.files:
        index = read_index(ckpt, root, TORCH_INDEX_NAME)
        files = sorted(set(index.values()))
        for f in files:
            if f not in ckpt.files:
                raise HeaderError(f, f"shard named in {TORCH_INDEX_NAME} is missing")
    else:
        index = None
        files = sorted(f for f in ckpt.files if "/" not in f and is_torch_weights(f))
    placed: dict[str, str] = {}
    for rel in files:
        check_relative_path(root, rel, rel, allowed_root=ckpt.allowed_root)
        z = read_torch_zip(root / rel, rel)
        add_tensors(ckpt, rel, z.tensors, placed, sharded=index is not None)
        ckpt.unreadable_tensors.update(z.unreadable)
        ckpt.notes.extend(z.notes)
        ckpt.torch_files.append(rel)
    if index is not None:
        check_placement(index, placed, TORCH_INDEX_NAME)


def read_rows(ckpt: Checkpoint, info: TensorInfo, rows: list[int]) -> np.ndarray:
    """Read a few rows of a 2-D tensor by byte range (never the whole tensor)."""
    import numpy as np  # deferred: ~40 ms to import, needed only once rows are read

    if len(info.shape) != 2:
        raise InputError(f"{info.name}: not a 2-D tensor")
    row_bytes = info.shape[1] * DTYPE_SIZES[info.dtype]
    out = []
    for r in rows:
        if not 0 <= r < info.shape[0]:  # the rows may come from a caller (Checkpoint.row_sample)
            raise InputError(f"{info.name}: row {r} is outside its {info.shape[0]} rows")
        sub = TensorInfo(info.name, info.file, info.dtype, (info.shape[1],), info.start + r * row_bytes,
                         info.start + (r + 1) * row_bytes)
        out.append(decode(ckpt.read_bytes(sub), info.dtype, (info.shape[1],)))
    return np.stack(out) if out else np.zeros((0, info.shape[1]), dtype=np.float32)
