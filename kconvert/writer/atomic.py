"""An output folder that appears complete or not at all.

Everything is written into `.<dest>.kconvert-tmp-<pid>-<random>` beside the destination (same parent, so the
final `rename` stays on one filesystem and is atomic), then renamed into place. An exception, Ctrl-C or
SIGTERM removes the temporary folder; a SIGKILL leaves only that hidden, clearly named folder, which a later
run for the same destination removes once its process is gone.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from kconvert.errors import InputError, UsageError, raise_interrupted

_TMP_TAG = "kconvert-tmp"
_OLD_TAG = "kconvert-old"


def os_error_reason(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    if e.errno == errno.EFBIG:
        return "file too large for the file system or the process's file size limit"
    return e.strerror or str(e)


def check_destination(out_dir: Path, *, force: bool, input_root: Path | None) -> None:
    """Refuse, before anything is written, a destination that exists (without force), that is or holds the
    input, or whose parent cannot hold a folder."""
    if input_root is not None:
        real_in = input_root.resolve()
        real_out = out_dir.resolve()
        if real_out == real_in or real_out in real_in.parents:
            raise UsageError(f"{out_dir}: is (or contains) the input checkpoint; write the fix elsewhere")
        if real_in in real_out.parents:
            raise UsageError(f"{out_dir}: lies inside the input checkpoint folder; write the fix elsewhere")
    if os.path.lexists(out_dir) and not force:
        raise UsageError(f"{out_dir}: already exists (use --force to replace it)")
    parent = out_dir.parent
    if os.path.lexists(parent) and not parent.is_dir():
        raise InputError(f"{out_dir}: cannot write there: {parent} is not a folder")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(out_dir: Path) -> list[Path]:
    """Remove temporary folders of the same destination left by runs that were killed (their pid is gone)."""
    pat = re.compile(rf"^\.{re.escape(out_dir.name)}\.(?:{_TMP_TAG}|{_OLD_TAG})-(\d+)-[0-9a-f]+$")
    removed = []
    try:
        entries = list(os.scandir(out_dir.parent))
    except OSError:
        return removed
    for ent in entries:
        m = pat.match(ent.name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        _remove(Path(ent.path))
        removed.append(Path(ent.path))
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def interrupt_guard() -> Iterator[None]:
    """Within: SIGTERM raises Interrupted, a KeyboardInterrupt (so cleanup runs as for Ctrl-C, and the command
    line exits 143: kconvert.errors), and SIGXFSZ is ignored so that exceeding a file size limit is an EFBIG
    error to report, not a silent kill. For library callers: the command line installs the same handler for
    its whole run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_term = signal.signal(signal.SIGTERM, raise_interrupted)
    old_xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN) if hasattr(signal, "SIGXFSZ") else None
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if old_xfsz is not None:
            signal.signal(signal.SIGXFSZ, old_xfsz)


class TempFolder:
    """The hidden folder the output is written into; `commit()` renames it to the destination."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.parent = out_dir.parent
        try:
            self.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{out_dir}: cannot create its parent folder: {os_error_reason(e)}") from None
        remove_stale(out_dir)
        self.path = self.parent / f".{out_dir.name}.{_TMP_TAG}-{os.getpid()}-{secrets.token_hex(4)}"
        self.committed = False
        try:
            os.mkdir(self.path, 0o755)
        except OSError as e:
            raise InputError(f"{out_dir}: cannot write in {self.parent}: {os_error_reason(e)}") from None
        except BaseException:  # an interrupt right after the folder was made: it goes with the run
            _remove(self.path)
            raise

    def discard(self) -> None:
        if not self.committed:
            _remove(self.path)

    def commit(self, *, force: bool, durable: bool = True) -> None:
        sync = fsync_dir if durable else (lambda path: None)
        sync(self.path)
        if os.path.lexists(self.out_dir):
            if not force:
                raise UsageError(f"{self.out_dir}: appeared while writing; the output is left unwritten")
            aside = self.parent / f".{self.out_dir.name}.{_OLD_TAG}-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(self.out_dir, aside)
            try:
                os.rename(self.path, self.out_dir)
            except BaseException:
                os.rename(aside, self.out_dir)
                raise
            self.committed = True
            sync(self.parent)
            _remove(aside)
        else:
            os.rename(self.path, self.out_dir)
            self.committed = True
            sync(self.parent)
