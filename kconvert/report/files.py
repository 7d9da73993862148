"""Report files (`--report`, `--junit`, `--markdown`, `--sarif`), each written atomically: a reader never sees half a
report. A checkpoint is written by `kconvert.writer`, which makes a whole folder appear at once."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kconvert.errors import InputError


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    except OSError as e:
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    try:
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
