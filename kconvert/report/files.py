"""Report files (`--report`, `--junit`, `--markdown`, `--sarif`), each written atomically: a reader never sees half a
report. A checkpoint is written by `kconvert.writer`, which makes a whole folder appear at once."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kconvert.errors import InputError


def _umask() -> int:
    # The process umask can only be read by setting it; set it straight back (kconvert writes no file meanwhile).
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    except OSError as e:
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    try:
        # mkstemp creates 0600 for its own privacy; a report is an ordinary file, so it gets the mode open(2)
        # would give it (0666 under the umask: 0644 under umask 022), still written beside and renamed in place.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], doc: Any) -> None:
    write_text_atomic(path, json.dumps(doc, indent=2, default=str) + "\n")
