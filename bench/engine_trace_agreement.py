"""`kconvert score` on traces recorded inside vLLM (`kconvert trace --engine vllm`) against live `kconvert verify`,
draft by draft, on the tiny example (k=3, all 96 prompts, 64 tokens, greedy, one dtype).

Two engine traces, one per kernel path of the CPU build: the MLA path (the target's default, and the MLA draft's
live path) and `VLLM_MLA_DISABLE=1` (the path verify sets for a Llama-layer draft beside an MLA target). Each draft
is scored on the trace of its own live path; live runs are bench/score_agreement.py's (cached in the same work
folder, so the two benches share them).

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

from score_agreement import DRAFTS, TARGET, TINY, live, log, scored  # noqa: E402


def engine_trace(path: str, dtype: str, work: Path) -> tuple[Path, float]:
    from kconvert.score.engine_record import record_trace_vllm
    from kconvert.score.record import TraceRequest

    name = "nomla" if os.environ.get("VLLM_MLA_DISABLE") == "1" else "mla"
    out = work / "traces" / f"engine.{name}.{dtype}"
    if not (out / "trace.json").exists():
        log(f"engine trace ({name} path) {dtype}")
        t0 = time.perf_counter()
        record_trace_vllm(TraceRequest(target=TARGET, out=str(out), prompts="all", max_tokens=64, layers="all",
                                       dtype=dtype, lookahead=8, force=True))
        log(f"  {time.perf_counter() - t0:.1f} s")
    return out, json.loads((out / "trace.json").read_text())["recorder"]["seconds"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kconvert-score-agreement"))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    from kconvert.runners.vllm_args import _is_mla  # noqa: F401 (the rule verify applies, restated below)
    from kconvert.score.trace import open_trace

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
        sc = scored(path, trace)
        tr = open_trace(trace)
        same = None
        if lv.get("output_token_ids"):
            same = sum(tr.sequence(i).input_ids[tr.sequence(i).prompt_len: tr.sequence(i).stop].tolist() == o
                       for i, o in enumerate(lv["output_token_ids"]))
        c = lv.get("counters") or {}
        live_al = 1 + c["accepted"] / c["drafts"] if c.get("drafts") else None
        score_al = sc["acceptance"]["mean_acceptance_length"] if sc["acceptance"] else None
        rows.append({"draft": name, "path": "MLA" if mla_draft else "VLLM_MLA_DISABLE=1", "live_al": live_al,
                     "score_al": score_al, "live": c, "score": sc["counters"], "outputs_equal": same,
                     "trace_seconds": secs, "error": sc["error"] or lv.get("error")})
        log(f"{name}: live {live_al} score {score_al} outputs equal {same}/96")
    (a.work / f"engine_agreement.{a.dtype}.json").write_text(json.dumps(rows, indent=1))
    print("| draft | path | live AL | score AL (engine trace) | diff | live drafts / accepted | score drafts / accepted "
          "| outputs = trace |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["live_al"] is None or r["score_al"] is None:
            print(f"| {r['draft']} | {r['path']} | engine failed | does not run | | | | |")
            continue
        print(f"| {r['draft']} | {r['path']} | {r['live_al']:.4f} | {r['score_al']:.4f} | "
              f"{r['score_al'] - r['live_al']:+.4f} | {r['live']['drafts']} / {r['live']['accepted']} | "
              f"{r['score']['drafts']} / {r['score']['accepted']} | {r['outputs_equal']}/96 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
