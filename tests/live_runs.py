"""One cache of live `kconvert verify` runs on the shipped tiny example, shared by every live test module of a
pytest session, so that an engine run one module needs (a good draft at the example's settings) is not started
again by another (examples, score agreement, TP)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
TARGET = str(TINY / "target")
# Same prompts and lengths for every run so that acceptance lengths compare.
SETTINGS = dict(prompts="all", max_prompts=None, max_tokens=64, num_speculative_tokens=3, timeout_s=900, lossless=False)
# Token-for-token comparisons run in float32: in bf16 the CPU kernels of a k+1-token verification step and of a
# one-token decode step round differently, and this chaotic tiny target amplifies that into other greedy
# outputs (measured: bf16 speculative vs plain runs differ; float32 runs are identical).
FP32 = (("dtype", "float32"),)
GOOD = {"mla": "drafts/mla-torchspec", "llama": "drafts/llama-speculators"}

_runs: dict[tuple, object] = {}


def run_verify(draft: str, engine_args: tuple = (), **kw):
    """`kconvert.verify` of `draft` next to the tiny target with SETTINGS (overridden by `kw`), once per session."""
    from kconvert.verify import VerifySettings, verify

    key = (draft, engine_args, tuple(sorted(kw.items())))
    if key not in _runs:
        st = VerifySettings(**{**SETTINGS, **kw, "engine_args": dict(engine_args)})
        _runs[key] = verify(draft, TARGET, settings=st)
    return _runs[key]


def al(vr) -> float:
    return vr.acceptance["mean_acceptance_length"]
