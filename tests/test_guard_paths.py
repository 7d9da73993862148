"""kconvert/guard/paths.py, the one guard for every path kconvert reads or writes (issue #45), against the operating
system's promises and independent parsers: stat(2)/open(2)/mknod(2) for the kinds of file, Python's json and
tomllib for what a document holds (the nesting the guard counts before they run is checked against the nesting they
build), rename(2) and open(2) for what writing may replace. Engine-free; device nodes, FIFOs and sockets are made
in the test's own folder, never at a system path.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import socket
import stat
import sys
import threading
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kconvert.errors import InputError, KConvertError, UsageError
from kconvert.guard import paths as g
from tests.path_options import private_char_device


@contextlib.contextmanager
def deadline(seconds: float = 10):
    def fire(signum, frame):
        raise TimeoutError("blocked")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def char_device(path: Path, like: str = "/dev/null") -> Path:
    try:
        private_char_device(path, like)
    except PermissionError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip("mknod needs CAP_MKNOD (root); CI=true runs it")
    return path


def unix_socket(path: Path) -> Path:
    here = os.getcwd()
    os.chdir(path.parent)  # AF_UNIX names are limited to 108 bytes; a pytest tmp_path may be longer
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(path.name)
        s.close()
    finally:
        os.chdir(here)
    return path


def node(path: Path) -> tuple[int, int]:
    st_ = os.lstat(path)
    return stat.S_IFMT(st_.st_mode), st_.st_rdev


# ------------------------------------------------------------------------------------------------ reading ---

@pytest.mark.parametrize("kind", ["fifo", "chardev", "zerodev", "socket", "folder", "symlink-to-fifo"])
def test_reading_refuses_every_kind_but_a_regular_file_without_blocking_or_reading_it(tmp_path, kind):
    """A FIFO with no writer would block open(2) forever (fifo(7)); /dev/zero never ends. Each is refused in one
    line naming what was given, within the alarm, and is still the same node afterwards."""
    p = tmp_path / "x"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "chardev":
        char_device(p)
    elif kind == "zerodev":
        char_device(p, "/dev/zero")
    elif kind == "socket":
        unix_socket(p)
    elif kind == "folder":
        p.mkdir()
    else:
        os.mkfifo(tmp_path / "fifo")
        p.symlink_to("fifo")
    before = node(p)
    with deadline(), pytest.raises(InputError) as e:
        g.read_bytes(p, f"--policy {p}")
    assert e.value.message.startswith(f"--policy {p}: ") and "\n" not in e.value.message
    want = {"fifo": "a FIFO", "chardev": "a character device", "zerodev": "a character device", "socket": "a socket",
            "folder": "is a folder", "symlink-to-fifo": "a FIFO"}[kind]
    assert want in e.value.message
    assert node(p) == before


def test_the_size_cap_is_checked_before_reading_and_bounds_what_is_read(tmp_path):
    """A sparse file (truncate(2): size without disk) one byte over the cap is refused from its size; at the cap it
    is read whole."""
    p = tmp_path / "f"
    with open(p, "wb") as f:
        f.truncate(1001)
    with pytest.raises(InputError, match="1,001 bytes is more than the 1,000 bytes"):
        g.read_bytes(p, "f", max_bytes=1000)
    os.truncate(p, 1000)
    assert g.read_bytes(p, "f", max_bytes=1000) == b"\0" * 1000


def test_a_missing_file_and_invalid_utf8_are_one_line_each(tmp_path):
    with pytest.raises(InputError) as e:
        g.read_text(tmp_path / "nope", "--config nope", missing_hint="write one")
    assert e.value.message == "--config nope: no such file" and e.value.hint == "write one"
    (tmp_path / "b").write_bytes(b"ok \xff\xfe")
    with pytest.raises(InputError, match=r"^b: not UTF-8 text \(invalid start byte at byte 3\)$"):
        g.read_text(tmp_path / "b", "b")


def _depth(x) -> int:
    """Containers nested in a parsed document, the root counted (a scalar is 0): the parsers' own result."""
    if isinstance(x, dict):
        return 1 + max((_depth(v) for v in x.values()), default=0)
    if isinstance(x, list):
        return 1 + max((_depth(v) for v in x), default=0)
    return 0


# strings that look like structure: brackets, braces, quotes, escapes, dots, comment signs
tricky = st.text(alphabet='ab[]{}".,#=\\\'\n', max_size=8)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | tricky
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(tricky, kids, max_size=3),
                           max_leaves=40)


def _nest(x, extra: int):
    for i in range(extra):
        x = [x] if i % 2 else {"k": x}
    return x


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=json_values, extra=st.integers(0, 80), limit=st.integers(1, 80))
def test_json_nesting_is_counted_before_parsing_exactly_as_json_builds_it(doc, extra, limit):
    """loads_json accepts a document iff Python's json builds it at most `limit` deep, and then returns what json
    returns; never a RecursionError."""
    doc = _nest(doc, extra)
    text = json.dumps(doc)
    real = _depth(json.loads(text))
    if real <= limit:
        assert g.loads_json(text, "", max_depth=limit) == json.loads(text)
    else:
        with pytest.raises(ValueError, match=f"deeper than {limit} levels"):
            g.loads_json(text, "", max_depth=limit)


def test_json_nested_past_the_recursion_limit_is_a_refusal_not_a_crash():
    with pytest.raises(ValueError, match="deeper than 64"):
        g.loads_json("[" * 100_000 + "]" * 100_000, "")


def test_json_file_options_hold_no_nan_infinity_or_duplicate_keys(tmp_path):
    """RFC 8259 has no NaN or Infinity, which Python's json reads by default; a duplicate key leaves two readers
    disagreeing on the value."""
    for text, word in (('{"a": NaN}', "NaN"), ('[-Infinity]', "-Infinity"), ('{"a": 1, "a": 2}', "duplicate key")):
        p = tmp_path / "r.json"
        p.write_text(text)
        with pytest.raises(InputError, match=word):
            g.read_json(p, "--report r.json")
    assert g.loads_json('{"a": NaN}', "", constants=True)["a"] != g.loads_json('{"a": NaN}', "", constants=True)["a"]


# ---- TOML: a writer of its own (the test's), tomllib as the judge of what was written -------------------------

keys = st.sampled_from(["a", "b", "k1", '"x.y"', "'q[r]'", '"#"'])


def _toml_value(draw, depth: int) -> str:
    kind = draw(st.sampled_from(["int", "float", "str", "array", "inline"] if depth < 6 else ["int", "str"]))
    if kind == "int":
        return str(draw(st.integers(-5, 5)))
    if kind == "float":
        return draw(st.sampled_from(["1.5", "-0.25", "3e2", "6.02e23", "1979-05-27T07:32:00.999Z"]))
    if kind == "str":
        return draw(st.sampled_from(['"[{.}]"', "'a.b#c'", '"""x\n[y]\n"""', "'''z]]'''", '"\\"]"']))
    if kind == "array":
        items = [_toml_value(draw, depth + 1) for _ in range(draw(st.integers(0, 3)))]
        sep = draw(st.sampled_from([", ", ",\n  "]))
        return "[" + sep.join(items) + "]"
    pairs = {}
    for _ in range(draw(st.integers(0, 3))):
        pairs[_dotted(draw)] = _toml_value(draw, depth + 1)
    return "{" + ", ".join(f"{k} = {v}" for k, v in _unclashing(pairs).items()) + "}"


def _dotted(draw) -> str:
    return ".".join(draw(st.lists(keys, min_size=1, max_size=3)))


def _unclashing(pairs: dict[str, str]) -> dict[str, str]:
    """Keep keys none of which is a prefix of another (TOML forbids defining a key twice)."""
    out: dict[str, str] = {}
    for k, v in pairs.items():
        if not any(k == o or k.startswith(o + ".") or o.startswith(k + ".") for o in out):
            out[k] = v
    return out


@st.composite
def toml_documents(draw) -> str:
    lines = ["# a comment with [brackets] and {braces}.and.dots"]
    body = {_dotted(draw): _toml_value(draw, 1) for _ in range(draw(st.integers(0, 3)))}
    lines += [f"{k} = {v}  # trailing" for k, v in _unclashing(body).items()]
    for i in range(draw(st.integers(0, 2))):
        header = f"t{i}." + _dotted(draw)
        lines.append(draw(st.sampled_from([f"[{header}]", f"[[{header}]]"])))
        lines += [f"{k} = {v}" for k, v in _unclashing({_dotted(draw): _toml_value(draw, 1)}).items()]
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(text=toml_documents())
def test_toml_nesting_is_never_under_counted_and_over_counted_by_one_at_most(text):
    """The nesting tomllib builds (its own parse is the judge) is what toml_depth_ok counts, or one more (a dot in
    a float or a date is counted as a key's): a document is never let through deeper than the cap."""
    try:
        real = _depth(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        return  # the writer above made something TOML does not allow (a key defined twice): nothing to judge
    if real > 1:  # an empty document is its root alone: no cap below 1 is asked
        assert not g.toml_depth_ok(text, real - 1)
    assert g.toml_depth_ok(text, real + 1)


@pytest.mark.parametrize("text", [
    "x = " + "[" * 100_000 + "]" * 100_000,  # tomllib: RecursionError
    "x = " + "{a = " * 100_000 + "1" + "}" * 100_000,  # tomllib: RecursionError
    "a" + ".a" * 100_000 + " = 1",  # tomllib: quadratic, minutes
    "[" + "a." * 100_000 + "a]\nx = 1",
])
def test_toml_nested_past_the_cap_is_refused_before_tomllib_runs(tmp_path, text):
    p = tmp_path / "kconvert.toml"
    p.write_text(text)
    with deadline(10), pytest.raises(InputError, match="nests deeper than 64 levels"):
        g.read_toml(p, "--config kconvert.toml")


def test_toml_nan_and_inf_are_refused(tmp_path):
    p = tmp_path / "gate.toml"
    for v in ("nan", "+inf", "-inf"):
        p.write_text(f"[[gate]]\nmin_acceptance_length = {v}\n")
        with pytest.raises(InputError, match="not a finite number"):
            g.read_toml(p, "--policy gate.toml")


# ------------------------------------------------------------------------------------------------ writing ---

def _owned(folder: Path) -> bool:
    return (folder / "mine").is_file()


@pytest.mark.parametrize("kind, force, refused", [
    ("new", False, None), ("empty-folder", False, None), ("earlier", True, None),
    ("earlier", False, "--force replaces it"),  # the one refusal that names --force: it is ours
    ("foreign-folder", True, "is not a x kconvert wrote"), ("regular", True, "is a regular file"),
    ("symlink", True, "is a symlink"), ("fifo", True, "is a FIFO"), ("chardev", True, "is a character device"),
    ("socket", True, "is a socket"), ("input", True, "is the input"), ("inside-input", True, "lies inside the input"),
    ("parent-of-input", True, "contains the input"),
])
def test_a_folder_destination_is_new_empty_or_an_earlier_output_and_nothing_else(tmp_path, kind, force, refused):
    inp = tmp_path / "in" / "draft"
    inp.mkdir(parents=True)
    d = tmp_path / "d"
    if kind == "empty-folder":
        d.mkdir()
    elif kind == "earlier":
        d.mkdir()
        (d / "mine").write_text("")
    elif kind == "foreign-folder":
        d.mkdir()
        (d / "theirs").write_text("")
    elif kind == "regular":
        d.write_text("x")
    elif kind == "symlink":
        (tmp_path / "elsewhere").mkdir()
        d.symlink_to(tmp_path / "elsewhere")
    elif kind == "fifo":
        os.mkfifo(d)
    elif kind == "chardev":
        char_device(d)
    elif kind == "socket":
        unix_socket(d)
    elif kind == "input":
        d = inp
    elif kind == "inside-input":
        d = inp / "sub"
    elif kind == "parent-of-input":
        d = tmp_path / "in"
    before = node(d) if os.path.lexists(d) else None
    if refused is None:
        g.check_output_folder(d, what=str(d), force=force, inputs=[str(inp)], owned=_owned, kind="x")
        return
    with pytest.raises(UsageError) as e:
        g.check_output_folder(d, what=str(d), force=force, inputs=[str(inp)], owned=_owned, kind="x")
    assert refused in e.value.message
    assert ("--force" in e.value.message) == (kind == "earlier")
    assert before is None or node(d) == before


class Reader(threading.Thread):
    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.data = path, None
        self.start()

    def run(self) -> None:
        with open(self.path, "rb") as f:
            self.data = f.read()


def test_a_report_is_written_through_a_fifo_and_a_character_device_and_never_renamed_over_them(tmp_path):
    """fifo(7): the reader gets the bytes; the node is still a FIFO. null(4): a device takes the bytes and stays
    the device (same major and minor); no file appears beside either."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = Reader(fifo)
    with deadline():
        g.write_file(fifo, "report\n", what="--report fifo", owns=None, kind="JSON report")
    r.join(5)
    assert r.data == b"report\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "via-link"
    link.symlink_to("fifo")
    r = Reader(fifo)
    with deadline():
        g.write_file(link, "again\n", what="--report via-link", owns=None, kind="JSON report")
    r.join(5)
    assert r.data == b"again\n" and link.is_symlink()
    dev = char_device(tmp_path / "null")
    before = node(dev)
    g.write_file(dev, "x" * 100_000, what="--report null", owns=None, kind="JSON report")
    assert node(dev) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "null", "via-link"]


def test_dash_is_standard_output(capsys):
    g.write_file("-", "to stdout\n", what="--report -", owns=None, kind="JSON report")
    assert capsys.readouterr().out == "to stdout\n"


@pytest.mark.parametrize("kind, written", [
    ("new", True), ("empty", True), ("owned", True), ("foreign", False), ("folder", False), ("socket", False),
    ("symlink-to-file", False), ("dangling-symlink", False), ("input", False),
])
def test_a_report_replaces_only_nothing_an_empty_file_or_its_own_earlier_report(tmp_path, kind, written):
    p = tmp_path / "r.json"
    inp = tmp_path / "draft"
    inp.mkdir()
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "owned":
        p.write_text("MINE old")
    elif kind == "foreign":
        p.write_text("someone's notes")
    elif kind == "folder":
        p.mkdir()
    elif kind == "socket":
        unix_socket(p)
    elif kind == "symlink-to-file":
        (tmp_path / "notes").write_text("notes")
        p.symlink_to("notes")
    elif kind == "dangling-symlink":
        p.symlink_to("nowhere")
    elif kind == "input":
        p = inp

    def owns(path: Path) -> bool:
        return path.read_text().startswith("MINE")

    before = {q.name: (node(q), q.read_bytes() if q.is_file() and not q.is_symlink() else None)
              for q in tmp_path.iterdir()}
    if written:
        g.write_file(p, "MINE new", what="--report r.json", owns=owns, kind="JSON report")
        assert p.read_text() == "MINE new" and not p.is_symlink()
        assert os.stat(p).st_mode & 0o777 == 0o666 & ~g._umask()
        return
    with pytest.raises(UsageError) as e:
        g.write_file(p, "MINE new", what="--report r.json", owns=owns, kind="JSON report")
    assert "--force" not in e.value.message
    assert {q.name: (node(q), q.read_bytes() if q.is_file() and not q.is_symlink() else None)
            for q in tmp_path.iterdir()} == before


def test_what_stands_at_a_report_is_judged_again_at_the_rename(tmp_path, monkeypatch):
    """A folder that appears while the report is written (here at its fsync) is not renamed over (rename(2) would
    refuse a non-empty one anyway, but an empty one or a file would be replaced): refused, left as it is, no
    temporary file beside."""
    p = tmp_path / "r.json"
    real = os.fsync

    def appear(fd):
        real(fd)
        if not p.exists():
            p.write_text("someone else's, meanwhile")

    monkeypatch.setattr(g.os, "fsync", appear)
    with pytest.raises(UsageError, match="changed while kconvert wrote"):
        g.write_file(p, "MINE", what="--report r.json", owns=lambda q: q.read_text().startswith("MINE"),
                     kind="JSON report")
    assert p.read_text() == "someone else's, meanwhile" and sorted(os.listdir(tmp_path)) == ["r.json"]


def test_a_folder_output_is_owned_only_while_its_manifest_lists_everything_in_it(tmp_path):
    d = tmp_path / "out"
    (d / "sub").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"a")
    (d / "sub" / "b.json").write_bytes(b"{}")
    (d / "kconvert.json").write_text(json.dumps({"tool": "kconvert", "output": {"files": {"a.bin": {},
                                                                                        "sub/b.json": {}}}}))
    from kconvert.writer.atomic import fix_output_owned

    assert fix_output_owned(d)
    (d / "notes.txt").write_text("added by the user")
    assert not fix_output_owned(d)
    (d / "notes.txt").unlink()
    os.mkfifo(d / "sub" / "p")
    assert not fix_output_owned(d)
    (d / "sub" / "p").unlink()
    (d / "kconvert.json").write_text(json.dumps({"tool": "other", "output": {"files": {}}}))
    assert not fix_output_owned(d)


# ----------------------------------------------------------------------------- each report format's marker ---

def test_every_file_format_recognises_its_own_earlier_output_and_no_other_file(tmp_path, capsys):
    """Each file option's format writes a real document (inspect, verify --dry-run, matrix on the shipped tiny
    examples); its `owns` recognises that file, and refuses a file of the same extension written by anyone else.
    Every format that writes files has an `owns` (a format without one could never replace its own file)."""
    from kconvert.cli import main
    from kconvert.report.formats import formats

    tiny = Path(__file__).resolve().parent.parent / "examples" / "tiny"
    draft, target = str(tiny / "drafts" / "mla-torchspec"), str(tiny / "target")
    written: dict[str, Path] = {}
    for document, argv in (("inspect", ["inspect", draft, "--target", target]),
                           ("verify", ["verify", draft, "--target", target, "--dry-run"]),
                           ("matrix", ["matrix", draft, "--target", target, "--engines", "vllm", "--cache", "off"])):
        extra = []
        for fmt in formats():
            opt = fmt.files.get(document)
            if opt is not None:
                path = tmp_path / f"{document}-{fmt.name}{fmt.extension}"
                extra += [opt.flag, str(path)]
                written[f"{document}/{fmt.name}"] = path
        assert main(argv + extra) in (0, 1), capsys.readouterr().err
    foreign = {".json": '{"tool": {"name": "other"}}\n', ".sarif": '{"runs": [{"tool": {"driver": {"name": "x"}}}]}',
               ".xml": '<?xml version="1.0"?>\n<testsuites name="pytest"/>\n', ".md": "# My model\n\nnotes\n",
               ".html": "<!DOCTYPE html><html><head><title>My page</title></head></html>",
               ".csv": "a,b\n1,2\n"}
    by_name = {f.name: f for f in formats()}
    for key, path in written.items():
        fmt = by_name[key.split("/")[1]]
        assert fmt.owns is not None, f"{fmt.name} writes files and recognises none of them"
        assert fmt.owns(path), f"{key}: its own output {path.name} is not recognised"
        other = tmp_path / f"other{fmt.extension}"
        other.write_text(foreign[fmt.extension])
        assert not fmt.owns(other), f"{key}: a file it did not write is taken for its own"


# --------------------------------------------------------------------- the checkpoint's own special files ---

@pytest.mark.parametrize("name", ["model.safetensors.index.json", "kconvert.json", "config.json", "tokenizer.json",
                                  "extra.safetensors"])
@pytest.mark.parametrize("kind", ["fifo", "socket", "chardev"])
def test_a_checkpoint_file_that_is_not_a_regular_file_is_refused_by_name_not_skipped(tmp_path, name, kind, capsys):
    """SECURITY.md: a shard, index or config that is not a regular file is refused before any read. A FIFO named
    model.safetensors.index.json or kconvert.json was skipped by the file listing, so the checkpoint was read
    without it (issue #45); fix then dropped any such file from its copy."""
    from kconvert.cli import main
    from tests.writer_factories import write_draft

    d = write_draft(tmp_path / "d", shards=2)
    p = d / name
    if p.exists():
        p.unlink()
    {"fifo": lambda: os.mkfifo(p), "socket": lambda: unix_socket(p), "chardev": lambda: char_device(p)}[kind]()
    with deadline():
        rc = main(["inspect", str(d)])
    err = capsys.readouterr().err
    assert rc == 2 and name in err and "not a regular file" in err, err
    assert stat.S_IFMT(os.lstat(p).st_mode) in (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR)


@pytest.mark.parametrize("kind", ["fifo", "foreign", "folder", "database"])
def test_the_digest_cache_path_from_the_environment_is_guarded_too(tmp_path, monkeypatch, kind):
    """$KCONVERT_HASH_CACHE may name anything: a FIFO, someone's file, a folder, another program's sqlite database
    (into which `CREATE TABLE IF NOT EXISTS files` wrote a table). The cache turns itself off (as for any failure
    of it), the command runs, and what stands there is left as it was, byte for byte."""
    import sqlite3

    from kconvert.source import hashcache
    from tests.writer_factories import write_draft

    p = tmp_path / "cache"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "foreign":
        p.write_text("someone's notes\n")
    elif kind == "database":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE accounts (name TEXT)")
        con.commit()
        con.close()
    else:
        p.mkdir()
    regular = kind in ("foreign", "database")
    before = node(p), p.read_bytes() if regular else None
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(p))
    d = write_draft(tmp_path / "d")
    with deadline():
        assert hashcache.lookup(d / "model.safetensors") is None
        hashcache.store(d / "model.safetensors", "0" * 64)
    assert (node(p), p.read_bytes() if regular else None) == before
    assert sorted(q.name for q in tmp_path.iterdir()) == ["cache", "d"]  # no -journal or -wal beside it


@pytest.mark.parametrize("name", ["trace.json", "trace.safetensors"])
@pytest.mark.parametrize("kind", ["fifo", "socket", "chardev", "folder"])
def test_a_trace_file_that_is_not_a_regular_file_is_refused_by_name(tmp_path, name, kind, capsys):
    """A trace folder's own files, as a checkpoint's: a FIFO named trace.safetensors was reported as missing ("no
    trace.safetensors"), which it is not; it is refused by name, as what it is."""
    from kconvert.cli import main
    from tests.score_factories import random_trace
    from tests.writer_factories import write_draft

    trace = random_trace(tmp_path / "trace", seqs=((4, 6), (4, 6)))
    p = trace / name
    p.unlink()
    {"fifo": lambda: os.mkfifo(p), "socket": lambda: unix_socket(p), "chardev": lambda: char_device(p),
     "folder": p.mkdir}[kind]()
    with deadline():
        rc = main(["score", str(write_draft(tmp_path / "d")), "--trace", str(trace), "--threads", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and name in err and ("not a regular file" in err or "directory" in err or "folder" in err), err
    assert "no " + name not in err, err
