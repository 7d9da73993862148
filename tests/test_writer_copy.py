"""How the writer moves bytes (kconvert.writer.stream): copy_file_range with both digests hashed from a map of the
copied bytes, read/write where the kernel cannot copy. Whatever the path, the bytes written and the digests in
kconvert.json are the same, and the digests are those hashlib computes reading the files back (the oracle)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import pytest

from kconvert.source.checkpoint import load_folder
from kconvert.writer import stream, write_checkpoint
from kconvert.writer.ops import RenameTensor, RewriteD2TOffsets
from tests.writer_factories import draft_tensors, sha256_tree, write_draft

pytestmark = pytest.mark.timeout(60)

CHUNK = 4096 * 3 + 8  # many chunks, none aligned to a page: maps at unaligned offsets, several in flight


def _draft(folder):
    tensors = draft_tensors(hidden=64, vocab=96, target_vocab=512, prefix="model.")
    tensors["model.holes.weight"] = ("BF16", (2048, 1024), None)  # 4 MB  # a sparse span: copied as a hole
    return write_draft(folder, tensors, shards=2)


def _fix(src, out, **kw):
    ck = load_folder(src, ref=str(src))
    ops = [RenameTensor(n, n[len("model."):]) for n in sorted(ck.tensors) if n.startswith("model.")]
    ops.append(RewriteD2TOffsets())
    return write_checkpoint(ck, ops, out, provenance={}, chunk_bytes=CHUNK, **kw)


def _recorded(out):
    rec = json.loads((out / "kconvert.json").read_text())
    return ({k: v["sha256"] for k, v in rec["input"]["files"].items()},
            {k: v["sha256"] for k, v in rec["output"]["files"].items()})


@pytest.mark.parametrize("mode", ["copy_file_range", "read_write", "copy_file_range refused (EXDEV)",
                                  "copy_file_range, fallocate refused (EOPNOTSUPP)"])
def test_every_copy_path_records_the_digests_hashlib_reads_back(tmp_path, monkeypatch, mode):
    src = _draft(tmp_path / "in")
    calls = []
    if mode.startswith("copy_file_range refused"):
        def refuse(*a, **kw):
            calls.append(a)
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(os, "copy_file_range", refuse)
    if "fallocate refused" in mode:
        def no_fallocate(*a):
            calls.append(a)
            return -1  # fallocate(2)'s failure, as on a filesystem without it
        monkeypatch.setattr(stream, "_fallocate", no_fallocate)
        monkeypatch.setattr(stream, "_preallocation_helps", lambda fd: True)  # whatever tmp_path's filesystem
    res = _fix(src, tmp_path / "out", copy_mode=mode.split()[0].rstrip(","), workers=2)
    inputs, outputs = _recorded(tmp_path / "out")
    on_disk = sha256_tree(tmp_path / "out")
    on_disk.pop("kconvert.json")
    assert outputs == on_disk
    assert inputs == sha256_tree(src)
    assert res.bytes_written > 0
    if "refused" in mode:
        assert len(calls) == 2  # one refusal per shard worker, read/write (or no preallocation) from then on
    # the hole stays a hole in the output: the shards take about 4 MB less disk than their size
    shards = [os.stat(tmp_path / "out" / k) for k in on_disk if k.endswith(".safetensors")]
    assert sum(st.st_blocks * 512 for st in shards) < sum(st.st_size for st in shards) - (3 << 20)

def test_the_copy_paths_write_the_same_bytes(tmp_path):
    src = _draft(tmp_path / "in")
    _fix(src, tmp_path / "crf", copy_mode="copy_file_range")
    _fix(src, tmp_path / "rw", copy_mode="read_write")
    a, b = sha256_tree(tmp_path / "crf"), sha256_tree(tmp_path / "rw")
    a.pop("kconvert.json"), b.pop("kconvert.json")  # its creation time may differ
    assert a == b


def test_the_free_space_check_counts_the_holes_the_copy_keeps(tmp_path, monkeypatch):
    """The same draft, sparse and dense (cp --sparse=never fills its 4 MB hole), against a disk reported with 2 MB
    less room than the output's size: the sparse one fits, since the copy keeps its hole; the dense one is refused
    before anything is written (CI once refused a sparse 4.38 GB zoo replica that needed 0.1 MB)."""
    from types import SimpleNamespace

    from kconvert.errors import InputError
    sparse = _draft(tmp_path / "sparse")
    dense = tmp_path / "dense"
    subprocess.run(["cp", "-r", "--sparse=never", str(sparse), str(dense)], check=True)
    size = sum(f.stat().st_size for f in dense.iterdir() if f.suffix == ".safetensors")
    dense_blocks = sum(f.stat().st_blocks * 512 for f in dense.iterdir() if f.suffix == ".safetensors")
    sparse_blocks = sum(f.stat().st_blocks * 512 for f in sparse.iterdir() if f.suffix == ".safetensors")
    if dense_blocks < size or sparse_blocks > size - (3 << 20):
        pytest.skip("this filesystem does not keep holes")
    real = os.statvfs
    free = size - (2 << 20)
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=free // 4096, f_frsize=4096)
                        if str(p).startswith(str(tmp_path)) else real(p))
    _fix(sparse, tmp_path / "from-sparse")
    assert (tmp_path / "from-sparse" / "kconvert.json").is_file()
    with pytest.raises(InputError, match=r"from-dense: needs [0-9.]+ MB, only [0-9.]+ MB free on that disk"):
        _fix(dense, tmp_path / "from-dense")
    assert not (tmp_path / "from-dense").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left


@pytest.mark.skipif(shutil.which("stat") is None, reason="needs coreutils stat")
@pytest.mark.parametrize("folder", ["tmp_path", "/dev/shm", "/proc"])
def test_preallocation_is_used_on_ext4_only(tmp_path, folder):
    # oracle: coreutils `stat -f -c %t` (the filesystem's magic number, hex), ef53 for ext2/3/4
    path = str(tmp_path) if folder == "tmp_path" else folder
    if not os.path.isdir(path):
        pytest.skip(f"no {path}")
    magic = subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True, check=True).stdout
    fd = os.open(path, os.O_RDONLY)
    try:
        assert stream._preallocation_helps(fd) == (magic.strip() == "ef53")
    finally:
        os.close(fd)
