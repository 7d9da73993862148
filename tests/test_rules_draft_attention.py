"""K305: a non-MLA draft layer next to an MLA target needs its own attention backend (issue #49 item 3), read from
each engine row's `draft_attention`, over every row and draft family; and the engines' own code for it."""
from __future__ import annotations

import re
from importlib.util import find_spec
from pathlib import Path

import pytest

from kconvert import inspect
from kconvert.engines.expectations import ALL_ROWS
from kconvert.rules.attention import draft_attention_backend
from tests.factories import make_draft, make_target

ROWS = [r.key for r in ALL_ROWS]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory):
    root = tmp_path_factory.mktemp("drafts")
    return {"llama": make_draft(root / "llama", "specforge"), "mla": make_draft(root / "mla", "torchspec", family="mla"),
            "target": make_target(root / "t")}


def _k305(res):
    return [f for f in res.findings if f.id == draft_attention_backend.id]


@pytest.mark.parametrize("key", ROWS)
def test_a_llama_draft_next_to_an_mla_target_names_the_rows_argument(drafts, key):
    row = next(r for r in ALL_ROWS if r.key == key)
    res = inspect(str(drafts["llama"]), target=str(drafts["target"]), engine=row.engine, engine_version=row.version)
    found = _k305(res)
    # only where the engine's default runs the draft on the target's MLA backends (SGLang) is there a finding; vLLM
    # picks a backend per layer unless one is forced for the target
    if row.draft_attention is None or row.draft_attention[0] != "always":
        assert found == []
        return
    (f,) = found
    assert not f.fixable and f.severity == "info"
    # the message names the row's argument, its sources (the parentheses of the row's text) left to the evidence,
    # which keeps the argument and its sources whole
    arg = row.draft_attention[1]
    options = re.sub(r" \([^()]*\)", "", arg)
    assert options in f.message and "(" not in options
    assert any(e.observed == options and all(f"({src})" in arg for src in e.expected.split("; "))
               for e in f.evidence)


@pytest.mark.parametrize("key", ROWS)
def test_an_mla_draft_or_a_non_mla_target_needs_nothing(drafts, tmp_path, key):
    row = next(r for r in ALL_ROWS if r.key == key)
    res = inspect(str(drafts["mla"]), target=str(drafts["target"]), engine=row.engine, engine_version=row.version)
    assert _k305(res) == []
    res = inspect(str(drafts["llama"]), target="llama-3.1-8b", engine=row.engine, engine_version=row.version)
    assert _k305(res) == []


VLLM = Path(find_spec("vllm").origin).parent if find_spec("vllm") else None


@pytest.mark.skipif(VLLM is None, reason="vLLM is not installed")
def test_vllm_gives_the_draft_the_targets_backend_unless_the_speculative_config_names_one():
    spec = (VLLM / "config" / "speculative.py").read_text(encoding="utf-8")
    assert '("attention_backend", "attention_config", "backend")' in spec  # _DRAFT_VLLM_CONFIG_OVERRIDES
    assert "attention_backend: AttentionBackendEnum | None = None" in spec
    sel = (VLLM / "v1" / "attention" / "selector.py").read_text(encoding="utf-8")
    assert "backend = attention_config.backend" in sel
