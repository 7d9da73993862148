"""`kconvert score` on traces recorded inside vLLM (`kconvert trace --engine vllm`) against live `kconvert verify`,
draft by draft, on the tiny example (k=3, all 96 prompts, 64 tokens, greedy, one dtype).

Two engine traces, one per kernel path of the CPU build: the MLA path (the target's default, and the MLA draft's
live path) and `VLLM_MLA_DISABLE=1` (the path verify sets for a Llama-layer draft beside an MLA target). Each draft
is scored on the trace of its own live path; live runs are bench/score_agreement.py's (cached in the same work
folder, so the two benches share them). Beside it, score on bench/score_agreement.py's HF greedy trace (A there).

    flock /tmp/kconvert-engine.lock .venv/bin/python bench/engine_trace_agreement.py --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from score_agreement import DRAFTS, TARGET, TINY, greedy_trace, live, log, scored  # noqa: E402


def engine_trace(path: str, dtype: str, work: Path) -> tuple[Path, float]:
    from kconvert.trace.record_vllm import record_trace_vllm
    from kconvert.trace.request import TraceRequest

    name = "nomla" if os.environ.get("VLLM_MLA_DISABLE") == "1" else "mla"
    out = work / "traces" / f"engine.{name}.{dtype}"
    if not (out / "trace.json").exists():
        log(f"engine trace ({name} path) {dtype}")
        t0 = time.perf_counter()
        record_trace_vllm(TraceRequest(target=TARGET, out=str(out), prompts="all", max_tokens=64, layers="all",
                                       dtype=dtype, lookahead=8, force=True))
        log(f"  {time.perf_counter() - t0:.1f} s")
    return out, json.loads((out / "trace.json").read_text())["recorder"]["seconds"]


def _same(trace: Path, lv: dict) -> int | None:
    from kconvert.trace.format import open_trace

    if not lv.get("output_token_ids"):
        return None
    tr = open_trace(trace)
    return sum(tr.sequence(i).input_ids[tr.sequence(i).prompt_len: tr.sequence(i).stop].tolist() == o
               for i, o in enumerate(lv["output_token_ids"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kconvert-score-agreement"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    rows = []
    for name, rel in DRAFTS.items():
        if a.only and name not in a.only:
            continue
        path = str(TINY / rel)
        cfg = json.loads((Path(path) / "config.json").read_text())
        mla_draft = "deepseek" in " ".join(cfg.get("architectures") or []).lower()
        os.environ.pop("VLLM_MLA_DISABLE", None)
        lv = live(name, path, a.dtype, a.work)  # verify sets VLLM_MLA_DISABLE itself for a Llama-layer draft
        if not mla_draft:
            os.environ["VLLM_MLA_DISABLE"] = "1"
        trace, secs = engine_trace(path, a.dtype, a.work)
        sc, hf = scored(path, trace), scored(path, greedy_trace(a.dtype, a.work))
        c = lv.get("counters") or {}
        live_al = 1 + c["accepted"] / c["drafts"] if c.get("drafts") else None

        def al(s):
            return s["acceptance"]["mean_acceptance_length"] if s["acceptance"] else None
        per = lv.get("spec_decode_per_request") or []
        rows.append({"draft": name, "path": "MLA" if mla_draft else "`VLLM_MLA_DISABLE=1`", "live_al": live_al,
                     "score_al": al(sc), "hf_al": al(hf), "live": c, "score": sc["counters"],
                     "outputs_equal": _same(trace, lv), "hf_outputs_equal": _same(greedy_trace(a.dtype, a.work), lv),
                     "steps_identical": sum((p or {}).get("per_step_accepted") == s for p, s in
                                            zip(per, sc["steps"] or [])) if per else None,
                     "trace_seconds": secs, "error": sc["error"] or lv.get("error")})
        log(f"{name}: live {live_al} score {al(sc)} (HF trace {al(hf)})")
    (a.work / f"engine_agreement.{a.dtype}.json").write_text(json.dumps(rows, indent=1))
    print("| draft | live path | live AL | score AL, HF trace | score AL, engine trace | engine - live | live drafts / "
          "accepted | engine-trace drafts / accepted | outputs = trace (HF / engine) | requests with identical steps "
          "(engine) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["live_al"] is None or r["score_al"] is None:
            print(f"| {r['draft']} | {r['path']} | engine failed | does not run | does not run | | | | | |")
            continue
        print(f"| {r['draft']} | {r['path']} | {r['live_al']:.4f} | {r['hf_al']:.4f} | {r['score_al']:.4f} | "
              f"{r['score_al'] - r['live_al']:+.4f} | {r['live']['drafts']} / {r['live']['accepted']} | "
              f"{r['score']['drafts']} / {r['score']['accepted']} | {r['hf_outputs_equal']} / {r['outputs_equal']} "
              f"of 96 | {r['steps_identical']}/96 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
