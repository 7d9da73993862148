"""kconvert/source/safetensors_header.py: the one-line refusals of an index and a header, written out by hand
(issue #30: the survivors of its mutation run). Each expected line is derived in the test from the input given and
from the outside pieces it quotes: Python's own json error text, the safetensors format's rules."""
from __future__ import annotations

import json

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
