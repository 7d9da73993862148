"""kconvert/writer/atomic.py against the operating system's own promises (issue #30: the survivors of its mutation run).

Each expectation comes from outside the module: rename(2), open(2)'s O_DIRECTORY, kill(2)'s signal 0 and EPERM,
strerror(3), pathconf(3)'s NAME_MAX, signal(7)'s numbers, and the bytes on disk. All in-process, milliseconds each.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kconvert.errors import InputError, UsageError
from kconvert.writer import atomic
from kconvert.writer.atomic import TempFolder, fsync_dir, interrupt_guard, os_error_reason

REPO = Path(__file__).resolve().parent.parent


# --- os_error_reason: the OS's words, except the three errnos the module names --------------------------------------

def test_os_error_reason_gives_the_os_strerror_for_other_errnos():
    """Expected: strerror(3) for EACCES, from the C library (os.strerror), not from kconvert."""
    e = OSError(errno.EACCES, os.strerror(errno.EACCES), "/x")
    assert os_error_reason(e) == os.strerror(errno.EACCES)


def test_os_error_reason_without_strerror_is_the_exception_text():
    """Expected: an OSError raised with a bare message has no strerror (Python's OSError); its text is that message."""
    assert os_error_reason(OSError("the disk went away")) == "the disk went away"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_os_error_reason_names_a_full_device(code):
    """Expected: ENOSPC and EDQUOT both mean the device (or quota) is full (write(2), ERRORS)."""
    assert "no space left on device" in os_error_reason(OSError(code, os.strerror(code)))


def test_os_error_reason_names_the_file_size_limit_for_efbig():
    """Expected: write(2) gives EFBIG past the file system's or RLIMIT_FSIZE's maximum; both causes are named."""
    r = os_error_reason(OSError(errno.EFBIG, os.strerror(errno.EFBIG)))
    assert r.startswith("file too large") and "file system" in r and "file size limit" in r


# --- _pid_alive: kill(pid, 0) -------------------------------------------------------------------------------------

def test_pid_alive_probes_with_signal_0_and_sends_nothing():
    """Expected (kill(2)): signal 0 checks that the process exists and sends nothing: a live child is reported alive
    and is still running afterwards (a real signal, e.g. SIGHUP, would have ended `sleep`)."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert atomic._pid_alive(child.pid) is True
        assert child.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.2)
    finally:
        child.kill()
        child.wait()
    assert atomic._pid_alive(child.pid) is False  # reaped: kill(2) gives ESRCH


def test_pid_alive_counts_a_process_we_may_not_signal_as_alive():
    """Expected (kill(2), EPERM): 'the calling process does not have permission to send the signal' to an existing
    process; pid 1 exists. Probed as an unprivileged user (uid 65534 in a forked child when we are root)."""
    # (probed here too, on a child we may signal, so that mutmut maps this test to _pid_alive: the forked probe's
    # coverage is lost with its os._exit; a child, not os.getpid(), so a mutant sending a real signal hits the child)
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert atomic._pid_alive(child.pid) is True
    finally:
        child.kill()
        child.wait()
    if os.getuid() != 0:
        with pytest.raises(PermissionError):
            os.kill(1, 0)
        assert atomic._pid_alive(1) is True
        return
    pid = os.fork()
    if pid == 0:  # the child drops to uid 65534 (nobody) and reports by exit status only
        status = 9
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                os.kill(1, 0)
                status = 2  # no EPERM: the premise does not hold here
            except PermissionError:
                status = 0 if atomic._pid_alive(1) is True else 1
        finally:
            os._exit(status)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0


# --- _remove: a file, a folder, a symlink, and errors it must swallow ----------------------------------------------

def test_remove_deletes_a_regular_file(tmp_path):
    """Expected: the file is gone from the folder listing afterwards."""
    f = tmp_path / "f"
    f.write_bytes(b"x")
    atomic._remove(f)
    assert os.listdir(tmp_path) == []


def test_remove_deletes_a_symlink_to_a_folder_and_not_what_it_points_to(tmp_path):
    """Expected: unlink(2) removes the link itself; the target folder and its file keep their bytes."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_bytes(b"kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    atomic._remove(link)
    assert not os.path.lexists(link)
    assert (target / "keep").read_bytes() == b"kept"


def test_remove_of_a_folder_swallows_the_errors_of_its_entries(tmp_path, monkeypatch):
    """Expected: cleanup never raises (it runs inside except-blocks, where an error would hide the first one). The
    error is unlink(2)'s EACCES for an entry of a folder without write permission, which root cannot meet for real,
    so it is raised in its place."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").write_bytes(b"x")

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(os, "unlink", refuse)
    atomic._remove(d)  # no exception
    monkeypatch.undo()
    assert (d / "f").read_bytes() == b"x"


# --- fsync_dir: a directory descriptor ---------------------------------------------------------------------------

def test_fsync_dir_opens_with_o_directory(tmp_path):
    """Expected (open(2), O_DIRECTORY): 'If pathname is not a directory, cause the open to fail' with ENOTDIR."""
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        fsync_dir(f)
    fsync_dir(tmp_path)  # a folder is fine


# --- interrupt_guard: SIGTERM becomes KeyboardInterrupt, handlers restored -----------------------------------------

def test_sigterm_inside_the_guard_is_a_keyboard_interrupt_naming_the_signal():
    """Expected: signal(7) numbers SIGTERM 15 on Linux; the interrupt says which signal arrived, and the handler
    in place before the guard is back after it."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as ei:
        with interrupt_guard():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
    assert ei.value.args == ("signal 15",)
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_guard_outside_the_main_thread_installs_nothing():
    """Expected: signal.signal may only be called from the main thread (Python's signal module raises ValueError
    elsewhere); the guard then leaves the handlers alone."""
    seen = []

    def run():
        with interrupt_guard():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before]


def test_sigxfsz_is_ignored_inside_the_guard_and_the_previous_handler_is_back_after():
    """Expected: setrlimit(2)/signal(7): a write past RLIMIT_FSIZE sends SIGXFSZ, whose default action kills the
    process; ignored (SIG_IGN), the write fails with EFBIG instead, an error the writer reports. Python's
    signal.getsignal says which handler is installed; the one in place before the guard (here a function of the
    test's own, so that "restored" cannot be confused with a default) is back after it, on success and on error."""
    def mine(signum, frame):  # never called: only its identity is compared
        raise AssertionError("SIGXFSZ delivered")

    old = signal.signal(signal.SIGXFSZ, mine)
    try:
        with interrupt_guard():
            assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGXFSZ) is mine
        with pytest.raises(RuntimeError):
            with interrupt_guard():
                assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
                raise RuntimeError("a failing write")
        assert signal.getsignal(signal.SIGXFSZ) is mine
    finally:
        signal.signal(signal.SIGXFSZ, old)


def test_the_guard_in_the_main_thread_installs_its_sigterm_handler():
    """Expected: inside the guard in the main thread SIGTERM's handler is no longer the one before (it raises
    KeyboardInterrupt, as the test above shows); outside the main thread it is untouched (the test above that)."""
    before = signal.getsignal(signal.SIGTERM)
    with interrupt_guard():
        inside = signal.getsignal(signal.SIGTERM)
    assert inside is not before and callable(inside)
    assert signal.getsignal(signal.SIGTERM) is before


# --- TempFolder.commit: rename(2)'s promise ------------------------------------------------------------------------

def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_commit_marks_itself_committed_so_a_later_discard_keeps_the_output(tmp_path):
    """Expected: after rename(2) the destination holds the temp folder's bytes; `committed` is what the writer's
    close (kconvert/writer/write.py, _Run.close) reads to decide whether to discard; both commit paths set it."""
    for force in (False, True):
        out = tmp_path / f"out{force}"
        if force:
            out.mkdir()
            (out / "old").write_bytes(b"old")
        t = TempFolder(out, owned=lambda folder: True)  # the old folder counts as an earlier output of ours
        (t.path / "new").write_bytes(b"new")
        assert not t.committed
        t.commit(force=force)
        assert t.committed
        t.discard()
        assert _listing(out) == {"new": b"new"}
        assert [p for p in os.listdir(tmp_path) if p.startswith(f".out{force}.")] == []


def test_force_commit_puts_the_old_destination_back_when_the_rename_fails(tmp_path):
    """Expected (rename(2), ENOENT): renaming a folder that no longer exists fails; the old destination, moved aside
    just before, is renamed back with its bytes, and the error reaches the caller."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_bytes(b"old bytes")
    t = TempFolder(out, owned=lambda folder: True)
    os.rmdir(t.path)  # the temporary folder is gone: the second rename cannot succeed
    with pytest.raises(FileNotFoundError):
        t.commit(force=True, durable=False)
    assert _listing(out) == {"old": b"old bytes"}
    assert not t.committed
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_destination_that_appears_while_writing_is_refused_by_name(tmp_path):
    """Expected: the refusal names the destination the user gave (its path), and leaves what appeared alone."""
    out = tmp_path / "out"
    t = TempFolder(out)
    out.mkdir()
    (out / "theirs").write_bytes(b"theirs")
    with pytest.raises(UsageError) as ei:
        t.commit(force=False)
    assert str(out) in str(ei.value) and "appeared" in str(ei.value)
    assert _listing(out) == {"theirs": b"theirs"}


@pytest.mark.parametrize("owned", [None, lambda folder: False])
def test_force_commit_never_replaces_a_folder_it_does_not_recognise(tmp_path, owned):
    """Expected (issue #45): with force, only an earlier output (`owned`) is moved aside; a folder of someone else's
    files stays as it is, and the output is not written."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "theirs").write_bytes(b"theirs")
    t = TempFolder(out, owned=owned)
    with pytest.raises(UsageError):
        t.commit(force=True, durable=False)
    assert _listing(out) == {"theirs": b"theirs"} and not t.committed
    t.discard()
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_commit_replaces_an_empty_folder_in_one_rename(tmp_path):
    """Expected (rename(2)): a folder renamed onto an empty folder replaces it; no --force is needed for nothing."""
    out = tmp_path / "out"
    out.mkdir()
    t = TempFolder(out)
    (t.path / "new").write_bytes(b"new")
    t.commit(force=False, durable=False)
    assert _listing(out) == {"new": b"new"} and sorted(os.listdir(tmp_path)) == ["out"]


def test_force_commit_works_for_the_longest_name_the_temp_folder_allows(tmp_path):
    """Expected (pathconf(3), _PC_NAME_MAX): a destination whose hidden temp name `.<name>.kconvert-tmp-<pid>-<8 hex>`
    is exactly NAME_MAX long can be replaced: the folder it is moved aside to must be no longer than that."""
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    fixed = len(".") + len(".kconvert-tmp-") + len(str(os.getpid())) + len("-") + 8
    out = tmp_path / ("n" * (name_max - fixed))
    out.mkdir()
    (out / "old").write_bytes(b"old")
    t = TempFolder(out, owned=lambda folder: True)
    assert len(t.path.name) == name_max
    (t.path / "new").write_bytes(b"new")
    t.commit(force=True)
    assert _listing(out) == {"new": b"new"}
    assert sorted(os.listdir(tmp_path)) == [out.name]


def test_a_temp_folder_that_cannot_be_created_is_an_input_error(tmp_path):
    """Expected (mkdir(2), ENOTDIR): a parent that is a regular file cannot hold a folder."""
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(InputError):
        TempFolder(f / "out")


def test_a_nested_destination_gets_its_missing_parents(tmp_path):
    """Expected: like `mkdir -p` (mkdir(1)), every missing folder above the destination is created."""
    out = tmp_path / "a" / "b" / "out"
    t = TempFolder(out)
    assert t.path.parent == tmp_path / "a" / "b" and t.path.is_dir()
    t.commit(force=False)
    assert out.is_dir()


def test_the_temp_folder_is_0755_whatever_the_umask(tmp_path):
    """Expected (mkdir(2)): the folder's mode is `mode & ~umask`; under umask 0 it is exactly the mode asked for,
    0755 (owner rwx, no write for group or others), where a mode-less mkdir would give 0777."""
    old = os.umask(0)
    try:
        t = TempFolder(tmp_path / "out")
    finally:
        os.umask(old)
    assert os.stat(t.path).st_mode & 0o7777 == 0o755
    t.discard()


def test_a_temp_name_longer_than_name_max_is_an_input_error_naming_the_os_reason(tmp_path):
    """Expected (mkdir(2), ENAMETOOLONG; pathconf(3) NAME_MAX): one byte over NAME_MAX for the hidden temp name is
    refused by the kernel; the error names the destination and strerror(ENAMETOOLONG)."""
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    fixed = len(".") + len(".kconvert-tmp-") + len(str(os.getpid())) + len("-") + 8
    out = tmp_path / ("n" * (name_max - fixed + 1))
    with pytest.raises(InputError) as ei:
        TempFolder(out)
    assert str(out) in str(ei.value) and os.strerror(errno.ENAMETOOLONG) in str(ei.value)
    assert os.listdir(tmp_path) == []


# --- remove_stale: only the leftovers of dead processes, all of them -----------------------------------------------

def _dead_pid() -> int:
    """A pid whose process has exited and been reaped: kill(pid, 0) gives ESRCH (unless the kernel reuses it)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _until_first_in_scandir(parent: Path, make_blocker, stale_name: str) -> None:
    """Add blockers until one comes before `stale_name` in os.scandir's order (the order remove_stale reads)."""
    for i in range(200):
        names = [e.name for e in os.scandir(parent)]
        if names.index(stale_name) > 0 and any(n != stale_name for n in names[:names.index(stale_name)]):
            return
        make_blocker(i)
    pytest.skip("os.scandir never listed another entry before the stale folder")


def test_remove_stale_removes_a_dead_runs_folder_after_unrelated_entries(tmp_path):
    """Expected: a folder of the same destination whose pid is gone is removed, whatever else the parent holds and
    whatever order the directory lists it in (the stale folder is put after unrelated entries in os.scandir's order);
    the list returned names it."""
    out = tmp_path / "out"
    stale = tmp_path / f".out.kconvert-tmp-{_dead_pid()}-0123abcd"
    stale.mkdir()
    (stale / "partial").write_bytes(b"x")
    _until_first_in_scandir(tmp_path, lambda i: (tmp_path / f"unrelated{i}").write_bytes(b""), stale.name)
    assert atomic.remove_stale(out) == [stale]
    assert not os.path.lexists(stale)
    assert all(n.startswith("unrelated") for n in os.listdir(tmp_path))


def test_remove_stale_keeps_live_runs_folders_and_still_removes_dead_ones(tmp_path):
    """Expected (kill(2) signal 0): folders of live processes (ours, a running child) are another run's work and
    stay; a dead run's folder listed after them in os.scandir's order is still removed."""
    out = tmp_path / "out"
    child = subprocess.Popen(["sleep", "30"])
    try:
        live = [tmp_path / f".out.kconvert-tmp-{child.pid}-aa", tmp_path / f".out.kconvert-old-{os.getpid()}-bb"]
        for p in live:
            p.mkdir()
        stale = tmp_path / f".out.kconvert-old-{_dead_pid()}-cc"
        stale.mkdir()
        _until_first_in_scandir(tmp_path, lambda i: (tmp_path / f".out.kconvert-tmp-{os.getpid()}-{i:x}").mkdir(),
                                stale.name)
        assert atomic.remove_stale(out) == [stale]
        assert all(p.is_dir() for p in live)
    finally:
        child.kill()
        child.wait()
