"""kconvert.trace.trace(): the one library entry of `kconvert trace`, its dispatch to the sources by name
(kconvert/trace/sources.py), and the pieces the recorders share with score without importing it.

- every source named in SOURCES resolves to a function of its module, and a request no source takes is refused
  with the message `--engine` users read;
- `trace()` records from the tiny example's target through the registry and returns trace.json as written (the
  file's own bytes, parsed here), the CLI's `--json` document being the same without the target's config;
- the estimate path gives what `estimate()` gives for the positions counted from the prompts (written out);
- the dump recorder's final norm is bit for bit the draft runner's rms_norm on float32 inputs.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.trace import EstimateRequest, TraceRequest, trace
from kconvert.trace.sources import SOURCES

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"


def test_every_source_resolves_to_its_record_function():
    assert sorted(SOURCES) == ["dump", "hf", "vllm"]
    for name, src in SOURCES.items():
        assert callable(src.recorder()), name
        assert src.request in ("TraceRequest", "DumpRequest")


def test_an_engine_no_source_records_is_refused_with_the_choices(tmp_path):
    with pytest.raises(UsageError, match=r"^--engine 'sglang': choose hf or vllm$"):
        trace(TraceRequest(target=str(TINY / "target"), out=str(tmp_path / "t"), engine="sglang"))
    assert not (tmp_path / "t").exists()


def test_hf_refuses_the_vllm_only_options(tmp_path):
    pytest.importorskip("torch")
    with pytest.raises(UsageError, match="--tp, --engine-arg and --trust-remote-code set up vLLM"):
        trace(TraceRequest(target=str(TINY / "target"), out=str(tmp_path / "t"), tp=2))


def test_estimate_counts_the_prompts_outputs_and_lookahead():
    from kconvert.prompts import load_prompts
    from kconvert.trace.estimate import estimate

    n = len(load_prompts("math")[1][:3])
    assert n == 3
    r = trace(EstimateRequest(target="kimi-k2.5", prompts="math", max_prompts=3, max_tokens=10, lookahead=2))
    assert r.source == "estimate" and r.path is None
    assert r.positions_from == "3 prompts x (max_tokens 10 + lookahead 2); prompt tokens not counted"
    assert r.estimate.positions == 36 and r.estimate.sequences == 3  # 3 x (10 + 2)
    assert r.estimate.total == estimate("kimi-k2.5", positions=36, sequences=3).total
    assert r.to_dict()["positions_from"] == r.positions_from and r.to_dict()["total_bytes"] == r.estimate.total


def test_trace_records_through_the_registry_and_returns_trace_json_as_written(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "t"
    seen: list[str] = []
    r = trace(TraceRequest(target=str(TINY / "target"), out=str(out), max_prompts=2, max_tokens=4, lookahead=2,
                           layers=[1, 2], dtype="float32", threads=1), progress=seen.append)
    assert r.source == "hf" and r.path == out
    assert r.meta == json.loads((out / "trace.json").read_text())
    assert r.meta["num_sequences"] == 2 and r.meta["layers"] == [1, 2]
    assert "config" in r.meta["target"] and "config" not in r.to_dict()["target"]
    assert {k: v for k, v in r.to_dict().items() if k != "target"} == {k: v for k, v in r.meta.items() if k != "target"}
    assert "loading the target" in seen


def test_the_dump_recorders_final_norm_is_the_draft_runners_rms_norm():
    torch = pytest.importorskip("torch")
    from kconvert.score.draft import rms_norm
    from kconvert.trace.from_dump import final_norm

    g = torch.Generator().manual_seed(0)
    for shape, eps in (((7, 64), 1e-6), ((3, 5, 48), 1e-5), ((1, 16), 0.0)):
        x = torch.randn(*shape, generator=g) * 3
        w = torch.rand(shape[-1], generator=g) + 0.5
        assert torch.equal(final_norm(x, w, eps), rms_norm(x, w, eps))
    x = torch.tensor([[3.0, 4.0]])  # mean of squares 12.5: x / sqrt(12.5) * w
    assert torch.allclose(final_norm(x, torch.tensor([1.0, 2.0]), 0.0),
                          torch.tensor([[3 / 12.5 ** 0.5, 8 / 12.5 ** 0.5]]))
