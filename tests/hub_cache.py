"""Pre-populate a Hugging Face cache folder the way huggingface_hub lays it out (blobs, refs, snapshots with
relative symlinks), so that the real huggingface_hub code resolves Hub ids offline (HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def populate_cache(cache: Path, repo_id: str, folder: Path, *, revision: str = "main",
                   commit: str | None = None, skip: tuple[str, ...] = (), repo_type: str = "model") -> Path:
    commit = commit or hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    snap = repo / "snapshots" / commit
    for src in sorted(folder.rglob("*")):
        if not src.is_file() or src.name in skip:
            continue
        rel = src.relative_to(folder)
        h = hashlib.sha256(src.read_bytes()).hexdigest()
        blob = repo / "blobs" / h
        if not blob.exists():
            shutil.copyfile(src, blob)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return snap
