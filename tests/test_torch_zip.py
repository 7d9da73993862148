"""`.bin` drafts: the static PyTorch zip reader (never unpickles), the hostile inputs it refuses with exit 2 while
executing nothing, and `fix --from-pickle` through torch.load(weights_only=True)."""
from __future__ import annotations

import builtins
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kconvert.errors import AmbiguityError, HeaderError, UsageError
from kconvert.commands.fix import fix
from kconvert.commands.inspect import inspect
from kconvert.source import open_checkpoint
from kconvert.source.torch_zip import read_torch_zip
from tests.factories import TINY, draft_config, draft_tensors, make_target
from tests.torch_factories import Entry, row_major, save_state_dict, state_dict_pickle, write_zip

ROOT = Path(__file__).resolve().parent.parent


def bin_draft(folder: Path, *, tensors: dict | None = None) -> Path:
    """The EAGLE reference layout (midlayer.*, d2t/t2d, no embeddings) saved as pytorch_model.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = draft_config(TINY, "eagle", "llama")
    (folder / "config.json").write_text(json.dumps(cfg))
    t = tensors if tensors is not None else draft_tensors(TINY, "llama")
    save_state_dict(folder / "pytorch_model.bin", t)
    return folder


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


# --- the static reader on a well-formed file --------------------------------------------------------------------

def test_a_bin_draft_is_described_statically_and_judged_like_safetensors(tmp_path, monkeypatch):
    folder = bin_draft(tmp_path / "d")
    # Nothing may unpickle: any call to pickle.load(s) during inspect fails the test.
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle.loads called"))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: pytest.fail("pickle.load called"))
    res = inspect(str(folder), target=str(make_target(tmp_path / "t")))
    assert res.checkpoint.torch_files == ["pytorch_model.bin"]
    assert res.draft.shape("fc.weight") == (TINY.hidden, 3 * TINY.hidden)
    assert res.draft.tensors["layers.0.self_attn.q_proj.weight"].dtype == "BF16"
    ids_ = {(f.id, f.severity) for f in res.findings}
    assert ("K003", "info") in ids_ and ("K003", "error") not in ids_
    assert ("K001", "warning") in ids_
    assert "K502" not in {f.id for f in res.findings}  # d2t read by byte range from the zip member and judged
    assert res.exit_code == 0


def test_absolute_d2t_in_a_bin_is_read_by_range_and_found(tmp_path):
    t = draft_tensors(TINY, "llama")
    dt, shape, d2t = t["d2t"]
    t["d2t"] = (dt, shape, d2t + np.arange(TINY.draft_vocab))
    res = inspect(str(bin_draft(tmp_path / "d", tensors=t)), target=str(make_target(tmp_path / "t")))
    assert [f.severity for f in res.findings if f.id == "K502"] == ["error"]


def test_real_torch_save_output_is_read(tmp_path):
    torch = pytest.importorskip("torch")
    sd = {"w": torch.randn(3, 4, dtype=torch.bfloat16), "d2t": torch.arange(6), "view": torch.randn(4, 3).t()}
    torch.save(sd, tmp_path / "m.bin")
    z = read_torch_zip(tmp_path / "m.bin", "m.bin")
    assert {k: (v.dtype, v.shape) for k, v in z.tensors.items()} == {"w": ("BF16", (3, 4)), "d2t": ("I64", (6,)),
                                                                     "view": ("F32", (3, 4))}
    assert set(z.unreadable) == {"view"}  # a transposed view has no single byte span


# --- hostile inputs: refused with exit 2, nothing executed --------------------------------------------------------

class _Sys:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Eval:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (builtins.eval, (f"open({str(self.marker)!r}, 'w')",))


class _Getattr:
    def __reduce__(self):
        return (getattr, ("kconvert", "upper"))


def _archive(folder: Path, pkl: bytes, members: list | None = None, *, member_name: str = "archive/data.pkl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(draft_config(TINY, "eagle", "llama")))
    # with the version record torch.save writes (torch.load refuses an archive without one, and so does kconvert):
    # each file differs from a real one only in what its test is about
    write_zip(folder / "pytorch_model.bin", [(member_name, pkl)] + (members or [])
              + [(member_name.rpartition("/")[0] + "/version", b"3\n")])
    return folder


def refused(folder: Path, *words: str) -> str:
    r = cli("inspect", str(folder))
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stderr
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    for w in words:
        assert w in line, line
    return line


@pytest.mark.parametrize("payload,word", [(_Sys, "system"), (_Eval, "eval")])
def test_a_pickle_naming_a_code_global_is_refused_and_not_executed(tmp_path, payload, word):
    marker = tmp_path / "executed"
    folder = _archive(tmp_path / "d", pickle.dumps({"w": payload(marker)}, protocol=2))
    refused(folder, "pytorch_model.bin", word, "refused")
    assert not marker.exists()
    # fix reads the checkpoint the same way: with or without --from-pickle the static check refuses it before
    # anything could reach torch.load.
    for from_pickle in (False, True):
        with pytest.raises(HeaderError):
            fix(str(folder), tmp_path / "out", from_pickle=from_pickle)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_reduce_of_a_non_allowed_global_is_refused(tmp_path):
    refused(_archive(tmp_path / "d", pickle.dumps({"w": _Getattr()}, protocol=2)), "getattr")


def test_a_reduce_of_an_allowed_storage_class_is_refused(tmp_path):
    # torch.FloatStorage may name a storage's dtype, never be called.
    pkl = b"\x80\x02}(X\x01\x00\x00\x00wctorch\nFloatStorage\n)Ru."
    refused(_archive(tmp_path / "d", pkl), "REDUCE")


def test_an_object_building_opcode_is_refused(tmp_path):
    pkl = b"\x80\x02}(X\x01\x00\x00\x00w(ccollections\nOrderedDict\no" + b"u."  # OBJ
    refused(_archive(tmp_path / "d", pkl), "OBJ")


def test_a_storage_offset_past_its_member_is_refused(tmp_path):
    e = Entry("fc.weight", "F32", "0", 16, 10, (4, 4), row_major((4, 4)))  # needs elements 10..25 of 16
    folder = _archive(tmp_path / "d", state_dict_pickle([e]), [("archive/data/0", bytes(64))])
    refused(folder, "runs past storage")


def test_a_storage_shorter_than_declared_is_refused(tmp_path):
    e = Entry("fc.weight", "F32", "0", 16, 0, (4, 4), row_major((4, 4)))
    refused(_archive(tmp_path / "d", state_dict_pickle([e]), [("archive/data/0", bytes(60))]), "holds 60 bytes")


@pytest.mark.parametrize("name", ["../evil/data.pkl", "/abs/data.pkl", "archive\\data.pkl"])
def test_a_zip_member_leaving_the_archive_is_refused(tmp_path, name):
    e = Entry("w", "F32", "0", 1, 0, (1,), (1,))
    refused(_archive(tmp_path / "d", state_dict_pickle([e]), [("archive/data/0", bytes(4))], member_name=name),
            "zip member")


def test_a_storage_member_outside_the_archive_folder_is_refused(tmp_path):
    e = Entry("w", "F32", "0", 1, 0, (1,), (1,))
    refused(_archive(tmp_path / "d", state_dict_pickle([e]), [("other/data/0", bytes(4))]), "outside the archive")


def test_a_legacy_non_zip_torch_file_is_refused(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(draft_config(TINY, "eagle", "llama")))
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"w": 1}, protocol=2))
    refused(folder, "legacy")


def test_a_truncated_archive_is_refused(tmp_path):
    folder = bin_draft(tmp_path / "d")
    p = folder / "pytorch_model.bin"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    refused(folder, "pytorch_model.bin")


# --- fix --from-pickle --------------------------------------------------------------------------------------------

def test_fix_refuses_a_bin_draft_unasked_and_converts_it_with_from_pickle(tmp_path):
    pytest.importorskip("torch")
    src = bin_draft(tmp_path / "d")
    target = str(make_target(tmp_path / "t"))
    with pytest.raises(AmbiguityError) as e:
        fix(str(src), tmp_path / "out", target=target)
    assert "--from-pickle" in (e.value.hint or "")
    dry = fix(str(src), None, target=target, from_pickle=True, dry_run=True)
    assert dry.written is None
    res = fix(str(src), tmp_path / "out", target=target, from_pickle=True)
    out = tmp_path / "out"
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert not [p for p in tmp_path.iterdir() if "kconvert-pickle" in p.name]  # the temporary copy is gone
    prov = json.loads((out / "kconvert.json").read_text())
    assert prov["input"]["converted_from_pickle"]["pytorch_model.bin"]["tensors"] == len(draft_tensors(TINY, "llama"))
    assert "weights_only=True" in prov["input"]["through"]
    after = open_checkpoint(str(out))
    src_ck = open_checkpoint(str(src))
    assert {n: (t.dtype, t.shape) for n, t in after.tensors.items()} == \
        {n: (t.dtype, t.shape) for n, t in src_ck.tensors.items()}
    for name in ("d2t", "t2d", "midlayer.hidden_norm.weight"):
        assert np.array_equal(after.read_array(name), src_ck.read_array(name))
    assert [f for f in res.after.findings if f.severity == "error"] == []


def test_from_pickle_judges_the_destination_against_the_users_folder_not_its_temporary_copy(tmp_path, capsys):
    """Issue #45: the destination was checked against the converted copy in a temporary folder, so `-o D/sub/out`
    wrote inside the draft (exit 0) and `-o D --force` replaced it (its pytorch_model.bin deleted). Both are refused
    before anything is converted, and the draft's folder is byte for byte what it was."""
    pytest.importorskip("torch")
    from kconvert.cli import main
    from tests.writer_factories import sha256_tree

    src = bin_draft(tmp_path / "d")
    target = str(make_target(tmp_path / "t"))
    before = sha256_tree(src), sorted(p.relative_to(src).as_posix() for p in src.rglob("*"))
    for out, force in ((src / "sub" / "out", []), (src, ["--force"]), (tmp_path, ["--force"])):
        assert main(["fix", str(src), "-o", str(out), "--target", target, "--from-pickle", *force]) == 2
        assert "the input" in capsys.readouterr().err
        assert (sha256_tree(src), sorted(p.relative_to(src).as_posix() for p in src.rglob("*"))) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "t"]  # no temporary copy left beside


def test_from_pickle_without_torch_is_exit_3_with_the_install_line(tmp_path, monkeypatch):
    # One rule for a missing optional package (issue 18): exit 3, "this machine cannot run the step".
    from kconvert.errors import MissingPackageError

    src = bin_draft(tmp_path / "d")
    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch here")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(MissingPackageError) as e:
        fix(str(src), tmp_path / "out", from_pickle=True)
    assert "torch" in e.value.message and not (tmp_path / "out").exists()
    assert e.value.exit_code == 3 and e.value.hint == "pip install 'kconvert-eagle3[pickle]'"


# --- fuzzing the walker -------------------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kconvert.source.torch_zip import _walk_pickle  # noqa: E402

_VALID = state_dict_pickle([Entry("fc.weight", "BF16", "0", 12, 0, (3, 4), (4, 1)),
                            Entry("d2t", "I64", "1", 5, 0, (5,), (1,))])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=512),
                 st.tuples(st.integers(0, len(_VALID) - 1), st.binary(min_size=1, max_size=8)).map(
                     lambda p: _VALID[:p[0]] + p[1] + _VALID[p[0] + len(p[1]):])))
def test_the_walker_only_ever_raises_its_own_refusal(data):
    # Random bytes and valid pickles with a few bytes overwritten: the walker returns a value or refuses with a
    # HeaderError; nothing else escapes, and it never imports or calls what the bytes name.
    try:
        _walk_pickle("fuzz.bin", data)
    except HeaderError:
        pass
