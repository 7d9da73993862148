"""Every path option of the command line, given every kind of path (issue #45, class 1 and 2): nothing kconvert is
given is ever harmed.

The options are enumerated from the CLI's own parameter definitions (tests/path_options.py `path_options`): a new
option declared as taking a path is tried here without an edit. Each is given, in its command's base invocation
(engine-free, run in this process): a new path, a regular file, an empty file, an empty and a non-empty folder, an
earlier output of the same kind (for an input: what it expects), a symlink inside the sandbox and one out of it, a
FIFO, a private character device (mknod of /dev/null's numbers in the test's own folder), a socket, and the
command's input itself, a path inside it and its parent folder; a folder destination of a command that takes
--force, each of them again with --force. For each:

- the exit code is one of 0, 1, 2, 3, 130, 143 (never 70, no traceback), within a timeout (no hang);
- nothing outside the destination changed: names, types, sizes, mtimes, sha256 and device numbers of every entry
  of the sandbox (inputs, the folder holding the path, a folder outside), compared before and after;
- a destination kconvert may not write (anything but a new path, an empty file or folder, its own earlier output,
  and for a report a FIFO or character device it writes through) is refused with exit 2 and left as it was, and
  the refusal never suggests --force;
- a FIFO or device given as a report destination is still a node of the same kind afterwards.

A FIFO given as a report destination gets a reader, as `--report >(cat)` would; every other FIFO none (a read of
it would block: the timeout fails the test).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import stat
import threading
from pathlib import Path

import pytest

from tests.path_options import (KNOWN, PathOption, argv_with, build_inputs, copy_inputs, path_options,
                                primary_input, private_char_device, valid_input)

ALLOWED = {0, 1, 2, 3, 130, 143}
TIMEOUT_S = 60  # one run: the first score run imports torch (~5 s on a busy 2-core machine); a hang is forever

OPTIONS = path_options()
KINDS = ("new", "regular", "empty-file", "empty-folder", "folder", "earlier", "symlink-in", "symlink-out", "fifo",
         "chardev", "socket", "input", "inside-input", "parent-of-input")
# the kinds each destination role may be written over; every other kind must be refused, exit 2, unchanged
WRITABLE = {"output-file": {"new", "empty-file", "earlier", "fifo", "chardev"},
            "output-folder": {"new", "empty-folder", "earlier"},
            "cache": {"new", "empty-file", "earlier"}}


def test_the_enumeration_finds_every_path_option_the_cli_declares():
    found = {(o.command, o.flag) for o in OPTIONS}
    assert found, "no path option found: kconvert.cli._common.path declarations are not read back"
    assert not KNOWN - found, f"path options no longer declared as such: {sorted(KNOWN - found)}"
    assert {o.role for o in OPTIONS} == {"input", "output-file", "output-folder", "cache"}


def test_every_option_that_speaks_of_a_file_or_folder_is_declared_a_path():
    """An option whose help says it takes a file, folder or path but is not declared one would escape the guard
    at the command line and this test: each such option is declared, or named here as taking none."""
    import re

    from kconvert.cli import _built, _register
    from kconvert.cli._common import path_role

    _register()
    # options whose help names a file or folder and that take none (a flag takes no value at all): each says why
    not_paths = {
        ("fix", "--output-format"), ("inspect", "--output-format"), ("score", "--output-format"),
        ("verify", "--output-format"),  # a format's name; its help says what a finding's path:line looks like
        ("push", "--base-model"),  # a Hub id for the card; its help says when a local folder needs one
        ("trace", "--push"),  # a Hub dataset repository id; its help says an existing folder goes to push-trace
    }
    words = re.compile(r"\b(file|folder|directory|path)\b", re.I)
    missing = []
    for name, cmd in _built(None).commands.items():
        for p in cmd.params:
            flag = p.opts[0] if getattr(p, "opts", None) and p.opts[0].startswith("-") else p.name
            if path_role(p) is None and not getattr(p, "is_flag", False) and words.search(p.help or "") \
                    and (name, flag) not in not_paths:
                missing.append((name, flag))
    assert not missing, f"options whose help names a file or folder but that take no declared path: {missing}"


# ------------------------------------------------------------------------------------------------ the sandbox ---

_DIGESTS: dict[tuple, str] = {}


def _sha256(p: Path, st: os.stat_result) -> str:
    """A file's sha256, remembered while its (device, inode, size, mtime, ctime) stay the same, as git's index does:
    any write changes ctime, which no process can set back."""
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return _DIGESTS[key]


def snapshot(root: Path, skip: set[Path], loose_dirs: set[Path]) -> dict[str, tuple]:
    """Every entry under `root` by relative path: type, size, mtime, sha256 (files), target (symlinks), rdev
    (devices). Nothing is opened but regular files: a FIFO or a device is only lstat-ed. `skip`: subtrees left out
    (the destination, the base run's scratch); `loose_dirs`: folders whose mtime may change (the destination's
    parents: creating the destination changes them)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            p = here / name
            if p in skip:
                continue
            st = os.lstat(p)
            rel = p.relative_to(root).as_posix()
            kind = stat.S_IFMT(st.st_mode)
            if stat.S_ISREG(st.st_mode):
                out[rel] = (kind, st.st_size, st.st_mtime_ns, _sha256(p, st))
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = (kind, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = (kind, None if p in loose_dirs else st.st_mtime_ns)
            else:
                out[rel] = (kind, st.st_rdev, st.st_mode)
    return out


class Hung(BaseException):
    """Raised by the alarm in the main thread: a BaseException, so that kconvert's own `except Exception` (its
    internal-error line) cannot swallow it."""


@contextlib.contextmanager
def deadline(seconds: float):
    def fire(signum, frame):
        raise Hung(f"no exit within {seconds} s: blocked (a FIFO read, an endless stream?)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class FifoReader:
    """Drains a FIFO in a thread, as a shell's `>(cat)` would; `close()` releases it if nobody ever wrote."""

    def __init__(self, path: Path):
        self.path, self.data = path, b""
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with open(self.path, "rb") as f:  # waits for a writer
            self.data = f.read()

    def close(self) -> None:
        if self.thread.is_alive():
            with contextlib.suppress(OSError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))  # a writer that writes nothing: EOF
        self.thread.join(5)


def make_kind(kind: str, out: Path, outside: Path, opt: PathOption, inputs: dict[str, Path],
              earlier) -> Path | None:
    """A path of `kind` in `out` (its target, for a symlink out, in `outside`); None when this machine cannot make
    it (a device node without root)."""
    p = out / "p"
    if kind == "new":
        return out / "new" / "p"
    if kind == "regular":
        p.write_bytes(b"someone's own file\n")
    elif kind == "empty-file":
        p.write_bytes(b"")
    elif kind == "empty-folder":
        p.mkdir()
    elif kind == "folder":
        p.mkdir()
        (p / "notes.txt").write_text("someone's notes\n")
    elif kind == "earlier":
        return earlier(p)
    elif kind == "symlink-in":
        (out / "inside.txt").write_text("a file beside\n")
        p.symlink_to("inside.txt")
    elif kind == "symlink-out":
        p.symlink_to(outside / "precious.txt")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "chardev":
        try:
            private_char_device(p)
        except PermissionError:
            if os.environ.get("CI") == "true":
                raise
            return None  # mknod needs CAP_MKNOD (root): this kind is left out here; CI=true runs it
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(out)  # a relative name: AF_UNIX paths are limited to 108 bytes, a pytest tmp_path may be longer
        try:
            s.bind("p")
        finally:
            os.chdir(here)
        s.close()  # the socket file stays
    elif kind == "input":
        return primary_input(opt, inputs)
    elif kind == "inside-input":
        first = primary_input(opt, inputs)
        return first / "sub" / "p" if first.is_dir() else first.parent / first.name / "p"
    elif kind == "parent-of-input":
        return primary_input(opt, inputs).parent
    return p


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    from kconvert.cli import main

    capsys.readouterr()
    with deadline(TIMEOUT_S):
        rc = main(argv)
    got = capsys.readouterr()
    return rc, got.out, got.err


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    root = tmp_path_factory.mktemp("path-options") / "in"
    return root, build_inputs(root)


@pytest.mark.parametrize("opt", OPTIONS, ids=lambda o: o.id)
def test_every_kind_of_path_in_every_path_option(opt: PathOption, template, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("KCONVERT_OUTPUT_FORMAT", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # no project configuration found upward from here but what a test writes
    src_root, src = template
    inputs = copy_inputs(src, src_root, tmp_path / "in")  # one copy per option: every run checks it is unchanged
    failures = []
    # a destination a command may replace with --force is tried with it too (issue #45: `fix -o PATH --force`
    # deleted whatever stood at PATH)
    tries = [(kind, []) for kind in KINDS]
    if opt.role == "output-folder" and opt.force:
        tries += [(kind, ["--force"]) for kind in KINDS]
    for kind, extra in tries:
        sandbox = tmp_path / (kind + ("+forced" if extra else ""))  # no "--force" in a path an error line names
        out, outside, scratch = sandbox / "out", sandbox / "outside", sandbox / "scratch"
        for d in (out, outside, scratch):
            d.mkdir(parents=True)
        (outside / "precious.txt").write_text("outside the sandbox's out folder\n")

        def earlier(p: Path) -> Path:
            if opt.role == "input":
                return inputs[valid_input(opt)]
            rc, _, err = run(argv_with(opt, str(p), inputs, scratch) + extra, capsys)  # the same command, before
            assert rc in ALLOWED, (kind, rc, err)
            return p

        value = make_kind(kind, out, outside, opt, inputs, earlier)
        if value is None:
            continue
        writable = opt.role != "input" and kind in WRITABLE[opt.role]
        dest = value if writable else None
        while dest is not None and not os.path.lexists(dest.parent):
            dest = dest.parent  # a new path's missing folders are made with it, as mkdir -p makes them
        loose = {value.parent, *value.parents} if writable else set()
        watched = (tmp_path / "in", sandbox)
        before = [snapshot(w, {scratch} | ({dest} if dest else set()), loose) for w in watched]
        node = os.lstat(value) if os.path.lexists(value) else None
        reader = FifoReader(value) if kind == "fifo" and opt.role == "output-file" else None
        argv = argv_with(opt, str(value), inputs, scratch) + extra
        try:
            rc, _, err = run(argv, capsys)
        except Hung as e:
            failures.append((kind, f"hung: {e}"))
            continue
        finally:
            if reader is not None:
                reader.close()
        after = [snapshot(w, {scratch} | ({dest} if dest else set()), loose) for w in watched]
        problems = []
        if rc not in ALLOWED or "Traceback" in err or "internal error" in err:
            problems.append(f"exit {rc}: {err.strip()[-300:]}")
        for b, a in zip(before, after):
            changed = sorted(k for k in set(b) | set(a) if b.get(k) != a.get(k))
            if changed:
                problems.append(f"changed outside the destination: {changed[:6]}")
        if opt.role != "input" and not writable:
            if rc != 2:
                problems.append(f"a {kind} destination was not refused (exit {rc})")
            elif "--force" in err and not (kind == "earlier" and not extra):
                problems.append(f"the refusal suggests --force: {err.strip()}")
        if node is not None and (stat.S_ISFIFO(node.st_mode) or stat.S_ISCHR(node.st_mode)):
            now = os.lstat(value)
            if stat.S_IFMT(now.st_mode) != stat.S_IFMT(node.st_mode) or now.st_rdev != node.st_rdev:
                problems.append("the node is no longer the FIFO or device it was")
        if problems:
            failures.append((kind, " ".join(argv), problems))
        shutil.rmtree(sandbox, ignore_errors=True)
    assert not failures, "\n".join(map(str, failures))


# ------------------------------------------------------------------------------- inputs given as Hub ids ---

# the inputs a command's base invocation reads that a Hub id can name (a checkpoint, a target, a trace dataset)
HUB_INPUTS = ("draft", "draft_t", "full", "target", "dump_target", "trace")
DESTINATIONS = [o for o in OPTIONS if o.role != "input"]


@pytest.mark.parametrize("opt", DESTINATIONS, ids=lambda o: o.id)
def test_a_destination_inside_the_hub_cache_of_an_input_given_by_hub_id_is_refused(opt, template, tmp_path, capsys,
                                                                                   monkeypatch):
    """A Hub id resolves to a snapshot of symlinks into its repository's `blobs/` in Hugging Face's cache: the whole
    repository folder is what the command reads. Every destination option, in its base invocation with each of its
    inputs named by a Hub id instead, given a path inside that repository (the snapshot, `blobs/`, the repository
    folder itself) is refused with exit 2 and the cache is unchanged. Seen failing before kconvert/guard/paths.py
    `_hub_cache_folders`: `inspect org/d --report SNAPSHOT/r.json` wrote into the snapshot, `fix org/d -o
    REPO/blobs/x` into `blobs/`."""
    from tests.hub_cache import populate_cache

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    src_root, src = template
    inputs = copy_inputs(src, src_root, tmp_path / "in")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = argv_with(opt, str(scratch / "dest"), inputs, scratch)
    named = [k for k in HUB_INPUTS if str(inputs[k]) in argv]
    if not named:
        pytest.skip(f"{opt.id}: its base invocation reads no input a Hub id names")
    failures = []
    for key in named:
        kind = "dataset" if key == "trace" else "model"
        snap = populate_cache(cache, f"org/{key.replace('_', '-')}", inputs[key], repo_type=kind)
        repo = snap.parent.parent
        hub_argv = [f"org/{key.replace('_', '-')}" if a == str(inputs[key]) else a for a in argv]
        for where in (snap / "out", repo / "blobs" / "out", repo / "out"):
            value = hub_argv.index(str(scratch / "dest"))
            before = snapshot(cache, set(), set())
            rc, _, err = run([*hub_argv[:value], str(where), *hub_argv[value + 1:]], capsys)
            if rc != 2 or snapshot(cache, set(), set()) != before:
                failures.append((key, str(where.relative_to(cache)), rc, err.strip()[-200:]))
    assert not failures, "\n".join(map(str, failures))


# ------------------------------------------------------------------ two destinations of one command, one path ---

PAIRS = [(a, b) for a in DESTINATIONS for b in DESTINATIONS
         if a.command == b.command and a.flag < b.flag and a.argument is None and b.argument is None]


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0].command} {p[0].flag} {p[1].flag}")
@pytest.mark.parametrize("how", ["same", "inside", "stdout"])
def test_two_destinations_of_one_command_never_share_a_path(pair, how, template, tmp_path, capsys, monkeypatch):
    """Every pair of one command's destination options (enumerated from the CLI), given the same path, one inside
    the other, or both standard output: refused with exit 2 before anything is written. `inspect --report o.json
    --sarif o.json` wrote o.json and then exited 2 on --sarif (its own output stood there); `--report - --sarif -`
    ran two documents together on stdout."""
    a, b = pair
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    src_root, src = template
    inputs = copy_inputs(src, src_root, tmp_path / "in")
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    stdout_ok = {"output-file"}
    if how == "stdout" and not (a.role in stdout_ok and b.role in stdout_ok):
        pytest.skip("a folder or a cache is never standard output")
    first = {"same": out / "p", "inside": out / "p", "stdout": "-"}[how]
    second = {"same": out / "p", "inside": out / "p" / "q", "stdout": "-"}[how]
    argv = argv_with(a, str(first), inputs, scratch) + [b.flag, str(second)]
    rc, _, err = run(argv, capsys)
    assert rc == 2 and "--force" not in err, (rc, err)
    assert list(out.iterdir()) == [], f"written before the refusal: {list(out.iterdir())}"


# ------------------------------------------------------------------- inputs named by the project configuration ---

def _takes_config(command: str) -> bool:
    from kconvert.cli import _built, _register

    _register()
    return any("--config" in (getattr(p, "opts", None) or []) for p in _built(None).commands[command].params)


@pytest.mark.parametrize("opt", [o for o in DESTINATIONS if _takes_config(o.command)], ids=lambda o: o.id)
@pytest.mark.parametrize("how", ["found", "--config"])
def test_a_destination_inside_the_target_the_project_configuration_names_is_refused(opt, how, template, tmp_path,
                                                                                    capsys, monkeypatch):
    """The target a kconvert.toml (found in the working directory, or given with --config) names is read like
    --target: every destination option of every command that reads a project configuration, put inside it, is
    refused (exit 2) and the target is unchanged; so is the configuration file itself. Seen failing before
    kconvert/cli/__init__.py `_project_inputs`: `inspect d --report` into the folder `target = "./t"` names wrote
    there."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    src_root, src = template
    inputs = copy_inputs(src, src_root, tmp_path / "in")
    project, scratch = tmp_path / "project", tmp_path / "scratch"
    project.mkdir()
    scratch.mkdir()
    (project / "kconvert.toml").write_text(f'target = "{inputs["target"]}"\n')
    monkeypatch.chdir(project)
    argv = argv_with(opt, str(scratch / "dest"), inputs, scratch)
    if "--target" in argv:
        i = argv.index("--target")
        del argv[i:i + 2]
    if how == "--config":
        argv += ["--config", str(project / "kconvert.toml")]
    failures = []
    for where in (inputs["target"] / "out", project / "kconvert.toml"):
        if where.name == "kconvert.toml" and opt.role == "output-folder":
            continue  # a folder destination over a file is refused for being a file (tested above)
        value = argv.index(str(scratch / "dest"))
        before = snapshot(inputs["target"], set(), set()), (project / "kconvert.toml").read_bytes()
        rc, _, err = run([*argv[:value], str(where), *argv[value + 1:]], capsys)
        after = snapshot(inputs["target"], set(), set()), (project / "kconvert.toml").read_bytes()
        if rc != 2 or before != after or "input" not in err:
            failures.append((str(where), rc, err.strip()[-200:]))
    assert not failures, "\n".join(map(str, failures))


@pytest.mark.parametrize("opt", [o for o in DESTINATIONS if o.command == "matrix"], ids=lambda o: o.id)
@pytest.mark.parametrize("how", ["--from", "glob"])
def test_a_destination_inside_a_draft_a_list_or_a_glob_names_is_refused(opt, how, template, tmp_path, capsys,
                                                                        monkeypatch):
    """matrix reads drafts its arguments do not spell out: those a `--from` list names and the folders a quoted
    glob matches. Every destination option of matrix, put inside such a draft, is refused (exit 2) before any cell
    runs and the draft is unchanged. Seen failing before kconvert/matrix/gather.py `listed_inputs`: `matrix --from
    list.txt --csv D/m.csv` with D in the list wrote into D."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    src_root, src = template
    inputs = copy_inputs(src, src_root, tmp_path / "in")
    runs = tmp_path / "runs"
    shutil.copytree(inputs["draft"], runs / "epoch-1")
    draft = runs / "epoch-1"
    (tmp_path / "list.txt").write_text(f"{draft}\n")
    named = ["--from", str(tmp_path / "list.txt")] if how == "--from" else [str(runs / "epoch-*")]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = argv_with(opt, str(scratch / "dest"), inputs, scratch)
    argv[argv.index(str(inputs["draft"])):argv.index(str(inputs["draft"])) + 1] = named
    value = argv.index(str(scratch / "dest"))
    before = snapshot(runs, set(), set())
    rc, _, err = run([*argv[:value], str(draft / "out"), *argv[value + 1:]], capsys)
    assert rc == 2 and "input" in err, (rc, err)
    assert snapshot(runs, set(), set()) == before
