"""The writer's copy + output hash of one file, alone, in variants: CPU seconds of each (bench/NOTES.md).

    python bench/copy_variants.py --src BIG.safetensors --workdir /tmp/x --rounds 3 plain falloc hash hashread

Each variant copies SRC to a new file in WORKDIR with os.copy_file_range in 8 MB chunks (as
kconvert.writer.stream does), then removes it; the variants run interleaved, round after round, so a machine
whose load changes disturbs them alike. A variant is a name made of these parts:

- `plain`: the copy alone; `falloc`: fallocate(2) the whole file first; `fchunk`: fallocate each chunk first
- `hash`: sha256 of each chunk through a read-only map of the output just copied (the writer's way);
  `hashread`: the same bytes read back with preadv into one reused buffer instead; `pop`: the map with
  madvise(MADV_POPULATE_READ) before hashing
- `rw`: preadv of the input into one reused buffer and pwrite of it instead of copy_file_range (with `hash`:
  the buffer hashed)
- `sync`: fsync the output at the end (timed)

It prints wall, user and system seconds and the minor page faults of each run. Outside the test suite.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import mmap
import os
import resource
import time

MADV_POPULATE_READ = 22  # Linux 5.14; Python 3.11's mmap has no constant for it

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def _usage() -> tuple[float, float, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def one(src_path: str, dst_path: str, mode: str, chunk: int) -> str:
    src = os.open(src_path, os.O_RDONLY)
    size = os.fstat(src).st_size
    buf = memoryview(bytearray(chunk))
    u0, s0, f0 = _usage()
    t = time.perf_counter()
    dst = os.open(dst_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    if "falloc" in mode:
        assert _libc.fallocate(dst, 0, 0, size) == 0, ctypes.get_errno()
    h = hashlib.sha256() if "hash" in mode else None
    pos = 0
    while pos < size:
        n = min(chunk, size - pos)
        if "fchunk" in mode:
            assert _libc.fallocate(dst, 0, pos, n) == 0, ctypes.get_errno()
        done = 0
        if "rw" in mode:
            got = 0
            while got < n:
                got += os.preadv(src, [buf[got:n]], pos + got)
            while done < n:
                done += os.pwrite(dst, buf[done:n], pos + done)
        while done < n:
            done += os.copy_file_range(src, dst, n - done, pos + done, pos + done)
        if h is not None and "rw" in mode:
            h.update(buf[:n])
        elif h is not None and "hashread" in mode:
            got = 0
            while got < n:
                got += os.preadv(dst, [buf[got:n]], pos + got)
            h.update(buf[:n])
        elif h is not None:
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            mm = mmap.mmap(dst, pos + n - start, mmap.MAP_SHARED, mmap.PROT_READ, offset=start)
            if "pop" in mode:
                mm.madvise(MADV_POPULATE_READ)
            v = memoryview(mm)
            h.update(v[pos - start:])
            v.release()
            mm.close()
        pos += n
    if "sync" in mode:
        os.fsync(dst)
    u1, s1, f1 = _usage()
    wall = time.perf_counter() - t
    os.close(dst)
    os.close(src)
    os.unlink(dst_path)
    return f"{mode:<12} wall {wall:.2f} s  user {u1 - u0:.2f} s  sys {s1 - s0:.2f} s  minflt {f1 - f0}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--workdir", required=True, help="on the same filesystem as --src")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk-mb", type=int, default=8)
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    dst = os.path.join(a.workdir, "copy_variants.out")
    for r in range(a.rounds):
        for v in a.variants:
            os.sync()
            print(f"round {r + 1}: {one(a.src, dst, v, a.chunk_mb << 20)}", flush=True)


if __name__ == "__main__":
    main()
