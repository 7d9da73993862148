"""The checkpoint writer behind `kconvert fix`: each op, sharding, provenance, atomic replacement."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from kconvert.errors import InputError, UsageError
from kconvert.writer.config import apply_config
from kconvert.writer.ops import (
    CastTensor,
    DeleteConfig,
    DropTensor,
    RebuildT2D,
    RenameTensor,
    ReselectLmHead,
    RewriteD2TOffsets,
    SetConfig,
)
from kconvert.source.checkpoint import load_folder
from kconvert.writer import write_checkpoint
from kconvert.writer.rewrite import bf16_to_f32, f32_to_bf16
from tests.writer_factories import (
    draft_tensors,
    sha256_tree,
    write_draft,
    write_full_lm_head,
    write_real_shape_draft,
    write_safetensors,
)

pytestmark = pytest.mark.timeout(60)


def _open(p: Path):
    return load_folder(p, ref=str(p))


def _write(src: Path, ops, out: Path, **kw):
    return write_checkpoint(_open(src), ops, out, provenance=kw.pop("provenance", {}), **kw)


def _tensor_bytes(ckpt, name: str) -> bytes:
    info = ckpt.tensors[name]
    with open(ckpt.root / info.file, "rb") as f:
        f.seek(info.start)
        return f.read(info.nbytes)


def _check_loads(folder: Path) -> None:
    """The output reparses with kconvert's reader and safetensors itself (non-bf16 tensors decoded)."""
    ck = _open(folder)
    for f in ck.safetensors_files:
        raw = (folder / f).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        assert n % 8 == 0
        with safe_open(str(folder / f), framework="numpy") as g:
            for k in g.keys():
                if ck.tensors[k].dtype != "BF16":
                    assert g.get_tensor(k).shape == ck.tensors[k].shape


def _midlayer_renames(ck) -> list[RenameTensor]:
    return [RenameTensor(n, "layers.0." + n[len("midlayer."):])
            for n in sorted(ck.tensors) if n.startswith("midlayer.")]


# ops -------------------------------------------------------------------------------------------------

def test_rename_midlayer_to_layers_0_keeps_bytes(tmp_path):
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    _write(src, _midlayer_renames(ck), tmp_path / "out")
    out = _open(tmp_path / "out")
    assert not any(n.startswith("midlayer.") for n in out.tensors)
    for n in ck.tensors:
        new = "layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n
        assert _tensor_bytes(out, new) == _tensor_bytes(ck, n)
    _check_loads(tmp_path / "out")


def test_strip_model_prefix(tmp_path):
    src = write_draft(tmp_path / "in", prefix="model.")
    ck = _open(src)
    ops = [RenameTensor(n, n[len("model."):]) for n in sorted(ck.tensors) if n.startswith("model.")]
    _write(src, ops, tmp_path / "out")
    out = _open(tmp_path / "out")
    assert sorted(out.tensors) == sorted(n.removeprefix("model.") for n in ck.tensors)
    assert _tensor_bytes(out, "fc.weight") == _tensor_bytes(ck, "model.fc.weight")


def test_drop_tensor_removes_it_from_header_and_index(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    _write(src, [DropTensor("t2d")], tmp_path / "out")
    out = _open(tmp_path / "out")
    assert "t2d" not in out.tensors and "t2d" not in out.index
    _check_loads(tmp_path / "out")


def test_rewrite_d2t_absolute_ids_to_offsets(tmp_path):
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    absolute = ck.read_array("d2t")
    _write(src, [RewriteD2TOffsets()], tmp_path / "out")
    out = _open(tmp_path / "out")
    assert out.tensors["d2t"].dtype == "I64"
    np.testing.assert_array_equal(out.read_array("d2t"), absolute - np.arange(len(absolute)))


def test_rebuild_t2d_uses_d2t_offsets_rewritten_earlier_in_the_plan(tmp_path):
    src = write_draft(tmp_path / "in", target_vocab=64)
    ck = _open(src)
    absolute = ck.read_array("d2t")
    _write(src, [DropTensor("t2d"), RewriteD2TOffsets(), RebuildT2D(target_vocab_size=100)], tmp_path / "out")
    out = _open(tmp_path / "out")
    mask = out.read_array("t2d")
    assert mask.dtype == np.bool_ and mask.shape == (100,)
    assert np.flatnonzero(mask).tolist() == sorted(absolute.tolist())
    _check_loads(tmp_path / "out")


def test_rebuild_t2d_refuses_ids_outside_the_target_vocabulary(tmp_path):
    src = write_draft(tmp_path / "in", target_vocab=64)
    with pytest.raises(InputError, match="outside a vocabulary of 10"):
        _write(src, [RewriteD2TOffsets(), RebuildT2D(target_vocab_size=10)], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_reselect_lm_head_reads_rows_d2t_plus_i_from_the_source(tmp_path):
    src = write_draft(tmp_path / "in", vocab=16, target_vocab=64, hidden=8, d2t_absolute=False)
    target = write_full_lm_head(tmp_path / "target", vocab=64, hidden=8, dtype="F32")
    ck = _open(src)
    ids = ck.read_array("d2t") + np.arange(16)
    _write(src, [ReselectLmHead(source=str(target))], tmp_path / "out")
    out = _open(tmp_path / "out")
    lm = out.read_array("lm_head.weight")
    assert out.tensors["lm_head.weight"].dtype == "F32" and lm.shape == (16, 8)
    np.testing.assert_array_equal(lm[:, 0], ids.astype(np.float32))
    np.testing.assert_array_equal(lm[:, 7], ids.astype(np.float32))


def test_reselect_lm_head_chunks_reads_across_row_runs(tmp_path, monkeypatch):
    from kconvert.writer import rewrite

    monkeypatch.setattr(rewrite, "CHUNK_BYTES", 3 * 8 * 4)  # three rows per chunk
    src = write_draft(tmp_path / "in", vocab=16, target_vocab=64, hidden=8, d2t_absolute=False)
    target = write_full_lm_head(tmp_path / "target", vocab=64, hidden=8, dtype="BF16")
    ck = _open(src)
    ids = ck.read_array("d2t") + np.arange(16)
    from kconvert.writer.layout import build_layout

    layout = build_layout(ck, [ReselectLmHead(source=str(target))])
    t = layout.tensors["lm_head.weight"]
    t.chunks = rewrite.reselect_rows(*_src_info(target), ids, chunk=3 * 8 * 2)
    pieces = list(t.chunks())
    assert len(pieces) == 6
    rows = bf16_to_f32(np.frombuffer(b"".join(pieces), "<u2")).reshape(16, 8)
    np.testing.assert_array_equal(rows[:, 3], ids.astype(np.float32))


def _src_info(target: Path):
    ck = _open(target)
    info = ck.tensors["lm_head.weight"]
    return target / info.file, info


def test_cast_bf16_to_f32_and_back_is_exact(tmp_path):
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    _write(src, [CastTensor("fc.weight", "F32")], tmp_path / "mid")
    mid = _open(tmp_path / "mid")
    assert mid.tensors["fc.weight"].dtype == "F32"
    np.testing.assert_array_equal(mid.read_array("fc.weight"), ck.read_array("fc.weight"))
    _write(tmp_path / "mid", [CastTensor("fc.weight", "BF16")], tmp_path / "back")
    assert _tensor_bytes(_open(tmp_path / "back"), "fc.weight") == _tensor_bytes(ck, "fc.weight")


def test_cast_f32_to_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -2.5, np.inf, 3.4e38],
                 dtype=np.float32)
    got = bf16_to_f32(f32_to_bf16(x))
    # 1+2^-8 is a tie between 1 and 1+2^-7: even (1) wins; 1+3*2^-8 ties up to 1+2^-6 (even mantissa).
    np.testing.assert_array_equal(got[:5], np.array([1.0, 1.0, 1.0 + 2**-6, 1.0 + 2**-7, -2.5], np.float32))
    assert np.isinf(got[5]) and np.isinf(got[6])  # 3.4e38 rounds past bf16's max finite value
    assert np.isnan(bf16_to_f32(f32_to_bf16(np.array([np.nan], np.float32))))[0]


def test_cast_f16_chunked_matches_numpy(tmp_path, monkeypatch):
    import kconvert.writer.rewrite as rw

    monkeypatch.setattr(rw, "CHUNK_BYTES", 7)  # chunks that split elements
    rng = np.random.default_rng(3)
    vals = rng.standard_normal((5, 8)).astype(np.float32)
    src = write_draft(tmp_path / "in", tensors={"w": ("F32", (5, 8), vals)})
    ck = _open(src)
    from kconvert.writer.layout import build_layout

    t = build_layout(ck, [CastTensor("w", "F16")]).tensors["w"]
    t.chunks = rw.cast_chunks(rw.range_chunks(src / "model.safetensors", ck.tensors["w"].start,
                                              ck.tensors["w"].end, "w", chunk=7), "F32", "F16")
    assert b"".join(t.chunks()) == vals.astype("<f2").tobytes()


def test_config_ops_apply_and_keep_key_order(tmp_path):
    src = write_draft(tmp_path / "in")
    ops = [SetConfig(("eagle_config", "eagle_aux_hidden_state_layer_ids"), [2, 30, 58]),
           SetConfig(("draft_vocab_size",), 16), DeleteConfig(("torch_dtype",)), SetConfig(("a", "b", "c"), 1)]
    _write(src, ops, tmp_path / "out")
    text = (tmp_path / "out" / "config.json").read_text()
    cfg = json.loads(text)
    assert text.endswith("}\n") and text.startswith('{\n  "architectures"')
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert "torch_dtype" not in cfg and cfg["a"] == {"b": {"c": 1}}
    src_keys = [k for k in json.loads((src / "config.json").read_text()) if k != "torch_dtype"]
    assert list(cfg)[: len(src_keys)] == src_keys


def test_apply_config_is_pure_and_refuses_crossing_a_value():
    cfg = {"x": 1, "n": {"k": 2}}
    out = apply_config(cfg, [SetConfig(("n", "k"), 3), DeleteConfig(("missing", "y"))])
    assert cfg == {"x": 1, "n": {"k": 2}} and out == {"x": 1, "n": {"k": 3}}
    with pytest.raises(UsageError, match="x is not an object"):
        apply_config(cfg, [SetConfig(("x", "y"), 1)])


# validation ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ops, match", [
    ([RenameTensor("nope", "x")], "does not hold"),
    ([RenameTensor("fc.weight", "norm.weight")], "already exists"),
    ([DropTensor("nope")], "does not hold"),
    ([DropTensor("d2t"), DropTensor("d2t")], "does not hold"),
    ([RewriteD2TOffsets(name="fc.weight")], "expected a 1-D tensor"),
    ([CastTensor("d2t", "F32")], "only F32, F16 and BF16"),
    ([RenameTensor("fc.weight", "")], "not a valid tensor name"),
])
def test_invalid_ops_are_refused_before_writing(tmp_path, ops, match):
    src = write_draft(tmp_path / "in")
    with pytest.raises(UsageError, match=match):
        _write(src, ops, tmp_path / "out")
    assert os.listdir(tmp_path) == ["in"]


def test_reselect_from_a_source_without_the_tensor_is_refused(tmp_path):
    src = write_draft(tmp_path / "in")
    target = write_full_lm_head(tmp_path / "target")
    with pytest.raises(UsageError, match="has no tensor"):
        _write(src, [ReselectLmHead(source=str(target), source_tensor="nope")], tmp_path / "out")


# layout, files, provenance ---------------------------------------------------------------------------

def test_sharded_in_sharded_out_with_a_correct_index(tmp_path):
    src = write_draft(tmp_path / "in", shards=3)
    ck = _open(src)
    _write(src, _midlayer_renames(ck), tmp_path / "out")
    out = _open(tmp_path / "out")
    idx = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert sorted(p.name for p in (tmp_path / "out").glob("*.safetensors")) == sorted(
        p.name for p in src.glob("*.safetensors"))
    assert idx["weight_map"] == out.index
    assert idx["metadata"]["total_size"] == sum(t.nbytes for t in out.tensors.values())
    for shard, meta in out.shard_metadata.items():
        assert meta == {"format": "pt"}
        assert out.tensors  # every shard reparsed
    _check_loads(tmp_path / "out")


def test_single_file_stays_single_without_an_index(tmp_path):
    src = write_draft(tmp_path / "in")
    _write(src, [RewriteD2TOffsets()], tmp_path / "out")
    assert not (tmp_path / "out" / "model.safetensors.index.json").exists()
    assert _open(tmp_path / "out").shard_metadata == {"model.safetensors": {"format": "pt"}}


def test_zero_ops_is_idempotent_on_tensor_bytes(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    _write(src, [], tmp_path / "out")
    ck, out = _open(src), _open(tmp_path / "out")
    assert out.index == ck.index
    for n in ck.tensors:
        assert _tensor_bytes(out, n) == _tensor_bytes(ck, n)
    assert (tmp_path / "out" / "config.json").read_text() == json.dumps(ck.config, indent=2) + "\n"
    _write(tmp_path / "out", [], tmp_path / "again")
    again = _open(tmp_path / "again")
    for f in out.safetensors_files:
        assert (tmp_path / "again" / f).read_bytes() == (tmp_path / "out" / f).read_bytes()
    assert again.tensors.keys() == out.tensors.keys()


def test_the_input_is_never_modified(tmp_path):
    src = write_draft(tmp_path / "in", shards=2, pickle=True)
    (src / "kconvert.json").write_text('{"old": true}\n')
    before = sha256_tree(src)
    ck = _open(src)
    ops = _midlayer_renames(ck) + [RewriteD2TOffsets(), RebuildT2D(target_vocab_size=64),
                                   CastTensor("norm.weight", "F32"), SetConfig(("x",), 1)]
    write_checkpoint(ck, ops, tmp_path / "out", provenance={})
    assert sha256_tree(src) == before


def test_other_files_copied_pickles_skipped_provenance_replaced(tmp_path):
    src = write_draft(tmp_path / "in", pickle=True)
    (src / "kconvert.json").write_text('{"old": true}\n')
    (src / "sub").mkdir()
    (src / "sub" / "chat_template.jinja").write_text("{{ x }}")
    res = _write(src, [RewriteD2TOffsets()], tmp_path / "out",
                 provenance={"input": {"source": "org/draft", "revision": "abc123"}, "extra": 1})
    out = tmp_path / "out"
    for f in ("README.md", "tokenizer_config.json", "generation_config.json", "sub/chat_template.jinja"):
        assert (out / f).read_bytes() == (src / f).read_bytes()
    assert not (out / "pytorch_model.bin").exists() and "pytorch_model.bin" in res.skipped
    prov = json.loads((out / "kconvert.json").read_text())
    assert prov["tool"] == "kconvert" and prov["version"] and prov["created"] and prov["extra"] == 1
    assert prov["input"]["source"] == "org/draft" and prov["input"]["revision"] == "abc123"
    assert prov["ops"] == [{"name": "d2t", "reason": "", "kind": "d2t-absolute-to-offsets"}]
    assert set(prov["input"]["files"]) == {p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()}
    import hashlib

    for name, entry in prov["output"]["files"].items():
        data = (out / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    for name, entry in prov["input"]["files"].items():
        assert entry["sha256"] == hashlib.sha256((src / name).read_bytes()).hexdigest(), name
    assert set(prov["output"]["files"]) | {"kconvert.json"} == {
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def test_progress_is_reported_per_file_and_ends_at_total(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    calls = []
    _write(src, [], tmp_path / "out", progress=lambda d, t, m: calls.append((d, t, m)))
    assert len(calls) >= 4 and calls[-1][0] == calls[-1][1]
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


def test_existing_destination_is_refused_without_force(tmp_path):
    src = write_draft(tmp_path / "in")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(UsageError, match="already exists") as e:
        _write(src, [], tmp_path / "out")
    assert e.value.exit_code == 2
    assert os.listdir(tmp_path / "out") == ["keep"]
    assert sorted(os.listdir(tmp_path)) == ["in", "out"]


def test_force_replaces_an_earlier_output_and_nothing_else(tmp_path):
    """--force replaces what kconvert wrote (a folder its kconvert.json lists whole), never a folder of other files
    (issue #45: `fix -o PATH --force` deleted whatever stood at PATH)."""
    src = write_draft(tmp_path / "in")
    _write(src, [], tmp_path / "out")
    _write(src, [], tmp_path / "out", force=True)
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert sorted(os.listdir(tmp_path)) == ["in", "out"]
    (tmp_path / "out" / "stale.safetensors").write_text("x")  # a file kconvert did not write makes it the user's
    with pytest.raises(UsageError, match="not a fix output kconvert wrote") as e:
        _write(src, [], tmp_path / "out", force=True)
    assert "--force" not in str(e.value)
    assert (tmp_path / "out" / "stale.safetensors").read_text() == "x"
    assert sorted(os.listdir(tmp_path)) == ["in", "out"]


def test_writing_into_or_over_the_input_is_refused(tmp_path):
    src = write_draft(tmp_path / "in")
    with pytest.raises(UsageError, match="is the input"):
        _write(src, [], src, force=True)
    with pytest.raises(UsageError, match="inside the input"):
        _write(src, [], src / "fixed")
    with pytest.raises(UsageError, match="contains the input"):
        _write(src, [], tmp_path, force=True)


def test_dropping_every_tensor_of_a_shard_omits_that_shard(tmp_path):
    tensors = draft_tensors()
    src = write_draft(tmp_path / "in", tensors=tensors, shards=3)
    ck = _open(src)
    last = sorted(set(ck.index.values()))[-1]
    res = _write(src, [DropTensor(n) for n, s in ck.index.items() if s == last], tmp_path / "out")
    assert not (tmp_path / "out" / last).exists() and last in res.skipped
    assert last not in set(_open(tmp_path / "out").index.values())


def test_real_shape_sparse_checkpoint_stays_sparse(tmp_path):
    """A [163840, 7168] bf16 lm_head header over a hole: holes are detected (SEEK_DATA) and left as holes
    in the output, so the output takes no more disk than the input's real bytes."""
    src = write_real_shape_draft(tmp_path / "in")
    ck = _open(src)
    assert ck.tensors["lm_head.weight"].shape == (163840, 7168)
    res = _write(src, _midlayer_renames(ck) + [RewriteD2TOffsets()], tmp_path / "out")
    out = tmp_path / "out"
    for f in res.files:
        st = os.stat(out / f)
        assert st.st_blocks * 512 < 16 * 1024 * 1024, (f, st.st_size, st.st_blocks)
    assert sum(os.stat(out / f).st_size for f in res.files) > 3 * 10**9
    o = _open(out)
    np.testing.assert_array_equal(o.read_array("d2t"), ck.read_array("d2t") - np.arange(len(ck.read_array("d2t"))))
    assert o.tensors["lm_head.weight"].shape == (163840, 7168)


def test_written_headers_are_padded_and_contiguous(tmp_path):
    src = write_draft(tmp_path / "in", tensors={
        "a": ("F32", (3,), np.arange(3, dtype=np.float32)),
        "b": ("BOOL", (5,), np.ones(5, bool)),
        "c": ("I64", (1,), np.array([7])),
    })
    _write(src, [RenameTensor("b", "bb")], tmp_path / "out")
    raw = (tmp_path / "out" / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    assert (8 + n) % 8 == 0 and hdr["__metadata__"] == {"format": "pt"}
    spans = sorted(v["data_offsets"] for k, v in hdr.items() if k != "__metadata__")
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] == len(raw) - 8 - n
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="numpy") as g:
        assert g.get_tensor("bb").tolist() == [True] * 5 and g.get_tensor("c").tolist() == [7]


def test_write_safetensors_factory_holes_take_no_disk(tmp_path):
    p = write_safetensors(tmp_path / "x.safetensors", {"w": ("BF16", (16384, 4096), None)})
    assert os.stat(p).st_size > 100_000_000 and os.stat(p).st_blocks * 512 < 1_000_000


def test_a_known_input_hash_is_reused_not_recomputed(tmp_path):
    src = write_draft(tmp_path / "in")
    ck = _open(src)
    ck.files["model.safetensors"].sha256 = "ab" * 32
    res = write_checkpoint(ck, [], tmp_path / "out", provenance={})
    assert res.input_files["model.safetensors"]["sha256"] == "ab" * 32


def test_shards_written_by_parallel_workers_equal_a_sequential_write(tmp_path):
    src = write_draft(tmp_path / "in", shards=3)
    ck = _open(src)
    seq = _write(src, _midlayer_renames(ck) + [RewriteD2TOffsets()], tmp_path / "seq", workers=1)
    par = _write(src, _midlayer_renames(_open(src)) + [RewriteD2TOffsets()], tmp_path / "par", workers=3)
    assert par.files == seq.files and par.input_files == seq.input_files
    a, b = sha256_tree(tmp_path / "seq"), sha256_tree(tmp_path / "par")
    a.pop("kconvert.json"), b.pop("kconvert.json")  # its creation time may differ
    assert a == b


def test_no_fsync_writes_the_same_bytes(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    src = write_draft(tmp_path / "in", shards=2)
    a = _write(src, [RewriteD2TOffsets()], tmp_path / "a", durable=False)
    assert calls == []
    b = _write(src, [RewriteD2TOffsets()], tmp_path / "b")
    assert len(calls) >= 4  # files and both folders
    assert a.files == b.files


def test_a_failing_shard_worker_stops_the_others_and_leaves_nothing(tmp_path, monkeypatch):
    import kconvert.writer.stream as stream

    src = write_draft(tmp_path / "in", shards=3)
    real = stream.write_shard

    def failing(s, ckpt, shard, *a, **kw):
        if shard.startswith("model-00002"):
            s.current = shard  # as the real one does before it writes
            raise OSError(28, "No space left on device")
        return real(s, ckpt, shard, *a, **kw)

    monkeypatch.setattr(stream, "write_shard", failing)
    with pytest.raises(InputError, match=r"writing model-00002-of-00003.safetensors failed: no space left on device"):
        _write(src, [], tmp_path / "out", workers=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
