"""kconvert/writer/stream.py, the byte mover, piece by piece against outside oracles (issue #30: its mutation run).

The expected values come from outside the module:
- the bytes: files the test writes itself with bytes written down here, read back with plain `open().read()`;
  a shard the streamer writes is read by the safetensors library (`safetensors.numpy.load_file`, the loader the
  engines use) against arrays written down in the test;
- the digests: `hashlib.sha256` of the bytes read back (Python docs);
- holes: lseek(2)'s SEEK_DATA/SEEK_HOLE on a file made sparse by writing two 4096-byte blocks and truncating
  (ext4's block size, from `os.statvfs(...).f_bsize`; skipped where the filesystem keeps no holes); st_blocks
  (stat(2): 512-byte units) for "a hole stays a hole";
- the system calls' contracts: pwrite(2)/preadv(2) may move fewer bytes than asked, copy_file_range(2) fails
  with EXDEV across filesystems and returns 0 at end of input, fallocate(2)'s mode 0 is plain allocation,
  sync_file_range(2)'s SYNC_FILE_RANGE_WRITE is 2 (linux/fs.h), open(2)'s O_EXCL, umask(2);
- memoryview's documented release() (a released view raises ValueError on use).
All engine-free, in-process, milliseconds each.
"""
from __future__ import annotations

import errno
import hashlib
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from kconvert.errors import InputError
from kconvert.source.checkpoint import load_folder
from kconvert.writer import stream
from kconvert.writer.layout import OutTensor
from kconvert.writer.stream import Shared, Streamer
from tests.writer_factories import write_safetensors

pytestmark = pytest.mark.timeout(60)

BLOCK = 4096
A = bytes(range(256)) * 16  # 4096 bytes 00 01 .. ff repeated
B = b"\xab" * BLOCK


def _sparse(path: Path) -> bytes:
    """Data at [0, 4096) and [12288, 16384), holes at [4096, 12288) and [16384, 20480): 20480 bytes."""
    with open(path, "wb") as f:
        f.write(A)
        f.seek(3 * BLOCK)
        f.write(B)
        f.truncate(5 * BLOCK)
    content = A + bytes(2 * BLOCK) + B + bytes(BLOCK)
    assert path.read_bytes() == content
    return content


def _holes_kept(path: Path) -> bool:
    return os.statvfs(path).f_bsize == BLOCK and os.stat(path).st_blocks * 512 == 2 * BLOCK


@pytest.fixture
def sparse(tmp_path):
    p = tmp_path / "sparse.bin"
    content = _sparse(p)
    if not _holes_kept(p):
        pytest.skip("this filesystem keeps no 4096-byte holes")
    return p, content


@pytest.fixture
def streamer():
    made = []

    def make(copy_mode="copy_file_range", chunk=1000, progress=None, total=1 << 40, durable=True):
        s = Streamer(copy_mode=copy_mode, chunk=chunk, shared=Shared(progress, total), durable=durable)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def _fd(path, flags=os.O_RDONLY):
    return os.open(path, flags)


# --- _segments / hole_bytes: lseek(2) SEEK_DATA / SEEK_HOLE ---------------------------------------------------------

def test_segments_are_the_data_and_holes_lseek_reports(sparse):
    p, _ = sparse
    fd = _fd(p)
    try:
        assert stream._segments(fd, 0, 5 * BLOCK) == [(0, 4096, True), (4096, 12288, False), (12288, 16384, True),
                                                      (16384, 20480, False)]
        # a window starting inside a hole and ending inside data: clipped to the window
        assert stream._segments(fd, 5000, 13000) == [(5000, 12288, False), (12288, 13000, True)]
        # a window inside the trailing hole: SEEK_DATA fails with ENXIO (lseek(2)), all of it is a hole
        assert stream._segments(fd, 17000, 20000) == [(17000, 20000, False)]
        # a window inside data ending in a hole
        assert stream._segments(fd, 100, 5000) == [(100, 4096, True), (4096, 5000, False)]
        assert stream._segments(fd, 300, 300) == []
        assert stream._segments(fd, 300, 200) == []
    finally:
        os.close(fd)


def test_segments_without_seek_data_or_where_the_filesystem_refuses_are_one_data_run(sparse, monkeypatch):
    p, _ = sparse
    fd = _fd(p)
    try:
        for code in (errno.EINVAL, errno.EOPNOTSUPP):
            def refuse(*a, code=code):
                raise OSError(code, os.strerror(code))
            monkeypatch.setattr(os, "lseek", refuse)
            assert stream._segments(fd, 10, 9000) == [(10, 9000, True)]
        monkeypatch.setattr(os, "lseek", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
        with pytest.raises(OSError) as e:
            stream._segments(fd, 10, 9000)
        assert e.value.errno == errno.EIO
        monkeypatch.undo()
        monkeypatch.delattr(os, "SEEK_DATA")
        assert stream._segments(fd, 10, 9000) == [(10, 9000, True)]
        assert stream._segments(fd, 10, 10) == []
    finally:
        os.close(fd)


def test_segments_passes_other_seek_data_errors_on(sparse, monkeypatch):
    p, _ = sparse
    fd = _fd(p)
    real = os.lseek

    def lseek(fd_, pos, how):
        if how == os.SEEK_DATA:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return real(fd_, pos, how)
    monkeypatch.setattr(os, "lseek", lseek)
    try:
        with pytest.raises(OSError) as e:
            stream._segments(fd, 0, 9000)
        assert e.value.errno == errno.EBADF
    finally:
        os.close(fd)


def test_hole_bytes_counts_the_holes_of_the_spans(sparse, tmp_path, monkeypatch):
    p, _ = sparse
    # holes [4096, 12288) and [16384, 20480): of [0, 20480) 12288 bytes; of [5000, 13000) 12288 - 5000 = 7288;
    # of [100, 5000) 5000 - 4096 = 904
    assert stream.hole_bytes(p, [(0, 5 * BLOCK)]) == 12288
    assert stream.hole_bytes(p, [(5000, 13000), (100, 5000)]) == 7288 + 904
    assert stream.hole_bytes(p, []) == 0
    assert stream.hole_bytes(tmp_path / "missing", [(0, 100)]) == 0
    monkeypatch.setattr(stream, "_segments", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    assert stream.hole_bytes(p, [(0, 5 * BLOCK)]) == 0


# --- _Hash, _Ring ---------------------------------------------------------------------------------------------------

def test_hash_is_sha256_of_the_updates_in_order(streamer):
    s = streamer()
    h = stream._Hash(s.in_ex)
    for part in (b"abc", memoryview(b"def"), b""):
        h.update(part)
    assert h.hexdigest() == hashlib.sha256(b"abcdef").hexdigest()


def test_ring_hands_out_its_buffers_in_turn_and_waits_for_their_hashes():
    r = stream._Ring(3, 16)
    got = [r.take()[0] for _ in range(4)]
    assert got == [0, 1, 2, 0]
    i, buf = r.take()
    assert i == 1 and len(buf) == 16
    f: Future = Future()
    r.pending[2] = [f]
    threading.Timer(0.2, f.set_result, (None,)).start()
    t0 = time.monotonic()
    i, _ = r.take()
    assert i == 2 and f.done() and time.monotonic() - t0 >= 0.15
    assert r.pending[2] == []


def test_ring_maps_the_output_bytes_asked_and_keeps_at_most_its_buffers_mapped(tmp_path):
    p = tmp_path / "out.bin"
    data = bytes(range(256)) * 100  # 25600 bytes
    p.write_bytes(data)
    fd = _fd(p)
    r = stream._Ring(3, 16)
    try:
        views = []
        for off, n in ((0, 10), (5000, 300), (8191, 2), (20000, 5600)):
            v = r.map_output(fd, off, n)
            assert bytes(v) == data[off:off + n]
            views.append(v)
            assert len(r.maps) <= 3
        assert len(r.maps) == 3
        with pytest.raises(ValueError):  # the oldest map was released to make room (memoryview.release)
            bytes(views[0])
        f: Future = Future()
        r.hold([f])
        assert r.maps[-1][2] == [f]
        threading.Timer(0.1, f.set_result, (None,)).start()
        r.drain()
        assert r.maps == [] and f.done()
        for v in views:
            with pytest.raises(ValueError):
                bytes(v)
    finally:
        os.close(fd)


def test_ring_drain_waits_for_every_pending_hash():
    r = stream._Ring(2, 8)
    fs = [Future() for _ in range(3)]
    r.pending = [[fs[0], fs[1]], [fs[2]]]
    for k, f in enumerate(fs):
        threading.Timer(0.05 * (k + 1), f.set_result, (None,)).start()
    r.drain()
    assert all(f.done() for f in fs) and r.pending == [[], []]


# --- Shared: progress and cancellation ------------------------------------------------------------------------------

def test_progress_is_reported_every_64_mib_when_forced_and_never_past_the_total():
    calls = []
    sh = Shared(lambda d, t, m: calls.append((d, t, m)), 200 << 20)
    sh.advance(10, "a", False)
    assert calls == []
    sh.advance((64 << 20) - 10, "b", False)  # exactly 64 MiB done since the last report
    assert calls == [(64 << 20, 200 << 20, "b")]
    sh.advance(1, "c", False)
    assert len(calls) == 1
    sh.advance(0, "d", True)
    assert calls[-1] == ((64 << 20) + 1, 200 << 20, "d")
    sh.advance(300 << 20, "e", False)
    assert calls[-1] == (200 << 20, 200 << 20, "e")  # clamped to the total
    assert sh.done == (364 << 20) + 1
    Shared(None, 10).advance(100, "no callback", True)  # nothing to call: no error
    sh.cancel.set()
    with pytest.raises(stream._Cancelled):
        sh.advance(1, "f", True)
    assert sh.done == (364 << 20) + 1 and len(calls) == 3


def test_streamer_advance_forwards_to_the_shared_progress(streamer):
    calls = []
    s = streamer(progress=lambda d, t, m: calls.append((d, t, m)), total=100)
    s.advance(7, "x")
    assert calls == []
    s.advance(3, "y", force=True)
    assert calls == [(10, 100, "y")]


# --- primitives: reads, writes, write-back hints -------------------------------------------------------------------

def test_read_into_reads_all_of_a_short_read_and_refuses_a_file_that_ended(tmp_path, streamer, monkeypatch):
    p = tmp_path / "in.bin"
    p.write_bytes(A)
    s = streamer()
    fd = _fd(p)
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd_, bufs, off: real(fd_, [bufs[0][:3]], off))  # 3 bytes a call
    try:
        mv = memoryview(bytearray(20))
        s._read_into(fd, mv, 100, "x")
        assert bytes(mv) == A[100:120]
        with pytest.raises(InputError, match=r"^in\.bin: file ended early \(changed while being copied\?\)$"):
            s._read_into(fd, memoryview(bytearray(10)), BLOCK - 4, "in.bin")
    finally:
        os.close(fd)


def test_write_all_writes_everything_of_short_writes(tmp_path, streamer, monkeypatch):
    p = tmp_path / "out.bin"
    s = streamer()
    fd = os.open(p, os.O_RDWR | os.O_CREAT)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd_, mv, off: real(fd_, bytes(mv)[:5], off))  # 5 bytes a call
    try:
        s._write_all(fd, b"0123456789abcdef", 3)
        s._write_all(fd, bytearray(b"XY"), 0)
    finally:
        os.close(fd)
    assert p.read_bytes() == b"XY\x000123456789abcdef"
    assert s.bytes_written == 18


def test_write_back_is_started_every_writeback_every_bytes_when_durable(tmp_path, streamer, monkeypatch):
    calls = []
    monkeypatch.setattr(stream, "_sync_file_range", lambda fd, off, n, flags: calls.append((fd, off, n, flags)) or 0)
    monkeypatch.setattr(stream, "WRITEBACK_EVERY", 100)
    s = streamer()
    fd = os.open(tmp_path / "out.bin", os.O_RDWR | os.O_CREAT)
    try:
        s._write_all(fd, b"x" * 60, 0)
        s.wait_syncs()
        assert calls == []
        s._write_all(fd, b"x" * 40, 60)  # 100 bytes since 0: one hint for [0, 100)
        s._write_all(fd, b"x" * 99, 100)  # 99 since 100: none
        s._write_all(fd, b"x" * 150, 199)  # 249 since 100: [100, 349)
        s.wait_syncs()
        assert calls == [(fd, 0, 100, 2), (fd, 100, 249, 2)]  # SYNC_FILE_RANGE_WRITE == 2 (linux/fs.h)
        calls.clear()
        src = tmp_path / "in.bin"
        src.write_bytes(A)
        sfd = _fd(src)
        try:
            dst = s.open_out(tmp_path / "copy.bin")
            assert s._copy_kernel(sfd, 0, 150, dst, 0) is True  # the kernel's copy is hinted the same way
            s.wait_syncs()
            assert calls == [(dst, 0, 150, 2)]
            os.close(dst)
        finally:
            os.close(sfd)
        calls.clear()
        nd = streamer(durable=False)
        nd._write_all(fd, b"x" * 500, 0)
        nd.wait_syncs()
        monkeypatch.setattr(stream, "_sync_file_range", None)
        s._write_all(fd, b"x" * 500, 400)
        s.wait_syncs()
        assert calls == []
    finally:
        os.close(fd)


# --- hash_only, copy_span ------------------------------------------------------------------------------------------

def test_hash_only_hashes_data_and_holes_as_the_file_reads(sparse, streamer):
    p, content = sparse
    s = streamer(chunk=1000)
    fd = _fd(p)
    try:
        for a, b in ((0, 5 * BLOCK), (100, 13000), (17000, 20000)):
            h = stream._Hash(s.in_ex)
            before = s.shared.done
            s.hash_only(fd, a, b, h, "x")
            s.ring.drain()
            assert h.hexdigest() == hashlib.sha256(content[a:b]).hexdigest()
            assert s.shared.done - before == b - a
        # no hash to feed (its digest is known): only the progress moves
        s.hash_only(fd, 0, 500, None, "x")
        s.hash_only(fd, 500, 400, None, "x")
        h = stream._Hash(s.in_ex)
        s.hash_only(fd, 500, 400, h, "x")
        assert h.hexdigest() == hashlib.sha256(b"").hexdigest()
        assert s.shared.done == 20480 + 12900 + 3000 + 500
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", ["copy_file_range", "read_write", "copy_file_range, mmap refused"])
def test_copy_span_writes_the_bytes_at_the_shift_feeds_both_hashes_and_keeps_holes(sparse, tmp_path, streamer,
                                                                                    monkeypatch, mode):
    p, content = sparse
    s = streamer(copy_mode=mode.split(",")[0], chunk=1000)
    kernel = []
    real_crf = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", lambda *a: kernel.append(a) or real_crf(*a))
    if "mmap refused" in mode:
        monkeypatch.setattr(s.ring, "map_output", lambda *a: (_ for _ in ()).throw(OSError(errno.ENODEV, "no mmap")))
    src = _fd(p)
    out = tmp_path / "out.bin"
    dst = s.open_out(out)
    try:
        h_in, h_out = stream._Hash(s.in_ex), stream._Hash(s.out_ex)
        s.copy_span(src, 0, 5 * BLOCK, dst, 2 * BLOCK, h_in, h_out, "x")  # the copy starts 8192 bytes in
        s.ring.drain()
        s.finish_file(dst, 7 * BLOCK)
        s.wait_syncs()
    finally:
        os.close(src)
    got = out.read_bytes()
    assert got == bytes(2 * BLOCK) + content
    assert h_in.hexdigest() == h_out.hexdigest() == hashlib.sha256(content).hexdigest()
    assert s.shared.done == 5 * BLOCK
    assert s.bytes_written == 2 * BLOCK  # the data only, not the holes
    assert os.stat(out).st_blocks * 512 == 2 * BLOCK  # only the two data blocks take disk
    assert s.copy_mode == mode.split(",")[0]
    # the kernel copies the two 4096-byte data blocks in 1000-byte chunks (5 each), or is never asked (read/write)
    assert len(kernel) == (0 if mode == "read_write" else 10)


def test_copy_span_without_hashes_only_copies(sparse, tmp_path, streamer):
    p, content = sparse
    for mode in ("copy_file_range", "read_write"):
        s = streamer(copy_mode=mode, chunk=1000)
        src = _fd(p)
        out = tmp_path / f"{mode}.bin"
        dst = s.open_out(out)
        try:
            s.copy_span(src, 100, 13000, dst, 0, None, None, "x")
            s.ring.drain()
            s.finish_file(dst, 12900)
            s.wait_syncs()
        finally:
            os.close(src)
        assert out.read_bytes() == content[100:13000]
        assert s.bytes_written == (4096 - 100) + (13000 - 12288)


def test_a_refused_kernel_copy_falls_back_to_read_write_having_copied_nothing(sparse, tmp_path, streamer, monkeypatch):
    p, content = sparse
    calls = []

    def refuse(*a):
        calls.append(a)
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(os, "copy_file_range", refuse)
    s = streamer(chunk=1000)
    src = _fd(p)
    out = tmp_path / "out.bin"
    dst = s.open_out(out)
    try:
        h = stream._Hash(s.out_ex)
        s.copy_span(src, 0, 5 * BLOCK, dst, 0, None, h, "x")
        s.ring.drain()
        s.finish_file(dst, 5 * BLOCK)
        s.wait_syncs()
    finally:
        os.close(src)
    assert len(calls) == 1 and s.copy_mode == "read_write"
    assert out.read_bytes() == content and h.hexdigest() == hashlib.sha256(content).hexdigest()
    assert s.bytes_written == 2 * BLOCK


def test_kernel_copy_loops_over_short_copies_and_refuses_an_input_that_ended(tmp_path, streamer, monkeypatch):
    p = tmp_path / "in.bin"
    p.write_bytes(A)
    real = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", lambda s_, d, n, o, do: real(s_, d, min(n, 7), o, do))
    s = streamer()
    src = _fd(p)
    dst = s.open_out(tmp_path / "out.bin")
    try:
        assert s._copy_kernel(src, 10, 30, dst, 5) is True
        assert os.pread(dst, 100, 0) == bytes(5) + A[10:40]
        assert s.bytes_written == 30
        with pytest.raises(InputError, match=r"^input file ended early \(changed while being copied\?\)$"):
            s._copy_kernel(src, BLOCK - 3, 10, dst, 0)
    finally:
        os.close(src)
        os.close(dst)


@pytest.mark.parametrize("first_ok", [True, False])
def test_kernel_copy_errors_other_than_unsupported_or_after_a_partial_copy_are_raised(tmp_path, streamer, monkeypatch,
                                                                                      first_ok):
    p = tmp_path / "in.bin"
    p.write_bytes(A)
    real = os.copy_file_range
    n = [0]

    def crf(s_, d, cnt, o, do):
        n[0] += 1
        if first_ok and n[0] == 1:
            return real(s_, d, 7, o, do)
        raise OSError(errno.EXDEV if first_ok else errno.EIO, "refused")
    monkeypatch.setattr(os, "copy_file_range", crf)
    s = streamer()
    src = _fd(p)
    dst = s.open_out(tmp_path / "out.bin")
    try:
        with pytest.raises(OSError) as e:
            s._copy_kernel(src, 0, 30, dst, 0)
        assert e.value.errno == (errno.EXDEV if first_ok else errno.EIO)
        assert s.copy_mode == "copy_file_range"
    finally:
        os.close(src)
        os.close(dst)


@pytest.mark.parametrize("code", sorted(stream._NO_KERNEL_COPY))
def test_every_unsupported_errno_of_copy_file_range_means_read_write(tmp_path, streamer, monkeypatch, code):
    p = tmp_path / "in.bin"
    p.write_bytes(A)
    monkeypatch.setattr(os, "copy_file_range", lambda *a: (_ for _ in ()).throw(OSError(code, os.strerror(code))))
    s = streamer()
    src = _fd(p)
    dst = s.open_out(tmp_path / "out.bin")
    try:
        assert s._copy_kernel(src, 0, 30, dst, 0) is False
        assert s.copy_mode == "read_write" and s.bytes_written == 0
    finally:
        os.close(src)
        os.close(dst)


def test_preallocation_asks_fallocate_mode_0_for_each_chunk_until_it_fails(tmp_path, streamer, monkeypatch):
    calls = []
    answers = [0, 0, -1]
    monkeypatch.setattr(stream, "_fallocate", lambda fd, mode, off, n: calls.append((fd, mode, off, n)) or answers.pop(0))
    monkeypatch.setattr(stream, "_preallocation_helps", lambda fd: True)
    s = streamer()
    s.preallocate = None
    s._preallocate(5, 100, 50)
    s._preallocate(5, 150, 0)  # nothing to allocate
    s._preallocate(5, 150, 1)
    assert s.preallocate is True
    s._preallocate(5, 200, 50)  # refused: no more tries
    s._preallocate(5, 250, 50)
    assert calls == [(5, 0, 100, 50), (5, 0, 150, 1), (5, 0, 200, 50)]
    assert s.preallocate is False
    calls.clear()
    monkeypatch.setattr(stream, "_preallocation_helps", lambda fd: False)
    s2 = streamer()
    s2.preallocate = None
    s2._preallocate(5, 0, 50)
    assert s2.preallocate is False and calls == []


def test_preallocation_is_decided_at_the_first_chunk_only_when_fallocate_exists(monkeypatch):
    monkeypatch.setattr(stream, "_fallocate", None)
    s = Streamer(copy_mode="read_write", chunk=8, shared=Shared(None, 1))
    try:
        assert s.preallocate is False
    finally:
        s.close()
    monkeypatch.setattr(stream, "_fallocate", lambda *a: 0)
    s = Streamer(copy_mode="read_write", chunk=8, shared=Shared(None, 1))
    try:
        assert s.preallocate is None
        assert bytes(s.zeros) == bytes(8) and len(s.ring.bufs) == stream.N_BUFFERS and s.durable is True
    finally:
        s.close()


def test_preallocation_helps_is_false_without_fstatfs_or_when_it_fails(tmp_path, monkeypatch):
    fd = _fd(tmp_path)
    try:
        monkeypatch.setattr(stream, "_fstatfs", None)
        assert stream._preallocation_helps(fd) is False
        monkeypatch.setattr(stream, "_fstatfs", lambda fd_, buf: -1)
        assert stream._preallocation_helps(fd) is False
    finally:
        os.close(fd)


def test_libc_function_is_the_c_function_with_its_argument_types_and_int_result(tmp_path):
    getpid = stream._libc_function("getpid", [])
    assert getpid() == os.getpid()  # getpid(2)
    assert stream._libc_function("no_such_function_in_libc", []) is None
    # ftruncate(2) takes a 64-bit off_t: 8 GiB only passes as the int64 the argument types declare (a bare Python
    # int is passed as a C int, and ctypes refuses one that large); it returns int 0 on success
    ftruncate = stream._libc_function("ftruncate", [stream.ctypes.c_int, stream.ctypes.c_int64])
    fd = os.open(tmp_path / "big.bin", os.O_RDWR | os.O_CREAT)
    try:
        assert ftruncate(fd, 1 << 33) == 0
        assert os.fstat(fd).st_size == 1 << 33
    finally:
        os.close(fd)


# --- files ----------------------------------------------------------------------------------------------------------

def test_finish_file_sets_the_size_and_closes_after_fsync(tmp_path, streamer, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    for durable in (True, False):
        s = streamer(durable=durable)
        p = tmp_path / f"{durable}.bin"
        fd = s.open_out(p)
        s._write_all(fd, b"abc", 0)
        s.wb_start[fd] = 3
        s.finish_file(fd, 3 * BLOCK)  # a trailing hole: the size comes from ftruncate(2)
        s.wait_syncs()
        assert fd not in s.wb_start
        assert p.read_bytes() == b"abc" + bytes(3 * BLOCK - 3)
        with pytest.raises(OSError) as e:
            os.fstat(fd)
        assert e.value.errno == errno.EBADF
        assert synced == ([fd] if durable else [])
        synced.clear()


def test_open_out_makes_the_folders_refuses_an_existing_file_and_gives_mode_0644(tmp_path, streamer):
    s = streamer()
    old = os.umask(0o022)
    try:
        fd = s.open_out(tmp_path / "a" / "b" / "out.bin")
    finally:
        os.umask(old)
    try:
        os.write(fd, b"hi")
        assert os.pread(fd, 2, 0) == b"hi"  # opened for reading and writing (O_RDWR)
    finally:
        os.close(fd)
    assert (os.stat(tmp_path / "a" / "b" / "out.bin").st_mode & 0o777) == 0o644
    with pytest.raises(FileExistsError):
        s.open_out(tmp_path / "a" / "b" / "out.bin")
    os.close(s.open_out(tmp_path / "a" / "b" / "second.bin"))  # a second file in a folder that exists


def test_copy_file_copies_and_records_the_digest_or_refuses_a_changed_size(tmp_path, streamer):
    src = tmp_path / "in" / "tokenizer.json"
    src.parent.mkdir()
    data = b'{"model": "tiny"}\n' * 1000
    src.write_bytes(data)
    calls = []
    s = streamer(chunk=1000, progress=lambda d, t, m: calls.append((d, m)))
    assert s.copy_file(src, tmp_path / "out" / "tokenizer.json", "tokenizer.json", len(data)) == (
        len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == data
    assert s.current == "tokenizer.json" and calls[-1] == (len(data), "copied tokenizer.json")
    assert s.copy_file(src, tmp_path / "out2" / "t.json", "t.json", None)[1] == hashlib.sha256(data).hexdigest()
    with pytest.raises(InputError, match=rf"^tokenizer\.json: changed size since it was read \(5 -> {len(data)} bytes\)$"):
        s.copy_file(src, tmp_path / "out3" / "tokenizer.json", "tokenizer.json", 5)
    assert not (tmp_path / "out3").exists()


def _blob(tmp_path: Path, data: bytes) -> Path:
    """A Hub cache layout (huggingface_hub: snapshots/<rev>/<file> -> blobs/<sha256>), the digest written down here."""
    sha = hashlib.sha256(data).hexdigest()
    blob = tmp_path / "hub" / "blobs" / sha
    blob.parent.mkdir(parents=True)
    blob.write_bytes(data)
    link = tmp_path / "hub" / "snapshots" / "rev" / "f.bin"
    link.parent.mkdir(parents=True)
    link.symlink_to(blob)
    return link


def test_copy_file_and_hash_file_use_a_known_digest(tmp_path, streamer, monkeypatch):
    data = b"known bytes"
    link = _blob(tmp_path, data)
    s = streamer()
    fed = []
    monkeypatch.setattr(stream._Hash, "update", lambda self, d: fed.append(bytes(d)))
    assert s.copy_file(link, tmp_path / "out" / "f.bin", "f.bin", None) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "out" / "f.bin").read_bytes() == data
    assert s.hash_file(link, "f.bin") == (len(data), hashlib.sha256(data).hexdigest())
    assert fed == []  # not hashed again


def test_hash_file_hashes_what_it_reads(sparse, streamer):
    p, content = sparse
    s = streamer(chunk=1000)
    assert s.hash_file(p, "sparse.bin") == (len(content), hashlib.sha256(content).hexdigest())


def test_write_small_writes_the_bytes_and_returns_their_digest(tmp_path, streamer):
    s = streamer()
    data = b'{"a": 1}\n'
    assert s.write_small(tmp_path / "o" / "config.json", data) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "o" / "config.json").read_bytes() == data
    assert s.current == "config.json" and s.bytes_written == len(data)
    with pytest.raises(FileExistsError):
        s.write_small(tmp_path / "o" / "config.json", data)


def test_write_small_closes_the_file_when_the_write_fails(tmp_path, streamer, monkeypatch):
    s = streamer()
    opened = []
    real = s.open_out
    monkeypatch.setattr(s, "open_out", lambda p: opened.append(real(p)) or opened[-1])
    monkeypatch.setattr(os, "pwrite", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    with pytest.raises(OSError):
        s.write_small(tmp_path / "x.json", b"data")
    with pytest.raises(OSError) as e:
        os.fstat(opened[0])
    assert e.value.errno == errno.EBADF


# --- shards: _runs, write_shard, run_shards --------------------------------------------------------------------------

def _info(name, start, end, file="m.safetensors"):
    from kconvert.source.safetensors_header import TensorInfo
    return TensorInfo(name=name, file=file, dtype="U8", shape=(end - start,), start=start, end=end)


def _t(name, n, copy_of=None, chunks=None):
    return OutTensor(name=name, dtype="U8", shape=(n,), shard="m.safetensors", order=0, copy_of=copy_of, chunks=chunks)


def test_runs_join_adjacent_copies_into_one_span_and_yield_rewrites_at_their_offsets():
    a = _t("a", 10, _info("a", 100, 110))
    b = _t("b", 5, _info("b", 110, 115))  # follows a in the input: one span [100, 115)
    c = _t("c", 4, chunks=lambda: iter([b"cccc"]))
    d = _t("d", 3, _info("d", 120, 123))
    e = _t("e", 2, _info("e", 130, 132))  # a gap of 7 bytes after d: a second span
    f = _t("f", 1, _info("f", 132, 133))
    # output offsets from 64 (after the header): a 64, b 74, c 79, d 83, e 86, f 88
    assert list(stream._runs([a, b, c, d, e, f], 64)) == [(64, (100, 115)), (79, c), (83, (120, 123)),
                                                          (86, (130, 133))]
    assert list(stream._runs([c], 8)) == [(8, c)]
    assert list(stream._runs([], 8)) == []
    assert list(stream._runs([a], 8)) == [(8, (100, 110))]


def _shard_in(tmp_path):
    """An input shard: x (U8, 6 values), gone (dropped, 4), y (I32, 3), z (F32, 2)."""
    folder = tmp_path / "in"
    write_safetensors(folder / "model.safetensors", {
        "x": ("U8", (6,), np.array([1, 2, 3, 4, 5, 6], np.uint8).tobytes()),
        "gone": ("U8", (4,), b"\xee" * 4),
        "y": ("I32", (3,), np.array([-1, 0, 7], "<i4").tobytes()),
        "z": ("F32", (2,), np.array([0.5, -2.0], "<f4").tobytes()),
    }, {"format": "pt"})
    (folder / "config.json").write_text("{}\n")
    return folder, load_folder(folder, ref=str(folder))


@pytest.mark.parametrize("mode", ["copy_file_range", "read_write"])
def test_write_shard_writes_a_file_safetensors_loads_with_the_expected_arrays(tmp_path, streamer, monkeypatch, mode):
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)  # every step reported, to read the names it gives
    folder, ck = _shard_in(tmp_path)
    ti = ck.tensors
    new = np.array([10, 20], "<i8")
    tensors = [
        OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ti["x"]),
        OutTensor("y", "I32", (3,), "model.safetensors", 1, copy_of=ti["y"]),
        OutTensor("w", "I64", (2,), "model.safetensors", 2, chunks=lambda: iter([new.tobytes()[:5], new.tobytes()[5:]])),
        OutTensor("z", "F32", (2,), "model.safetensors", 3, copy_of=ti["z"]),
    ]
    calls = []
    s = streamer(copy_mode=mode, chunk=4, progress=lambda d, t, m: calls.append(m))
    out = tmp_path / "out" / "model.safetensors"
    (size, sha), inp = stream.write_shard(s, ck, "model.safetensors", tensors, {"format": "pt"}, out)
    s.wait_syncs()
    got = load_file(str(out))
    assert set(got) == {"x", "y", "w", "z"}
    np.testing.assert_array_equal(got["x"], np.array([1, 2, 3, 4, 5, 6], np.uint8))
    np.testing.assert_array_equal(got["y"], np.array([-1, 0, 7], np.int32))
    np.testing.assert_array_equal(got["w"], np.array([10, 20], np.int64))
    np.testing.assert_array_equal(got["z"], np.array([0.5, -2.0], np.float32))
    raw = out.read_bytes()
    assert (size, sha) == (len(raw), hashlib.sha256(raw).hexdigest())
    # the data: x 6 + y 12 + w 16 + z 8 bytes after the header, no more
    assert len(raw) == 8 + int.from_bytes(raw[:8], "little") + 42
    src = (folder / "model.safetensors").read_bytes()
    assert inp == (len(src), hashlib.sha256(src).hexdigest())
    assert s.current == "model.safetensors" and calls[-1] == "wrote model.safetensors"
    # every step names the shard; a rewrite's steps name the tensor too
    assert set(calls) == {"model.safetensors", "model.safetensors [w]", "wrote model.safetensors"}
    # the progress counts the output header, every input byte (copied or only hashed: the input header, the
    # dropped tensor) and the rewritten tensor's 16 bytes
    assert s.shared.done == (8 + int.from_bytes(raw[:8], "little")) + len(src) + 16


def test_write_shard_of_a_new_shard_has_no_input(tmp_path, streamer):
    folder, ck = _shard_in(tmp_path)
    t = OutTensor("w", "I64", (1,), "extra.safetensors", 0, chunks=lambda: iter([np.array([3], "<i8").tobytes()]))
    s = streamer()
    out = tmp_path / "out" / "extra.safetensors"
    (size, sha), inp = stream.write_shard(s, ck, "extra.safetensors", [t], {}, out)
    s.wait_syncs()
    assert inp is None
    np.testing.assert_array_equal(load_file(str(out))["w"], np.array([3], np.int64))
    raw = out.read_bytes()
    assert (size, sha) == (len(raw), hashlib.sha256(raw).hexdigest())


def test_write_shard_with_a_known_input_digest_does_not_hash_the_input(tmp_path, streamer, monkeypatch):
    folder, ck = _shard_in(tmp_path)
    ck.files["model.safetensors"].sha256 = "f" * 64  # a digest already known (as a Hub blob's name would be)
    x = OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ck.tensors["x"])
    s = streamer()
    _, inp = stream.write_shard(s, ck, "model.safetensors", [x], {}, tmp_path / "out.safetensors")
    s.wait_syncs()
    assert inp == ((folder / "model.safetensors").stat().st_size, "f" * 64)


def test_write_shard_refuses_an_input_that_changed_size_and_leaves_no_descriptor(tmp_path, streamer):
    folder, ck = _shard_in(tmp_path)
    p = folder / "model.safetensors"
    n = p.stat().st_size
    with open(p, "ab") as f:
        f.write(b"\0" * 3)
    x = OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ck.tensors["x"])
    s = streamer()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(InputError, match=rf"^model\.safetensors: changed size since it was read \({n} -> {n + 3} bytes\)$"):
        stream.write_shard(s, ck, "model.safetensors", [x], {}, tmp_path / "out.safetensors")
    assert len(os.listdir("/proc/self/fd")) == before
    assert not (tmp_path / "out.safetensors").exists()


def test_a_rewrite_of_the_wrong_length_is_an_error_naming_the_tensor(tmp_path, streamer):
    folder, ck = _shard_in(tmp_path)
    t = OutTensor("w", "I64", (2,), "model.safetensors", 0, chunks=lambda: iter([b"\1" * 8, b"\2" * 4]))
    s = streamer()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError, match=r"^rewrite of w produced 12 bytes, expected 16$"):
        stream.write_shard(s, ck, "model.safetensors", [t], {}, tmp_path / "out.safetensors")
    assert len(os.listdir("/proc/self/fd")) == before


def test_run_shards_runs_every_shard_once_across_the_workers():
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(3)]
    seen, lock = [], threading.Lock()

    def work(shard, st):
        with lock:
            seen.append((shard, st))
        time.sleep(0.05)
    try:
        stream.run_shards([f"s{i}" for i in range(9)], work, sts, shared)
    finally:
        for st in sts:
            st.close()
    assert sorted(x for x, _ in seen) == [f"s{i}" for i in range(9)]
    assert {st for _, st in seen} <= set(sts)
    assert len({st for _, st in seen}) >= 2  # 9 shards of 50 ms each: the other workers took some


def test_run_shards_stops_the_others_and_raises_the_first_real_error_naming_its_file():
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(2)]
    done = []

    def work(shard, st):
        st.current = shard
        if shard == "bad":
            raise ValueError("broken shard")
        for _ in range(200):
            time.sleep(0.005)
            st.advance(0, shard)  # raises _Cancelled once the other worker failed
        done.append(shard)
    try:
        with pytest.raises(ValueError, match="^broken shard$"):
            stream.run_shards(["slow", "bad", "never1", "never2"], work, sts, shared)
    finally:
        for st in sts:
            st.close()
    assert shared.cancel.is_set()
    assert done == []
    assert sts[0].current == "bad"


def test_run_shards_an_interrupt_wins_over_the_errors_it_caused():
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(2)]
    started = threading.Event()

    def work(shard, st):
        st.current = shard
        if threading.current_thread() is threading.main_thread():
            started.wait(5)
            time.sleep(0.05)
            raise KeyboardInterrupt()
        started.set()
        while not shared.cancel.is_set():
            time.sleep(0.005)
        raise OSError(errno.EIO, "I/O error")  # an error caused by the interrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            stream.run_shards(["a", "b"], work, sts, shared)
    finally:
        for st in sts:
            st.close()


def test_run_shards_with_nothing_to_do_returns():
    shared = Shared(None, 1)
    st = Streamer(copy_mode="read_write", chunk=8, shared=shared)
    try:
        stream.run_shards([], lambda *a: None, [st], shared)
    finally:
        st.close()


def test_shard_header_is_the_safetensors_framing_of_the_tensors_in_order():
    x = _t("x", 6, _info("x", 0, 6))
    w = OutTensor("w", "I64", (2,), "m", 1)
    h = stream.shard_header([x, w], {"format": "pt"})
    # hand-built: JSON of the two entries in order, offsets 0..6 and 6..22, padded with spaces to 8 bytes
    body = ('{"__metadata__":{"format":"pt"},"x":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},'
            '"w":{"dtype":"I64","shape":[2],"data_offsets":[6,22]}}')
    body += " " * (-len(body) % 8)
    assert h == len(body).to_bytes(8, "little") + body.encode()


def test_a_fresh_streamer_names_no_file_so_an_early_error_names_the_output(streamer):
    # kconvert/writer/write.py names `run.current or 'the output'` in a failed write's message
    assert streamer().current == ""


def test_each_hash_executor_runs_one_update_at_a_time_in_order(streamer):
    """A sha256 must be fed in order (hashlib's update is not commutative): each of the streamer's executors runs
    one call at a time, first in first out (concurrent.futures: ThreadPoolExecutor(max_workers=1))."""
    s = streamer()
    for ex in (s.in_ex, s.out_ex, s.sync_ex):
        gate = threading.Event()
        ran = []
        first = ex.submit(lambda: (gate.wait(5), ran.append(1)))
        second = ex.submit(lambda: ran.append(2))
        time.sleep(0.1)
        assert not second.done() and ran == []
        gate.set()
        first.result(5), second.result(5)
        assert ran == [1, 2]


def test_copy_file_closes_its_output_when_the_copy_fails(tmp_path, streamer, monkeypatch):
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 100)
    s = streamer()
    monkeypatch.setattr(s, "copy_span", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as e:
        s.copy_file(src, tmp_path / "out" / "f.bin", "f.bin", 100)
    assert e.value.errno == errno.EIO
    assert len(os.listdir("/proc/self/fd")) == before


def test_write_shard_closes_the_input_when_the_output_cannot_be_opened(tmp_path, streamer):
    folder, ck = _shard_in(tmp_path)
    x = OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ck.tensors["x"])
    (tmp_path / "out.safetensors").write_bytes(b"already there")
    s = streamer()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FileExistsError):
        stream.write_shard(s, ck, "model.safetensors", [x], {}, tmp_path / "out.safetensors")
    assert len(os.listdir("/proc/self/fd")) == before
    assert (tmp_path / "out.safetensors").read_bytes() == b"already there"


def test_run_shards_names_the_failing_workers_file_in_the_first_streamer():
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(2)]
    failed = []

    def work(shard, st):
        st.current = shard
        if threading.current_thread() is not threading.main_thread():
            failed.append(shard)
            raise ValueError(f"broken {shard}")
        for _ in range(400):
            time.sleep(0.005)
            st.advance(0, shard)  # raises _Cancelled once the other worker failed
    try:
        with pytest.raises(ValueError, match=r"^broken s\d$"):
            stream.run_shards(["s1", "s2", "s3", "s4"], work, sts, shared)
    finally:
        for st in sts:
            st.close()
    assert len(failed) == 1 and sts[0].current == failed[0]


def test_run_shards_an_interrupt_while_waiting_for_the_workers_stops_them(monkeypatch):
    """SIGINT's default handler raises KeyboardInterrupt in the main thread (Python signal docs), also inside
    Thread.join (lock waits are interruptible on POSIX)."""
    import signal
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(2)]
    saw_cancel = []

    def work(shard, st):
        st.current = shard
        if threading.current_thread() is threading.main_thread():
            return
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        for _ in range(400):
            if shared.cancel.is_set():
                saw_cancel.append(shard)
                return
            time.sleep(0.005)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            stream.run_shards(["a", "b"], work, sts, shared)
    finally:
        signal.signal(signal.SIGINT, old)
        for st in sts:
            st.close()
    assert len(saw_cancel) == 1 and shared.cancel.is_set()
    assert sts[0].current == ({"a", "b"} - set(saw_cancel)).pop()  # the interrupt was the calling thread's own


def test_run_shards_an_interrupt_outside_the_work_stops_the_others():
    class Event(threading.Event):
        hit = False

        def is_set(self):
            if threading.current_thread() is threading.main_thread() and not Event.hit:
                Event.hit = True
                raise KeyboardInterrupt()
            return super().is_set()
    shared = Shared(None, 1)
    shared.cancel = Event()
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(2)]
    saw_cancel = []

    def work(shard, st):
        st.current = shard
        for _ in range(400):
            if shared.cancel.is_set():
                saw_cancel.append(shard)
                return
            time.sleep(0.005)
    try:
        with pytest.raises(KeyboardInterrupt):
            stream.run_shards(["a", "b"], work, sts, shared)
    finally:
        for st in sts:
            st.close()
    assert saw_cancel == ["a"] and threading.Event.is_set(shared.cancel)
    assert sts[0].current == ""  # the interrupt was the calling thread's own, which had no file yet


@pytest.mark.parametrize("how", ["copy_file", "hash_file"])
def test_a_file_that_shrinks_while_read_is_refused_naming_it(tmp_path, streamer, monkeypatch, how):
    """preadv(2) returns 0 at end of file: a file cut short after its size was taken ends early, and the error and
    the progress name the file (its path relative to the checkpoint)."""
    src = tmp_path / "tokenizer.json"
    src.write_bytes(b"t" * 3000)
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)
    calls = []
    s = streamer(copy_mode="read_write", chunk=1000, progress=lambda d, t, m: calls.append(m))
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, off: 0 if off >= 2000 else real(fd, bufs, off))
    with pytest.raises(InputError, match=r"^tokenizer\.json: file ended early \(changed while being copied\?\)$"):
        if how == "copy_file":
            s.copy_file(src, tmp_path / "out" / "tokenizer.json", "tokenizer.json", 3000)
        else:
            s.hash_file(src, "tokenizer.json")
    assert calls == ["tokenizer.json", "tokenizer.json"]  # the two chunks read before the end


def test_reads_of_one_byte_at_a_time_are_not_an_end_of_file(tmp_path, streamer, monkeypatch):
    """preadv(2) may return any count from 1 up; only 0 means end of file."""
    p = tmp_path / "in.bin"
    p.write_bytes(A)
    s = streamer()
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd_, bufs, off: real(fd_, [bufs[0][:1]], off))
    fd = _fd(p)
    try:
        mv = memoryview(bytearray(5))
        s._read_into(fd, mv, 250, "in.bin")
        assert bytes(mv) == A[250:255]
    finally:
        os.close(fd)


def test_skipping_bytes_whose_digest_is_known_reports_progress_naming_the_file(sparse, streamer, monkeypatch):
    p, _ = sparse
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)
    calls = []
    s = streamer(progress=lambda d, t, m: calls.append((d, m)))
    fd = _fd(p)
    try:
        s.hash_only(fd, 0, 3000, None, "model.safetensors")
    finally:
        os.close(fd)
    assert calls == [(3000, "model.safetensors")]


@pytest.mark.parametrize("mode", ["copy_file_range", "read_write", "copy_file_range, mmap refused"])
def test_copy_span_progress_and_end_of_file_errors_name_the_file(sparse, tmp_path, streamer, monkeypatch, mode):
    p, _ = sparse
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)
    calls = []
    s = streamer(copy_mode=mode.split(",")[0], chunk=2048, progress=lambda d, t, m: calls.append(m))
    if "mmap refused" in mode:
        monkeypatch.setattr(s.ring, "map_output", lambda *a: (_ for _ in ()).throw(ValueError("mmap closed or invalid")))
    src = _fd(p)
    dst = s.open_out(tmp_path / "out.bin")
    try:
        h = stream._Hash(s.out_ex)
        s.copy_span(src, 0, 2 * BLOCK, dst, 0, None, h, "model-00001.safetensors")
        s.ring.drain()
        # [0, 4096) data in two 2048-byte chunks, [4096, 8192) hole in two more: one report each
        assert calls == ["model-00001.safetensors"] * 4
        if mode != "copy_file_range":  # these paths read with preadv: an end of file names the file
            monkeypatch.setattr(os, "preadv", lambda *a: 0)
            with pytest.raises(InputError, match=r"^model-00001\.safetensors: file ended early"):
                s.copy_span(src, 0, 100, dst, 0, None, h, "model-00001.safetensors")
    finally:
        os.close(src)
        os.close(dst)


def test_close_waits_for_the_running_call_and_cancels_the_queued_ones():
    """concurrent.futures: shutdown(wait=True) returns once the running calls are done; cancel_futures=True cancels
    the calls not yet started. After close() no thread of the streamer touches a file."""
    s = Streamer(copy_mode="read_write", chunk=8, shared=Shared(None, 1))
    started = threading.Event()
    running = s.sync_ex.submit(lambda: (started.set(), time.sleep(0.3)))
    queued = s.sync_ex.submit(lambda: None)
    started.wait(5)
    s.close()
    assert running.done() and not running.cancelled()
    assert queued.cancelled()


def test_write_shard_of_a_shard_missing_from_the_file_table_hashes_it_without_a_size_check(tmp_path, streamer,
                                                                                         monkeypatch):
    """A Checkpoint whose `files` does not list the shard (its header was read, its file entry is absent): no
    recorded size to compare and no recorded digest, so the input is hashed, the dropped tail too (gone, y, z),
    and every progress step names the shard."""
    folder, ck = _shard_in(tmp_path)
    del ck.files["model.safetensors"]
    x = OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ck.tensors["x"])
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)
    calls = []
    s = streamer(progress=lambda d, t, m: calls.append(m))
    (size, sha), inp = stream.write_shard(s, ck, "model.safetensors", [x], {}, tmp_path / "out.safetensors")
    s.wait_syncs()
    src = (folder / "model.safetensors").read_bytes()
    assert inp == (len(src), hashlib.sha256(src).hexdigest())
    np.testing.assert_array_equal(load_file(str(tmp_path / "out.safetensors"))["x"], np.arange(1, 7, dtype=np.uint8))
    assert set(calls) == {"model.safetensors", "wrote model.safetensors"}


def test_a_new_shard_never_reads_an_input_file_of_the_same_name_that_is_no_shard(tmp_path, streamer):
    """An output shard the input has no shard for (not among the shards whose headers were read) has no input,
    even when the input folder holds some other file of that name."""
    folder, ck = _shard_in(tmp_path)
    (folder / "extra.safetensors").write_bytes(b"not a shard of this checkpoint")
    t = OutTensor("w", "I64", (1,), "extra.safetensors", 0, chunks=lambda: iter([np.array([3], "<i8").tobytes()]))
    s = streamer()
    _, inp = stream.write_shard(s, ck, "extra.safetensors", [t], {}, tmp_path / "out" / "extra.safetensors")
    s.wait_syncs()
    assert inp is None


def _documented_thread_names() -> set[str]:
    """The thread names docs/design.md's "Threads" paragraph (How fix writes) gives: the backquoted `kconvert-...`."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    para = text.split("- **Threads.**", 1)[1].split("\n- **", 1)[0]
    return set(re.findall(r"`(kconvert-[^`]+)`", para))


def test_the_documented_thread_names_are_the_four_of_a_write():
    # docs/design.md, How fix writes, Threads: the shard workers, the two sha256 threads and the fsync thread
    assert _documented_thread_names() == {"kconvert-shard", "kconvert-sha-in_0", "kconvert-sha-out_0",
                                          "kconvert-fsync_0"}


def test_a_shard_writes_threads_carry_the_documented_names(tmp_path, streamer):
    # a durable write of a shard whose input digest is unknown runs all three of its worker's threads: the input
    # hash, the output hash, the fsync; they live until the streamer is closed
    folder, ck = _shard_in(tmp_path)
    before = set(threading.enumerate())
    s = streamer()
    x = OutTensor("x", "U8", (6,), "model.safetensors", 0, copy_of=ck.tensors["x"])
    stream.write_shard(s, ck, "model.safetensors", [x], {}, tmp_path / "out.safetensors")
    s.wait_syncs()
    started = {t.name for t in set(threading.enumerate()) - before}
    assert started == {"kconvert-sha-in_0", "kconvert-sha-out_0", "kconvert-fsync_0"}
    assert started <= _documented_thread_names()


def test_run_shards_workers_past_the_first_are_named_kconvert_shard():
    # three workers, three shards, each shard waiting until all three are being worked on: every worker takes
    # one; the first is the calling thread, the two others threads of their own named as docs/design.md says
    shared = Shared(None, 1)
    sts = [Streamer(copy_mode="read_write", chunk=8, shared=shared) for _ in range(3)]
    all_in = threading.Barrier(3, timeout=20)
    names, lock = [], threading.Lock()

    def work(shard, st):
        with lock:
            names.append((st is sts[0], threading.current_thread().name))
        all_in.wait()
    try:
        stream.run_shards(["a", "b", "c"], work, sts, shared)
    finally:
        for st in sts:
            st.close()
    assert sorted(names) == [(False, "kconvert-shard"), (False, "kconvert-shard"),
                             (True, threading.current_thread().name)]
    assert "kconvert-shard" in _documented_thread_names()
