"""The figures behind verify's output-health gate (`--max-degenerate-share`, kconvert/results/thresholds.py): the
share of degenerate outputs and the median distinct-token share of the shipped tiny example, and of its copy whose
lm_head makes it loop (tests/live_runs.py looping_target), each per prompt set, next to the demo's fixed draft.

    .venv/bin/python bench/output_health.py [--work /tmp/kconvert-output-health] [--dtypes auto float32]

The draft is `scripts/demo.sh`'s: `kconvert fix examples/tiny/broken/aux-ids-sglang-convention`. Each (target, dtype)
is one `kconvert verify --prompts all` run (the demo's prompt set; its 96 prompts are math, chat and code, 32
each, in that order), one engine at a time, with the check off so the run reports whatever it measures; the
figures per set are read from the report's per-prompt list.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kconvert.prompts import SHIPPED_SETS, load_prompts  # noqa: E402
from tests.live_runs import TARGET, TINY, looping_target  # noqa: E402


def kconvert(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=env,
                          timeout=3600)


def figures(per: list[dict]) -> dict:
    bad = sum(p["degenerate"] for p in per)
    return {"n": len(per), "degenerate": bad, "degenerate_share": round(bad / len(per), 3),
            "median_distinct_share": statistics.median(p["distinct_share"] for p in per)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/kconvert-output-health")
    ap.add_argument("--dtypes", nargs="+", default=["auto", "float32"])
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    draft = work / "fixed"
    if not draft.exists():
        r = kconvert("fix", str(TINY / "broken" / "aux-ids-sglang-convention"), "-o", str(draft), "--target", TARGET)
        assert r.returncode == 0, r.stderr
    loop = work / "looping-target"
    if not loop.exists():
        looping_target(loop)
    sizes = [(name, len(load_prompts(name)[1])) for name in SHIPPED_SETS]
    rows = []
    for label, target in (("shipped", TARGET), ("looping", str(loop))):
        for dtype in a.dtypes:
            report = work / f"{label}-{dtype}.json"
            args = ["verify", str(draft), "--target", target, "--prompts", "all", "--max-degenerate-share", "off",
                    "--report", str(report)]
            if dtype != "auto":
                args += ["--engine-arg", f"dtype={dtype}"]
            r = kconvert(*args)
            assert r.returncode == 0, r.stderr[-2000:]
            live = json.loads(report.read_text())["live"]
            per = live["output_health"]["per_prompt"]
            start = 0
            for name, n in sizes:
                rows.append({"target": label, "dtype": dtype, "set": name, **figures(per[start:start + n])})
                start += n
            rows.append({"target": label, "dtype": dtype, "set": "all", **figures(per),
                         "mean_acceptance_length": round(live["acceptance"]["mean_acceptance_length"], 4)})
            print(json.dumps(rows[-1]), flush=True)
    print("\n| target | dtype | prompt set | degenerate outputs | share | median distinct share | AL |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['target']} | {row['dtype']} | {row['set']} | {row['degenerate']} of {row['n']} "
              f"| {row['degenerate_share']} | {row['median_distinct_share']:.4f} | "
              f"{row.get('mean_acceptance_length', '')} |")


if __name__ == "__main__":
    main()
