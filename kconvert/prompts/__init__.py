"""Prompt sets for live verification.

Shipped sets are ``<name>.jsonl`` files beside this module, one ``{"id": ..., "prompt": ...}`` object a line:
``math``, ``chat``, ``code`` (``all`` = the three together) and ``_smoke`` (a few prompts for tests). A user
set is a path to a ``.jsonl`` file of the same shape or a ``.txt`` file with one prompt a line. Prompts are
user messages; the engine layer renders them with the target's chat template.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, UsageError
from kconvert.guard.paths import read_json_lines, read_text

PROMPTS_DIR = Path(__file__).resolve().parent
SHIPPED_SETS = ("math", "chat", "code")
ALL_SET = "all"


def shipped_set_names() -> list[str]:
    """Names accepted by :func:`load_prompts` without a path (sets whose file is present, plus ``all``)."""
    names = sorted(p.stem for p in PROMPTS_DIR.glob("*.jsonl"))
    if all((PROMPTS_DIR / f"{n}.jsonl").is_file() for n in SHIPPED_SETS):
        names.append(ALL_SET)
    return names


# A prompt file holds prompts, a few KB to a few MB.
MAX_PROMPTS_BYTES = 64 * 1024 * 1024


def _read_jsonl(path: Path, what: str) -> list[str]:
    prompts: list[str] = []
    # the read guard: a regular file (a FIFO is refused unopened), bounded, UTF-8, each line strict JSON
    for lineno, obj in read_json_lines(path, what, max_bytes=MAX_PROMPTS_BYTES, where=str(path)):
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
    for n, obj in read_json_lines(p, f"--continuations {p}", max_bytes=MAX_CONTINUATION_BYTES, where=str(p)):
        ok = isinstance(obj, dict) and all(_token_ids(obj.get(k)) for k in ("prompt_token_ids", "output_token_ids"))
        if not ok or not obj["prompt_token_ids"]:
            raise InputError(f'{p}:{n}: expected {{"prompt_token_ids": [int, ...], "output_token_ids": [int, ...]}}')
        items.append(obj)
    if not items:
        raise InputError(f"{p}: no continuations")
    return items


def _read_txt(path: Path, what: str) -> list[str]:
    text = read_text(path, what, max_bytes=MAX_PROMPTS_BYTES)
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
        prompts = _read_jsonl(shipped, str(shipped))
        set_name = spec
    else:
        if not os.path.lexists(path):  # anything that is there, a FIFO or a folder too, meets the read guard
            raise UsageError(f"prompt file not found: {path}")
        if path.suffix == ".jsonl":
            prompts = _read_jsonl(path, f"--prompts {path}")
        elif path.suffix == ".txt":
            prompts = _read_txt(path, f"--prompts {path}")
        else:
            raise UsageError(f"unsupported prompt file {path} (expected .jsonl or .txt)")
        set_name = path.stem
    if not prompts:
        raise UsageError(f"prompt set {spec!r} has no prompts")
    return set_name, prompts
