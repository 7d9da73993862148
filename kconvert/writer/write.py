"""`write_checkpoint`: a checkpoint with a plan's ops applied, written to a new folder that appears complete or not
at all (the writer behind `kconvert fix`).

The steps, one function each: which input files are copied, regenerated or left out (`_sort_files`); the space the
output needs (`check_space`); the shards, streamed by one worker per core (`kconvert.writer.stream`); the small
files (index, config, provenance); the provenance record (`provenance_record`); the digests kept for the next
command (`_remember_digests`).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import kconvert.writer.stream as stream
from kconvert._version import __version__
from kconvert.errors import InputError
from kconvert.source import hashcache
from kconvert.source.checkpoint import Checkpoint
from kconvert.source.names import CONFIG_NAME, INDEX_NAME, PROVENANCE_NAME, is_pickle
from kconvert.guard.paths import check_output_folder, read_bytes
from kconvert.source.safetensors_header import MAX_INDEX_BYTES
from kconvert.writer.atomic import TempFolder, fix_output_owned, interrupt_guard, os_error_reason
from kconvert.writer.config import apply_config, deep_merge
from kconvert.writer.layout import Layout, build_layout
from kconvert.writer.ops import op_to_dict

Progress = Callable[[int, int, str], None]

MAX_SHARD_WORKERS = 4


@dataclass
class WriteResult:
    """What `write_checkpoint` wrote: output files with size and sha256, input hashes, files left out."""

    out_dir: Path
    files: dict[str, dict[str, Any]]  # output file -> {"size", "sha256"} (kconvert.json itself: size only)
    input_files: dict[str, dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)  # input file -> why it was not copied
    ops: list[Any] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)


def write_checkpoint(ckpt: Checkpoint, ops: list[Any], out_dir: os.PathLike[str] | str, *, force: bool = False,
                     provenance: dict[str, Any] | None = None, progress: Progress | None = None,
                     check_space: bool = True, copy_mode: str = "copy_file_range",
                     chunk_bytes: int = stream.CHUNK_BYTES, durable: bool = True,
                     workers: int | None = None,
                     before_commit: Callable[[Path], None] | None = None,
                     inputs: Sequence[Any] = ()) -> WriteResult:
    """Write `ckpt` with `ops` applied to `out_dir`, atomically.

    - `ops`: plan ops in order (kconvert.writer.ops); all are checked before anything is written.
    - `force`: replace an earlier fix output at `out_dir` (the old one is moved aside, the new one renamed in, the
      old one deleted); without it an existing non-empty `out_dir` is a UsageError, and anything kconvert did not
      write there is one with it too (`kconvert.guard.paths.check_output_folder`).
    - `inputs`: paths the caller read besides `ckpt`'s folder (a target folder, a report): `out_dir` may not be,
      contain or lie inside any of them, nor `ckpt.root`.
    - `provenance`: merged (recursively, caller wins) into the `kconvert.json` written in the output, e.g.
      {"input": {"source": "org/name", "revision": "<commit>"}}.
    - `progress(done_bytes, total_bytes, message)`: called every ~64 MB and after each file.
    - `check_space`: refuse before writing when the destination's free space is below the output size.
    - `copy_mode`: "copy_file_range" (default; read/write where the kernel cannot copy between the two
      folders) or "read_write"; see `kconvert.writer.stream`.
    - `durable`: fsync every output file and the folders before and after the rename (default). Without it
      the output is as durable as `cp`'s: an interrupted or killed run still leaves nothing at the
      destination, but a power cut soon after may leave the renamed folder with data missing.
    - `workers`: shards written at once (default: one per core, at most 4); each worker has its own two
      hash threads, so the sha256 streams of several shards run on several cores.
    - `before_commit(temp_folder)`: called with the complete output before it is renamed into place; an
      exception it raises discards the output (fix's self-check: a failed fix leaves no folder behind).

    Raises UsageError (bad op, existing destination) or InputError (unreadable input, unwritable
    destination, full disk); the destination is then untouched and no temporary folder remains.
    """
    t0 = time.monotonic()
    if copy_mode not in ("read_write", "copy_file_range"):
        raise ValueError(f"copy_mode {copy_mode!r}")
    if copy_mode == "copy_file_range" and not hasattr(os, "copy_file_range"):
        copy_mode = "read_write"
    out_dir = Path(out_dir).expanduser().absolute()
    ops = list(ops)
    layout = build_layout(ckpt, ops)
    config = apply_config(ckpt.config, ops)
    check_output_folder(out_dir, what=str(out_dir), force=force, inputs=[ckpt.root, *inputs], owned=fix_output_owned,
                        kind="fix output")
    assert ckpt.root is not None
    copies, skipped = _sort_files(ckpt, layout)
    out_size, total = _sizes(ckpt, layout, copies, skipped)
    if check_space:
        _check_space(out_dir, out_size - _holes_kept(ckpt, layout, copies))
    started = time.time()
    n_workers = max(1, min(len(layout.shards), workers or os.cpu_count() or 1, MAX_SHARD_WORKERS))
    with interrupt_guard():
        run = _Run(ckpt, layout, out_dir, progress, total, copy_mode, chunk_bytes, durable, n_workers)
        try:
            run.write_shards()
            run.copy_files(copies)
            run.hash_the_rest()
            run.write_index_and_config(config)
            record = provenance_record(ckpt, ops, run.input_files, run.files, skipped, provenance)
            provenance_size = run.write_provenance(record)
            if before_commit is not None:
                before_commit(run.tmp.path)
            run.tmp.commit(force=force, durable=durable)
        except OSError as e:
            run.tmp.discard()
            raise InputError(f"{out_dir}: writing {run.current or 'the output'} failed: {os_error_reason(e)}") from None
        except BaseException:
            run.tmp.discard()
            raise
        finally:
            run.close()
    _remember_digests(ckpt, out_dir, run, started)
    files = dict(run.files)
    files[PROVENANCE_NAME] = {"size": provenance_size}
    if progress is not None:
        progress(total, total, f"wrote {out_dir}")
    return WriteResult(out_dir=out_dir, files=files, input_files=run.input_files, skipped=skipped, ops=ops,
                       bytes_written=run.bytes_written, seconds=time.monotonic() - t0, provenance=record)


def _sort_files(ckpt: Checkpoint, layout: Layout) -> tuple[list[str], dict[str, str]]:
    """The input files copied as they are, and those left out with the reason (shards are rewritten, and config,
    index and provenance regenerated, so neither list holds them)."""
    shard_inputs = set(ckpt.shard_metadata)
    regenerated = {CONFIG_NAME, INDEX_NAME, PROVENANCE_NAME}
    skipped: dict[str, str] = {}
    copies: list[str] = []
    for rel in sorted(ckpt.files):
        if rel in shard_inputs:
            if rel not in layout.shards:
                skipped[rel] = "every tensor in it was dropped"
            continue
        if rel in regenerated:
            continue
        if is_pickle(rel):
            skipped[rel] = "pickle file: kconvert never unpickles nor copies it"
            continue
        copies.append(rel)
    return copies, skipped


def _sizes(ckpt: Checkpoint, layout: Layout, copies: list[str], skipped: dict[str, str]) -> tuple[int, int]:
    """The output's size, and the bytes the run moves (output written, plus input bytes that are only hashed),
    which is what progress counts."""
    out_size = sum(len(stream.shard_header(ts, layout.shard_metadata.get(sh, {}))) + sum(t.nbytes for t in ts)
                   for sh, ts in layout.shards.items())
    out_size += sum(ckpt.files[r].size or 0 for r in copies)
    shard_inputs = set(ckpt.shard_metadata)
    copied_in = sum(t.nbytes for ts in layout.shards.values() for t in ts if t.copy_of is not None)
    hash_only = sum(ckpt.files[r].size or 0 for r in shard_inputs if r in ckpt.files) - copied_in
    hash_only += sum(ckpt.files[r].size or 0 for r in skipped if r not in shard_inputs)
    return out_size, out_size + max(0, hash_only)


def _holes_kept(ckpt: Checkpoint, layout: Layout, copies: list[str]) -> int:
    """Bytes of the output that stay holes: the copy keeps the holes of a sparse input (stream.copy_span), so
    they take no room on the destination's disk and the free-space check does not count them."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for ts in layout.shards.values():
        for t in ts:
            if t.copy_of is not None:
                spans.setdefault(t.copy_of.file, []).append((t.copy_of.start, t.copy_of.end))
    for rel in copies:
        spans.setdefault(rel, []).append((0, ckpt.files[rel].size or 0))
    assert ckpt.root is not None
    return sum(stream.hole_bytes(ckpt.root / rel, s) for rel, s in spans.items())


def _check_space(out_dir: Path, out_size: int) -> None:
    probe = out_dir.parent if out_dir.parent.exists() else Path(os.path.commonpath([out_dir.parent, "/"]))
    try:
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    if free is not None and free < out_size:
        raise InputError(f"{out_dir}: needs {_size_text(out_size)}, only {_size_text(free)} free on that disk")


def _size_text(n: int) -> str:
    """Bytes in GB, or in MB below 1 GB (where GB to two places would say 0.00)."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class _Run:
    """One write: the temporary folder, the shard workers, and the sizes and digests of every file so far."""

    def __init__(self, ckpt: Checkpoint, layout: Layout, out_dir: Path, progress: Progress | None, total: int,
                 copy_mode: str, chunk_bytes: int, durable: bool, n_workers: int):
        self.ckpt, self.layout = ckpt, layout
        self.tmp = TempFolder(out_dir, owned=fix_output_owned)
        try:  # an interrupt here (before write_checkpoint's try holds this run) must not leave the folder
            self.shared = stream.Shared(progress, total)
            self.streamers = [stream.Streamer(copy_mode=copy_mode, chunk=chunk_bytes, shared=self.shared,
                                              durable=durable) for _ in range(n_workers)]
        except BaseException:
            self.tmp.discard()
            raise
        self.files: dict[str, dict[str, Any]] = {}
        self.input_files: dict[str, dict[str, Any]] = {}
        self.computed_inputs: set[str] = set()  # input digests this run computed (not known before)

    @property
    def current(self) -> str:
        """The file being written when an error struck, for the message."""
        return self.streamers[0].current

    @property
    def bytes_written(self) -> int:
        return sum(st.bytes_written for st in self.streamers)

    def close(self) -> None:
        for st in self.streamers:
            st.close()
        if not self.tmp.committed:
            self.tmp.discard()

    def write_shards(self) -> None:
        ckpt = self.ckpt

        def one_shard(shard: str, st: stream.Streamer) -> None:
            known_before = bool(ckpt.files.get(shard) and ckpt.files[shard].sha256)
            # Looked up on the module at each call, so that a test can stand in for it.
            (osz, osha), inp = stream.write_shard(st, ckpt, shard, self.layout.shards[shard],
                                                   self.layout.shard_metadata.get(shard, {}), self.tmp.path / shard)
            self.files[shard] = {"size": osz, "sha256": osha}
            if inp is not None:
                self.input_files[shard] = {"size": inp[0], "sha256": inp[1]}
                if not known_before:
                    self.computed_inputs.add(shard)

        stream.run_shards(sorted(self.layout.shards), one_shard, self.streamers, self.shared)

    def copy_files(self, copies: list[str]) -> None:
        s, root = self.streamers[0], self.ckpt.root
        assert root is not None
        for rel in copies:
            size, sha = s.copy_file(root / rel, self.tmp.path / rel, rel, self.ckpt.files[rel].size)
            self.files[rel] = {"size": size, "sha256": sha}
            self.input_files[rel] = {"size": size, "sha256": sha}
            self.computed_inputs.add(rel)

    def hash_the_rest(self) -> None:
        """The provenance names every input file: hash those neither copied nor rewritten (left out, regenerated)."""
        s, root = self.streamers[0], self.ckpt.root
        assert root is not None
        for rel in sorted(set(self.ckpt.files) - set(self.input_files)):
            s.current = rel
            known = self.ckpt.files[rel].sha256
            size, sha = (self.ckpt.files[rel].size, known) if known else s.hash_file(root / rel, rel)
            self.input_files[rel] = {"size": size, "sha256": sha}
            self.computed_inputs.add(rel)

    def write_index_and_config(self, config: dict[str, Any]) -> None:
        s = self.streamers[0]
        if self.layout.sharded:
            size, sha = s.write_small(self.tmp.path / INDEX_NAME, _index_json(self.ckpt, self.layout))
            self.files[INDEX_NAME] = {"size": size, "sha256": sha}
        size, sha = s.write_small(self.tmp.path / CONFIG_NAME, _json_bytes(config))
        self.files[CONFIG_NAME] = {"size": size, "sha256": sha}

    def write_provenance(self, record: dict[str, Any]) -> int:
        size, _ = self.streamers[0].write_small(self.tmp.path / PROVENANCE_NAME, _json_bytes(record))
        for st in self.streamers:
            st.wait_syncs()
        return size


def provenance_record(ckpt: Checkpoint, ops: list[Any], input_files: dict[str, dict[str, Any]],
                      files: dict[str, dict[str, Any]], skipped: dict[str, str],
                      extra: dict[str, Any] | None) -> dict[str, Any]:
    """kconvert.json: tool and version, input (source, revision, every file's size and sha256), every op, output
    files, files left out; `extra` merged in (caller wins), the output files always the writer's own."""
    record: dict[str, Any] = {
        "tool": "kconvert",
        "version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "input": {
            "source": ckpt.repo_id or ckpt.ref,
            "revision": ckpt.commit or ckpt.revision,
            "files": dict(sorted(input_files.items())),
        },
        "ops": [op_to_dict(op) for op in ops],
        "output": {"files": dict(sorted(files.items()))},
    }
    if skipped:
        record["skipped"] = dict(skipped)
    record = deep_merge(record, extra or {})
    record["output"]["files"] = dict(sorted(files.items()))
    return record


def _remember_digests(ckpt: Checkpoint, out_dir: Path, run: _Run, started: float) -> None:
    """Keep the digests for the next command (verify's report, a second fix); never an error."""
    entries: list[tuple[Path, str, bool, float | None]] = []
    for rel in run.computed_inputs:
        if ckpt.root is not None and run.input_files.get(rel, {}).get("sha256"):
            entries.append((ckpt.root / rel, run.input_files[rel]["sha256"], False, started))
    for rel, meta in run.files.items():
        if meta.get("sha256"):
            entries.append((out_dir / rel, meta["sha256"], True, None))
    hashcache.store_many(entries)


def _json_bytes(doc: Any) -> bytes:
    # strict JSON out as in (kconvert.source.safetensors_header.loads_strict_json): never NaN or Infinity
    return (json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _index_json(ckpt: Checkpoint, layout: Layout) -> bytes:
    meta: dict[str, Any] = {}
    if ckpt.index is not None and ckpt.root is not None:
        try:
            old = json.loads(read_bytes(ckpt.root / INDEX_NAME, INDEX_NAME, max_bytes=MAX_INDEX_BYTES))
            if isinstance(old.get("metadata"), dict):
                meta = dict(old["metadata"])
        except (InputError, ValueError):
            pass
    meta["total_size"] = layout.total_tensor_bytes
    wm = {t.name: shard for shard, ts in layout.shards.items() for t in ts}
    return _json_bytes({"metadata": meta, "weight_map": dict(sorted(wm.items()))})


__all__ = ["WriteResult", "provenance_record", "write_checkpoint"]
