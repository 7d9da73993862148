"""Where a finding lives: the checkpoint file its evidence points at and, for a config key, the line of that key.

CI formats anchor a finding to a file and line (GitHub annotations, SARIF, GitLab Code Quality, the concise
`path:line:` prefix), so a reviewer lands on `config.json` line 12 instead of a table cell. The line comes from
the config's own text as the source layer read it (`Checkpoint.config_text`), scanned with the standard
library's JSON primitives; a config that does not scan (or a key that is not in it) gives a file-level location,
never an error: the checks already read the config. The report's renderers name these locations
(`kconvert.report.anchors`).
"""
from __future__ import annotations

import bisect
import json
from typing import Any

from kconvert.results.inspection import Inspection
from kconvert.source.names import CONFIG_NAME

CONFIG = CONFIG_NAME
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


def _config_lines(result: Inspection) -> dict[tuple[str, ...], int]:
    # the text the source layer read the config from (`Checkpoint.config_text`): the report reads no file again
    text = result.checkpoint.config_text
    if text is None:
        return {}
    try:
        return key_lines(text)
    except (ValueError, RecursionError):
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


def locate(result: Inspection, where: str | None, lines: dict[tuple[str, ...], int] | None = None
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


def finding_locations(result: Inspection) -> list[dict[str, Any] | None]:
    """One location per finding (in `result.findings` order): its first evidence that names a file, else the
    checkpoint's config.json (the file a reader opens first), else None."""
    lines = _config_lines(result)
    fallback = {"file": CONFIG, "line": None} if CONFIG in result.checkpoint.files else None
    out = []
    for f in result.findings:
        loc = next((x for x in (locate(result, e.where, lines) for e in f.evidence) if x is not None), None)
        out.append(loc or (dict(fallback) if fallback else None))
    return out
