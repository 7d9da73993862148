"""Publish a trace as a Hub dataset repository: exactly the files trace.json lists, checked, plus its card.

The habits of `kconvert push` (kconvert.hub.upload): the folder is opened and validated as `score` would open it
(schema, headers, shapes, every data file's sha256 against trace.json), only trace.json and the safetensors files
it names are sent (anything else in the folder stays behind), huggingface_hub hashes each file again while
preparing the commit and a file that changed since the check is refused, and everything lands in one commit.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert.errors import InputError, UsageError
from kconvert.hub.binding import LocalFile
from kconvert.source.names import README_NAME


@dataclass
class TracePush:
    repo_id: str
    revision: str | None
    files: list[LocalFile]
    readme: str
    dry_run: bool
    commit_url: str | None = None
    commit_oid: str | None = None
    pr_url: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def reference(self) -> str:
        """What `kconvert score --trace` takes to read this push back, pinned to its commit when there is one."""
        pin = self.commit_oid or (self.revision if self.revision and self.revision != "main" else None)
        return self.repo_id + (f"@{pin}" if pin else "")

    def to_dict(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "repo_type": "dataset", "revision": self.revision or "main",
                "files": [f.to_dict() for f in self.files] + [{"name": README_NAME, "size": len(self.readme.encode()),
                                                               "sha256": None, "bound": False}],
                "readme": self.readme, "dry_run": self.dry_run, "commit_url": self.commit_url,
                "commit_oid": self.commit_oid, "pr_url": self.pr_url, "score_with": self.reference,
                "notes": self.notes}


def trace_files(folder: str | Path) -> tuple[dict[str, Any], list[LocalFile]]:
    """(trace.json as a dict, the files to publish) of a trace folder, validated and hashed: trace.json by the
    bytes just read, every data file checked against the sha256 trace.json records."""
    from kconvert.guard.paths import read_bytes
    from kconvert.trace.format import MAX_META_BYTES, META_NAME, open_trace

    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputError(f"{folder}: no such trace folder")
    with open_trace(root, check_data_sha256=True) as tr:  # a Path: never taken for a Hub id
        raw = read_bytes(root / META_NAME, META_NAME, max_bytes=MAX_META_BYTES)
        if hashlib.sha256(raw).hexdigest() != tr.meta_sha256:
            raise InputError(f"{root / META_NAME}: changed while it was being checked")
        doc = json.loads(raw)  # the bytes open_trace validated (same sha256)
        data = doc["data"]
        files = [LocalFile(META_NAME, root / META_NAME, (root / META_NAME).stat().st_size, tr.meta_sha256, True)]
        for entry in data.get("files") or [data]:
            files.append(LocalFile(entry["file"], root / entry["file"], int(entry["size"]), entry["sha256"], True))
    return doc, files


def check_repo_id(repo_id: str) -> None:
    """The dataset repository to publish to, checked by the one Hub id check (kconvert.source.hub)."""
    from kconvert.source.hub import hub_id_problem

    problem = "a branch goes in --revision" if "@" in repo_id else hub_id_problem(repo_id)
    if problem is not None:
        raise UsageError(f"{repo_id!r}: give the dataset repository as org/name ({problem})")


def push_trace(folder: str | Path, repo_id: str, *, revision: str | None = None, create_pr: bool = False,
               private: bool | None = None, dry_run: bool = False, commit_message: str | None = None,
               token: str | None = None, endpoint: str | None = None,
               on_upload: Callable[[int, int], None] | None = None) -> TracePush:
    """Upload the trace in `folder` to the Hub dataset `repo_id` (created when missing) in one commit."""
    from kconvert.hub.trace_card import data_bytes, render_trace_card

    check_repo_id(repo_id)
    doc, files = trace_files(folder)
    card = render_trace_card(doc, repo_id, revision=revision)
    out = TracePush(repo_id, revision, files, card, dry_run)
    if dry_run:
        return out
    from kconvert.hub.upload import upload

    msg = commit_message or (f"Upload kconvert trace of {doc['target'].get('source')} ({doc['dtype']}, "
                             f"{doc['num_positions']} positions, {data_bytes(doc) / 1e6:.1f} MB)")
    c = upload(repo_id, files, card, commit_message=msg, revision=revision, create_pr=create_pr, private=private,
               token=token, endpoint=endpoint, on_upload=on_upload, repo_type="dataset",
               bound_by="trace.json (every data file checked against it before the push)")
    out.commit_url, out.commit_oid, out.pr_url = c.url, c.oid, c.pr_url
    return out


def push_recorded(folder: str | Path, repo_id: str, *, private: bool = False,
                  on_upload: Callable[[int, int], None] | None = None) -> TracePush:
    """`kconvert trace --push`: push_trace right after a recording. A failure keeps the recording and says how to
    push it again without recording it again."""
    from kconvert.errors import KConvertError

    try:
        return push_trace(folder, repo_id, private=True if private else None, on_upload=on_upload)
    except KConvertError as e:
        e.hint = (f"{e.hint}; " if e.hint else "") + f"the trace is written: kconvert push-trace {folder} {repo_id}"
        raise


__all__ = ["TracePush", "check_repo_id", "push_recorded", "push_trace", "trace_files"]
