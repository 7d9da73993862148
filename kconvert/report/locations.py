"""Where a finding lives: the checkpoint file its evidence points at and, for a config key, the line of that key.

CI formats anchor a finding to a file and line (GitHub annotations, SARIF, GitLab Code Quality, the concise
`path:line:` prefix), so a reviewer lands on `config.json` line 12 instead of a table cell. The line comes from
the config's own text, scanned with the standard library's JSON primitives; a config that does not scan (or a
key that is not in it) gives a file-level location, never an error: the checks already read the config.
"""
from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kconvert.source.names import CONFIG_NAME

if TYPE_CHECKING:
    from kconvert.inspect import InspectResult

CONFIG = CONFIG_NAME
_MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a draft config is a few KB; the source layer refuses far less already
_MAX_DEPTH = 64
_WS = " \t\r\n"
_decoder = json.JSONDecoder()


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every object key in a JSON text, by key path (`("eagle_config", "layer_ids")`).

    Array elements are path components too (`"0"`), so keys inside lists of objects are found. Raises
    ValueError on text that is not JSON."""
    out: dict[tuple[str, ...], int] = {}
    newlines: list[int] = [i for i, c in enumerate(text) if c == "\n"]

    def line_of(pos: int) -> int:
        import bisect

        return bisect.bisect_left(newlines, pos) + 1

    def ws(i: int) -> int:
        while i < len(text) and text[i] in _WS:
            i += 1
        return i

    def value(i: int, path: tuple[str, ...]) -> int:
        if len(path) > _MAX_DEPTH:
            raise ValueError("nested too deeply")
        i = ws(i)
        if i >= len(text):
            raise ValueError("unexpected end")
        c = text[i]
        if c == "{":
            i = ws(i + 1)
            if i < len(text) and text[i] == "}":
                return i + 1
            while True:
                if i >= len(text) or text[i] != '"':
                    raise ValueError(f"expected a key at {i}")
                key, end = json.decoder.scanstring(text, i + 1)
                out.setdefault(path + (key,), line_of(i))
                i = ws(end)
                if i >= len(text) or text[i] != ":":
                    raise ValueError(f"expected ':' at {i}")
                i = ws(value(i + 1, path + (key,)))
                if i < len(text) and text[i] == ",":
                    i = ws(i + 1)
                    continue
                if i < len(text) and text[i] == "}":
                    return i + 1
                raise ValueError(f"expected ',' or '}}' at {i}")
        if c == "[":
            i = ws(i + 1)
            if i < len(text) and text[i] == "]":
                return i + 1
            n = 0
            while True:
                i = ws(value(i, path + (str(n),)))
                n += 1
                if i < len(text) and text[i] == ",":
                    i += 1
                    continue
                if i < len(text) and text[i] == "]":
                    return i + 1
                raise ValueError(f"expected ',' or ']' at {i}")
        _, end = _decoder.raw_decode(text, i)
        return end

    end = ws(value(0, ()))
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return out


def _config_lines(result: InspectResult) -> dict[tuple[str, ...], int]:
    ck = result.checkpoint
    path = ck.local_path(CONFIG) if CONFIG in ck.files else None
    if path is None:
        return {}
    try:
        if path.stat().st_size > _MAX_CONFIG_BYTES:
            return {}
        return key_lines(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}


def _config_path(where: str, config: dict[str, Any], speculators: bool) -> tuple[str, ...] | None:
    """The key path of a config-key evidence (`eagle_config.eagle_aux_hidden_state_layer_ids`), if it is one."""
    parts = tuple(where.split("."))
    if parts[0] in config:
        return parts
    nested = config.get("transformer_layer_config")
    if speculators and isinstance(nested, dict) and parts[0] in nested:
        return ("transformer_layer_config",) + parts
    return None


def locate(result: InspectResult, where: str | None, lines: dict[tuple[str, ...], int] | None = None
           ) -> dict[str, Any] | None:
    """`{"file": <path in the checkpoint>, "line": int | None}` for one evidence's `where`, or None when it
    names nothing in the checkpoint (a flag, a missing key)."""
    if not where:
        return None
    ck = result.checkpoint
    if where in ck.files:
        return {"file": where, "line": None}
    raw = result.draft.raw_names.get(where, where)
    info = ck.tensors.get(raw) or ck.tensors.get(where)
    if info is not None:
        return {"file": info.file, "line": None}
    path = _config_path(where, ck.config, result.draft.is_speculators)
    if path is not None and CONFIG in ck.files:
        if lines is None:
            lines = _config_lines(result)
        # the deepest key of the path that the text has: a missing leaf still points at its parent object
        for n in range(len(path), 0, -1):
            if path[:n] in lines:
                return {"file": CONFIG, "line": lines[path[:n]]}
        return {"file": CONFIG, "line": None}
    return None


def finding_locations(result: InspectResult) -> list[dict[str, Any] | None]:
    """One location per finding (in `result.findings` order): its first evidence that names a file, else the
    checkpoint's config.json (the file a reader opens first), else None."""
    lines = _config_lines(result)
    fallback = {"file": CONFIG, "line": None} if CONFIG in result.checkpoint.files else None
    out = []
    for f in result.findings:
        loc = next((x for x in (locate(result, e.where, lines) for e in f.evidence) if x is not None), None)
        out.append(loc or (dict(fallback) if fallback else None))
    return out


def display_path(doc: dict[str, Any], file: str | None, *, relative_to: str | os.PathLike[str] | None = None) -> str:
    """How a report names a checkpoint file: `<folder>/<file>` for a local draft (relative to `relative_to`,
    default the working directory, when it lies below it), `hf://org/name@rev/<file>` for a Hub draft."""
    sub = doc.get("subject") or {}
    source = str(sub.get("source") or "")
    if sub.get("kind") == "hub" and sub.get("repo_id"):
        rev = sub.get("revision")
        base = f"hf://{sub['repo_id']}" + (f"@{rev}" if rev else "")
        return f"{base}/{file}" if file else base
    path = Path(source) / file if file else Path(source)
    base = Path(relative_to) if relative_to is not None else Path.cwd()
    if path.is_absolute():
        try:
            path = path.relative_to(base.resolve())
        except ValueError:
            pass
    else:
        path = Path(os.path.normpath(path))
    return PurePosixPath(*path.parts).as_posix() if path.parts else "."


def hub_url(doc: dict[str, Any], file: str | None) -> str | None:
    """The Hub page of a file of a Hub draft (SARIF needs an absolute URI for files outside the repository)."""
    sub = doc.get("subject") or {}
    if sub.get("kind") != "hub" or not sub.get("repo_id"):
        return None
    rev = sub.get("commit") or sub.get("revision") or "main"
    return f"https://huggingface.co/{sub['repo_id']}/blob/{rev}/{file or ''}".rstrip("/")


def path_in_repository(doc: dict[str, Any], file: str | None, root: str | os.PathLike[str] | None) -> str | None:
    """A local checkpoint file's path relative to the repository root `root` (default: the working directory),
    '/'-separated; None for a Hub draft or a file outside the repository, which CI annotations cannot anchor."""
    sub = doc.get("subject") or {}
    if sub.get("kind") != "local" or not file:
        return None
    p = Path(str(sub.get("source") or "")) / file
    absolute = os.path.realpath(p if p.is_absolute() else Path.cwd() / p)
    base = os.path.realpath(root) if root else os.path.realpath(Path.cwd())
    rel = os.path.relpath(absolute, base)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return PurePosixPath(*Path(rel).parts).as_posix()
