"""How a report names a checkpoint file: a path in the working tree or the repository, or a Hub URL.

The report's renderers (concise, GitHub, GitLab, SARIF) read the file and line of each finding from the JSON
document (`kconvert.results.locations` put them there); these turn them into the paths each format anchors to.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from kconvert.source.names import CONFIG_NAME

CONFIG = CONFIG_NAME


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
