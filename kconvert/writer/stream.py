"""How `write_checkpoint` moves bytes: one output shard at a time per worker, in bounded memory.

Each output shard is its new header followed by its tensors in the input's data order. A worker walks every input
file once, front to back, in fixed-size chunks. Spans of unchanged tensors (adjacent ones form one span) are copied
by the kernel (`os.copy_file_range`, page cache to page cache) and then hashed where they now are, through a
read-only map of the output range just written: both digests (input sha256, output sha256: for a copied span they
are the same bytes the kernel just read) are computed by two single-thread executors from that one map, and no
byte is copied into a Python buffer (hashlib releases the GIL, so the two hashes run on two cores while the worker
copies the next chunk). Input bytes that are not copied (header, dropped or rewritten tensors) are read and only
hashed. Holes of sparse inputs (SEEK_DATA/SEEK_HOLE) are hashed as zeros and left as holes in the output. Memory
stays at a few chunk buffers and as many maps in flight, whatever the checkpoint size. On ext4 each chunk's
blocks are allocated (fallocate) just before the kernel copies into it, which is cheaper than ext4's delayed
allocation page by page.

The input is never mapped: a file truncated by someone else under a map raises SIGBUS instead of an error; only
this run's own temporary output is. Where the kernel cannot copy between the two files (EXDEV across
filesystems, EINVAL/EOPNOTSUPP/ENOSYS) the worker falls back to read/write (`copy_mode="read_write"`): one read
into a reused buffer feeds the write and both hashes.

Hashing, not copying, bounds the wall time, so the shards are written by up to one worker per core (each with its
own two hash threads), and an input digest already known is not recomputed (kconvert.source.hashcache). The
output is hashed in full whatever happens. `durable=False` (`--no-fsync`) skips the fsyncs and the early
write-back, leaving the flushing to the OS as `cp` does. The measurements behind these choices are in
bench/NOTES.md.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kconvert.errors import InputError
from kconvert.source import hashcache
from kconvert.source.checkpoint import Checkpoint
from kconvert.writer.layout import OutTensor
from kconvert.writer.header import safetensors_header

CHUNK_BYTES = 8 * 1024 * 1024
N_BUFFERS = 3
PROGRESS_EVERY = 64 * 1024 * 1024

Progress = Callable[[int, int, str], None]

_NO_KERNEL_COPY = {errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS}
if hasattr(errno, "ENOTSUP"):
    _NO_KERNEL_COPY.add(errno.ENOTSUP)

SYNC_FILE_RANGE_WRITE = 2
WRITEBACK_EVERY = 64 * 1024 * 1024


try:
    _LIBC: Any = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def _libc_function(name: str, argtypes: list) -> Any:
    """A C library function with its argument types (returning int), or None where there is none (not Linux)."""
    fn = getattr(_LIBC, name, None)
    if fn is None:
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


# Python's os module has no sync_file_range(2). It starts write-back of the bytes just written without waiting for
# it, so the fsync that makes the output durable at the end finds little left to flush: disk writes overlap with
# reading and hashing instead of coming after them. Linux only; elsewhere a no-op.
_sync_file_range = _libc_function("sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])
# Python 3.11's os module has only posix_fallocate, which glibc emulates by writing zeros where the filesystem
# cannot allocate; fallocate(2) itself fails instead (EOPNOTSUPP), and the copy goes on without. Allocating each
# chunk before the kernel copies into it spares ext4 its per-page delayed-allocation work in copy_file_range and
# the block allocation at write-back: -25 % system time of the copy (bench/NOTES.md). Linux only; elsewhere None.
_fallocate = _libc_function("fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])
_fstatfs = _libc_function("fstatfs", [ctypes.c_int, ctypes.c_char_p])
EXT4_SUPER_MAGIC = 0xEF53  # linux/magic.h; ext2 and ext3 share it (without extents they refuse fallocate)


def _preallocation_helps(fd: int) -> bool:
    """Whether `fd` is on ext4, the one filesystem the preallocation was measured on. Elsewhere it is left
    out: on btrfs and XFS copy_file_range shares extents (a reflink) and blocks allocated first would be
    wasted work."""
    if _fstatfs is None:
        return False
    buf = ctypes.create_string_buffer(512)  # struct statfs (120 bytes on x86-64); f_type comes first
    if _fstatfs(fd, buf) != 0:
        return False
    return ctypes.cast(buf, ctypes.POINTER(ctypes.c_long))[0] == EXT4_SUPER_MAGIC


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
        self.maps = []

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
        while self.maps:
            self._release_oldest()

    # Read-only maps of output bytes the kernel just copied, held until their hashes are done: as many in
    # flight as there are buffers, so memory stays bounded the same way.
    maps: list[tuple[mmap.mmap, list[memoryview], list[Future]]]

    def map_output(self, fd: int, off: int, n: int) -> memoryview:
        while len(self.maps) >= len(self.bufs):
            self._release_oldest()
        start = off - off % mmap.ALLOCATIONGRANULARITY
        mm = mmap.mmap(fd, off + n - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start)
        whole = memoryview(mm)
        view = whole[off - start:]
        self.maps.append((mm, [view, whole], []))
        return view

    def hold(self, futures: list[Future]) -> None:
        """The hashes reading the last mapped chunk: it is unmapped once they are done."""
        self.maps[-1][2].extend(futures)

    def _release_oldest(self) -> None:
        mm, views, fs = self.maps.pop(0)
        try:
            for f in fs:
                f.result()
        finally:
            # A future is done as soon as its hash has run, while the executor's thread may still hold the
            # arguments: released views make the map closable whoever still refers to them. A hash still queued
            # or running (this wait was interrupted: Ctrl-C, SIGTERM) keeps its view exported, and releasing it
            # would raise BufferError over the interrupt (issue #45: exit 70 at 4 of 10 SIGTERMs during a copy):
            # that map is left to the garbage collector, which unmaps it once the hash thread lets it go.
            if all(f.done() for f in fs):
                for v in views:
                    v.release()
                mm.close()


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


def hole_bytes(path: Path, spans: list[tuple[int, int]]) -> int:
    """How many bytes of these spans of a file are holes, which a copy leaves as holes (0 where the file cannot
    be opened or the filesystem cannot tell: then every byte counts as data)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        return sum(b - a for start, end in spans for a, b, is_data in _segments(fd, start, end) if not is_data)
    except OSError:
        return 0
    finally:
        os.close(fd)


class _Cancelled(Exception):
    """Another shard worker failed or the run was interrupted: this worker stops at its next chunk."""


class Shared:
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


class Streamer:
    """One shard worker: its chunk buffers, its two hash threads and its fsync thread."""

    def __init__(self, *, copy_mode: str, chunk: int, shared: Shared, durable: bool = True):
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
        self.preallocate: bool | None = None if _fallocate is not None else False  # decided at the first chunk

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
            # stall reading and hashing behind the disk. The same single thread closes the file after its fsync,
            # so the fd outlives the hint.
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
                elif self.copy_mode == "copy_file_range" and self._copy_kernel(src, pos, n, dst, pos + shift):
                    hashes = [h for h in (h_in, h_out) if h is not None]
                    if hashes:
                        # Both digests from the bytes just copied, read where they now are (the output's page
                        # cache) through a read-only map: no copy into a buffer. The output is this run's own
                        # temporary file, so the map cannot lose its pages under it (the input is never mapped: a
                        # truncated input would raise SIGBUS instead of an error).
                        try:
                            view = self.ring.map_output(dst, pos + shift, n)
                        except (OSError, ValueError):  # a filesystem without mmap: read the copy back
                            i, buf = self.ring.take()
                            view = buf[:n]
                            self._read_into(dst, view, pos + shift, what)
                            self.ring.pending[i] = [h.update(view) for h in hashes]
                        else:
                            self.ring.hold([h.update(view) for h in hashes])
                else:
                    i, buf = self.ring.take()
                    mv = buf[:n]
                    self._read_into(src, mv, pos, what)
                    self.ring.pending[i] = [h.update(mv) for h in (h_in, h_out) if h is not None]
                    self._write_all(dst, mv, pos + shift)
                pos += n
                self.advance(n, what)

    def _preallocate(self, fd: int, off: int, n: int) -> None:
        """Allocate the blocks of a chunk of data about to be copied (holes stay holes). Best effort: where the
        filesystem cannot (or any other error, ENOSPC included, which the copy itself then reports), the worker
        stops trying and copies without."""
        if self.preallocate is None:
            self.preallocate = _preallocation_helps(fd)
        if self.preallocate and n > 0 and _fallocate(fd, 0, off, n) != 0:  # type: ignore[misc]
            self.preallocate = False

    def _copy_kernel(self, src: int, off: int, n: int, dst: int, dst_off: int) -> bool:
        """Copy in the kernel; False (and read/write from then on) where the two files' filesystems cannot
        (EXDEV across filesystems, EINVAL/EOPNOTSUPP/ENOSYS where unsupported), having copied nothing."""
        # Chunk by chunk, not the whole run at once: read/write into preallocated blocks costs more than
        # without (bench/NOTES.md), and a refusal of the first copy must leave at most one chunk preallocated.
        self._preallocate(dst, dst_off, n)
        done = 0
        while done < n:
            try:
                k = os.copy_file_range(src, dst, n - done, off + done, dst_off + done)
            except OSError as e:
                if done == 0 and e.errno in _NO_KERNEL_COPY:
                    self.copy_mode = "read_write"
                    return False
                raise
            if k == 0:
                raise InputError("input file ended early (changed while being copied?)")
            done += k
        self.bytes_written += n
        self._writeback(dst, dst_off + n)
        return True

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
    """A safetensors header for the shard's tensors in order (the one writer: kconvert.writer.header)."""
    return safetensors_header(((t.name, t.dtype, t.shape, t.nbytes) for t in tensors), metadata)


def _runs(tensors: list[OutTensor], start: int) -> Iterator[tuple[int, tuple[int, int] | OutTensor]]:
    """The output after its header, in order, with the offset each piece is written at: a run of adjacent
    unchanged tensors as the input byte span (start, end) it copies, a rewritten tensor as itself."""
    span: list[int] | None = None  # [input start, input end, output offset]
    off = start
    for t in tensors:
        if t.copy_of is not None and span is not None and span[1] == t.copy_of.start:
            span[1] = t.copy_of.end
        else:
            if span is not None:
                yield span[2], (span[0], span[1])
                span = None
            if t.copy_of is not None:
                span = [t.copy_of.start, t.copy_of.end, off]
            else:
                yield off, t
        off += t.nbytes
    if span is not None:
        yield span[2], (span[0], span[1])


def _open_input(s: Streamer, ckpt: Checkpoint, shard: str) -> tuple[int | None, int, _Hash | None, str | None]:
    """The input shard of an output shard, when there is one: its descriptor, its size, the hash to feed (None
    when its digest is already known) and the known digest."""
    in_path = ckpt.local_path(shard) if shard in ckpt.shard_metadata else None
    if in_path is None:
        return None, 0, None, None
    # A hash already known (computed earlier in this run, a Hub blob's name, or kconvert's stat-keyed hash
    # cache: see kconvert.source.hashcache) is not recomputed.
    known = (ckpt.files[shard].sha256 if shard in ckpt.files else None) or hashcache.lookup(in_path)
    src = os.open(in_path, os.O_RDONLY)
    try:
        in_size = os.fstat(src).st_size
        expected = ckpt.files[shard].size if shard in ckpt.files else None
        if expected is not None and in_size != expected:
            raise InputError(f"{shard}: changed size since it was read ({expected} -> {in_size} bytes)")
    except BaseException:
        os.close(src)
        raise
    return src, in_size, (None if known else _Hash(s.in_ex)), known


def write_shard(s: Streamer, ckpt: Checkpoint, shard: str, tensors: list[OutTensor],
                metadata: dict[str, str], dst_path: Path) -> tuple[tuple[int, str], tuple[int, str] | None]:
    """Write one output shard; returns (output size, sha256) and the input shard's (size, sha256)."""
    s.current = shard
    header = shard_header(tensors, metadata)
    src, in_size, h_in, known = _open_input(s, ckpt, shard)
    try:
        dst = s.open_out(dst_path)
    except BaseException:
        if src is not None:
            os.close(src)
        raise
    h_out = _Hash(s.out_ex)
    end = len(header) + sum(t.nbytes for t in tensors)
    try:
        s.write_bytes(dst, header, 0, h_out, shard)
        in_pos = 0
        for off, piece in _runs(tensors, len(header)):
            if isinstance(piece, tuple):
                assert src is not None
                s.hash_only(src, in_pos, piece[0], h_in, shard)
                s.copy_span(src, piece[0], piece[1], dst, off, h_in, h_out, shard)
                in_pos = piece[1]
            else:
                _write_rewritten(s, dst, piece, off, h_out, shard)
        if src is not None:
            s.hash_only(src, in_pos, in_size, h_in, shard)
        s.ring.drain()
    except BaseException:
        os.close(dst)
        raise
    finally:
        if src is not None:
            os.close(src)
    s.finish_file(dst, end)
    s.advance(0, f"wrote {shard}", force=True)
    if src is None:
        return (end, h_out.hexdigest()), None
    return (end, h_out.hexdigest()), (in_size, h_in.hexdigest() if h_in is not None else known)


def _write_rewritten(s: Streamer, dst: int, t: OutTensor, off: int, h_out: _Hash, shard: str) -> None:
    assert t.chunks is not None
    n = 0
    for piece in t.chunks():
        s.write_bytes(dst, piece, off + n, h_out, f"{shard} [{t.name}]")
        n += len(piece)
    if n != t.nbytes:
        raise RuntimeError(f"rewrite of {t.name} produced {n} bytes, expected {t.nbytes}")


def run_shards(shards: list[str], work: Callable[[str, Streamer], None], streamers: list[Streamer],
                shared: Shared) -> None:
    """Run `work(shard, streamer)` for every shard, one worker per streamer, the calling thread being the first
    (so that Ctrl-C/SIGTERM, delivered to the main thread, stops the work). The first error stops every
    worker at its next chunk and is re-raised once all have stopped, the failing worker's file named in
    `streamers[0].current`; nothing writes into the temporary folder after this returns."""
    todo = list(shards)
    lock = threading.Lock()
    errors: list[tuple[BaseException, Streamer]] = []

    def loop(st: Streamer) -> None:
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

    def run(st: Streamer, finished: threading.Event) -> None:
        try:
            loop(st)
        finally:
            finished.set()

    # Each worker's end is waited for on its own event, not with Thread.join: on CPython 3.11 a join interrupted by
    # Ctrl-C marks the thread stopped while it still runs (Lib/threading.py _wait_for_tstate_lock, bpo-45274's
    # `lock.release(); self._stop()` on any exception), so `is_alive()` would let this return with a worker still
    # writing. An interrupted Event.wait leaves nothing marked.
    ends = [threading.Event() for _ in streamers[1:]]
    threads = [threading.Thread(target=run, args=(st, end), name="kconvert-shard", daemon=True)
               for st, end in zip(streamers[1:], ends)]
    for t in threads:
        t.start()
    try:
        loop(streamers[0])
    except BaseException as e:  # noqa: BLE001 - e.g. an interrupt outside `work`: stop the others first
        shared.cancel.set()
        errors.append((e, streamers[0]))
    for end in ends:
        while not end.is_set():
            try:
                end.wait()
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


__all__ = ["CHUNK_BYTES", "Shared", "Streamer", "run_shards", "shard_header", "write_shard"]
