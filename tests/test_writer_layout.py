"""kconvert/writer/layout.py against facts outside it (issue #30: the survivors of its mutation run).

Expected values come from: the input files themselves, read as the safetensors format defines them (an 8-byte
little-endian header length, then a JSON header whose `data_offsets` give each tensor's span and so the data order;
`__metadata__` is the one reserved key: https://github.com/huggingface/safetensors README "Format"), parsed here
with json and struct rather than by kconvert's reader; byte sizes derived by hand from shapes and dtypes
(BF16 2 bytes, I64 8, BOOL 1); vLLM's and SGLang's reading of `d2t` as offsets (target id = draft id + d2t[draft
id]) and of `t2d` as a boolean mask over the target vocabulary (docs/formats-and-engines.md#vllm-032-loading-rules); ASCII's control
characters (0-31); and the fix command's refusal messages, which a user reads, derived by hand from the op and the
input. All in-process, milliseconds each (one 64 MiB sparse read).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from kconvert.errors import InputError, UsageError
from kconvert.source.checkpoint import Checkpoint, load_folder
from kconvert.writer.layout import build_layout
from kconvert.writer.ops import (
    CastTensor,
    DropTensor,
    RebuildT2D,
    RenameTensor,
    ReselectLmHead,
    RewriteD2TOffsets,
    SetConfig,
)
from tests.writer_factories import draft_tensors, write_draft, write_full_lm_head, write_safetensors

# draft_tensors() defaults: hidden 8, draft vocab 16, target vocab 64, BF16 weights, I64 d2t, BOOL t2d.
NAMES = list(draft_tensors())


def _open(p: Path) -> Checkpoint:
    return load_folder(p, ref=str(p))


def _header(path: Path) -> dict:
    """The safetensors header as the format defines it: u64 little-endian length, then JSON."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def _bytes(t) -> bytes:
    return b"".join(bytes(c) for c in t.chunks())


def _msg(excinfo) -> str:
    return excinfo.value.message


def _refused(ck, ops, kind=UsageError) -> str:
    with pytest.raises(kind) as e:
        build_layout(ck, ops)
    return _msg(e)


@pytest.fixture
def draft(tmp_path) -> Path:
    return write_draft(tmp_path / "in")


# --- the plan with no tensor ops: every input tensor, in the file's data order -------------------------------------

def test_no_ops_keeps_every_tensor_in_data_order_with_its_size(draft):
    h = _header(draft / "model.safetensors")
    meta = h.pop("__metadata__")
    by_offset = sorted(h, key=lambda n: h[n]["data_offsets"][0])
    layout = build_layout(_open(draft), [SetConfig(("x",), 1)])
    assert list(layout.shards) == ["model.safetensors"]
    ts = layout.shards["model.safetensors"]
    assert [t.name for t in ts] == by_offset
    assert {t.name: t.nbytes for t in ts} == {n: h[n]["data_offsets"][1] - h[n]["data_offsets"][0] for n in h}
    assert {t.name: (t.dtype, list(t.shape)) for t in ts} == {n: (h[n]["dtype"], h[n]["shape"]) for n in h}
    assert layout.sharded is False
    assert layout.shard_metadata == {"model.safetensors": meta}
    # by hand: fc [8, 24] + q [8, 16] + k, v [4, 16] + o [8, 8] + gate, up [16, 8] + down [8, 16] + lm_head [16, 8]
    # + 4 norms [8], all BF16, then d2t 16 x I64 and t2d 64 x BOOL
    hand = 2 * (192 + 128 + 64 + 64 + 64 + 128 + 128 + 128 + 128 + 4 * 8) + 16 * 8 + 64
    assert layout.total_tensor_bytes == hand == 2304
    assert set(layout.tensors) == set(h)


def test_tensors_keep_the_data_order_across_names_that_sort_otherwise(tmp_path):
    """Data order is the file's `data_offsets`, not the names' order: z first, then a."""
    write_draft(tmp_path / "in", tensors={"z": ("F32", (2,), np.zeros(2)), "a": ("F32", (3,), np.ones(3))})
    layout = build_layout(_open(tmp_path / "in"), [])
    assert [t.name for t in layout.shards["model.safetensors"]] == ["z", "a"]


def test_shard_metadata_is_a_copy(draft):
    ck = _open(draft)
    layout = build_layout(ck, [])
    layout.shard_metadata["model.safetensors"]["x"] = "y"
    assert ck.shard_metadata["model.safetensors"] == {"format": "pt"}


# --- shards -------------------------------------------------------------------------------------------------------

def test_sharded_input_stays_sharded_and_every_shard_keeps_its_tensors(tmp_path):
    src = write_draft(tmp_path / "in", shards=3)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    layout = build_layout(_open(src), [])
    assert layout.sharded is True
    assert {t.name: sh for sh, ts in layout.shards.items() for t in ts} == index


def test_a_shard_emptied_by_drops_is_left_out_when_others_remain(tmp_path):
    src = write_draft(tmp_path / "in", shards=3)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    first = "model-00001-of-00003.safetensors"
    layout = build_layout(_open(src), [DropTensor(n) for n, sh in index.items() if sh == first])
    assert sorted(layout.shards) == ["model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    assert layout.sharded is True


def test_the_only_shard_is_kept_even_when_every_tensor_goes(draft):
    layout = build_layout(_open(draft), [DropTensor(n) for n in NAMES])
    assert layout.shards == {"model.safetensors": []} and layout.total_tensor_bytes == 0
    assert layout.sharded is False


def test_two_files_without_an_index_are_written_as_a_sharded_checkpoint(tmp_path):
    """Two safetensors files and no index: more than one shard out, so the output gets an index."""
    t = draft_tensors()
    write_safetensors(tmp_path / "in" / "a.safetensors", {n: t[n] for n in NAMES[:5]}, {"format": "pt"})
    write_safetensors(tmp_path / "in" / "b.safetensors", {n: t[n] for n in NAMES[5:]})
    (tmp_path / "in" / "config.json").write_text("{}")
    ck = _open(tmp_path / "in")
    assert ck.index is None
    layout = build_layout(ck, [])
    assert layout.sharded is True and sorted(layout.shards) == ["a.safetensors", "b.safetensors"]
    assert layout.shard_metadata == {"a.safetensors": {"format": "pt"}, "b.safetensors": {}}


def test_a_draft_without_local_files_is_refused(draft):
    ck = _open(draft)
    ck.root = None
    assert _refused(ck, [], InputError) == f"{ck.ref}: fix needs the checkpoint's files locally (download it first)"


def test_a_missing_shard_is_refused(tmp_path):
    src = write_draft(tmp_path / "in", shards=2)
    ck = _open(src)
    (src / "model-00002-of-00002.safetensors").unlink()
    assert _refused(ck, [], InputError) == ("model-00002-of-00002.safetensors: not available locally; "
                                            "fix needs every shard on disk")


def test_an_unknown_op_is_refused_by_its_type_name(draft):
    class Shrink:
        kind = "shrink"

    assert _refused(_open(draft), [Shrink()]) == "unknown op Shrink"


# --- rename / drop -------------------------------------------------------------------------------------------------

def test_rename_keeps_the_tensor_where_it_was(draft):
    layout = build_layout(_open(draft), [RenameTensor("midlayer.hidden_norm.weight", "layers.0.hidden_norm.weight")])
    names = [t.name for t in layout.shards["model.safetensors"]]
    assert names == [n.replace("midlayer.hidden_norm", "layers.0.hidden_norm") for n in NAMES]


def test_rename_to_itself_changes_nothing(draft):
    layout = build_layout(_open(draft), [RenameTensor("fc.weight", "fc.weight")])
    assert [t.name for t in layout.shards["model.safetensors"]] == NAMES


def test_rename_onto_an_existing_name_is_refused(draft):
    assert _refused(_open(draft), [RenameTensor("fc.weight", "norm.weight")]) == (
        "rename 'fc.weight' -> 'norm.weight': a tensor of that name already exists")


def test_renames_chain_and_a_freed_name_can_be_taken(draft):
    """norm -> tmp, then fc -> norm (now free): fc's bytes under norm's name, at fc's place."""
    layout = build_layout(_open(draft), [RenameTensor("norm.weight", "tmp"), RenameTensor("fc.weight", "norm.weight")])
    ts = layout.shards["model.safetensors"]
    assert ts[0].name == "norm.weight" and ts[0].shape == (8, 24)
    assert "tmp" in layout.tensors and "fc.weight" not in layout.tensors


@pytest.mark.parametrize("bad", ["", "__metadata__", "a\nb", "a\x1fb", "\x00", "x.\x7f", "x.\x9b", 5, None])
def test_rename_to_an_invalid_name_is_refused(draft, bad):
    """'' is no name; `__metadata__` is the format's reserved key; control characters (C0, DEL and C1, as the
    header reader refuses them: issue #45) are refused."""
    assert _refused(_open(draft), [RenameTensor("fc.weight", bad)]) == (
        f"rename 'fc.weight': new name {bad!r} is not a valid tensor name")


@pytest.mark.parametrize("good", ["a b", "x.\u00e9", "layers.0.fc.weight"])
def test_rename_to_names_with_printable_characters_is_allowed(draft, good):
    """The space (ASCII 32) and letters beyond ASCII are not control characters."""
    assert good in build_layout(_open(draft), [RenameTensor("fc.weight", good)]).tensors


def test_an_op_on_a_missing_tensor_names_the_op_kind_and_the_tensor(draft):
    assert _refused(_open(draft), [DropTensor("d2t"), DropTensor("d2t")]) == (
        "op 'drop-tensor' names tensor 'd2t', which the checkpoint does not hold (at this point of the plan)")
    assert _refused(_open(draft), [RenameTensor("nope", "x")]) == (
        "op 'rename-tensor' names tensor 'nope', which the checkpoint does not hold (at this point of the plan)")


def test_drop_removes_only_that_tensor(draft):
    layout = build_layout(_open(draft), [DropTensor("t2d")])
    assert [t.name for t in layout.shards["model.safetensors"]] == [n for n in NAMES if n != "t2d"]


# --- d2t: absolute ids to offsets ----------------------------------------------------------------------------------

def _with_d2t(tmp_path, values, dtype="I64", extra=None) -> Checkpoint:
    tensors = {"fc.weight": ("F32", (2, 2), np.zeros((2, 2))), "d2t": (dtype, (len(values),), np.array(values))}
    tensors.update(extra or {})
    write_draft(tmp_path / "in", tensors=tensors)
    return _open(tmp_path / "in")


def test_d2t_absolute_ids_become_offsets_in_the_same_dtype(tmp_path):
    """Absolute [0, 5, 7, 100] -> offsets [0-0, 5-1, 7-2, 100-3] = [0, 4, 5, 97], stored as I32 little-endian.
    An absolute id 0 is a valid target id, not a negative one."""
    ck = _with_d2t(tmp_path, [0, 5, 7, 100], "I32")
    t = build_layout(ck, [RewriteD2TOffsets()]).tensors["d2t"]
    assert t.dtype == "I32" and t.shape == (4,) and t.copy_of is None
    assert _bytes(t) == struct.pack("<4i", 0, 4, 5, 97)


def test_d2t_with_negative_ids_is_refused_naming_the_smallest(tmp_path):
    ck = _with_d2t(tmp_path, [3, -1, -4, 9])
    assert _refused(ck, [RewriteD2TOffsets()]) == (
        "rewrite d2t: holds negative ids (-4), not absolute target ids")


def test_d2t_of_a_two_d_tensor_is_refused(draft):
    assert _refused(_open(draft), [RewriteD2TOffsets(name="fc.weight")]) == (
        "op 'd2t-absolute-to-offsets': fc.weight has shape [8, 24], expected a 1-D tensor")


def test_d2t_larger_than_64_mib_is_refused_and_64_mib_is_read(tmp_path):
    """checkpoint.MAX_SMALL_TENSOR_BYTES is 64 MiB: 8 Mi I64 values (exactly 64 MiB, a hole of zeros) are read and
    rewritten; one more value (64 MiB + 8 bytes) is refused."""
    n = 8 * 1024 * 1024
    write_draft(tmp_path / "ok", tensors={"d2t": ("I64", (n,), None)})
    t = build_layout(_open(tmp_path / "ok"), [RewriteD2TOffsets()]).tensors["d2t"]
    assert t.nbytes == 8 * n and _bytes(t)[-8:] == struct.pack("<q", -(n - 1))  # absolute 0 at id n-1: -(n-1)
    write_draft(tmp_path / "big", tensors={"d2t": ("I64", (n + 1,), None)})
    assert _refused(_open(tmp_path / "big"), [RewriteD2TOffsets()]) == (
        f"op 'd2t-absolute-to-offsets': d2t is {8 * (n + 1)} bytes, too large for a token map")


def test_a_token_map_written_earlier_in_the_plan_is_read_from_its_new_bytes(tmp_path):
    """t2d rebuilt earlier in the plan (BOOL bytes, no integer values): a later d2t rewrite of it reads those bytes
    and finds a BOOL tensor, not an integer one."""
    ck = _with_d2t(tmp_path, [0, 1])
    msg = _refused(ck, [RebuildT2D(name="m", target_vocab_size=4), RewriteD2TOffsets(name="m")], InputError)
    assert msg == "expected an integer tensor, found BOOL"


def test_d2t_rewritten_twice_reads_the_first_rewrites_values(tmp_path):
    """[10, 11, 12] -> [10, 10, 10] -> [10, 9, 8]: the second op sees the first one's output."""
    ck = _with_d2t(tmp_path, [10, 11, 12])
    t = build_layout(ck, [RewriteD2TOffsets(), RewriteD2TOffsets()]).tensors["d2t"]
    assert _bytes(t) == struct.pack("<3q", 10, 9, 8)


# --- t2d: rebuilt from d2t offsets ---------------------------------------------------------------------------------

def test_rebuild_t2d_replaces_the_mask_in_place(tmp_path):
    """Offsets [0, 4, 5, 97] reach target ids 0, 5, 7, 100 of 101."""
    ck = _with_d2t(tmp_path, [0, 4, 5, 97], extra={"t2d": ("BOOL", (3,), np.zeros(3, bool)),
                                                   "norm.weight": ("F32", (2,), np.ones(2))})
    layout = build_layout(ck, [RebuildT2D(target_vocab_size=101)])
    t = layout.tensors["t2d"]
    assert t.dtype == "BOOL" and t.shape == (101,)
    mask = np.frombuffer(_bytes(t), np.uint8)
    assert np.flatnonzero(mask).tolist() == [0, 5, 7, 100] and set(mask.tolist()) == {0, 1}
    assert [x.name for x in layout.shards["model.safetensors"]] == ["fc.weight", "d2t", "t2d", "norm.weight"]


def test_rebuild_t2d_creates_a_missing_mask_after_the_inputs_tensors(tmp_path):
    ck = _with_d2t(tmp_path, [0, 0], extra={"norm.weight": ("F32", (2,), np.ones(2))})
    layout = build_layout(ck, [RebuildT2D(target_vocab_size=2)])
    assert [x.name for x in layout.shards["model.safetensors"]] == ["fc.weight", "d2t", "norm.weight", "t2d"]
    assert _bytes(layout.tensors["t2d"]) == b"\x01\x01" and layout.tensors["t2d"].nbytes == 2


def test_rebuild_t2d_over_a_vocabulary_of_one(tmp_path):
    """The smallest positive vocabulary: one draft id mapping to target id 0."""
    ck = _with_d2t(tmp_path, [0])
    assert _bytes(build_layout(ck, [RebuildT2D(target_vocab_size=1)]).tensors["t2d"]) == b"\x01"


@pytest.mark.parametrize("vocab", [0, -64, 64.0, "64", None])
def test_rebuild_t2d_needs_a_positive_integer_vocabulary(tmp_path, vocab):
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [RebuildT2D(target_vocab_size=vocab)]) == (
        "rebuild t2d: target_vocab_size must be a positive integer")


def test_rebuild_t2d_refuses_ids_past_the_vocabulary(tmp_path):
    """Offsets [0, 3] reach target ids 0 and 4; a vocabulary of 4 ends at id 3."""
    ck = _with_d2t(tmp_path, [0, 3])
    assert _refused(ck, [RebuildT2D(target_vocab_size=4)], InputError) == (
        "rebuild t2d from d2t: draft id 1 maps to target id 4, outside a vocabulary of 4")


def test_new_tensors_keep_their_creation_order_after_a_rename(tmp_path):
    """m1 then m2 created (both after the inputs), then m1 renamed to m3: m3 still comes before m2."""
    ck = _with_d2t(tmp_path, [0, 0])
    layout = build_layout(ck, [RebuildT2D(name="m1", target_vocab_size=2), RebuildT2D(name="m2", target_vocab_size=2),
                               RenameTensor("m1", "m3")])
    assert [x.name for x in layout.shards["model.safetensors"]] == ["fc.weight", "d2t", "m3", "m2"]


def test_a_new_tensor_with_an_invalid_name_is_refused(tmp_path):
    ck = _with_d2t(tmp_path, [0, 0])
    assert _refused(ck, [RebuildT2D(name="__metadata__", target_vocab_size=2)]) == (
        "rebuild: '__metadata__' is not a valid tensor name")


def test_new_tensors_go_into_the_shard_of_their_d2t(tmp_path):
    src = write_draft(tmp_path / "in", shards=3, d2t_absolute=False)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    layout = build_layout(_open(src), [DropTensor("t2d"), RebuildT2D(target_vocab_size=64)])
    assert layout.shards[index["d2t"]][-1].name == "t2d"


# --- lm_head re-selection ------------------------------------------------------------------------------------------

def test_reselect_lm_head_takes_the_sources_dtype_and_the_rows_d2t_reaches(tmp_path):
    """Source row r holds r (writer_factories.write_full_lm_head, F32 [64, 8]); d2t offsets [1, 1, 3] -> rows 1, 2,
    5; the draft's BF16 [3, 8] lm_head becomes F32 [3, 8]."""
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8, dtype="F32")
    ck = _with_d2t(tmp_path, [1, 1, 3], extra={"lm_head.weight": ("BF16", (3, 8), np.zeros((3, 8)))})
    t = build_layout(ck, [ReselectLmHead(source=str(target))]).tensors["lm_head.weight"]
    assert t.dtype == "F32" and t.shape == (3, 8) and t.copy_of is None and t.values is None
    rows = np.frombuffer(_bytes(t), "<f4").reshape(3, 8)
    assert rows[:, 0].tolist() == [1.0, 2.0, 5.0] and (rows == rows[:, :1]).all()


def test_reselect_lm_head_creates_a_missing_head(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8, dtype="BF16")
    ck = _with_d2t(tmp_path, [0, 9])
    layout = build_layout(ck, [ReselectLmHead(source=str(target))])
    t = layout.tensors["lm_head.weight"]
    assert t.dtype == "BF16" and t.shape == (2, 8) and t.nbytes == 32
    assert [x.name for x in layout.shards["model.safetensors"]] == ["fc.weight", "d2t", "lm_head.weight"]


def test_reselect_lm_head_refuses_another_hidden_size(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1], extra={"lm_head.weight": ("F32", (2, 16), np.zeros((2, 16)))})
    assert _refused(ck, [ReselectLmHead(source=str(target))]) == (
        "re-select lm_head.weight: hidden size 16 != source's 8")


def test_reselect_lm_head_refuses_a_one_d_source(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    write_safetensors(target / "model.safetensors", {"lm_head.weight": ("F32", (64,), np.zeros(64))})
    assert _refused(ck, [ReselectLmHead(source=str(target))]) == (
        "re-select lm_head.weight: source lm_head.weight has shape [64], expected [vocab, hidden]")


def test_reselect_lm_head_refuses_rows_past_the_sources_vocabulary(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 63])
    assert _refused(ck, [ReselectLmHead(source=str(target))], InputError) == (
        f"re-select lm_head.weight from {target}: draft id 1 maps to target id 64, outside a vocabulary of 64")


def test_reselect_lm_head_without_a_source_is_refused(tmp_path):
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [ReselectLmHead()]) == "re-select lm_head.weight: no source checkpoint given"


def test_reselect_lm_head_from_a_source_without_that_tensor_names_it(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [ReselectLmHead(source=str(target), source_tensor="output.weight")]) == (
        f"re-select lm_head.weight: source {target} has no tensor 'output.weight'")


def test_reselect_lm_head_from_an_unreadable_source_says_why(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{nope")
    ck = _with_d2t(tmp_path, [0, 1])
    msg = _refused(ck, [ReselectLmHead(source=str(bad))], InputError)
    assert msg.startswith(f"re-select lm_head.weight: source {bad}: {bad}/config.json: not valid JSON")


def test_reselect_lm_head_from_a_file_is_refused_as_not_a_folder(tmp_path):
    f = tmp_path / "lm.safetensors"
    f.write_bytes(b"x")
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [ReselectLmHead(source=str(f))], InputError) == (
        f"re-select lm_head.weight: source {f}: {f}: not a folder (give the checkpoint's folder, not a file)")


def test_reselect_lm_head_from_a_source_whose_shard_is_missing(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    src = load_folder(target, ref=str(target))
    (target / "model.safetensors").unlink()
    from kconvert.writer import layout as layout_mod

    orig = layout_mod.load_folder
    try:
        layout_mod.load_folder = lambda p, ref: src  # the source as read before its shard went away
        assert _refused(ck, [ReselectLmHead(source=str(target))], InputError) == (
            f"re-select lm_head.weight: {target}/model.safetensors is not available locally")
    finally:
        layout_mod.load_folder = orig


# --- casts ---------------------------------------------------------------------------------------------------------

def test_cast_bf16_to_f32_gives_the_exact_values(draft):
    """BF16 -> F32 is exact: the F32 bits are the BF16 bits shifted into the top half (read from the file)."""
    ck = _open(draft)
    info = ck.tensors["norm.weight"]
    raw = (draft / "model.safetensors").read_bytes()[info.start:info.end]
    t = build_layout(ck, [CastTensor("norm.weight", "F32")]).tensors["norm.weight"]
    assert t.dtype == "F32" and t.copy_of is None and t.values is None and t.nbytes == 32
    assert _bytes(t) == (np.frombuffer(raw, "<u2").astype("<u4") << 16).tobytes()


def test_two_casts_chain(draft):
    """BF16 -> F32 -> F16 equals numpy's F32 -> F16 of the exact BF16 values."""
    ck = _open(draft)
    info = ck.tensors["norm.weight"]
    raw = (draft / "model.safetensors").read_bytes()[info.start:info.end]
    exact = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4")
    t = build_layout(ck, [CastTensor("norm.weight", "F32"), CastTensor("norm.weight", "F16")]).tensors["norm.weight"]
    assert t.dtype == "F16" and _bytes(t) == exact.astype("<f2").tobytes()


def test_cast_to_the_same_dtype_keeps_the_byte_copy(draft):
    ck = _open(draft)
    t = build_layout(ck, [CastTensor("fc.weight", "BF16")]).tensors["fc.weight"]
    assert t.copy_of == ck.tensors["fc.weight"] and t.chunks is None and t.dtype == "BF16"


@pytest.mark.parametrize("name, dtype, have", [("d2t", "F32", "I64"), ("fc.weight", "I8", "BF16"),
                                               ("t2d", "BF16", "BOOL")])
def test_cast_outside_the_three_float_dtypes_is_refused(draft, name, dtype, have):
    assert _refused(_open(draft), [CastTensor(name, dtype)]) == (
        f"cast {name}: only F32, F16 and BF16 convert ({have} -> {dtype})")


@pytest.mark.parametrize("op, kind, name", [
    (RewriteD2TOffsets(name="nope"), "d2t-absolute-to-offsets", "nope"),
    (RebuildT2D(d2t_name="nope", target_vocab_size=4), "rebuild-t2d", "nope"),
    (ReselectLmHead(d2t_name="nope", source="/nowhere"), "reselect-lm-head", "nope"),
    (CastTensor("nope", "F32"), "cast-tensor", "nope"),
])
def test_every_op_on_a_missing_tensor_names_its_kind(tmp_path, op, kind, name):
    """The op's `kind` (kconvert/writer/ops.py, as kconvert.json records it) and the tensor it names."""
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [op]) == (
        f"op '{kind}' names tensor '{name}', which the checkpoint does not hold (at this point of the plan)")


def test_rebuild_and_reselect_from_a_two_d_d2t_name_their_kind(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [RebuildT2D(d2t_name="fc.weight", target_vocab_size=4)]) == (
        "op 'rebuild-t2d': fc.weight has shape [2, 2], expected a 1-D tensor")
    assert _refused(ck, [ReselectLmHead(d2t_name="fc.weight", source=str(target))]) == (
        "op 'reselect-lm-head': fc.weight has shape [2, 2], expected a 1-D tensor")


def test_reselect_into_an_invalid_name_is_refused(tmp_path):
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [ReselectLmHead(name="__metadata__", source=str(target))]) == (
        "re-select: '__metadata__' is not a valid tensor name")


def test_reselect_replaces_a_one_d_head_without_a_hidden_size_check(tmp_path):
    """An existing head that is not [rows, hidden] has no hidden size to compare: it is replaced by [2, 8] rows,
    rows 0 + 0 and 1 + 1 of the source."""
    target = write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1], extra={"lm_head.weight": ("F32", (16,), np.zeros(16))})
    t = build_layout(ck, [ReselectLmHead(source=str(target))]).tensors["lm_head.weight"]
    assert t.shape == (2, 8) and np.frombuffer(_bytes(t), "<f4")[::8].tolist() == [0.0, 2.0]


def test_reselect_from_a_name_that_is_neither_a_folder_nor_a_hub_id(tmp_path, monkeypatch):
    """A source that is no folder is looked up as a Hub id (kconvert/source/__init__.py open_checkpoint); a name
    without the org/name form is neither, and the refusal says so."""
    monkeypatch.chdir(tmp_path)
    ck = _with_d2t(tmp_path, [0, 1])
    assert _refused(ck, [ReselectLmHead(source="no-such-draft")], InputError) == (
        "re-select lm_head.weight: source no-such-draft: no-such-draft: neither a local folder nor a Hub id of the "
        "form org/name[@revision]")


def test_reselect_from_a_home_relative_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_full_lm_head(tmp_path / "t", vocab=64, hidden=8)
    ck = _with_d2t(tmp_path, [0, 1])
    t = build_layout(ck, [ReselectLmHead(source="~/t")]).tensors["lm_head.weight"]
    assert np.frombuffer(_bytes(t), "<f4")[::8].tolist() == [0.0, 2.0]


def test_a_cast_of_a_tensor_whose_file_was_truncated_names_file_and_tensor(tmp_path):
    """norm.weight F32 [2] is the last 8 bytes of the data; the file loses 4 of them after it was read."""
    ck = _with_d2t(tmp_path, [0, 1], extra={"norm.weight": ("F32", (2,), np.ones(2))})
    p = tmp_path / "in" / "model.safetensors"
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size - 4)
    t = build_layout(ck, [CastTensor("norm.weight", "BF16")]).tensors["norm.weight"]
    with pytest.raises(InputError) as e:
        _bytes(t)
    assert _msg(e) == "model.safetensors [norm.weight]: file ended 4 bytes early (truncated while reading?)"


def test_two_shards_with_one_emptied_leave_one_shard_still_indexed(tmp_path):
    """The input had an index (model.safetensors.index.json): the one shard left is written with an index too."""
    src = write_draft(tmp_path / "in", shards=2)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    first = "model-00001-of-00002.safetensors"
    layout = build_layout(_open(src), [DropTensor(n) for n, sh in index.items() if sh == first])
    assert list(layout.shards) == ["model-00002-of-00002.safetensors"] and layout.sharded is True


def test_a_checkpoint_whose_only_file_holds_no_tensors_keeps_that_file(tmp_path):
    """A safetensors file with a header of `__metadata__` only (no tensors) is still the checkpoint's one shard."""
    write_draft(tmp_path / "in", tensors={})
    ck = _open(tmp_path / "in")
    layout = build_layout(ck, [])
    assert layout.shards == {"model.safetensors": []} and layout.shard_metadata == {"model.safetensors": {
        "format": "pt"}}


def test_a_tensor_file_without_a_safetensors_header_gets_empty_shard_metadata(tmp_path):
    """A weight file kconvert described without a safetensors header (a PyTorch file read statically:
    checkpoint.py records its tensors but no `__metadata__` for it) has no shard metadata to keep: {}."""
    from kconvert.source.checkpoint import FileEntry
    from kconvert.source.safetensors_header import TensorInfo

    (tmp_path / "weights.bin").write_bytes(b"\x00" * 16)
    info = TensorInfo(name="w", file="weights.bin", dtype="F32", shape=(4,), start=0, end=16)
    ck = Checkpoint(ref="x", kind="local", root=tmp_path, files={"weights.bin": FileEntry("weights.bin", 16)},
                    tensors={"w": info})
    layout = build_layout(ck, [])
    assert layout.shard_metadata == {"weights.bin": {}} and [t.name for t in layout.shards["weights.bin"]] == ["w"]
