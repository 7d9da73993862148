"""The matrix's cell cache (kconvert/matrix/cache.py) against what lies outside it: the XDG Base Directory
specification for the default path, the manual's spelling of the option (docs/manual.md), sqlite's documented
answers read back through a second, plain sqlite3 connection, Python's json and io contracts.

Each test is engine-free and takes milliseconds (bench/NOTES.md, "Mutation score per module": the survivors of
`bench/mutation.py kconvert/matrix/cache.py` these tests kill)."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.matrix import cache as cache_mod
from kconvert.matrix.cache import CellCache, default_path

ROOT = Path(__file__).resolve().parent.parent
MANUAL = (ROOT / "docs" / "manual.md").read_text()


def _raw(db: Path) -> sqlite3.Connection:
    """A second connection that is not the code under test: what any sqlite reader sees in the file."""
    return sqlite3.connect(str(db), isolation_level=None)


def test_the_default_path_follows_xdg_cache_home_and_falls_back_to_home_dot_cache(tmp_path, monkeypatch):
    """XDG Base Directory Specification 0.8: "$XDG_CACHE_HOME defines the base directory relative to which
    user-specific non-essential data files should be stored. If $XDG_CACHE_HOME is either not set or empty, a
    default equal to $HOME/.cache should be used." The file name is the manual's
    (docs/manual.md: `$XDG_CACHE_HOME/kconvert/matrix.sqlite`)."""
    assert "$XDG_CACHE_HOME/kconvert/matrix.sqlite" in MANUAL
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "kconvert" / "matrix.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert default_path() == tmp_path / "home" / ".cache" / "kconvert" / "matrix.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_path() == tmp_path / "home" / ".cache" / "kconvert" / "matrix.sqlite"


@pytest.mark.parametrize("off", ["off", "none", "no", "0", "false", "", " OFF ", "False", "None"])
def test_cache_off_spellings_remember_nothing(off, tmp_path, monkeypatch):
    """The manual's `--cache off` (docs/manual.md) and its spellings, any case, surrounding blanks ignored: a cache
    with no file that returns nothing, stores nothing (no file appears anywhere under HOME or XDG_CACHE_HOME) and
    counts 0."""
    assert "`--cache off`" in MANUAL
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    c = CellCache.from_option(off)
    assert c.path is None
    c.put("k", {"state": "pass"})
    assert c.get("k") is None and len(c) == 0
    c.close()
    assert not any(tmp_path.rglob("*.sqlite"))


def test_cache_option_absent_is_the_default_file_and_a_path_is_that_file(tmp_path, monkeypatch):
    """`--cache` not given: the XDG default (spec quoted above); `--cache PATH` (docs/manual.md): that file, with
    `~` expanded as a shell would (HOME), even a file named like an off word's prefix ("offline.sqlite")."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    c = CellCache.from_option(None)
    assert c.path == tmp_path / "xdg" / "kconvert" / "matrix.sqlite" and c.path.is_file()
    c.close()
    c = CellCache.from_option("~/offline.sqlite")
    assert c.path == tmp_path / "home" / "offline.sqlite" and c.path.is_file()
    c.close()


def test_missing_parent_folders_are_created(tmp_path):
    """mkdir -p: a cache path under folders that do not exist yet (a fresh $XDG_CACHE_HOME) opens, and the file is
    a sqlite database another connection reads (sqlite_master lists the cells table)."""
    db = tmp_path / "a" / "b" / "c" / "cells.sqlite"
    c = CellCache(db)
    c.close()
    names = [r[0] for r in _raw(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert names == ["cells"]


def test_a_cache_that_cannot_be_opened_is_a_usage_error_naming_the_path_sqlites_reason_and_the_options(
        tmp_path, monkeypatch):
    """A folder where the file should be, and another program's database (here one holding an index named `cells`,
    which CREATE TABLE IF NOT EXISTS would not even skip: https://www.sqlite.org/lang_createtable.html): refused by
    the path guard before sqlite opens anything for writing (issue #45), so no retry (no sleep at all). A parent
    that is a file: mkdir's OSError. Each is kconvert's usage error, naming the path, with a hint that ends on the
    option the user types and names the two spellings the manual gives (docs/manual.md: `--cache PATH`,
    `--cache off`)."""
    assert "[--cache PATH]" in MANUAL and "`--cache off`" in MANUAL

    def no_sleep(s):
        raise AssertionError(f"slept {s!r} s after an error that is not a lock")
    monkeypatch.setattr(cache_mod.time, "sleep", no_sleep)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(UsageError) as e:
        CellCache(folder)
    assert str(folder) in e.value.message and "is a folder" in e.value.message  # the path guard, before sqlite
    assert "--cache PATH" in e.value.hint and e.value.hint.endswith("--cache off")
    foreign = tmp_path / "other-program.sqlite"
    raw = _raw(foreign)
    raw.execute("CREATE TABLE other (x)")
    raw.execute("CREATE INDEX cells ON other (x)")
    raw.close()
    before = foreign.read_bytes()
    with pytest.raises(UsageError) as e:
        CellCache(foreign)
    # another program's database is never written to (issue #45): refused before sqlite opens it for writing
    assert str(foreign) in e.value.message and "not a cell cache kconvert wrote" in e.value.message
    assert "--force" not in e.value.message and foreign.read_bytes() == before
    assert "--cache PATH" in e.value.hint and e.value.hint.endswith("--cache off")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UsageError) as e:
        CellCache(tmp_path / "a-file" / "cells.sqlite")
    assert str(tmp_path / "a-file" / "cells.sqlite") in e.value.message
    assert "--cache PATH" in e.value.hint and e.value.hint.endswith("--cache off")


def test_opening_retries_a_lock_answered_at_once_and_succeeds_once_it_is_released(tmp_path, monkeypatch):
    """A second connection holds `BEGIN EXCLUSIVE` (https://www.sqlite.org/lang_transaction.html: no other
    connection may read or write). The cache's first attempt is made with timeout 0, so sqlite answers "database
    is locked" (SQLITE_BUSY's text, https://www.sqlite.org/rescode.html) at once, as the comment in `_open` says
    switching to WAL does; the opening must pause briefly (well under a second: a lock held for a WAL switch
    lasts milliseconds), retry, and open once the holder commits — a WAL database another connection reads."""
    db = tmp_path / "cells.sqlite"
    holder = _raw(db)
    holder.execute("BEGIN EXCLUSIVE")
    real_connect, real_sleep = sqlite3.connect, time.sleep
    timeouts: list[float] = []

    def connect(path, timeout=5.0, isolation_level="", **kw):
        timeouts.append(timeout)
        return real_connect(path, timeout=0 if len(timeouts) == 1 else timeout, isolation_level=isolation_level, **kw)

    slept: list = []

    def sleep(s):
        slept.append(s)
        if holder.in_transaction:
            holder.execute("COMMIT")
        real_sleep(s)  # the real call: a pause that is not a number is a TypeError

    monkeypatch.setattr(cache_mod.sqlite3, "connect", connect)
    monkeypatch.setattr(cache_mod.time, "sleep", sleep)
    c = CellCache(db)
    monkeypatch.undo()
    assert len(timeouts) == 2 and len(slept) == 1 and 0 < slept[0] < 0.5
    c.put("k", {"state": "pass"})
    c.close()
    raw = _raw(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 1
    holder.close()


def test_every_statement_waits_thirty_seconds_for_another_writer(tmp_path):
    """https://www.sqlite.org/pragma.html#pragma_busy_timeout: `PRAGMA busy_timeout` reads the connection's busy handler
    timeout in milliseconds. The module promises 30 s to every statement (its docstring: "a busy timeout";
    BUSY_TIMEOUT_S's comment and `_open`'s: "the same 30 s"); Python's sqlite3.connect without `timeout=` gives
    5 s (https://docs.python.org/3.11/library/sqlite3.html#sqlite3.connect, "Default five seconds")."""
    c = CellCache(tmp_path / "cells.sqlite")
    assert c._con.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    c.close()


def test_a_stored_cell_is_visible_to_another_connection_at_once_as_sorted_json(tmp_path):
    """Each put is its own transaction (the module docstring: a killed run keeps every cell it finished), so a
    second connection sees it without any commit by the cache. The row's text is Python's json.dumps with
    sort_keys (https://docs.python.org/3.11/library/json.html#json.dump: default separators `', '` and `': '`),
    hand-written here; `stored` is the wall clock (time.time) of the put; a second put of the same key replaces
    the row (INSERT OR REPLACE)."""
    db = tmp_path / "cells.sqlite"
    c = CellCache(db)
    raw = _raw(db)
    before = time.time()
    c.put("k1", {"state": "pass", "draft": "d", "b": [2, 1], "a": {"z": 1, "y": None}})
    after = time.time()
    rows = raw.execute("SELECT key, cell, stored FROM cells").fetchall()
    assert len(rows) == 1 and rows[0][0] == "k1"
    assert rows[0][1] == '{"a": {"y": null, "z": 1}, "b": [2, 1], "draft": "d", "state": "pass"}'
    assert before <= rows[0][2] <= after
    c.put("k1", {"state": "warn"})
    assert raw.execute("SELECT cell FROM cells WHERE key = 'k1'").fetchall() == [('{"state": "warn"}',)]
    assert len(c) == 1 and c.get("k1") == {"state": "warn"}
    c.close()


def test_error_cells_are_not_stored_and_other_states_are(tmp_path):
    """The module docstring: 'Cells in state "error" are not stored' (a Hub that did not answer may answer next
    time). Read through a second connection: no row for the error cell, one for each other state."""
    db = tmp_path / "cells.sqlite"
    c = CellCache(db)
    c.put("e", {"state": "error", "message": "the Hub did not answer"})
    c.put("p", {"state": "pass"})
    c.put("f", {"state": "fail"})
    c.put("n", {"message": "no state"})
    keys = sorted(r[0] for r in _raw(db).execute("SELECT key FROM cells"))
    assert keys == ["f", "n", "p"] and c.get("e") is None and len(c) == 3
    c.close()


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\"a cell\"", "3", "null"])
def test_a_damaged_or_non_object_row_is_a_miss(text, tmp_path):
    """A row another writer left damaged, or holding JSON that is not an object (json.loads gives a list, str, int,
    None), is a miss (None), never handed on as a cell: cells are JSON objects (schemas/matrix.schema.json)."""
    db = tmp_path / "cells.sqlite"
    c = CellCache(db)
    _raw(db).execute("INSERT INTO cells (key, cell, stored) VALUES (?, ?, ?)", ("k", text, 0.0))
    assert c.get("k") is None and c.get("absent") is None
    c.close()


def test_close_twice_and_a_closed_cache_remembers_nothing(tmp_path):
    """io.IOBase.close (https://docs.python.org/3.11/library/io.html#io.IOBase.close): "it is allowed to call this
    method more than once; only the first call, however, will have an effect" — the same for the cache;
    once closed, it answers like `--cache off` (None, 0) and the data stays in the file for the next run."""
    db = tmp_path / "cells.sqlite"
    c = CellCache(db)
    c.put("k", {"state": "pass"})
    c.close()
    c.close()
    assert c.get("k") is None and len(c) == 0
    assert _raw(db).execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 1
