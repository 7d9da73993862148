"""Known sha256 digests of files, so that a multi-GB shard is hashed once and not by every command.

Two sources, both checked against the file as it is now:

- **Hub cache blobs.** huggingface_hub stores a snapshot's files as symlinks into `blobs/<etag>`; for files
  kept in LFS/Xet the etag is the sha256 of the content (64 hex digits; git-stored files have 40-digit sha1
  etags and are not used). The blob's size must match too.
- **A local stat-keyed cache**, in the way git's index remembers which files it has hashed: the digest is
  reused only while (device, inode, size, mtime_ns, ctime_ns) of the file are unchanged. Writing a file
  changes its mtime and ctime, and ctime cannot be set back by an unprivileged user. A digest computed by
  reading a file less than `RACY_SECONDS` after its last change is not stored (git's "racily clean" rule: a
  write within the same timestamp tick could go unnoticed). Files kconvert itself wrote are stored with the
  digest of the bytes it wrote.

The cache is an sqlite3 database (stdlib; safe with several kconvert processes at once) at
`$KCONVERT_HASH_CACHE`, default `$XDG_CACHE_HOME/kconvert/sha256.sqlite` (`~/.cache/...`).
`KCONVERT_HASH_CACHE=off` disables it. Any failure of the cache (read-only home, corrupt database) makes it
a no-op: it never turns into an error of the command. `kconvert push` does not use it: the publication gate
re-hashes every file itself.
"""
from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

RACY_SECONDS = 2.0
MAX_ENTRIES = 20000
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _db_path() -> Path | None:
    v = os.environ.get("KCONVERT_HASH_CACHE")
    if v is not None and v.strip().lower() in ("", "0", "off", "false", "no", "none"):
        return None
    if v:
        return Path(v).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kconvert" / "sha256.sqlite"


_GUARDED: dict[Path, bool] = {}  # per process: the path guard's answer for each cache path, asked once


def _is_hash_cache(path: Path) -> bool:
    """An earlier digest cache: an sqlite database (its 16-byte header) whose only table is `files`, or none yet
    (another process is creating it: an empty database holds nobody's data)."""
    from kconvert.guard.paths import read_head

    if read_head(path, str(path), 16) != b"SQLite format 3\x00":
        return False
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} <= {"files"}
    finally:
        con.close()


def _allowed(p: Path) -> bool:
    """The path guard on the cache's path ($KCONVERT_HASH_CACHE may name anything): a new path, an empty file or an
    earlier digest cache, never someone's file sqlite would write into, a FIFO sqlite would block on, or a device.
    Refused: the cache is off for this process, as for any other failure of it."""
    if p not in _GUARDED:
        from kconvert.errors import KConvertError
        from kconvert.guard.paths import check_output_file

        try:
            check_output_file(p, what=str(p), owns=_is_hash_cache, kind="digest cache", through=False)
            _GUARDED[p] = True
        except (KConvertError, OSError, sqlite3.Error):
            _GUARDED[p] = False
    return _GUARDED[p]


def _connect() -> sqlite3.Connection | None:
    p = _db_path()
    if p is None or not _allowed(p):
        return None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(str(p), timeout=5.0)
        con.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, "
                    "size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT, stored REAL)")
        return con
    except (OSError, sqlite3.Error):
        return None


def _key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def hub_blob_sha256(path: Path) -> str | None:
    """The sha256 a Hub cache blob is named by, if `path` is (a symlink to) such a blob of matching size."""
    try:
        real = Path(os.path.realpath(path))
        if real.parent.name != "blobs" or not _HEX64.fullmatch(real.name):
            return None
        if not real.is_file():
            return None
        return real.name
    except OSError:
        return None


def lookup(path: Path) -> str | None:
    """The known sha256 of `path` as it is now, or None."""
    blob = hub_blob_sha256(path)
    if blob is not None:
        return blob
    con = _connect()
    if con is None:
        return None
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        row = con.execute("SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM files WHERE path = ?",
                          (real,)).fetchone()
    except (OSError, sqlite3.Error):
        return None
    finally:
        con.close()
    if row is None or tuple(row[:5]) != _key(st) or not _HEX64.fullmatch(str(row[5])):
        return None
    return str(row[5])


def store(path: Path, sha256: str, *, written_by_us: bool = False, hashed_at: float | None = None) -> None:
    """Remember `sha256` for `path` as it is now (see the module docstring for when it is not stored)."""
    store_many([(path, sha256, written_by_us, hashed_at)])


def store_many(entries: list[tuple[Path, str, bool, float | None]]) -> None:
    """`store` for several files, (path, sha256, written_by_us, hashed_at) each, in one transaction: a fix
    remembers every input and output file at once, and each commit of the database is an fsync."""
    rows = []
    for path, sha256, written_by_us, hashed_at in entries:
        if not _HEX64.fullmatch(sha256) or hub_blob_sha256(path) is not None:
            continue
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            continue
        if not written_by_us:
            started = hashed_at if hashed_at is not None else time.time()
            if started - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 < RACY_SECONDS:
                continue
        rows.append((real, *_key(st), sha256, time.time()))
    if not rows:
        return
    con = _connect()
    if con is None:
        return
    try:
        with con:
            con.executemany("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            n = con.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            if n > MAX_ENTRIES:
                con.execute("DELETE FROM files WHERE path IN (SELECT path FROM files ORDER BY stored LIMIT ?)",
                            (n - MAX_ENTRIES,))
    except sqlite3.Error:
        pass
    finally:
        con.close()

__all__ = ["hub_blob_sha256", "lookup", "store", "store_many"]
