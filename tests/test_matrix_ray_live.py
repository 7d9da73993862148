"""A live matrix cell as a Ray task: the shipped MLA draft verified on the installed vLLM (CPU build, float32, a
few prompts) through the local pool and through a local Ray instance. The figures are the engine's counters
(tests/test_live_engine.py holds verify to them) and the CPU engine's counters repeat run to run
(docs: vllm-cpu-notes), so the two documents must be identical apart from timings: Ray changes where the
engine runs (a worker holding every CPU of the node, the CPU-only placement), never what it measures."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")
if os.environ.get("CI") == "true":
    import ray  # noqa: F401  the test tier installs the ray extra
else:
    pytest.importorskip("ray")

from kconvert.matrix import CellCache, MatrixRequest, run_matrix  # noqa: E402
from kconvert.matrix.executors.local import LocalExecutor  # noqa: E402
from kconvert.matrix.executors.ray import RayExecutor  # noqa: E402
from tests.matrix_tasks import without_timings  # noqa: E402

pytestmark = pytest.mark.live

TINY = Path(__file__).resolve().parent.parent / "examples" / "tiny"


def test_a_live_cell_on_ray_measures_what_the_local_pool_measures(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # before Ray starts: its workers inherit the environment
    req = MatrixRequest(drafts=[str(TINY / "drafts" / "mla-torchspec")], target=str(TINY / "target"),
                        engines="vllm:0.32", live=True, engine_args={"dtype": "float32"}, max_prompts=4,
                        max_tokens=16)
    local = run_matrix(req, executor=LocalExecutor(1), cache=CellCache(None))
    live = [c for c in local["cells"] if c["kind"] == "live"]
    assert len(live) == 1 and live[0]["state"] == "pass", live
    with RayExecutor(workers=2) as ex:
        on_ray = run_matrix(req, executor=ex, cache=CellCache(None))
        assert ex.notes == ["no GPU in the Ray cluster: live cells run on CPUs, each taking the 2 CPUs of a "
                            "whole node"]
    assert on_ray["timings"]["executor"] == "ray"
    assert without_timings(on_ray) == without_timings(local)
