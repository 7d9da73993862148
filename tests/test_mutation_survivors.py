"""The three survivors issue #30 named, each killed by a value from outside the code under test."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kconvert.errors import GateError
from kconvert.hub.binding import LocalFile
from kconvert.score.walk import ReadingScore
from kconvert.writer.atomic import TempFolder


def test_commit_fsyncs_the_temp_folder_then_renames_then_fsyncs_the_parent(tmp_path, monkeypatch):
    # the rename's promise (rename(2), fsync(2)): the folder's entries are on disk before the rename, and the parent's
    # entry for the new name after it
    events = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "rename", lambda a, b: (events.append(("rename", str(a), str(b))), real_rename(a, b))[1])
    out = tmp_path / "out"
    t = TempFolder(out)
    (t.path / "f").write_bytes(b"x")
    t.commit(force=False)
    assert events == [("fsync", str(t.path)), ("rename", str(t.path), str(out)), ("fsync", str(tmp_path))]


def test_counters_from_a_hand_derived_step_list():
    # steps accepted per draft of k=3 tokens: 2, 0, 3. Derived by hand: 3 drafts, 9 draft tokens, 5 accepted,
    # position 0 accepted in drafts 1 and 3, position 1 in drafts 1 and 3, position 2 in draft 3; AL = 1 + 5/3
    s = ReadingScore(reading=None, sequences=[SimpleNamespace(steps=[2, 0]), SimpleNamespace(steps=[3])], k=3)
    assert s.counters() == {"drafts": 3, "draft_tokens": 9, "accepted": 5, "accepted_per_pos": [2, 2, 1]}
    assert s.mean_acceptance_length == pytest.approx(1 + 5 / 3)


def test_upload_refuses_a_file_changed_since_it_was_hashed(tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from kconvert.hub import upload as up

    f = tmp_path / "model.safetensors"
    f.write_bytes(b"checked")
    checked = hashlib.sha256(b"checked").hexdigest()
    f.write_bytes(b"rewritten after the gate")
    commits = []
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", lambda self, *a, **k: None)
    monkeypatch.setattr(huggingface_hub.HfApi, "create_commit", lambda self, *a, **k: commits.append(a))
    with pytest.raises(GateError, match="changed while pushing"):
        up.upload("me/x", [LocalFile("model.safetensors", f, f.stat().st_size, checked, True)], "card",
                  commit_message="m", token="t", endpoint="http://127.0.0.1:9")
    assert commits == []
