"""kconvert/matrix/spec.py: what a matrix cell is asked to compute and the cache key it is stored under.

Outside facts checked against: schemas/matrix.schema.json (a cell's `kind` is "static" or "live" only: a score
cell is reported as a static one; the fields every cell carries), the module's documented contract of the cache
key (kconvert/matrix/spec.py docstrings: everything the result depends on, the trace by its digest "wherever it
lies", kconvert's version and code), and sha256 as hashlib computes it (FIPS 180-4: 64 hex digits). Expected
orders are sorted by hand. No engine; milliseconds.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kconvert.matrix import spec as spec_mod
from kconvert.matrix.spec import CellSpec, code_digest, settings_tuple
from kconvert.schemas import load_schema

SCHEMA = load_schema("matrix")  # schemas/matrix.schema.json, as kconvert ships it


def test_settings_tuple_is_sorted_by_name_and_leaves_none_out():
    assert settings_tuple(k=3, prompts="math", timeout=None, max_tokens=64) == (
        ("k", 3), ("max_tokens", 64), ("prompts", "math"))
    assert settings_tuple() == ()
    assert settings_tuple(a=0, b=False, c="") == (("a", 0), ("b", False), ("c", ""))  # falsy is not None


def test_setting_reads_a_pair_or_gives_the_default():
    s = CellSpec(draft="d", settings=(("k", 3), ("prompts", "math")))
    assert s.setting("k") == 3
    assert s.setting("prompts", "code") == "math"
    assert s.setting("threads") is None
    assert s.setting("threads", 4) == 4


def test_row_and_the_defaults():
    s = CellSpec(draft="d")
    assert s.row == "vllm:0.32"
    assert CellSpec(draft="d", engine="sglang", engine_version="0.5.23").row == "sglang:0.5.23"
    assert (s.engine, s.engine_version, s.kind, s.source, s.fail_on) == ("vllm", "0.32", "static", "local", "error")
    assert (s.target, s.revision, s.trace, s.trace_digest, s.selection, s.settings) == (None,) * 5 + ((),)


def test_read_ref_pins_a_hub_draft_to_its_resolved_commit_only():
    sha = "a" * 40
    assert CellSpec(draft="acme/d", source="hub", revision=sha).read_ref == f"acme/d@{sha}"
    assert CellSpec(draft="acme/d", source="hub", revision=None).read_ref == "acme/d"
    assert CellSpec(draft="acme/d@v2", source="hub", revision=sha).read_ref == "acme/d@v2"
    assert CellSpec(draft="acme/d", source="local", revision=sha).read_ref == "acme/d"


def test_base_cell_carries_the_schema_fields_and_a_score_cell_is_static():
    """schemas/matrix.schema.json: a cell's kind is one of its enum (static, live); `kconvert score` is an
    offline static judgement, so a score cell says static."""
    enum = SCHEMA["properties"]["cells"]["items"]["properties"]["kind"]["enum"]
    assert sorted(enum) == ["live", "static"]
    for kind, want in (("static", "static"), ("score", "static"), ("live", "live")):
        s = CellSpec(draft="runs/d", engine="sglang", engine_version="0.5.23", kind=kind, target="kimi-k2.5",
                     revision="b" * 64)
        assert s.base_cell() == {"draft": "runs/d", "revision": "b" * 64, "target": "kimi-k2.5",
                                 "engine": "sglang", "engine_version": "0.5.23", "kind": want}


BASE = CellSpec(draft="runs/d", kind="score", target="kimi-k2.5", revision="b" * 64, trace="/a/trace.json",
                trace_digest="c" * 64, settings=(("k", 3), ("threads", 2)))


def test_the_key_is_a_sha256_and_changes_with_every_field_the_result_depends_on():
    key = BASE.key()
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert BASE.key() == key == dataclasses.replace(BASE).key()
    changed = dict(draft="runs/e", engine="sglang", engine_version="0.33", kind="live", target="other",
                   revision="d" * 64, source="hub", trace_digest="e" * 64, settings=(("k", 4), ("threads", 2)),
                   selection=("K404",), fail_on="warning")
    for name, value in changed.items():
        assert dataclasses.replace(BASE, **{name: value}).key() != key, name


def test_the_key_names_the_trace_by_its_digest_wherever_it_lies():
    assert dataclasses.replace(BASE, trace="/elsewhere/copy.json").key() == BASE.key()


def test_the_key_does_not_depend_on_the_order_settings_were_given_in():
    """The result depends on the settings' values, not the order a caller listed them (settings_tuple sorts them;
    a hand-built tuple in another order is the same cell), nor on the key order of a dict value (engine args)."""
    swapped = dataclasses.replace(BASE, settings=(("threads", 2), ("k", 3)))
    assert swapped.key() == BASE.key()
    a = dataclasses.replace(BASE, settings=(("engine_args", {"max_model_len": 4096, "enforce_eager": True}),))
    b = dataclasses.replace(BASE, settings=(("engine_args", {"enforce_eager": True, "max_model_len": 4096}),))
    assert a.key() == b.key()


def test_the_key_takes_an_object_selection_and_changes_with_kconvert_version_and_code(monkeypatch):
    """A Selection (kconvert.rules.selection, a frozen dataclass, not JSON) is keyed by its text; a new release or
    a changed rule may judge differently (key()'s docstring)."""
    from kconvert.rules.selection import Selection

    s = dataclasses.replace(BASE, selection=Selection(select=("K404",)))
    key = s.key()
    assert re.fullmatch(r"[0-9a-f]{64}", key) and key != BASE.key()
    monkeypatch.setattr(spec_mod, "__version__", "99.0.0")
    assert s.key() != key
    monkeypatch.undo()
    assert s.key() == key
    monkeypatch.setattr(spec_mod, "_own_code", lambda: "0" * 64)
    assert s.key() != key


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_code_digest_covers_py_and_json_by_path_and_content_only(tmp_path):
    base = code_digest(_tree(tmp_path / "a", {"m.py": "x = 1\n", "d/p.json": "{}"}))
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    # the same files elsewhere: the same digest (content and relative paths, not the folder's place)
    assert code_digest(_tree(tmp_path / "b", {"m.py": "x = 1\n", "d/p.json": "{}"})) == base
    # a .txt, a .md and bytecode are not code the cells run
    assert code_digest(_tree(tmp_path / "b", {"notes.txt": "t", "README.md": "r", "d/__pycache__/m.json": "{}",
                                              "__pycache__/m.py": "y"})) == base
    assert code_digest(_tree(tmp_path / "c", {"m.py": "x = 2\n", "d/p.json": "{}"})) != base  # a .py's content
    assert code_digest(_tree(tmp_path / "e", {"m.py": "x = 1\n", "d/p.json": "[]"})) != base  # a .json's content
    assert code_digest(_tree(tmp_path / "f", {"n.py": "x = 1\n", "d/p.json": "{}"})) != base  # a renamed file
    assert code_digest(_tree(tmp_path / "g", {"m.py": "x = 1\n"})) != base  # a removed file


def test_code_digest_tells_apart_trees_whose_paths_and_contents_run_together(tmp_path):
    """Path and content are each framed by their length: {a.py: "b.py"} and {a.py: "", b.py: ""} concatenate to
    the same bytes "a.pyb.py" and must still be two codes."""
    one = code_digest(_tree(tmp_path / "one", {"a.py": "b.py"}))
    two = code_digest(_tree(tmp_path / "two", {"a.py": "", "b.py": ""}))
    assert one != two


def test_a_setting_that_is_not_json_is_keyed_by_its_text():
    """MatrixRequest.engine_args is `dict[str, Any]` (kconvert/matrix/build.py), passed into the live cell's
    settings as pairs: an API caller's Path value (a download dir) must key the cell, not crash, and key it as
    the same path given as text (the engine receives the same argument)."""
    with_path = dataclasses.replace(BASE, settings=(("engine_args", (("download_dir", Path("/models")),)),))
    with_text = dataclasses.replace(BASE, settings=(("engine_args", (("download_dir", "/models"),)),))
    assert re.fullmatch(r"[0-9a-f]{64}", with_path.key())
    assert with_path.key() == with_text.key()
