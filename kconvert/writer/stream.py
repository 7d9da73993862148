"""Stream a checkpoint to a new folder with the plan's ops applied (the writer behind `kconvert fix`).

How bytes move. Each output shard is its new header followed by its tensors in the input's data order. The
writer walks every input file once, front to back, in fixed-size chunks: bytes of unchanged tensors are read
into one of a few reused buffers, written to the output and hashed twice (input sha256, output sha256) by two
single-thread executors (hashlib releases the GIL, so the two hashes run on two cores while the main thread
reads and writes the next chunk); adjacent unchanged tensors form one span. Input bytes that are not copied
(header, dropped or rewritten tensors) are only hashed. Holes of sparse inputs (SEEK_DATA/SEEK_HOLE) are hashed
as zeros and left as holes in the output. Memory stays at a few chunk buffers whatever the checkpoint size.

Where the time goes. Hashing dominates: sha256 runs at ~1.5 GB/s per core here, read+write of the same bytes
at ~3 GB/s. So the shards are written by up to one worker per core (each with its own two hash threads), and
an input digest that is already known is not recomputed (kconvert.source.hashcache: Hub blob names and a
stat-keyed cache that fix and verify fill). The output must be hashed in full whatever happens, which puts a
floor under the wall time; bench/fix_vs_cp.py prints it next to `cp -r`. `durable=False` (`--no-fsync`)
skips the fsyncs and the early write-back, leaving the flushing to the OS as `cp` does.

Why read/write by default and not `os.copy_file_range`: the provenance must hash every input and output
file, so the bytes must reach user space anyway. With copy_file_range they are read back twice (input for its
hash, output for its hash: kernel copy + 2 reads); with read/write one read feeds the write and both hashes
(the output hash is then of the very buffer written). Measured with bench/fix_vs_cp.py `--copy-mode` on a
shared 2-core VM the two were equal within noise, both bound by the two sha256 streams (~1-1.5 GB/s each);
read/write is the default for its simpler accounting, copy_file_range stays selectable
(`copy_mode="copy_file_range"`).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kconvert.errors import InputError
from kconvert.plan.apply_config import apply_config
from kconvert.plan.ops import op_to_dict
from kconvert.source import hashcache
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.names import CONFIG_NAME, INDEX_NAME, PROVENANCE_NAME, is_pickle
from kconvert.writer.atomic import TempFolder, check_destination, interrupt_guard, os_error_reason
from kconvert.writer.layout import Layout, OutTensor, build_layout

CHUNK_BYTES = 8 * 1024 * 1024
N_BUFFERS = 3
PROGRESS_EVERY = 64 * 1024 * 1024

Progress = Callable[[int, int, str], None]

SYNC_FILE_RANGE_WRITE = 2
MAX_SHARD_WORKERS = 4
WRITEBACK_EVERY = 64 * 1024 * 1024


def _load_sync_file_range():
    # Python's os module has no sync_file_range(2). It starts write-back of the bytes just written without
    # waiting for it, so the fsync that makes the output durable at the end finds little left to flush: disk
    # writes overlap with reading and hashing instead of coming after them. Linux only; elsewhere a no-op.
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sync_file_range
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


_sync_file_range = _load_sync_file_range()


@dataclass
class WriteResult:
    """What `write_checkpoint` wrote: output files with size and sha256, input hashes, files left out."""

    out_dir: Path
    files: dict[str, dict[str, Any]]  # output file -> {"size", "sha256"} (kconvert.json itself: size only)
    input_files: dict[str, dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)  # input file -> why it was not copied
    ops: list[Any] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)


def kconvert_version() -> str:
    import kconvert

    v = getattr(kconvert, "__version__", None)
    if v:
        return str(v)
    try:
        from importlib.metadata import version

        return version("kconvert")
    except Exception:
        return "0.1.0"


class _Hash:
    """A sha256 fed in order from one single-thread executor."""

    def __init__(self, executor: ThreadPoolExecutor):
        self.h = hashlib.sha256()
        self.ex = executor

    def update(self, data: bytes | memoryview) -> Future:
        return self.ex.submit(self.h.update, data)

    def hexdigest(self) -> str:
        self.ex.submit(lambda: None).result()
        return self.h.hexdigest()


class _Ring:
    """A few reused chunk buffers; a buffer is handed out again only once its hashes are done."""

    def __init__(self, n: int, size: int):
        self.bufs = [memoryview(bytearray(size)) for _ in range(n)]
        self.pending: list[list[Future]] = [[] for _ in range(n)]
        self.i = 0

    def take(self) -> tuple[int, memoryview]:
        i = self.i
        self.i = (i + 1) % len(self.bufs)
        for f in self.pending[i]:
            f.result()
        self.pending[i] = []
        return i, self.bufs[i]

    def drain(self) -> None:
        for i, fs in enumerate(self.pending):
            for f in fs:
                f.result()
            self.pending[i] = []


def _segments(fd: int, start: int, end: int) -> list[tuple[int, int, bool]]:
    """Split [start, end) into (a, b, is_data) runs using SEEK_DATA/SEEK_HOLE where the FS supports them."""
    if not hasattr(os, "SEEK_DATA") or end <= start:
        return [(start, end, True)] if end > start else []
    out = []
    pos = start
    try:
        while pos < end:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                data = end
            data = min(data, end)
            if data > pos:
                out.append((pos, data, False))
                pos = data
            if pos >= end:
                break
            hole = min(os.lseek(fd, pos, os.SEEK_HOLE), end)
            out.append((pos, hole, True))
            pos = hole
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return [(start, end, True)]
        raise
    return out


class _Cancelled(Exception):
    """Another shard worker failed or the run was interrupted: this worker stops at its next chunk."""


class _Shared:
    """Progress and cancellation shared by the shard workers of one write."""

    def __init__(self, progress: Progress | None, total: int):
        self.progress = progress
        self.total = total
        self.done = 0
        self.last_report = 0
        self.lock = threading.Lock()
        self.cancel = threading.Event()

    def advance(self, n: int, message: str, force: bool) -> None:
        if self.cancel.is_set():
            raise _Cancelled()
        with self.lock:
            self.done += n
            report = self.progress is not None and (force or self.done - self.last_report >= PROGRESS_EVERY)
            if report:
                self.last_report = self.done
            done = min(self.done, self.total)
        if report:
            self.progress(done, self.total, message)  # type: ignore[misc]


class _Streamer:
    """One shard worker: its chunk buffers, its two hash threads and its fsync thread."""

    def __init__(self, *, copy_mode: str, chunk: int, shared: _Shared, durable: bool = True):
        self.copy_mode = copy_mode
        self.chunk = chunk
        self.durable = durable
        self.ring = _Ring(N_BUFFERS, chunk)
        self.zeros = memoryview(bytes(chunk))
        self.in_ex = ThreadPoolExecutor(1, thread_name_prefix="kconvert-sha-in")
        self.out_ex = ThreadPoolExecutor(1, thread_name_prefix="kconvert-sha-out")
        self.sync_ex = ThreadPoolExecutor(1, thread_name_prefix="kconvert-fsync")
        self.syncs: list[Future] = []
        self.shared = shared
        self.current = ""  # file being written, for error messages
        self.bytes_written = 0
        self.wb_start: dict[int, int] = {}

    def close(self) -> None:
        for ex in (self.in_ex, self.out_ex, self.sync_ex):
            ex.shutdown(wait=True, cancel_futures=True)

    # progress -----------------------------------------------------------------------------------------
    def advance(self, n: int, message: str, *, force: bool = False) -> None:
        self.shared.advance(n, message, force)

    # primitives ---------------------------------------------------------------------------------------
    def _read_into(self, fd: int, mv: memoryview, off: int, what: str) -> None:
        got = 0
        while got < len(mv):
            n = os.preadv(fd, [mv[got:]], off + got)
            if n == 0:
                raise InputError(f"{what}: file ended early (changed while being copied?)")
            got += n

    def _write_all(self, fd: int, mv: memoryview | bytes, off: int) -> None:
        mv = memoryview(mv)
        done = 0
        while done < len(mv):
            done += os.pwrite(fd, mv[done:], off + done)
        self.bytes_written += len(mv)
        self._writeback(fd, off + len(mv))

    def _writeback(self, fd: int, end: int) -> None:
        if _sync_file_range is None or not self.durable:
            return
        start = self.wb_start.get(fd, 0)
        if end - start >= WRITEBACK_EVERY:
            # Issued from the fsync thread: sync_file_range blocks while the device queue is full, which would
            # stall reading and hashing behind the disk (measured: the durable fix then took cp+sync + the whole
            # CPU time). The same single thread closes the file after its fsync, so the fd outlives the hint.
            self.syncs.append(self.sync_ex.submit(_sync_file_range, fd, start, end - start, SYNC_FILE_RANGE_WRITE))
            self.wb_start[fd] = end

    def hash_only(self, fd: int, start: int, end: int, h: _Hash | None, what: str) -> None:
        """Feed input bytes that are not copied (header, dropped or rewritten tensors) to the input hash."""
        if h is None or end <= start:
            self.advance(max(0, end - start), what)
            return
        for a, b, is_data in _segments(fd, start, end):
            pos = a
            while pos < b:
                n = min(self.chunk, b - pos)
                if is_data:
                    i, buf = self.ring.take()
                    mv = buf[:n]
                    self._read_into(fd, mv, pos, what)
                    self.ring.pending[i] = [h.update(mv)]
                else:
                    h.update(self.zeros[:n])
                pos += n
                self.advance(n, what)

    def copy_span(self, src: int, start: int, end: int, dst: int, dst_off: int,
                  h_in: _Hash | None, h_out: _Hash | None, what: str) -> None:
        """Copy input bytes [start, end) to dst at dst_off, feeding both hashes; holes stay holes."""
        shift = dst_off - start
        for a, b, is_data in _segments(src, start, end):
            pos = a
            while pos < b:
                n = min(self.chunk, b - pos)
                if not is_data:
                    for h in (h_in, h_out):
                        if h is not None:
                            h.update(self.zeros[:n])
                elif self.copy_mode == "copy_file_range":
                    self._copy_kernel(src, pos, n, dst, pos + shift)
                    i, buf = self.ring.take()
                    j, buf2 = self.ring.take()
                    futures = []
                    if h_in is not None:
                        self._read_into(src, buf[:n], pos, what)
                        futures.append(h_in.update(buf[:n]))
                    if h_out is not None:
                        self._read_into(dst, buf2[:n], pos + shift, what)
                        futures.append(h_out.update(buf2[:n]))
                    self.ring.pending[i] = futures
                else:
                    i, buf = self.ring.take()
                    mv = buf[:n]
                    self._read_into(src, mv, pos, what)
                    self.ring.pending[i] = [h.update(mv) for h in (h_in, h_out) if h is not None]
                    self._write_all(dst, mv, pos + shift)
                pos += n
                self.advance(n, what)

    def _copy_kernel(self, src: int, off: int, n: int, dst: int, dst_off: int) -> None:
        done = 0
        while done < n:
            k = os.copy_file_range(src, dst, n - done, off + done, dst_off + done)
            if k == 0:
                raise InputError("input file ended early (changed while being copied?)")
            done += k
        self.bytes_written += n
        self._writeback(dst, dst_off + n)

    def write_bytes(self, dst: int, data: bytes | memoryview, off: int, h_out: _Hash, what: str) -> None:
        h_out.update(data)
        self._write_all(dst, data, off)
        self.advance(len(data), what)

    def finish_file(self, fd: int, size: int) -> None:
        self.wb_start.pop(fd, None)  # the descriptor number may be reused by the next file
        os.ftruncate(fd, size)  # a trailing hole has no write to extend the file

        if not self.durable:
            os.close(fd)
            return

        def sync_close() -> None:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        self.syncs.append(self.sync_ex.submit(sync_close))

    def wait_syncs(self) -> None:
        for f in self.syncs:
            f.result()
        self.syncs = []

    # files --------------------------------------------------------------------------------------------
    def open_out(self, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)

    def copy_file(self, src_path: Path, dst_path: Path, rel: str, expected_size: int | None) -> tuple[int, str]:
        """Copy a non-tensor file; its input and output hashes are the same digest."""
        self.current = rel
        src = os.open(src_path, os.O_RDONLY)
        try:
            size = os.fstat(src).st_size
            if expected_size is not None and size != expected_size:
                raise InputError(f"{rel}: changed size since it was read ({expected_size} -> {size} bytes)")
            known = hashcache.lookup(src_path)
            dst = self.open_out(dst_path)
            h = None if known else _Hash(self.in_ex)
            try:
                self.copy_span(src, 0, size, dst, 0, h, None, rel)
                self.ring.drain()
            except BaseException:
                os.close(dst)
                raise
            self.finish_file(dst, size)
        finally:
            os.close(src)
        self.advance(0, f"copied {rel}", force=True)
        return size, known or h.hexdigest()  # type: ignore[union-attr]

    def hash_file(self, src_path: Path, rel: str) -> tuple[int, str]:
        known = hashcache.lookup(src_path)
        if known:
            return os.stat(src_path).st_size, known
        src = os.open(src_path, os.O_RDONLY)
        try:
            size = os.fstat(src).st_size
            h = _Hash(self.in_ex)
            self.hash_only(src, 0, size, h, rel)
            self.ring.drain()
        finally:
            os.close(src)
        return size, h.hexdigest()

    def write_small(self, dst_path: Path, data: bytes) -> tuple[int, str]:
        self.current = dst_path.name
        fd = self.open_out(dst_path)
        try:
            self._write_all(fd, data, 0)
        except BaseException:
            os.close(fd)
            raise
        self.finish_file(fd, len(data))
        return len(data), hashlib.sha256(data).hexdigest()


def shard_header(tensors: list[OutTensor], metadata: dict[str, str]) -> bytes:
    """A safetensors header: 8-byte LE length, JSON with contiguous data_offsets, space-padded to 8 bytes."""
    obj: dict[str, Any] = {}
    if metadata:
        obj["__metadata__"] = metadata
    off = 0
    for t in tensors:
        obj[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def _write_shard(s: _Streamer, ckpt: Checkpoint, shard: str, tensors: list[OutTensor],
                 metadata: dict[str, str], dst_path: Path) -> tuple[tuple[int, str], tuple[int, str] | None]:
    """Write one output shard; returns (output size, sha256) and the input shard's (size, sha256)."""
    s.current = shard
    header = shard_header(tensors, metadata)
    in_path = ckpt.local_path(shard) if shard in ckpt.shard_metadata else None
    src = os.open(in_path, os.O_RDONLY) if in_path is not None else None
    dst = s.open_out(dst_path)
    try:
        h_out = _Hash(s.out_ex)
        # A hash already known (computed earlier in this run, a Hub blob's name, or kconvert's stat-keyed hash
        # cache: see kconvert.source.hashcache) is not recomputed.
        known = ckpt.files[shard].sha256 if shard in ckpt.files else None
        if not known and in_path is not None:
            known = hashcache.lookup(in_path)
        h_in = _Hash(s.in_ex) if src is not None and not known else None
        in_size = 0
        if src is not None:
            in_size = os.fstat(src).st_size
            expected = ckpt.files[shard].size if shard in ckpt.files else None
            if expected is not None and in_size != expected:
                raise InputError(f"{shard}: changed size since it was read ({expected} -> {in_size} bytes)")
        s.write_bytes(dst, header, 0, h_out, shard)
        dst_off = len(header)
        in_pos = 0
        span: list[int] | None = None  # [src_start, src_end, dst_start] of adjacent unchanged tensors

        def flush() -> None:
            nonlocal span, in_pos
            if span is None:
                return
            a, b, d = span
            s.hash_only(src, in_pos, a, h_in, shard)
            s.copy_span(src, a, b, dst, d, h_in, h_out, shard)
            in_pos = b
            span = None

        for t in tensors:
            if t.copy_of is not None:
                assert t.copy_of.file == shard and src is not None
                a, b = t.copy_of.start, t.copy_of.end
                if span is not None and span[1] == a:
                    span[1] = b
                else:
                    flush()
                    span = [a, b, dst_off]
            else:
                flush()
                n = 0
                for piece in t.chunks():
                    s.write_bytes(dst, piece, dst_off + n, h_out, f"{shard} [{t.name}]")
                    n += len(piece)
                if n != t.nbytes:
                    raise RuntimeError(f"rewrite of {t.name} produced {n} bytes, expected {t.nbytes}")
            dst_off += t.nbytes
        flush()
        if src is not None:
            s.hash_only(src, in_pos, in_size, h_in, shard)
        s.ring.drain()
    except BaseException:
        os.close(dst)
        if src is not None:
            os.close(src)
        raise
    if src is not None:
        os.close(src)
    s.finish_file(dst, dst_off)
    s.advance(0, f"wrote {shard}", force=True)
    if src is None:
        return (dst_off, h_out.hexdigest()), None
    return (dst_off, h_out.hexdigest()), (in_size, h_in.hexdigest() if h_in is not None else known)


def _run_shards(shards: list[str], work: Callable[[str, _Streamer], None], streamers: list[_Streamer],
                shared: _Shared) -> None:
    """Run `work(shard, streamer)` for every shard, one worker per streamer, the calling thread being the first
    (so that Ctrl-C/SIGTERM, delivered to the main thread, stops the work). The first error stops every
    worker at its next chunk and is re-raised once all have stopped, the failing worker's file named in
    `streamers[0].current`; nothing writes into the temporary folder after this returns."""
    todo = list(shards)
    lock = threading.Lock()
    errors: list[tuple[BaseException, _Streamer]] = []

    def loop(st: _Streamer) -> None:
        while not shared.cancel.is_set():
            with lock:
                if not todo:
                    return
                shard = todo.pop(0)
            try:
                work(shard, st)
            except BaseException as e:  # noqa: BLE001 - handed to the calling thread below
                shared.cancel.set()
                errors.append((e, st))
                return

    threads = [threading.Thread(target=loop, args=(st,), name="kconvert-shard", daemon=True)
               for st in streamers[1:]]
    for t in threads:
        t.start()
    try:
        loop(streamers[0])
    except BaseException as e:  # noqa: BLE001 - e.g. an interrupt outside `work`: stop the others first
        shared.cancel.set()
        errors.append((e, streamers[0]))
    for t in threads:
        while t.is_alive():
            try:
                t.join()
            except BaseException as e:  # noqa: BLE001 - an interrupt while waiting: stop the others first
                shared.cancel.set()
                errors.append((e, streamers[0]))
    real = [(e, st) for e, st in errors if not isinstance(e, _Cancelled)]
    if real:
        # An interrupt wins over the errors it caused in other workers.
        real.sort(key=lambda x: not isinstance(x[0], KeyboardInterrupt))
        exc, st = real[0]
        streamers[0].current = st.current  # the file named in the error message
        raise exc


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _index_json(ckpt: Checkpoint, layout: Layout) -> bytes:
    meta: dict[str, Any] = {}
    if ckpt.index is not None and ckpt.root is not None:
        try:
            old = json.loads((ckpt.root / INDEX_NAME).read_bytes())
            if isinstance(old.get("metadata"), dict):
                meta = dict(old["metadata"])
        except (OSError, ValueError):
            pass
    meta["total_size"] = layout.total_tensor_bytes
    wm = {t.name: shard for shard, ts in layout.shards.items() for t in ts}
    obj = {"metadata": meta, "weight_map": dict(sorted(wm.items()))}
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_checkpoint(ckpt: Checkpoint, ops: list[Any], out_dir: os.PathLike[str] | str, *, force: bool = False,
                     provenance: dict[str, Any] | None = None, progress: Progress | None = None,
                     check_space: bool = True, copy_mode: str = "read_write",
                     chunk_bytes: int = CHUNK_BYTES, durable: bool = True,
                     workers: int | None = None,
                     before_commit: Callable[[Path], None] | None = None) -> WriteResult:
    """Write `ckpt` with `ops` applied to `out_dir`, atomically.

    - `ops`: plan ops in order (kconvert.plan.ops); all are checked before anything is written.
    - `force`: replace an existing `out_dir` (the old one is moved aside, the new one renamed in, the old
      one deleted); without it an existing `out_dir` is a UsageError.
    - `provenance`: merged (recursively, caller wins) into the `kconvert.json` written in the output, e.g.
      {"input": {"source": "org/name", "revision": "<commit>"}}.
    - `progress(done_bytes, total_bytes, message)`: called every ~64 MB and after each file.
    - `check_space`: refuse before writing when the destination's free space is below the output size.
    - `copy_mode`: "read_write" (default) or "copy_file_range"; see the module docstring.
    - `durable`: fsync every output file and the folders before and after the rename (default). Without it
      the output is as durable as `cp`'s: an interrupted or killed run still leaves nothing at the
      destination, but a power cut soon after may leave the renamed folder with data missing.
    - `workers`: shards written at once (default: one per core, at most 4); each worker has its own two
      hash threads, so the sha256 streams of several shards run on several cores.
    - `before_commit(temp_folder)`: called with the complete output before it is renamed into place; an
      exception it raises discards the output (fix's self-check: a failed fix leaves no folder behind).

    Raises UsageError (bad op, existing destination) or InputError (unreadable input, unwritable
    destination, full disk); the destination is then untouched and no temporary folder remains.
    """
    t0 = time.monotonic()
    if copy_mode not in ("read_write", "copy_file_range"):
        raise ValueError(f"copy_mode {copy_mode!r}")
    if copy_mode == "copy_file_range" and not hasattr(os, "copy_file_range"):
        copy_mode = "read_write"
    out_dir = Path(out_dir).expanduser().absolute()
    ops = list(ops)
    layout = build_layout(ckpt, ops)
    config = apply_config(ckpt.config, ops)
    check_destination(out_dir, force=force, input_root=ckpt.root)
    assert ckpt.root is not None

    shard_inputs = set(ckpt.shard_metadata)
    regenerated = {CONFIG_NAME, INDEX_NAME, PROVENANCE_NAME}
    skipped: dict[str, str] = {}
    copies: list[str] = []
    for rel in sorted(ckpt.files):
        if rel in shard_inputs:
            if rel not in layout.shards:
                skipped[rel] = "every tensor in it was dropped"
            continue
        if rel in regenerated:
            continue
        if is_pickle(rel):
            skipped[rel] = "pickle file: kconvert never unpickles nor copies it"
            continue
        copies.append(rel)

    out_size = sum(len(shard_header(ts, layout.shard_metadata.get(sh, {}))) + sum(t.nbytes for t in ts)
                   for sh, ts in layout.shards.items())
    out_size += sum(ckpt.files[r].size or 0 for r in copies)
    copied_in = sum(t.nbytes for ts in layout.shards.values() for t in ts if t.copy_of is not None)
    hash_only = sum(ckpt.files[r].size or 0 for r in shard_inputs if r in ckpt.files) - copied_in
    hash_only += sum(ckpt.files[r].size or 0 for r in skipped if r not in shard_inputs)
    total = out_size + max(0, hash_only)
    if check_space:
        probe = out_dir.parent if out_dir.parent.exists() else Path(os.path.commonpath([out_dir.parent, "/"]))
        try:
            st = os.statvfs(probe)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        if free is not None and free < out_size:
            raise InputError(f"{out_dir}: needs {out_size / 1e9:.2f} GB, only {free / 1e9:.2f} GB free on that disk")

    input_files: dict[str, dict[str, Any]] = {}
    files: dict[str, dict[str, Any]] = {}
    computed_inputs: set[str] = set()
    started = time.time()
    shards = sorted(layout.shards)
    n_workers = max(1, min(len(shards), workers or os.cpu_count() or 1, MAX_SHARD_WORKERS))
    with interrupt_guard():
        tmp = TempFolder(out_dir)
        shared = _Shared(progress, total)
        streamers = [_Streamer(copy_mode=copy_mode, chunk=chunk_bytes, shared=shared, durable=durable)
                     for _ in range(n_workers)]
        s = streamers[0]
        try:
            def one_shard(shard: str, st: _Streamer) -> None:
                known_before = bool(ckpt.files.get(shard) and ckpt.files[shard].sha256)
                (osz, osha), inp = _write_shard(st, ckpt, shard, layout.shards[shard],
                                                layout.shard_metadata.get(shard, {}), tmp.path / shard)
                files[shard] = {"size": osz, "sha256": osha}
                if inp is not None:
                    input_files[shard] = {"size": inp[0], "sha256": inp[1]}
                    if not known_before:
                        computed_inputs.add(shard)

            _run_shards(shards, one_shard, streamers, shared)
            for rel in copies:
                size, sha = s.copy_file(ckpt.root / rel, tmp.path / rel, rel, ckpt.files[rel].size)
                files[rel] = {"size": size, "sha256": sha}
                input_files[rel] = {"size": size, "sha256": sha}
                computed_inputs.add(rel)
            for rel in sorted(set(ckpt.files) - set(input_files)):
                s.current = rel
                known = ckpt.files[rel].sha256
                size, sha = (ckpt.files[rel].size, known) if known else s.hash_file(ckpt.root / rel, rel)
                input_files[rel] = {"size": size, "sha256": sha}
                computed_inputs.add(rel)
            if layout.sharded:
                data = _index_json(ckpt, layout)
                size, sha = s.write_small(tmp.path / INDEX_NAME, data)
                files[INDEX_NAME] = {"size": size, "sha256": sha}
            data = (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
            size, sha = s.write_small(tmp.path / CONFIG_NAME, data)
            files[CONFIG_NAME] = {"size": size, "sha256": sha}

            record: dict[str, Any] = {
                "tool": "kconvert",
                "version": kconvert_version(),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "input": {
                    "source": ckpt.repo_id or ckpt.ref,
                    "revision": ckpt.commit or ckpt.revision,
                    "files": dict(sorted(input_files.items())),
                },
                "ops": [op_to_dict(op) for op in ops],
                "output": {"files": dict(sorted(files.items()))},
            }
            if skipped:
                record["skipped"] = dict(skipped)
            record = _deep_merge(record, provenance or {})
            record["output"]["files"] = dict(sorted(files.items()))
            data = (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
            size, _ = s.write_small(tmp.path / PROVENANCE_NAME, data)
            for st in streamers:
                st.wait_syncs()
            if before_commit is not None:
                before_commit(tmp.path)
            tmp.commit(force=force, durable=durable)
        except OSError as e:
            tmp.discard()
            raise InputError(f"{out_dir}: writing {s.current or 'the output'} failed: {os_error_reason(e)}") from None
        except BaseException:
            tmp.discard()
            raise
        finally:
            for st in streamers:
                st.close()
            if not tmp.committed:
                tmp.discard()
    # Remember the digests for the next command (verify's report, a second fix); never an error.
    for rel in computed_inputs:
        if ckpt.root is not None and input_files.get(rel, {}).get("sha256"):
            hashcache.store(ckpt.root / rel, input_files[rel]["sha256"], hashed_at=started)
    for rel, meta in files.items():
        if meta.get("sha256"):
            hashcache.store(out_dir / rel, meta["sha256"], written_by_us=True)
    files[PROVENANCE_NAME] = {"size": size}
    if progress is not None:
        progress(total, total, f"wrote {out_dir}")
    return WriteResult(out_dir=out_dir, files=files, input_files=input_files, skipped=skipped, ops=ops,
                       bytes_written=sum(st.bytes_written for st in streamers), seconds=time.monotonic() - t0,
                       provenance=record)


__all__ = ["WriteResult", "shard_header", "write_checkpoint"]
