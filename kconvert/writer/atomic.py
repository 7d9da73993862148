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
from typing import Any, Callable

from kconvert.errors import InputError, UsageError, raise_interrupted
from kconvert.guard.paths import owned_folder, replaceable_folder
from kconvert.source.names import PROVENANCE_NAME

_TMP_TAG = "kconvert-tmp"
_OLD_TAG = "kconvert-old"


def os_error_reason(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    if e.errno == errno.EFBIG:
        return "file too large for the file system or the process's file size limit"
    return e.strerror or str(e)


def fix_output_files(doc: Any) -> list[str] | None:
    """The files a `kconvert.json` records as fix's output (`write.provenance_record`), or None when the document is
    not kconvert's: what makes a folder an earlier fix output that `--force` may replace."""
    out = doc.get("output") if isinstance(doc, dict) and doc.get("tool") == "kconvert" else None
    files = out.get("files") if isinstance(out, dict) else None
    return list(files) if isinstance(files, dict) else None


def fix_output_owned(folder: Path) -> bool:
    """`folder` is an earlier `kconvert fix` output: its kconvert.json lists every file in it, and nothing else is
    there (`kconvert.guard.paths.owned_folder`)."""
    return owned_folder(folder, PROVENANCE_NAME, fix_output_files)


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
    """The hidden folder the output is written into; `commit()` renames it to the destination. `owned`: recognises
    an earlier output of the same kind (`kconvert.guard.paths.owned_folder`), the only non-empty folder `commit`
    may replace."""

    def __init__(self, out_dir: Path, *, owned: Callable[[Path], bool] | None = None):
        self.out_dir = out_dir
        self.owned = owned
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
        # What stands at the destination is judged again here, at the rename: it may have changed since the
        # command's own check (kconvert.guard.paths.check_output_folder), and only nothing, an empty folder or an
        # earlier output of ours (with force) is ever replaced.
        state = replaceable_folder(self.out_dir, self.owned)
        if state in ("new", "empty"):
            # rename(2) replaces an empty folder in one step, and fails (ENOTEMPTY, ENOTDIR) when anything else
            # appeared there meanwhile
            os.rename(self.path, self.out_dir)
            self.committed = True
            sync(self.parent)
            return
        if state == "other" or not force:
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
