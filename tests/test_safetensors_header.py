"""kconvert/source/safetensors_header.py: the one-line refusals of an index and a header, written out by hand
(issue #30: the survivors of its mutation run). Each expected line is derived in the test from the input given and
from the outside pieces it quotes: Python's own json error text, the safetensors format's rules, POSIX strerror
texts (ENOENT, EIO); every header refusal is checked against safetensors 0.8's own loader on the same bytes
(`safetensors.deserialize` refuses them too, except where a comment says kconvert is stricter)."""
from __future__ import annotations

import json
import os

import pytest

from kconvert.errors import HeaderError
from kconvert.source import safetensors_header as sh
from kconvert.source.safetensors_header import parse_index


def _refusal(raw: bytes, *args) -> str:
    with pytest.raises(HeaderError) as ei:
        parse_index(raw, *args)
    return str(ei.value)


def test_an_index_names_itself_by_default():
    """Expected: the file a sharded checkpoint's index lives in is `model.safetensors.index.json` (transformers'
    SAFE_WEIGHTS_INDEX_NAME); the refusal starts with that name."""
    assert _refusal(b'{"weight_map": []}') == "model.safetensors.index.json: index has no 'weight_map' object"


def test_an_index_without_a_weight_map_object_is_refused_by_name():
    """Expected: one line `<file>: <reason>`; a list is not an object (JSON)."""
    assert _refusal(b'{"weight_map": []}', "sub/idx.json") == "sub/idx.json: index has no 'weight_map' object"
    assert _refusal(b'[]', "idx.json") == "idx.json: index has no 'weight_map' object"


def test_an_index_that_is_not_json_quotes_pythons_json_error():
    """Expected: the reason is Python's json module's own message for the same text (json.loads), after
    'index is not valid JSON'."""
    raw = b'{"weight_map": '
    with pytest.raises(json.JSONDecodeError) as ei:
        json.loads(raw)
    assert _refusal(raw, "idx.json") == f"idx.json: index is not valid JSON: {ei.value}"


def test_an_index_that_is_not_utf8_is_refused_by_name():
    """Expected: 0xff never starts a UTF-8 sequence (RFC 3629): 'invalid start byte' at byte 0 (Python's codec)."""
    assert _refusal(b"\xff{}", "idx.json") == "idx.json: index is not UTF-8 (invalid start byte at byte 0)"


def test_the_index_cap_is_inclusive(monkeypatch):
    """Expected: a cap of N bytes admits N and refuses N + 1; the refusal gives both sizes (cap lowered here so that
    the boundary costs no 64 MB)."""
    raw = b'{"weight_map": {}}'
    monkeypatch.setattr(sh, "MAX_INDEX_BYTES", len(raw))
    assert parse_index(raw, "idx.json") == {}
    monkeypatch.setattr(sh, "MAX_INDEX_BYTES", len(raw) - 1)
    assert _refusal(raw, "idx.json") == f"idx.json: index is {len(raw)} bytes (cap {len(raw) - 1})"


def test_index_tensor_names_control_characters_refused_and_space_kept():
    """Expected: control characters are the code points below 32 (ASCII C0); a space (32) is a printable name."""
    assert parse_index(b'{"weight_map": {"a b": "s.safetensors"}}', "idx.json") == {"a b": "s.safetensors"}
    assert (_refusal(b'{"weight_map": {"a\\u001fb": "s.safetensors"}}', "idx.json")
            == "idx.json: tensor name 'a\\x1fb' is empty or holds control characters")
    assert (_refusal(b'{"weight_map": {"": "s.safetensors"}}', "idx.json")
            == "idx.json: tensor name '' is empty or holds control characters")


def test_an_index_shard_that_is_not_a_string_is_refused_by_name():
    """Expected: the weight_map maps names to file names (strings); a number names no file."""
    assert _refusal(b'{"weight_map": {"a": 3}}', "idx.json") == "idx.json: shard of 'a' is not a string"


def _path_refusal(root, rel, what="config.json", **kw) -> str:
    with pytest.raises(HeaderError) as ei:
        sh.check_relative_path(root, rel, what, **kw)
    return str(ei.value)


@pytest.mark.parametrize("rel, reason", [
    (3, "path 3 is not a non-empty string"),
    ("", "path '' is not a non-empty string"),
    (None, "path None is not a non-empty string"),
    ("a\x00b", "path 'a\\x00b' holds a NUL or backslash"),
    ("a\\b", "path 'a\\\\b' holds a NUL or backslash"),
    ("a\nerror: forged", "path 'a\\nerror: forged' holds control characters"),
    ("a\x1fb", "path 'a\\x1fb' holds control characters"),
    ("a\x7fb", "path 'a\\x7fb' holds control characters"),
    ("/etc/passwd", "path '/etc/passwd' is absolute; only paths inside the checkpoint folder are read"),
    ("C:evil", "path 'C:evil' is absolute; only paths inside the checkpoint folder are read"),
    ("C:", "path 'C:' is absolute; only paths inside the checkpoint folder are read"),
    ("../x", "path '../x' leaves the checkpoint folder or is malformed"),
    ("a/../../x", "path 'a/../../x' leaves the checkpoint folder or is malformed"),
    ("a//b", "path 'a//b' leaves the checkpoint folder or is malformed"),
    ("a/", "path 'a/' leaves the checkpoint folder or is malformed"),
])
def test_a_path_outside_the_folder_is_refused_in_one_line(tmp_path, rel, reason):
    """Expected: a path inside the folder is relative (POSIX: no leading '/'; Windows: no drive 'C:'), has no '..'
    or empty component, and no C0 control character or DEL (0x7f, ASCII); the refusal names the document."""
    assert _path_refusal(tmp_path, rel) == f"config.json: {reason}"


def test_paths_inside_the_folder_are_returned_as_given(tmp_path):
    """Expected: a plain relative path, one with a space (32, printable), a one-letter name (no drive) and '.' parts
    stay inside the folder."""
    for rel in ("model.safetensors", "sub dir/a b.safetensors", "a", "./x", "c", "XX/XXa"):
        assert sh.check_relative_path(tmp_path, rel, "config.json") == rel


def test_a_symlink_out_of_the_folder_is_refused_unless_inside_the_allowed_root(tmp_path):
    """Expected: realpath(3) of a symlink is its target; a target outside the folder escapes it, one inside
    `allowed_root` (the Hub cache's repo folder, whose snapshots link into blobs) does not."""
    repo = tmp_path / "repo"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"x")
    snap = repo / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to(repo / "blobs" / "abc")
    assert (_path_refusal(snap, "model.safetensors")
            == "config.json: path 'model.safetensors' resolves outside the checkpoint folder (symlink escape)")
    assert sh.check_relative_path(snap, "model.safetensors", "config.json", allowed_root=repo) == "model.safetensors"
    assert sh.check_relative_path(snap, ".", "config.json") == "."


def test_a_folder_that_does_not_exist_cannot_resolve(tmp_path):
    """Expected: resolve(strict=True) of a missing folder raises FileNotFoundError (pathlib); the refusal quotes it."""
    missing = tmp_path / "gone"
    with pytest.raises(FileNotFoundError) as ei:
        missing.resolve(strict=True)
    assert _path_refusal(missing, "a") == f"config.json: path 'a' cannot be resolved: {ei.value}"


# ------------------------------------------------------------------ headers: parse_header_bytes and kin ----
# Each blob is built here by hand from the format's rules (https://github.com/huggingface/safetensors, "Format"):
# 8 bytes little-endian u64 N, N bytes of JSON (which may be padded with spaces), then the data section, each
# tensor {dtype, shape, data_offsets [begin, end)} relative to the data section's start, byte counts
# prod(shape) * dtype size (F32: 4, BF16: 2, U8: 1). Every refusal is also one safetensors 0.8's own loader makes
# on the same bytes (safetensors.safe_load on the blob raises), and every acceptance one it makes too.

import struct  # noqa: E402

import safetensors  # noqa: E402


def blob(header: dict | bytes, data: bytes = b"", pad: int = 0) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    raw += b" " * pad
    return struct.pack("<Q", len(raw)) + raw + data


def _header_refusal(b: bytes, rel: str = "m.safetensors", *, loader_refuses: bool = True) -> str:
    n = struct.unpack("<Q", b[:8])[0]
    with pytest.raises(HeaderError) as ei:
        sh.parse_header_bytes(rel, b[8:8 + n], file_size=len(b))
    if loader_refuses:
        with pytest.raises(Exception):
            safetensors.deserialize(b)
    return str(ei.value)


def _ok(b: bytes):
    n = struct.unpack("<Q", b[:8])[0]
    h = sh.parse_header_bytes("m.safetensors", b[8:8 + n], file_size=len(b))
    safetensors.deserialize(b)  # the real loader takes it too
    return h


def t(dtype="F32", shape=(2,), offs=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offs)}


def test_a_good_header_gives_absolute_spans_sizes_and_metadata():
    """Two tensors, F32 [2] (8 bytes) then BF16 [2, 3] (12 bytes), header padded with 4 spaces: the data section
    starts at 8 + N (N counts the padding), a tensor's absolute span is data_start + its offsets."""
    hdr = {"__metadata__": {"format": "pt"}, "a": t(), "b": t("BF16", (2, 3), (8, 20))}
    b = blob(hdr, bytes(20), pad=4)
    n = len(json.dumps(hdr)) + 4
    h = _ok(b)
    assert (h.file, h.header_len, h.data_start, h.file_size, h.metadata) == ("m.safetensors", n, 8 + n, len(b),
                                                                             {"format": "pt"})
    a, bb = h.tensors["a"], h.tensors["b"]
    assert (a.name, a.file, a.dtype, a.shape, a.start, a.end, a.nbytes, a.numel) == (
        "a", "m.safetensors", "F32", (2,), 8 + n, 8 + n + 8, 8, 2)
    assert (bb.dtype, bb.shape, bb.start, bb.end, bb.nbytes, bb.numel) == ("BF16", (2, 3), 8 + n + 8, 8 + n + 20,
                                                                          12, 6)
    assert list(h.tensors) == ["a", "b"]
    # metadata null is no metadata (safetensors' Metadata: `__metadata__` is an Option)
    assert sh.parse_header_json("m", {"__metadata__": None}, data_start=10, file_size=10).metadata == {}
    assert sh.parse_header_json("m", {}, data_start=10, file_size=None).metadata == {}


def test_a_scalar_and_an_empty_tensor_take_prod_of_their_shape():
    """shape [] is a scalar: prod([]) = 1 element (4 bytes in F32); shape [0] holds no bytes."""
    h = _ok(blob({"s": t(shape=(), offs=(0, 4)), "z": t(shape=(0,), offs=(4, 4))}, bytes(4)))
    assert (h.tensors["s"].numel, h.tensors["s"].nbytes, h.tensors["z"].numel, h.tensors["z"].nbytes) == (1, 4, 0, 0)


def test_header_shape_refusals_name_the_file_and_what_is_wrong():
    assert _header_refusal(blob(b"[]")) == "m.safetensors: header is not a JSON object"
    assert _header_refusal(blob({"__metadata__": {"a": 1}})) == "m.safetensors: __metadata__ must map strings to strings"
    assert _header_refusal(blob({"__metadata__": []})) == "m.safetensors: __metadata__ must map strings to strings"
    # kconvert's own rules, stricter than the loader (which takes an empty name and a rank-9 shape): a name is
    # printed in one-line refusals, so it must be a visible one
    assert _header_refusal(blob({"": t()}, bytes(8)), loader_refuses=False) == \
        "m.safetensors ['']: tensor name is empty or holds control characters"
    assert _header_refusal(blob({"a\x1fb": t()}, bytes(8)), loader_refuses=False) == \
        "m.safetensors ['a\\x1fb']: tensor name is empty or holds control characters"
    assert _header_refusal(blob({"w": [1]})) == "m.safetensors [w]: entry is not an object"
    assert _header_refusal(blob({"w": {"dtype": "F32", "shape": [2]}}, bytes(8))) == \
        "m.safetensors [w]: entry must hold exactly dtype, shape, data_offsets (has ['dtype', 'shape'])"
    # an unknown key: the loader ignores it (serde's default), kconvert refuses a field no reader checks
    assert _header_refusal(blob({"w": {**t(), "extra": 1}}, bytes(8)), loader_refuses=False) == \
        "m.safetensors [w]: entry must hold exactly dtype, shape, data_offsets (has ['data_offsets', 'dtype', " \
        "'extra', 'shape'])"
    assert _header_refusal(blob({"w": t(dtype="F33")}, bytes(8))) == "m.safetensors [w]: unknown dtype 'F33'"
    assert _header_refusal(blob({"w": t(dtype=4)}, bytes(8))) == "m.safetensors [w]: unknown dtype 4"


def test_a_name_with_a_space_or_non_ascii_is_a_name():
    """Only code points below 32 are control characters here (C0: Unicode's Cc below U+0020); ' ' (32) and 'é'
    are ordinary name characters."""
    h = _ok(blob({" é": t()}, bytes(8)))
    assert list(h.tensors) == [" é"]


def test_shape_and_offsets_refusals():
    """Rank cap 8 (MAX_RANK), dimensions non-negative ints below 2**40, offsets two non-negative ints with
    begin <= end."""
    assert _header_refusal(blob({"w": t(shape=[1] * 9, offs=(0, 4))}, bytes(4)), loader_refuses=False) == \
        f"m.safetensors [w]: invalid shape {[1] * 9!r}"
    _ok(blob({"w": t(shape=[1] * 8, offs=(0, 4))}, bytes(4)))  # rank 8 is allowed
    assert _header_refusal(blob({"w": t(shape=[-1])}, bytes(8))) == "m.safetensors [w]: invalid shape [-1]"
    assert _header_refusal(blob({"w": t(shape=[2**40], offs=(0, 0))}), loader_refuses=False) == \
        f"m.safetensors [w]: invalid shape [{2**40}]"
    assert _header_refusal(blob({"w": t(shape=[True])}, bytes(8))) == "m.safetensors [w]: invalid shape [True]"
    assert _header_refusal(blob({"w": t(shape=[2.0])}, bytes(8))) == "m.safetensors [w]: invalid shape [2.0]"
    assert _header_refusal(blob({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, bytes(8))) == \
        "m.safetensors [w]: invalid shape 2"
    assert _header_refusal(blob({"w": t(offs=(0,))}, bytes(8))) == "m.safetensors [w]: invalid data_offsets [0]"
    assert _header_refusal(blob({"w": t(offs=(0, 8, 8))}, bytes(8))) == \
        "m.safetensors [w]: invalid data_offsets [0, 8, 8]"
    assert _header_refusal(blob({"w": t(offs=(-1, 7))}, bytes(8))) == "m.safetensors [w]: invalid data_offsets [-1, 7]"
    assert _header_refusal(blob({"w": t(offs=(8, 0))}, bytes(8))) == "m.safetensors [w]: invalid data_offsets [8, 0]"
    assert _header_refusal(blob({"w": t(offs=(False, 8))}, bytes(8))) == \
        "m.safetensors [w]: invalid data_offsets [False, 8]"
    assert _header_refusal(blob({"w": {"dtype": "F32", "shape": [2], "data_offsets": "0-8"}}, bytes(8))) == \
        "m.safetensors [w]: invalid data_offsets '0-8'"
    _ok(blob({"w": t(shape=[0], offs=(0, 0))}))  # begin == end: an empty tensor


def test_span_and_file_end_refusals_give_the_byte_counts():
    """F32 [2] is 2 x 4 = 8 bytes: a 12-byte span is refused with both figures; a span past the file's data
    names the absolute end (8 + N + end) and the file size."""
    assert _header_refusal(blob({"w": t(offs=(0, 12))}, bytes(12))) == \
        "m.safetensors [w]: byte span 12 != shape [2] x F32 = 8 bytes"
    hdr = {"w": t()}
    b = blob(hdr, bytes(4))
    n = len(json.dumps(hdr))
    assert _header_refusal(b) == (f"m.safetensors [w]: data ends at byte {8 + n + 8}, past the end of the file "
                                  f"({len(b)} bytes): truncated or lying header")
    _ok(blob(hdr, bytes(8)))  # ends exactly at the end of the file


def test_the_tensors_must_tile_the_data_section():
    """safetensors' Metadata::validate: sorted by offsets, each begins where the previous ended, the first at 0,
    the last at the end of the data (a hole, an overlap, trailing bytes: refused)."""
    assert _header_refusal(blob({"w": t(offs=(4, 12))}, bytes(12))) == (
        "m.safetensors [w]: data_offsets begin at 4, leaving a hole of 4 bytes at the start of the data section; "
        "safetensors requires the tensors to tile the data")
    assert _header_refusal(blob({"a": t(), "b": t(offs=(12, 20))}, bytes(20))) == (
        "m.safetensors [b]: data_offsets begin at 12, leaving a hole of 4 bytes after 'a'; "
        "safetensors requires the tensors to tile the data")
    assert _header_refusal(blob({"a": t(offs=(0, 8)), "b": t(offs=(4, 12))}, bytes(12))) == \
        "m.safetensors [b]: byte span [4, 12) overlaps that of 'a'"
    assert _header_refusal(blob({"a": t()}, bytes(11))) == (
        "m.safetensors: the data section holds 11 bytes but its tensors cover 8: 3 trailing bytes no tensor "
        "describes (safetensors refuses the file)")
    # in the header's order or not, tiling is by offsets: b listed first is fine
    h = _ok(blob({"b": t(offs=(8, 16)), "a": t()}, bytes(16)))
    assert list(h.tensors) == ["b", "a"]
    # an empty tensor at the end, after the last real one (sorted (8, 8) after (0, 8))
    _ok(blob({"a": t(), "z": t(shape=[0], offs=(8, 8))}, bytes(8)))
    # no tensors and no data: fine; no tensors and data: trailing bytes
    _ok(blob({}))
    assert _header_refusal(blob({}, b"x")) == (
        "m.safetensors: the data section holds 1 bytes but its tensors cover 0: 1 trailing bytes no tensor "
        "describes (safetensors refuses the file)")
    # a remote header (size unknown): tiling from 0 still checked, the end cannot be
    assert sh.parse_header_json("r", {"a": t()}, data_start=10, file_size=None).tensors["a"].end == 18


def test_the_tensor_count_cap_is_inclusive(monkeypatch):
    monkeypatch.setattr(sh, "MAX_TENSORS", 2)
    _ok(blob({"a": t(), "b": t(offs=(8, 16))}, bytes(16)))
    hdr = {"a": t(), "b": t(offs=(8, 16)), "c": t(offs=(16, 24))}
    assert _header_refusal(blob(hdr, bytes(24)), loader_refuses=False) == \
        "m.safetensors: header lists 3 entries (cap 2)"


def test_a_lone_surrogate_escape_is_refused_as_safetensors_refuses_it():
    """serde_json: "lone leading surrogate in hex escape"; Python's json reads the escape into a str that cannot
    be encoded as UTF-8."""
    raw = b'{"\\ud800": ' + json.dumps(t()).encode() + b"}"
    assert _header_refusal(blob(raw, bytes(8))) == (
        "m.safetensors: header is not valid JSON for safetensors: the string '\\ud800' holds a lone UTF-16 "
        "surrogate escape, which serde_json (safetensors' parser) refuses")
    raw = b'{"__metadata__": {"k": "\\udfff"}}'
    assert "'\\udfff' holds a lone UTF-16" in _header_refusal(blob(raw))
    assert sh._lone_surrogate(["ok", {"a": ["\ud800"]}]) == "\ud800"
    assert sh._lone_surrogate({"a": [1, "b", {"c": None}]}) is None


def test_minus_zero_is_a_float_to_safetensors_so_not_a_dimension():
    """serde_json reads `-0` as -0.0 (a float): not a u64 dimension; Python would read the integer 0."""
    assert _header_refusal(blob(b'{"w": {"dtype": "F32", "shape": [-0], "data_offsets": [0, 0]}}')) == \
        "m.safetensors [w]: invalid shape [-0.0]"
    assert sh._serde_int("7") == 7 and sh._serde_int("-0") == 0.0


def test_json_refusals_name_the_header():
    assert _header_refusal(blob(b'{"a": 1, "a": 2}')) == \
        "m.safetensors: header is not valid JSON: duplicate key 'a'"
    assert _header_refusal(blob(b"\xff{}")) == \
        "m.safetensors: header is not UTF-8 (invalid start byte at byte 0)"
    deep = b"[" * 65 + b"]" * 65
    assert _header_refusal(blob(deep)) == "m.safetensors: header nests deeper than 64 levels"
    # Python's json error text (json.decoder.JSONDecodeError: "Expecting value: line 1 column 1 (char 0)")
    assert _header_refusal(blob(b"nope")) == \
        "m.safetensors: header is not valid JSON: Expecting value: line 1 column 1 (char 0)"


def test_nesting_is_counted_outside_strings_only():
    """Brackets inside a string (even after an escaped quote) are text, not nesting: 64 levels of real nesting
    and a string of 100 '[' parse; 65 levels do not."""
    assert sh.loads_strict_json(b"[" * 64 + b"]" * 64, "header") is not None
    s = b'{"k": "\\"' + b"[" * 100 + b'"}'
    assert sh.loads_strict_json(s, "header") == {"k": '"' + "[" * 100}
    s = b'{"k": "\\\\", "j": ' + b"[" * 63 + b"]" * 63 + b"}"  # an escaped backslash ends the escape
    assert sh.loads_strict_json(s, "header")["k"] == "\\"
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(b'{"k": "\\\\", "j": ' + b"[" * 64 + b"]" * 64 + b"}", "header")
    assert str(ei.value) == "header nests deeper than 64 levels"
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(b"[[]]", "", max_depth=1)
    assert str(ei.value) == "nested deeper than 1 levels"
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(b"\xc3", "")
    assert str(ei.value) == "not UTF-8 (unexpected end of data at byte 0)"
    # closing brackets bring the depth back: many siblings at depth 1 are not deep
    assert sh.loads_strict_json(b"[" + b"[],".join([b""] * 100) + b"[]]", "header", max_depth=2) is not None
    # without serde, -0 is Python's integer 0
    assert sh.loads_strict_json(b"[-0]", "x") == [0] and isinstance(sh.loads_strict_json(b"[-0]", "x")[0], int)
    assert isinstance(sh.loads_strict_json(b"[-0]", "x", serde=True)[0], float)


def test_header_length_cap_and_file_end(monkeypatch):
    """The first 8 bytes are a little-endian u64; the cap (100 MB, safetensors' own) is inclusive; 8 + N may
    equal the file size (an empty data section) but not pass it."""
    assert sh.header_length("m", struct.pack("<Q", 2), 10) == 2
    assert sh.header_length("m", b"\x02\x01\x00\x00\x00\x00\x00\x00", None) == 258  # little-endian: 2 + 256
    with pytest.raises(HeaderError) as ei:
        sh.header_length("m", struct.pack("<Q", 3), 10)
    assert str(ei.value) == "m: header length 3 runs past the end of the file (10 bytes)"
    assert sh.header_length("m", struct.pack("<Q", sh.MAX_HEADER_BYTES), None) == 100 * 1024 * 1024
    with pytest.raises(HeaderError) as ei:
        sh.header_length("m", struct.pack("<Q", 100 * 1024 * 1024 + 1), None)
    assert str(ei.value) == "m: header length 104857601 exceeds the 104857600 byte cap"


def test_read_header_reads_a_file_and_refuses_what_is_not_one(tmp_path):
    hdr = {"w": t()}
    f = tmp_path / "m.safetensors"
    f.write_bytes(blob(hdr, bytes(8), pad=3))
    h = sh.read_header(f, "sub/m.safetensors")
    assert (h.file, h.header_len, h.file_size, h.tensors["w"].start) == (
        "sub/m.safetensors", len(json.dumps(hdr)) + 3, f.stat().st_size, 8 + len(json.dumps(hdr)) + 3)

    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x00" * 7)
    with pytest.raises(HeaderError) as ei:
        sh.read_header(short, "short.safetensors")
    assert str(ei.value) == "short.safetensors: file is 7 bytes, too short for a safetensors header"
    eight = tmp_path / "eight.safetensors"
    eight.write_bytes(struct.pack("<Q", 0))  # 8 bytes: long enough to read N = 0, then "" is not JSON
    with pytest.raises(HeaderError) as ei:
        sh.read_header(eight, "eight.safetensors")
    assert str(ei.value).startswith("eight.safetensors: header is not valid JSON: Expecting value")

    with pytest.raises(HeaderError) as ei:
        sh.read_header(tmp_path, "d")
    assert str(ei.value) == "d: is a directory, not a file"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # open(2) of a FIFO without O_NONBLOCK waits for a writer forever (POSIX open: "O_NONBLOCK ... an open() for
    # reading-only shall return without delay"); a 5 s alarm turns such a hang into a failure of this test
    import signal

    def hung(*_):
        raise TimeoutError("read_header blocked opening a FIFO")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        with pytest.raises(HeaderError) as ei:
            sh.read_header(fifo, "fifo")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert str(ei.value) == "fifo: is not a regular file (FIFO, device or socket)"
    with pytest.raises(HeaderError) as ei:
        sh.read_header(tmp_path / "missing", "missing")
    assert str(ei.value) == "missing: cannot read: No such file or directory"  # strerror(ENOENT)


def test_read_header_refusals_from_the_os_name_the_file(tmp_path, monkeypatch):
    """What open(2)/fstat(2) can answer besides success, each a one-line refusal: EACCES (a root test process is
    never refused by permission bits, so the OS's answer is stood in for), EIO from fstat (the descriptor is
    closed, the refusal names strerror(EIO), "Input/output error"), and a file that shrinks between fstat and the
    read (fstat's size is stood in for: 100 bytes more than the file holds)."""
    import errno

    f = tmp_path / "m.safetensors"
    f.write_bytes(blob({"w": t()}, bytes(8)))
    real_open, real_fstat, real_close = os.open, os.fstat, os.close

    def denied(*a, **k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    monkeypatch.setattr(sh.os, "open", denied)
    with pytest.raises(HeaderError) as ei:
        sh.read_header(f, "m.safetensors")
    assert str(ei.value) == "m.safetensors: permission denied"
    monkeypatch.setattr(sh.os, "open", real_open)

    closed = []
    monkeypatch.setattr(sh.os, "close", lambda fd: (closed.append(fd), real_close(fd)))

    def eio(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(sh.os, "fstat", eio)
    with pytest.raises(HeaderError) as ei:
        sh.read_header(f, "m.safetensors")
    assert str(ei.value) == "m.safetensors: cannot read: Input/output error"
    assert len(closed) == 1  # the descriptor opened was closed before the refusal

    def bigger(fd):
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                               st.st_size + 100, st.st_atime, st.st_mtime, st.st_ctime))
    monkeypatch.setattr(sh.os, "fstat", bigger)
    f.write_bytes(struct.pack("<Q", 50) + b"{}")  # declares 50 header bytes, holds 2
    with pytest.raises(HeaderError) as ei:
        sh.read_header(f, "m.safetensors")
    assert str(ei.value) == "m.safetensors: file shrank while reading its header"


def test_bytes_after_the_json_value_are_refused_padding_spaces_are_not():
    """The format allows the header to be padded with spaces (0x20) only; anything else after the object is not
    JSON (Python's json: "Extra data"), and safetensors refuses it too."""
    assert _header_refusal(blob(b"{}X")) == "m.safetensors: header is not valid JSON: Extra data: line 1 column 3 (char 2)"
    assert _header_refusal(blob(b"{}X  ")) == \
        "m.safetensors: header is not valid JSON: Extra data: line 1 column 3 (char 2)"
    assert _ok(blob(b"{}", pad=5)).header_len == 7


def test_nesting_past_pythons_recursion_limit_is_a_json_refusal_not_a_crash():
    """With the depth cap lifted, 100000 nested lists exceed CPython's recursion limit inside json (RecursionError,
    Python docs: sys.getrecursionlimit, 1000 by default): still one ValueError naming the document."""
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(b"[" * 100000 + b"]" * 100000, "header", max_depth=10**6)
    assert str(ei.value).startswith("header is not valid JSON: maximum recursion depth exceeded")


def test_the_header_length_is_unsigned():
    """The length is a u64 (the format: "8 bytes: N, an unsigned little-endian 64-bit integer"): eight 0xff bytes
    are 2**64 - 1 = 18446744073709551615, over the cap, never -1; safetensors refuses the same bytes."""
    with pytest.raises(HeaderError) as ei:
        sh.header_length("m", b"\xff" * 8, None)
    assert str(ei.value) == "m: header length 18446744073709551615 exceeds the 104857600 byte cap"
    with pytest.raises(Exception):
        safetensors.deserialize(b"\xff" * 8 + b"{}")
    with pytest.raises(HeaderError) as ei:
        sh.header_length("m", b"\x00" * 7 + b"\x80", None)
    assert str(ei.value) == f"m: header length {2**63} exceeds the 104857600 byte cap"


def test_three_keys_one_misspelt_is_refused_as_the_wrong_fields():
    """An entry with three keys, one of them not a field of the format (`data_offset`): refused by what it holds,
    not by a missing key; safetensors refuses it too (serde: missing field `data_offsets`)."""
    entry = {"dtype": "F32", "shape": [2], "data_offset": [0, 8]}
    assert _header_refusal(blob({"w": entry}, bytes(8))) == \
        "m.safetensors [w]: entry must hold exactly dtype, shape, data_offsets (has ['data_offset', 'dtype', 'shape'])"


def test_a_span_that_does_not_start_at_zero_is_measured_end_minus_begin():
    """b's offsets [8, 20) span 20 - 8 = 12 bytes, not the 8 of an F32 [2]."""
    assert _header_refusal(blob({"a": t(), "b": t(offs=(8, 20))}, bytes(20))) == \
        "m.safetensors [b]: byte span 12 != shape [2] x F32 = 8 bytes"


def test_form_feed_and_vertical_tab_after_the_header_are_not_json_whitespace():
    """JSON's whitespace is space, tab, LF and CR only (RFC 8259 section 2, `ws`); a form feed (0x0c) or a
    vertical tab (0x0b) after the object is "Extra data" to Python's json and "trailing characters" to
    safetensors' serde_json (checked: safetensors.deserialize refuses both), so a padding of them is refused."""
    for c in (b"\x0c", b"\x0b"):
        assert _header_refusal(blob(b"{}" + c)) == \
            "m.safetensors: header is not valid JSON: Extra data: line 1 column 3 (char 2)"


def test_leading_spaces_are_kept_so_the_error_position_is_the_files():
    """Only the end is padding (the format pads the header at its end); a refusal's position counts from the
    first header byte: "  {}X" has its extra byte at index 4 (Python's json: "line 1 column 5 (char 4)")."""
    assert _header_refusal(blob(b"  {}X")) == \
        "m.safetensors: header is not valid JSON: Extra data: line 1 column 5 (char 4)"


def test_an_empty_string_before_deep_nesting_does_not_hide_the_nesting():
    """`["", [[...]]]` with 1 + 64 levels: the empty string "" opens and closes at once (no escape pending before
    any string), so the 64 lists after it count: 65 levels, over the cap."""
    raw = b'["", ' + b"[" * 64 + b"]" * 64 + b"]"
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(raw, "header")
    assert str(ei.value) == "header nests deeper than 64 levels"


def test_only_brackets_count_as_nesting_and_each_close_undoes_one_open():
    """`[[[],[[]]]]` is 4 levels deep (outer, second, then [[]] inside it: counted by hand), over a cap of 3 though
    its first inner list closes at 3; letters outside strings are no nesting: 65 of them are just not JSON
    (Python's json: "Expecting value"), and two before 65 '[' do not lower the count."""
    with pytest.raises(ValueError) as ei:
        sh.loads_strict_json(b"[[[],[[]]]]", "", max_depth=3)
    assert str(ei.value) == "nested deeper than 3 levels"
    assert sh.loads_strict_json(b"[[[],[[]]]]", "", max_depth=4) == [[[], [[]]]]
    assert _header_refusal(blob(b"X" * 65)) == \
        "m.safetensors: header is not valid JSON: Expecting value: line 1 column 1 (char 0)"
    assert _header_refusal(blob(b"XX" + b"[" * 65)) == "m.safetensors: header nests deeper than 64 levels"
