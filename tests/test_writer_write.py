"""kconvert/writer/write.py and kconvert/writer/config.py against facts outside them (issue #30: the survivors of
their mutation runs).

Expected values come from: the config ops' documented contract (kconvert/writer/config.py's docstring: pure, input
key order kept, new keys last, deleting a missing key a no-op) applied by hand to Hugging Face-style nested
config.json objects (the `eagle_config.eagle_aux_hidden_state_layer_ids` field vLLM and SGLang read:
docs/formats-and-engines.md: #aux-layer-ids, #vllms-two-model-runners); the safetensors format (an 8-byte little-endian header
length, a JSON header, `data_offsets` relative to the data area: https://github.com/huggingface/safetensors
README "Format"), read back by the `safetensors` package itself and by hashlib; the Hugging Face sharded index
(`model.safetensors.index.json`: `metadata.total_size` = the sum of the tensors' byte sizes, `weight_map` tensor
-> shard, as transformers' `save_pretrained` writes it); os.statvfs(2)'s f_bavail * f_frsize; and byte counts
derived by hand from the tensors' shapes and dtypes. All in-process, milliseconds to a fraction of a second each.
"""
from __future__ import annotations

import pytest

from kconvert.errors import UsageError
from kconvert.writer.config import apply_config, deep_merge
from kconvert.writer.ops import DeleteConfig, DropTensor, SetConfig

AUX = ("eagle_config", "eagle_aux_hidden_state_layer_ids")


# --- config.apply_config: the documented contract on nested config.json objects -------------------------------------

def test_set_creates_the_missing_objects_on_its_path():
    """A draft with no `eagle_config` (lightseekorg/kimi-k2.5-eagle3, docs/formats-and-engines.md#producers-and-their-layouts) given the ids
    vLLM reads: the intermediate object is created, the new key goes last, the input is unchanged."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168}
    out = apply_config(cfg, [SetConfig(AUX, [2, 30, 58])])
    assert out == {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168,
                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    assert list(out) == ["architectures", "hidden_size", "eagle_config"]
    assert cfg == {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168}


def test_set_three_deep_creates_both_missing_levels():
    """(a, b, c) on {}: a and b are created, c set; nothing else appears."""
    assert apply_config({}, [SetConfig(("a", "b", "c"), 1)]) == {"a": {"b": {"c": 1}}}


def test_set_into_an_existing_object_keeps_its_other_keys_and_order():
    """An `eagle_config` that already holds other flags (ModelOpt's, docs/formats-and-engines.md#producers-and-their-layouts) keeps them, and the
    replaced key keeps its place."""
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_last_layernorm": True},
           "vocab_size": 163840}
    out = apply_config(cfg, [SetConfig(AUX, [2, 30, 58])])
    assert out == {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_last_layernorm": True},
                   "vocab_size": 163840}
    assert list(out["eagle_config"]) == ["eagle_aux_hidden_state_layer_ids", "use_last_layernorm"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]


def test_set_explicit_null_intermediate_is_replaced_by_an_object():
    """JSON null on the path is 'missing' (config.py: `child is None` creates the object)."""
    assert apply_config({"eagle_config": None}, [SetConfig(AUX, [2])]) == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2]}}


def test_the_value_set_is_a_copy_not_the_callers_objects():
    """The result is independent of the op's value, at every depth: changing the caller's list (also one inside the
    object set) afterwards changes nothing in the result."""
    ids = [2, 30, 58]
    out = apply_config({}, [SetConfig(AUX, ids)])
    ids.append(99)
    assert out["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    inner = [2, 30, 58]
    out = apply_config({}, [SetConfig(("eagle_config",), {"eagle_aux_hidden_state_layer_ids": inner})])
    inner.append(99)
    assert out == {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}


def test_the_result_does_not_share_nested_objects_with_the_input():
    """Pure: changing the result's nested object leaves the input's as it was."""
    cfg = {"eagle_config": {"x": 1}}
    out = apply_config(cfg, [])
    out["eagle_config"]["x"] = 2
    assert cfg == {"eagle_config": {"x": 1}}


@pytest.mark.parametrize("path, where", [
    (("vocab_size", "x"), "vocab_size"),
    (("eagle_config", "eagle_aux_hidden_state_layer_ids", "x"), "eagle_config.eagle_aux_hidden_state_layer_ids"),
])
def test_set_across_a_value_names_the_whole_path_and_the_key_that_is_not_an_object(path, where):
    """The message names the path asked for and the prefix where a non-object sits (by hand from the input)."""
    cfg = {"vocab_size": 163840, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    with pytest.raises(UsageError) as e:
        apply_config(cfg, [SetConfig(path, 1)])
    assert e.value.message == f"config: cannot set {'.'.join(path)}: {where} is not an object"


def test_delete_a_nested_key_keeps_its_siblings():
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_last_layernorm": True}, "v": 1}
    assert apply_config(cfg, [DeleteConfig(AUX)]) == {"eagle_config": {"use_last_layernorm": True}, "v": 1}


def test_delete_a_top_level_key():
    """`torch_dtype` next to `dtype` (the lightseekorg draft, docs/formats-and-engines.md#producers-and-their-layouts): one of them goes."""
    assert apply_config({"torch_dtype": "float16", "dtype": "bfloat16"}, [DeleteConfig(("torch_dtype",))]) == {
        "dtype": "bfloat16"}


@pytest.mark.parametrize("cfg", [
    {"v": 1},                                   # the first key of the path is missing
    {"a": 5, "v": 1},                           # the first key holds a value, not an object
    {"a": {"b": 5}, "v": 1},                    # the second key holds a value
    {"a": {"b": {"d": 1}}, "v": 1},             # the last key is missing
    {"a": None, "v": 1},                        # null on the path
])
def test_deleting_what_is_not_there_is_a_no_op(cfg):
    """config.py's contract: deleting a missing key is a no-op (idempotent fixes), wherever the path stops."""
    import copy
    want = copy.deepcopy(cfg)
    assert apply_config(cfg, [DeleteConfig(("a", "b", "c"))]) == want


def test_ops_apply_in_order_and_other_kinds_are_ignored():
    """Set, then delete the same key: gone; delete then set: there. A tensor op changes no config."""
    assert apply_config({"k": 1}, [SetConfig(("k",), 2), DeleteConfig(("k",))]) == {}
    assert apply_config({"k": 1}, [DeleteConfig(("k",)), SetConfig(("k",), 3)]) == {"k": 3}
    assert apply_config({"k": 1}, [DropTensor("d2t")]) == {"k": 1}


@pytest.mark.parametrize("path", [(), ("",), ("a", ""), ("a", 1), (None,)])
@pytest.mark.parametrize("kind", [SetConfig, DeleteConfig])
def test_an_invalid_key_path_is_refused_with_its_repr(path, kind):
    """A key path is a non-empty tuple of non-empty strings; the message shows the path as Python prints it."""
    op = kind(path, 1) if kind is SetConfig else kind(path)
    with pytest.raises(UsageError) as e:
        apply_config({"a": {}}, [op])
    assert e.value.message == f"config: invalid key path {path!r}"


# --- config.deep_merge: the provenance's "caller wins", recursively -------------------------------------------------

def test_deep_merge_recurses_where_both_hold_objects_and_the_patch_wins_elsewhere():
    base = {"tool": "kconvert", "input": {"source": "org/a", "revision": None, "files": {}}, "n": 1}
    patch = {"input": {"revision": "abc123"}, "n": {"x": 1}, "new": [1]}
    out = deep_merge(base, patch)
    assert out == {"tool": "kconvert", "input": {"source": "org/a", "revision": "abc123", "files": {}},
                   "n": {"x": 1}, "new": [1]}
    assert base == {"tool": "kconvert", "input": {"source": "org/a", "revision": None, "files": {}}, "n": 1}
    assert patch == {"input": {"revision": "abc123"}, "n": {"x": 1}, "new": [1]}


def test_deep_merge_a_value_replaces_an_object():
    assert deep_merge({"a": {"b": 1}}, {"a": 2}) == {"a": 2}


# --- write.py: the folder kconvert fix writes ----------------------------------------------------------------------

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from kconvert.errors import InputError  # noqa: E402
from kconvert.source.checkpoint import load_folder  # noqa: E402
from kconvert.writer import stream, write  # noqa: E402
from kconvert.writer.ops import RenameTensor, RewriteD2TOffsets  # noqa: E402
from kconvert.writer.write import write_checkpoint  # noqa: E402
from tests.writer_factories import draft_tensors, write_draft  # noqa: E402

NAMES = list(draft_tensors())


def _open(p: Path):
    return load_folder(p, ref=str(p))


def _fix(src: Path, out: Path, ops=(), **kw):
    kw.setdefault("durable", False)
    return write_checkpoint(_open(src), list(ops), out, **kw)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _header(p: Path) -> dict:
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_config_json_is_two_space_json_with_unicode_kept_and_a_final_newline(tmp_path):
    """json.dumps(indent=2, ensure_ascii=False) + newline (Python's json docs): a non-ASCII value stays UTF-8."""
    src = write_draft(tmp_path / "in")
    res = _fix(src, tmp_path / "out", [SetConfig(("model_card_name",), "草稿 draft")])
    want = dict(json.loads((src / "config.json").read_text()), model_card_name="草稿 draft")
    raw = (tmp_path / "out" / "config.json").read_bytes()
    assert raw == (json.dumps(want, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    assert res.files["config.json"] == {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def test_the_provenance_record_names_tool_version_time_input_ops_and_output(tmp_path):
    """kconvert.json: the tool, its version (pyproject.toml [project] version), a UTC ISO-8601 time to the second,
    the input's every file (sizes from os.stat, sha256 from hashlib), each op as plain data, the output files."""
    src = write_draft(tmp_path / "in", pickle=True)
    t0 = datetime.now(timezone.utc).replace(microsecond=0)
    res = _fix(src, tmp_path / "out", [SetConfig(("a", "b"), 1, reason="why")])
    t1 = datetime.now(timezone.utc)
    out = tmp_path / "out"
    raw = (out / "kconvert.json").read_bytes()
    prov = json.loads(raw)
    assert raw == (json.dumps(prov, indent=2, ensure_ascii=False) + "\n").encode()
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert prov["tool"] == "kconvert" and f'version = "{prov["version"]}"' in pyproject
    created = datetime.fromisoformat(prov["created"])
    assert prov["created"].endswith("+00:00") and len(prov["created"]) == len("2026-12-02T13:45:00+00:00")
    assert t0 <= created <= t1
    assert prov["input"]["source"] == str(src) and prov["input"]["revision"] is None
    files_in = {rel: {"size": (src / rel).stat().st_size, "sha256": _sha(src / rel)} for rel in sorted(_files(src))}
    assert prov["input"]["files"] == files_in and list(prov["input"]["files"]) == sorted(files_in)
    assert prov["ops"] == [{"path": "a.b", "value": 1, "reason": "why", "kind": "set-config"}]
    files_out = {rel: {"size": (out / rel).stat().st_size, "sha256": _sha(out / rel)}
                 for rel in sorted(_files(out) - {"kconvert.json"})}
    assert prov["output"] == {"files": files_out} and list(prov["output"]["files"]) == sorted(files_out)
    assert prov["skipped"] == {"pytorch_model.bin": "pickle file: kconvert never unpickles nor copies it"}
    assert res.provenance == prov and res.skipped == prov["skipped"]
    assert res.files == dict(files_out, **{"kconvert.json": {"size": len(raw)}})
    assert res.input_files == files_in


def test_the_provenance_has_no_skipped_entry_when_nothing_was_left_out(tmp_path):
    src = write_draft(tmp_path / "in")
    prov = json.loads((_fix(src, tmp_path / "out").out_dir / "kconvert.json").read_text())
    assert "skipped" not in prov and set(prov) == {"tool", "version", "created", "input", "ops", "output"}


def test_the_callers_provenance_merges_in_but_never_replaces_the_output_files(tmp_path):
    src = write_draft(tmp_path / "in")
    res = _fix(src, tmp_path / "out", provenance={"input": {"source": "org/draft", "revision": "abc"},
                                                  "output": {"files": {"fake": 1}, "note": "n"}})
    prov = json.loads((tmp_path / "out" / "kconvert.json").read_text())
    assert prov["input"]["source"] == "org/draft" and prov["input"]["revision"] == "abc"
    assert set(prov["input"]["files"]) == _files(src)  # the writer's part of `input` stays
    assert prov["output"]["note"] == "n"
    assert set(prov["output"]["files"]) == _files(tmp_path / "out") - {"kconvert.json"}
    assert res.provenance == prov


def test_a_hub_checkpoint_is_recorded_by_repo_id_and_commit(tmp_path):
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    ck.repo_id, ck.revision, ck.commit = "org/draft", "main", "0123abc"
    prov = write_checkpoint(ck, [], tmp_path / "out", durable=False).provenance
    assert prov["input"]["source"] == "org/draft" and prov["input"]["revision"] == "0123abc"
    ck.commit = None
    prov = write_checkpoint(ck, [], tmp_path / "out2", durable=False).provenance
    assert prov["input"]["revision"] == "main"


def test_a_shard_every_tensor_of_which_was_dropped_is_skipped_with_that_reason(tmp_path):
    src = write_draft(tmp_path / "in", shards=3)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    first = "model-00001-of-00003.safetensors"
    res = _fix(src, tmp_path / "out", [DropTensor(n) for n, sh in index.items() if sh == first])
    assert res.skipped == {first: "every tensor in it was dropped"}
    assert not (tmp_path / "out" / first).exists()
    assert res.input_files[first] == {"size": (src / first).stat().st_size, "sha256": _sha(src / first)}


def test_the_index_keeps_the_inputs_metadata_and_counts_the_tensors_bytes(tmp_path):
    """total_size = the sum of the tensors' data spans (from the written headers); weight_map tensor -> shard,
    sorted; other metadata keys of the input's index are kept."""
    src = write_draft(tmp_path / "in", shards=2)
    idx = json.loads((src / "model.safetensors.index.json").read_text())
    idx["metadata"]["format"] = "pt"
    (src / "model.safetensors.index.json").write_text(json.dumps(idx))
    out = tmp_path / "out"
    res = _fix(src, out, [RenameTensor("fc.weight", "zz.fc.weight")])
    got = json.loads((out / "model.safetensors.index.json").read_text())
    assert res.files["model.safetensors.index.json"] == {
        "size": (out / "model.safetensors.index.json").stat().st_size,
        "sha256": _sha(out / "model.safetensors.index.json")}
    wm, total = {}, 0
    for shard in sorted(p.name for p in out.glob("*.safetensors")):
        h = _header(out / shard)
        h.pop("__metadata__", None)
        for n, e in h.items():
            wm[n] = shard
            total += e["data_offsets"][1] - e["data_offsets"][0]
    assert got == {"metadata": {"total_size": total, "format": "pt"}, "weight_map": dict(sorted(wm.items()))}
    assert list(got["weight_map"]) == sorted(wm) and total == 2304  # test_writer_layout.py's hand sum
    assert (out / "model.safetensors.index.json").read_bytes().endswith(b"}\n")


@pytest.mark.parametrize("old", ['{"metadata": "x", "weight_map": {}}', "not json"])
def test_an_unusable_input_index_metadata_leaves_only_total_size(tmp_path, old):
    src = write_draft(tmp_path / "in", shards=2)
    ck = _open(src)
    (src / "model.safetensors.index.json").write_text(old)  # changed after it was read
    write_checkpoint(ck, [], tmp_path / "out", durable=False)
    got = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert got["metadata"] == {"total_size": 2304}


def test_a_single_file_output_has_no_index(tmp_path):
    res = _fix(write_draft(tmp_path / "in"), tmp_path / "out")
    assert "model.safetensors.index.json" not in res.files
    assert not (tmp_path / "out" / "model.safetensors.index.json").exists()


def test_an_unknown_copy_mode_is_refused_before_anything_is_written(tmp_path):
    src = write_draft(tmp_path / "in")
    with pytest.raises(ValueError) as e:
        _fix(src, tmp_path / "out", copy_mode="mmap")
    assert str(e.value) == "copy_mode 'mmap'"
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_both_copy_modes_write_the_same_bytes(tmp_path):
    src = write_draft(tmp_path / "in")
    a = _fix(src, tmp_path / "a", copy_mode="read_write")
    b = _fix(src, tmp_path / "b", copy_mode="copy_file_range")
    strip = {"kconvert.json"}
    assert {k: v for k, v in a.files.items() if k not in strip} == {k: v for k, v in b.files.items() if k not in strip}


def test_without_copy_file_range_the_default_mode_falls_back_to_read_write(tmp_path, monkeypatch):
    """An OS without os.copy_file_range (Python docs: Linux >= 4.5 only): the default still writes."""
    seen = []
    real = stream.Streamer

    class Spy(real):
        def __init__(self, **kw):
            seen.append(kw["copy_mode"])
            super().__init__(**kw)

    monkeypatch.setattr(stream, "Streamer", Spy)
    monkeypatch.delattr(os, "copy_file_range")
    src = write_draft(tmp_path / "in")
    res = _fix(src, tmp_path / "out")
    assert seen == ["read_write"] and (tmp_path / "out" / "model.safetensors").is_file()
    assert res.files["model.safetensors"]["sha256"] == _sha(src / "model.safetensors")


@pytest.mark.parametrize("shards, workers, cpus, want", [
    (3, None, 8, 3),     # one per shard when cores are plenty
    (6, None, 8, 4),     # at most 4 (the docstring's "at most 4")
    (6, None, 2, 2),     # one per core
    (6, None, None, 1),  # os.cpu_count() may return None (Python docs): one
    (6, 2, 8, 2),        # the caller's figure
    (2, 5, 8, 2),        # never more than the shards
    (1, 0, 8, 1),        # 0 is "default": 1 shard, 1 worker
])
def test_the_number_of_shard_workers(tmp_path, monkeypatch, shards, workers, cpus, want):
    made = []
    real = stream.Streamer

    class Spy(real):
        def __init__(self, **kw):
            made.append(1)
            super().__init__(**kw)

    monkeypatch.setattr(stream, "Streamer", Spy)
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    src = write_draft(tmp_path / "in", shards=shards)
    _fix(src, tmp_path / "out", workers=workers)
    assert len(made) == want


def test_progress_ends_with_total_bytes_and_the_destination(tmp_path):
    """The last call is (total, total, 'wrote <out>'); total = bytes written (shards and copied files) + input bytes
    only hashed: the input shard's header (its tensors are copied) and a left-out pickle. Sizes from os.stat."""
    src = write_draft(tmp_path / "in", pickle=True)
    (src / "optimizer.pt").write_bytes(b"")  # an empty pickle left out: 0 bytes to hash
    out = tmp_path / "out"
    calls = []
    _fix(src, out, progress=lambda d, t, m: calls.append((d, t, m)))
    shard_out = (out / "model.safetensors").stat().st_size
    copies = sum((out / f).stat().st_size for f in ("README.md", "tokenizer_config.json", "generation_config.json"))
    shard_in = (src / "model.safetensors").stat().st_size
    hashed_only = (shard_in - 2304) + (src / "pytorch_model.bin").stat().st_size
    total = shard_out + copies + hashed_only
    assert calls[-1] == (total, total, f"wrote {out}")
    assert {c[1] for c in calls} == {total}
    assert all(a[0] <= b[0] <= total for a, b in zip(calls, calls[1:]))  # never past 100 %, never backwards


def test_the_output_folder_is_absolute_and_user_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    src = write_draft(tmp_path / "in")
    res = _fix(src, "~/out")
    assert res.out_dir == tmp_path / "out" and res.out_dir.is_absolute() and (tmp_path / "out").is_dir()
    monkeypatch.chdir(tmp_path)
    assert _fix(src, "rel").out_dir == tmp_path / "rel"


def test_bytes_written_and_seconds(tmp_path):
    """bytes_written: every byte of every output file, kconvert.json included (sizes from os.stat); seconds: the
    wall time, bounded by the test's own clock."""
    src = write_draft(tmp_path / "in")
    t0 = time.monotonic()
    res = _fix(src, tmp_path / "out", [RewriteD2TOffsets()])
    took = time.monotonic() - t0
    out = tmp_path / "out"
    assert res.bytes_written == sum((out / f).stat().st_size for f in _files(out))
    assert 0 < res.seconds <= took
    assert res.ops == [RewriteD2TOffsets()]


# --- the free-space check ------------------------------------------------------------------------------------------

def _fake_statvfs(monkeypatch, free: int | None, seen: list | None = None):
    real = os.statvfs

    def fake(p):
        if seen is not None:
            seen.append(str(p))
        if free is None:
            raise OSError(38, "Function not implemented")
        return SimpleNamespace(f_bavail=free, f_frsize=1)

    monkeypatch.setattr(os, "statvfs", fake)
    return real


def _dense_out_size(tmp_path) -> tuple[Path, int]:
    """A draft and its output's size on disk without holes: shard + copied files (config, index, kconvert.json
    are not counted: the check runs before they exist), from a first write's os.stat."""
    src = write_draft(tmp_path / "in")
    _fix(src, tmp_path / "probe", check_space=False)
    probe = tmp_path / "probe"
    return src, sum((probe / f).stat().st_size for f in ("model.safetensors", "README.md", "tokenizer_config.json",
                                                        "generation_config.json"))


def test_free_space_equal_to_the_output_is_enough_one_byte_less_is_refused(tmp_path, monkeypatch):
    src, need = _dense_out_size(tmp_path)
    _fake_statvfs(monkeypatch, need)
    _fix(src, tmp_path / "fits")
    _fake_statvfs(monkeypatch, need - 1)
    with pytest.raises(InputError) as e:
        _fix(src, tmp_path / "short")
    assert e.value.message == (f"{tmp_path / 'short'}: needs {need / 1e6:.1f} MB, only {(need - 1) / 1e6:.1f} MB "
                               "free on that disk")
    assert not (tmp_path / "short").exists()
    _fix(src, tmp_path / "unchecked", check_space=False)


def test_the_space_is_asked_of_the_destinations_parent_or_of_the_root(tmp_path, monkeypatch):
    src = write_draft(tmp_path / "in")
    seen: list = []
    _fake_statvfs(monkeypatch, 0, seen)
    with pytest.raises(InputError):
        _fix(src, tmp_path / "out")
    assert seen == [str(tmp_path)]
    seen.clear()
    with pytest.raises(InputError):
        _fix(src, tmp_path / "no" / "such" / "out")
    assert seen == ["/"]


def test_a_disk_that_cannot_say_its_free_space_is_not_refused(tmp_path, monkeypatch):
    src = write_draft(tmp_path / "in")
    _fake_statvfs(monkeypatch, None)
    assert (_fix(src, tmp_path / "out").out_dir / "kconvert.json").is_file()


@pytest.mark.parametrize("n, text", [
    (0, "0.0 MB"), (1_234_567, "1.2 MB"), (999_999_999, "1000.0 MB"), (10**9, "1.00 GB"),
    (2_345_678_901, "2.35 GB"), (163840 * 7168 * 2, "2.35 GB"),
    (1_015_000_001, "1.02 GB"),  # 1.015000001: just above the rounding point between 1.01 and 1.02
    (1_250_001, "1.3 MB"),       # 1.250001: just above the rounding point between 1.2 and 1.3
])
def test_sizes_in_messages_are_mb_below_a_gigabyte_and_gb_from_one(n, text):
    """Decimal units (1 GB = 10^9 bytes, 1 MB = 10^6); a Kimi lm_head [163840, 7168] BF16 is 2.35 GB."""
    assert write._size_text(n) == text


def test_two_files_without_an_index_get_one_with_only_total_size(tmp_path):
    """Two safetensors files and no model.safetensors.index.json in: the output is sharded, so it gets an index
    (metadata.total_size = the tensors' bytes, 2304 by the hand sum in test_writer_layout.py; weight_map from the
    written headers)."""
    from tests.writer_factories import write_safetensors

    t = draft_tensors()
    write_safetensors(tmp_path / "in" / "a.safetensors", {n: t[n] for n in NAMES[:5]}, {"format": "pt"})
    write_safetensors(tmp_path / "in" / "b.safetensors", {n: t[n] for n in NAMES[5:]})
    (tmp_path / "in" / "config.json").write_text("{}")
    res = _fix(tmp_path / "in", tmp_path / "out")
    got = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    wm = {n: f for f in ("a.safetensors", "b.safetensors") for n in _header(tmp_path / "out" / f) if n != "__metadata__"}
    assert got == {"metadata": {"total_size": 2304}, "weight_map": dict(sorted(wm.items()))}
    assert "model.safetensors.index.json" in res.files


def test_digests_of_fresh_inputs_are_not_remembered_but_those_of_the_outputs_are(tmp_path):
    """kconvert/source/hashcache.py's rule: a file changed within RACY_SECONDS of its hashing is not remembered (its
    digest may describe bytes still being written), while files the writer itself wrote are (written_by_us). The
    input here was written a moment ago; the digests looked up are hashlib's."""
    from kconvert.source import hashcache

    src = write_draft(tmp_path / "in")
    res = _fix(src, tmp_path / "out")
    for rel in res.input_files:
        assert hashcache.lookup(src / rel) is None, rel
    for rel, meta in res.files.items():
        if "sha256" in meta:
            assert hashcache.lookup(tmp_path / "out" / rel) == meta["sha256"] == _sha(tmp_path / "out" / rel), rel


def test_a_copied_file_that_changed_size_since_it_was_read_is_refused(tmp_path):
    """README.md grows by 4 bytes between the reading of the draft and the write (sizes by hand: the factory writes
    '# tiny draft\\n', 13 bytes); nothing appears at the destination."""
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    with open(src / "README.md", "ab") as f:
        f.write(b"more")
    with pytest.raises(InputError) as e:
        write_checkpoint(ck, [], tmp_path / "out", durable=False)
    assert e.value.message == "README.md: changed size since it was read (13 -> 17 bytes)"
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_an_os_error_before_the_commit_names_the_file_being_written_and_the_os_reason(tmp_path):
    """An OSError (here EIO, raised by the before_commit hook once every file is written) becomes one InputError
    line with strerror(3)'s text; the last file written is the provenance, kconvert.json. Nothing is left behind."""
    import errno

    src = write_draft(tmp_path / "in")

    def fail(path):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with pytest.raises(InputError) as e:
        _fix(src, tmp_path / "out", before_commit=fail)
    assert e.value.message == f"{tmp_path / 'out'}: writing kconvert.json failed: {os.strerror(errno.EIO)}"
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_the_before_commit_hook_sees_the_complete_output(tmp_path):
    src = write_draft(tmp_path / "in")
    seen = []
    res = _fix(src, tmp_path / "out", before_commit=lambda p: seen.append(_files(p)))
    assert seen == [_files(tmp_path / "out")] and "kconvert.json" in seen[0] and set(res.files) == seen[0]


def test_a_known_digest_of_a_file_left_out_is_recorded_not_recomputed(tmp_path):
    """A digest the checkpoint already carries (a Hub file's LFS sha256: FileEntry.sha256) is what the provenance
    records for a file kconvert does not copy; a planted value shows it was not recomputed."""
    src = write_draft(tmp_path / "in", pickle=True)
    ck = _open(src)
    ck.files["pytorch_model.bin"].sha256 = "cd" * 32
    res = write_checkpoint(ck, [], tmp_path / "out", durable=False)
    assert res.input_files["pytorch_model.bin"] == {"size": (src / "pytorch_model.bin").stat().st_size,
                                                    "sha256": "cd" * 32}


def test_a_file_left_out_that_cannot_be_read_is_named_in_the_error(tmp_path):
    """The pickle is replaced by a folder after the draft was read: hashing it fails with EISDIR (read(2)), and the
    one-line error names that file and strerror(3)'s text."""
    import errno
    import shutil

    src = write_draft(tmp_path / "in", pickle=True)
    ck = _open(src)
    (src / "pytorch_model.bin").unlink()
    (src / "pytorch_model.bin").mkdir()
    with pytest.raises(InputError) as e:
        write_checkpoint(ck, [], tmp_path / "out", durable=False)
    assert e.value.message == (f"{tmp_path / 'out'}: writing pytorch_model.bin failed: "
                               f"{os.strerror(errno.EISDIR)}")
    shutil.rmtree(src / "pytorch_model.bin")
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_a_digest_the_checkpoint_already_carried_is_not_put_in_the_hash_cache(tmp_path):
    """The hash cache keeps digests kconvert computed (write.py _Run.computed_inputs: "input digests this run
    computed (not known before)"); a shard whose sha256 came with the checkpoint (FileEntry.sha256, planted here) is
    recorded in the provenance but not remembered as kconvert's own reading of the file. The file is old enough
    for the cache's racy-window rule (hashcache.RACY_SECONDS), so only that rule keeps it out."""
    from kconvert.source import hashcache

    src = write_draft(tmp_path / "in")
    past = time.time() - 60
    for p in src.iterdir():
        os.utime(p, (past, past))
    time.sleep(hashcache.RACY_SECONDS + 0.1)
    ck = _open(src)
    ck.files["model.safetensors"].sha256 = "ab" * 32
    res = write_checkpoint(ck, [], tmp_path / "out", durable=False)
    assert res.input_files["model.safetensors"]["sha256"] == "ab" * 32
    assert hashcache.lookup(src / "model.safetensors") is None
    assert hashcache.lookup(src / "README.md") == _sha(src / "README.md")  # computed here, so remembered


def test_the_holes_of_a_sparse_copied_file_are_not_counted_against_free_space(tmp_path, monkeypatch):
    """A copied file that is one 1 MiB hole (truncate(2) extends with a hole) keeps its hole in the copy, so the
    free-space check needs its 1 MiB less: a disk with exactly (dense size - 1 MiB) free takes the output."""
    src, need = _dense_out_size(tmp_path)
    with open(src / "extra.dat", "wb") as f:
        f.truncate(1 << 20)
    if (src / "extra.dat").stat().st_blocks != 0:
        pytest.skip("this filesystem does not keep holes")
    _fake_statvfs(monkeypatch, need)  # need counts extra.dat's 1 MiB as size, and it is all hole
    res = _fix(src, tmp_path / "out")
    assert (tmp_path / "out" / "extra.dat").stat().st_size == 1 << 20 and "extra.dat" in res.files
    _fake_statvfs(monkeypatch, need - 1)
    with pytest.raises(InputError):
        _fix(src, tmp_path / "out2")


def test_an_empty_copied_file_counts_no_hole(tmp_path, monkeypatch):
    """A 0-byte file has no data and no hole (lseek(2) SEEK_DATA past the end: ENXIO): one byte less free than the
    dense output size is refused even with an empty file among the copies."""
    src, need = _dense_out_size(tmp_path)
    (src / "empty.txt").write_bytes(b"")
    _fake_statvfs(monkeypatch, need - 1)
    with pytest.raises(InputError):
        _fix(src, tmp_path / "out")
    _fake_statvfs(monkeypatch, need)
    assert (_fix(src, tmp_path / "out").out_dir / "empty.txt").stat().st_size == 0


def test_the_racy_window_is_measured_from_when_hashing_started_not_when_the_digest_is_stored(tmp_path):
    """hashcache's rule compares a file's last change with the time its hashing started (store_many's hashed_at):
    the input changed just before the fix began, so its digest is not remembered even though the write (held
    RACY_SECONDS + 0.2 s in before_commit) stores the digests well after that window."""
    from kconvert.source import hashcache

    src = write_draft(tmp_path / "in")
    _fix(src, tmp_path / "out", before_commit=lambda p: time.sleep(hashcache.RACY_SECONDS + 0.2))
    assert hashcache.lookup(src / "model.safetensors") is None
    assert hashcache.lookup(src / "README.md") is None


@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_write_syncs_the_folder_and_its_parent_around_the_rename(tmp_path, monkeypatch, durable):
    """write_checkpoint's docstring: `durable` fsyncs "the folders before and after the rename" (rename(2) is made
    durable by an fsync of the directory holding the new name); without it no folder is synced."""
    from kconvert.writer import atomic

    seen = []
    monkeypatch.setattr(atomic, "fsync_dir", lambda p: seen.append(Path(p)))
    src = write_draft(tmp_path / "in")
    write_checkpoint(_open(src), [], tmp_path / "out", durable=durable)
    if durable:
        assert tmp_path in seen and len(seen) >= 2
    else:
        assert seen == []


def test_an_os_error_before_any_file_is_named_says_the_output(tmp_path, monkeypatch):
    """An OSError (EIO) raised before the writer names a file (here by the first step, the shard writes) still
    makes one InputError line with strerror(3)'s text, naming the output as a whole; nothing is left behind."""
    import errno

    src = write_draft(tmp_path / "in")

    def fail(self):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(write._Run, "write_shards", fail)
    with pytest.raises(InputError) as e:
        write_checkpoint(_open(src), [], tmp_path / "out", durable=False)
    assert e.value.message == f"{tmp_path / 'out'}: writing the output failed: {os.strerror(errno.EIO)}"
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_hashing_a_file_left_out_names_it_in_the_progress(tmp_path, monkeypatch):
    """The pickle fix leaves out is hashed for the provenance; with a report after every byte (PROGRESS_EVERY 1),
    the progress lines while it is hashed name that file, as the copied files' lines name theirs."""
    src = write_draft(tmp_path / "in", pickle=True)
    monkeypatch.setattr(stream, "PROGRESS_EVERY", 1)
    monkeypatch.setenv("KCONVERT_HASH_CACHE", "off")  # hashed, not looked up
    seen = []
    write_checkpoint(_open(src), [], tmp_path / "out", durable=False, progress=lambda d, t, m: seen.append(m))
    assert "pytorch_model.bin" in seen
