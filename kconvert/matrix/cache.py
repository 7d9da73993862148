"""The matrix's cell cache: one sqlite file of its own (`--cache PATH`, default
`$XDG_CACHE_HOME/kconvert/matrix.sqlite`), keyed by `CellSpec.key()` (the draft's commit sha or content digest,
the engine row, kconvert's version and code digest, the trace's digest, the settings).

Safe under concurrent writers: sqlite in WAL mode with a busy timeout serialises writers and lets readers read
while one writes; each cell is one `INSERT OR REPLACE` in its own transaction, so a run that is killed keeps every
cell it finished. Cells in state "error" are not stored: a Hub that did not answer or an engine that crashed may
answer next time, and an error is cheap to recompute.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from kconvert.errors import KConvertError, UsageError
from kconvert.guard.paths import check_output_file, read_head

OFF = ("off", "none", "no", "0", "false", "")
_HINT = "give another --cache PATH, or --cache off"
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another (sqlite's busy timeout, and the opening's retries)


def is_cell_cache(path: Path) -> bool:
    """An earlier cell cache: an sqlite database (its 16-byte header, sqlite's file format section 1.3.1) whose
    only table is this module's `cells`, or none yet (another run is creating it this moment: an empty database
    holds nobody's data), opened read-only."""
    if read_head(path, str(path), 16) != b"SQLite format 3\x00":
        return False
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            names = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return names <= {"cells"}


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kconvert" / "matrix.sqlite"


class CellCache:
    """get(key) -> cell or None; put(key, cell). `path=None` is a cache that remembers nothing."""

    def __init__(self, path: str | os.PathLike[str] | None, *, inputs: Iterable[Any] = ()):
        self.path = Path(path).expanduser() if path is not None else None
        self._con: sqlite3.Connection | None = None
        if self.path is not None:
            # the path guard: a new path, an empty file or an earlier cell cache (is_cell_cache), never a file of
            # someone else's that sqlite would turn into a database, nor a FIFO, a device, or an input of the run
            try:
                check_output_file(self.path, what=f"--cache {self.path}", inputs=inputs, owns=is_cell_cache,
                                  kind="cell cache", through=False)
            except KConvertError as e:
                raise UsageError(e.message, hint=_HINT) from None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._con = self._open(self.path)
            except (OSError, sqlite3.Error) as e:
                raise UsageError(f"--cache {self.path}: cannot open the cell cache: {e}", hint=_HINT) from None

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        # Two runs opening a new cache at once: switching it to WAL takes a lock that sqlite's busy handler does
        # not wait for ("database is locked" at once, seen with two writer processes in tests/test_matrix.py), so
        # the opening itself is retried until the same 30 s the busy timeout gives every later statement.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            con = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("CREATE TABLE IF NOT EXISTS cells (key TEXT PRIMARY KEY, cell TEXT NOT NULL, "
                            "stored REAL NOT NULL)")
                return con
            except sqlite3.OperationalError as e:
                con.close()
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @classmethod
    def from_option(cls, value: str | None, *, inputs: Iterable[Any] = ()) -> "CellCache":
        if value is not None and value.strip().lower() in OFF:
            return cls(None)
        return cls(value if value is not None else default_path(), inputs=inputs)

    def get(self, key: str) -> dict[str, Any] | None:
        if self._con is None:
            return None
        row = self._con.execute("SELECT cell FROM cells WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            cell = json.loads(row[0])
        except ValueError:  # a damaged row is a miss, recomputed and replaced
            return None
        return cell if isinstance(cell, dict) else None

    def put(self, key: str, cell: dict[str, Any]) -> None:
        if self._con is None or cell.get("state") == "error":
            return
        self._con.execute("INSERT OR REPLACE INTO cells (key, cell, stored) VALUES (?, ?, ?)",
                          (key, json.dumps(cell, sort_keys=True), time.time()))

    def __len__(self) -> int:
        if self._con is None:
            return 0
        return int(self._con.execute("SELECT COUNT(*) FROM cells").fetchone()[0])

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


__all__ = ["CellCache", "default_path"]
