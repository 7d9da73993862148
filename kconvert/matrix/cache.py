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
from typing import Any

from kconvert.errors import UsageError

OFF = ("off", "none", "no", "0", "false", "")
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another (sqlite's busy timeout, and the opening's retries)


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kconvert" / "matrix.sqlite"


class CellCache:
    """get(key) -> cell or None; put(key, cell). `path=None` is a cache that remembers nothing."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path).expanduser() if path is not None else None
        self._con: sqlite3.Connection | None = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._con = self._open(self.path)
            except (OSError, sqlite3.Error) as e:
                raise UsageError(f"--cache {self.path}: cannot open the cell cache: {e}",
                                 hint="give another --cache PATH, or --cache off") from None

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
    def from_option(cls, value: str | None) -> "CellCache":
        if value is not None and value.strip().lower() in OFF:
            return cls(None)
        return cls(value if value is not None else default_path())

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
