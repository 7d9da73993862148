"""kconvert.source.hashcache: a file's sha256 is reused only while the file is provably unchanged."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from kconvert.source import hashcache
from kconvert.source.checkpoint import load_folder
from kconvert.writer import write_checkpoint
from tests.writer_factories import write_draft


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(tmp_path / "cache" / "sha256.sqlite"))


def _old_file(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    past = time.time() - 60
    os.utime(path, (past, past))  # mtime in the past; ctime is now, so wait out the racy window below
    return hashlib.sha256(data).hexdigest()


def test_store_then_lookup_and_any_change_forgets(tmp_path):
    f = tmp_path / "a.bin"
    sha = _old_file(f, b"x" * 1000)
    hashcache.store(f, sha, hashed_at=time.time() + hashcache.RACY_SECONDS + 1)
    assert hashcache.lookup(f) == sha
    f.write_bytes(b"y" * 1000)  # same size, new content: mtime/ctime change
    assert hashcache.lookup(f) is None
    g = tmp_path / "b.bin"
    sha_g = _old_file(g, b"z")
    hashcache.store(g, sha_g, hashed_at=time.time() + hashcache.RACY_SECONDS + 1)
    os.replace(f, g)  # another inode at the same path
    assert hashcache.lookup(g) is None


def test_a_digest_taken_right_after_a_write_is_not_trusted(tmp_path):
    f = tmp_path / "fresh.bin"
    f.write_bytes(b"data")
    hashcache.store(f, hashlib.sha256(b"data").hexdigest(), hashed_at=time.time())
    assert hashcache.lookup(f) is None
    hashcache.store(f, hashlib.sha256(b"data").hexdigest(), written_by_us=True)
    assert hashcache.lookup(f) == hashlib.sha256(b"data").hexdigest()


def test_disabled_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KCONVERT_HASH_CACHE", "off")
    f = tmp_path / "a.bin"
    f.write_bytes(b"a")
    hashcache.store(f, hashlib.sha256(b"a").hexdigest(), written_by_us=True)
    assert hashcache.lookup(f) is None


def test_an_unusable_cache_location_is_a_no_op(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("KCONVERT_HASH_CACHE", str(tmp_path / "file" / "sha256.sqlite"))
    f = tmp_path / "a.bin"
    f.write_bytes(b"a")
    hashcache.store(f, hashlib.sha256(b"a").hexdigest(), written_by_us=True)
    assert hashcache.lookup(f) is None


def test_hub_blob_names_are_sha256_digests(tmp_path):
    data = b"tensor bytes"
    sha = hashlib.sha256(data).hexdigest()
    blobs = tmp_path / "models--org--name" / "blobs"
    snap = tmp_path / "models--org--name" / "snapshots" / ("c" * 40)
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / sha).write_bytes(data)
    (snap / "model.safetensors").symlink_to(Path("../..") / "blobs" / sha)
    (blobs / ("d" * 40)).write_bytes(b"{}")  # a git-stored file: sha1 etag, not a content sha256
    (snap / "config.json").symlink_to(Path("../..") / "blobs" / ("d" * 40))
    assert hashcache.lookup(snap / "model.safetensors") == sha
    assert hashcache.lookup(snap / "config.json") is None


def test_fix_stores_input_and_output_digests_and_reuses_them(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    past = time.time() - 60
    for p in src.iterdir():
        os.utime(p, (past, past))
    time.sleep(hashcache.RACY_SECONDS + 0.1)  # ctime (now) must be older than the hashing by the racy window
    res = write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out", provenance={})
    for rel, meta in res.input_files.items():
        assert hashcache.lookup(src / rel) == meta["sha256"] == hashlib.sha256((src / rel).read_bytes()).hexdigest()
    for rel, meta in res.files.items():
        if "sha256" in meta:
            assert hashcache.lookup(tmp_path / "out" / rel) == meta["sha256"]
    # the second fix takes the input digests from the cache (a planted digest shows it was not recomputed) ...
    shard = sorted(p.name for p in src.glob("*.safetensors"))[0]
    hashcache.store(src / shard, "0" * 64, hashed_at=time.time())
    res2 = write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out2", provenance={})
    assert res2.input_files[shard]["sha256"] == "0" * 64
    # ... until the file changes in any way
    os.utime(src / shard)
    res3 = write_checkpoint(load_folder(src, ref=str(src)), [], tmp_path / "out3", provenance={})
    assert res3.input_files == res.input_files


def test_store_many_keeps_the_rules_of_store(tmp_path):
    """One transaction for several files: each is remembered as `store` would, the racy one is not."""
    old_a = _old_file(tmp_path / "a", b"a" * 100)
    old_b = _old_file(tmp_path / "b", b"b" * 100)
    (tmp_path / "fresh").write_bytes(b"c")
    fresh = hashlib.sha256(b"c").hexdigest()
    (tmp_path / "ours").write_bytes(b"d")
    ours = hashlib.sha256(b"d").hexdigest()
    later = time.time() + hashcache.RACY_SECONDS + 1  # hashed after the racy window (ctime is now)
    hashcache.store_many([(tmp_path / "a", old_a, False, later), (tmp_path / "b", old_b, False, later),
                          (tmp_path / "fresh", fresh, False, time.time()), (tmp_path / "ours", ours, True, None),
                          (tmp_path / "missing", old_a, False, later), (tmp_path / "a", "not hex", False, later)])
    assert hashcache.lookup(tmp_path / "a") == old_a and hashcache.lookup(tmp_path / "b") == old_b
    assert hashcache.lookup(tmp_path / "fresh") is None  # changed within RACY_SECONDS of its hashing
    assert hashcache.lookup(tmp_path / "ours") == ours
    assert hashcache.lookup(tmp_path / "missing") is None
