"""Prompt sets for live verification.

Shipped sets are ``<name>.jsonl`` files beside this module, one ``{"id": ..., "prompt": ...}`` object a line:
``math``, ``chat``, ``code`` (``all`` = the three together) and ``_smoke`` (a few prompts for tests). A user
set is a path to a ``.jsonl`` file of the same shape or a ``.txt`` file with one prompt a line. Prompts are
user messages; the engine layer renders them with the target's chat template.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from kconvert.errors import InputError, UsageError

PROMPTS_DIR = Path(__file__).resolve().parent
SHIPPED_SETS = ("math", "chat", "code")
ALL_SET = "all"


def shipped_set_names() -> list[str]:
    """Names accepted by :func:`load_prompts` without a path (sets whose file is present, plus ``all``)."""
    names = sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))
    if all((PROMPTS_DIR / f"{n}.jsonl").is_file() for n in SHIPPED_SETS):
        names.append(ALL_SET)
    return names


def _json_lines(path: Path, error: type[Exception], *, cannot_read: str, not_utf8: str, not_json: str,
                max_bytes: int | None = None, too_large: str = "") -> Iterator[tuple[int, Any]]:
    """The objects of a JSON-lines file with their line numbers, blank lines skipped; `error` (one line) for an
    unreadable, oversized, non-UTF-8 or non-JSON file, worded by the caller's templates (formatted with `path`,
    and `exc` and `reason` for `cannot_read` and `not_utf8`, `lineno` and `msg` for `not_json`)."""
    try:
        if max_bytes is not None and path.stat().st_size > max_bytes:
            raise error(too_large.format(path=path))
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(cannot_read.format(path=path, reason=exc.strerror or exc, exc=exc)) from None
    except UnicodeDecodeError as exc:
        raise error(not_utf8.format(path=path, exc=exc)) from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(not_json.format(path=path, lineno=lineno, msg=exc.msg)) from None
        yield lineno, obj


def _read_jsonl(path: Path) -> list[str]:
    prompts: list[str] = []
    for lineno, obj in _json_lines(path, UsageError, cannot_read="cannot read prompt file {path}: {exc}",
                                   not_utf8="cannot read prompt file {path}: {exc}",
                                   not_json="{path}:{lineno}: not a JSON object ({msg})"):
        if not isinstance(obj, dict) or "prompt" not in obj:
            raise UsageError(f'{path}:{lineno}: expected an object with a "prompt" key')
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise UsageError(f'{path}:{lineno}: "prompt" must be a non-empty string')
        prompts.append(prompt)
    return prompts


MAX_CONTINUATION_BYTES = 512 * 1024 * 1024


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def read_continuations(path: str | Path) -> list[dict[str, Any]]:
    """`kconvert trace --continuations`: JSON lines of {"prompt_token_ids": [...], "output_token_ids": [...]}
    (e.g. an engine's outputs) to teacher-force; InputError (one line) for anything else."""
    p = Path(path)
    items = []
    for n, obj in _json_lines(p, InputError, cannot_read="{path}: cannot read: {reason}",
                              not_utf8="{path}: not UTF-8 text", not_json="{path}:{lineno}: not JSON ({msg})",
                              max_bytes=MAX_CONTINUATION_BYTES,
                              too_large="{path}: too large for a continuations file"):
        ok = isinstance(obj, dict) and all(_token_ids(obj.get(k)) for k in ("prompt_token_ids", "output_token_ids"))
        if not ok or not obj["prompt_token_ids"]:
            raise InputError(f'{p}:{n}: expected {{"prompt_token_ids": [int, ...], "output_token_ids": [int, ...]}}')
        items.append(obj)
    if not items:
        raise InputError(f"{p}: no continuations")
    return items


def _read_txt(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read prompt file {path}: {exc}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_prompts(name_or_path: str | Path) -> tuple[str, list[str]]:
    """Load a prompt set by shipped name or path; return ``(set_name, prompts)``.

    Raises :class:`UsageError` (one line) for an unknown name, an unreadable or malformed file, an
    unsupported extension, or a set without prompts.
    """
    spec = str(name_or_path).strip()
    if not spec:
        raise UsageError("empty prompt set name")
    if spec == ALL_SET:
        prompts: list[str] = []
        for name in SHIPPED_SETS:
            prompts += load_prompts(name)[1]
        return ALL_SET, prompts
    path = Path(spec)
    is_path = path.suffix in (".jsonl", ".txt") or "/" in spec or path.exists()
    if not is_path:
        shipped = PROMPTS_DIR / f"{spec}.jsonl"
        if not shipped.is_file():
            known = ", ".join(shipped_set_names()) or "none"
            raise UsageError(f"unknown prompt set {spec!r} (shipped: {known}; or give a .jsonl/.txt path)")
        prompts = _read_jsonl(shipped)
        set_name = spec
    else:
        if not path.is_file():
            raise UsageError(f"prompt file not found: {path}")
        if path.suffix == ".jsonl":
            prompts = _read_jsonl(path)
        elif path.suffix == ".txt":
            prompts = _read_txt(path)
        else:
            raise UsageError(f"unsupported prompt file {path} (expected .jsonl or .txt)")
        set_name = path.stem
    if not prompts:
        raise UsageError(f"prompt set {spec!r} has no prompts")
    return set_name, prompts
