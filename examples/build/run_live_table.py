"""Run live_check.py for every draft and broken variant, one engine at a time, and write the table.

    .venv/bin/python examples/build/run_live_table.py [--only NAME ...] [--tp 2 8]

Writes examples/tiny/live_results.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TINY = REPO / "examples" / "tiny"

GOOD = ["drafts/mla-torchspec", "drafts/llama-speculators", "drafts/llama-fullvocab", "drafts/llama-specforge"]
BROKEN = ["broken/aux-ids-sglang-convention", "broken/d2t-absolute", "broken/no-aux-ids",
          "broken/norm-before-residual-missing", "broken/model-prefixed-keys", "broken/lm-head-wrong-prune"]


def error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pats = [r"^\w*(Error|Exception)\b.*:", r"Error:", r"error"]
    for pat in pats:
        for ln in reversed(lines):
            if re.search(pat, ln) and "Warning" not in ln:
                return ln[:400]
    return lines[-1][:400] if lines else ""


def run(variant: str | None, extra: list[str], timeout: int = 900) -> dict:
    cmd = [sys.executable, str(HERE / "live_check.py")] + (["--draft", str(TINY / variant)] if variant else []) + extra
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "", -9
    wall = round(time.time() - t0, 1)
    res = None
    for ln in out.splitlines():
        if ln.startswith("RESULT "):
            res = json.loads(ln[len("RESULT "):])
    row = {"variant": variant or "(target only)", "args": extra, "wall_s": wall, "rc": rc}
    if res is not None:
        row.update(res)
    else:
        row["crash"] = error_line(err + "\n" + out)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--tp", type=int, nargs="*", default=[],
                    help="also run the MLA draft at these tensor_parallel_size values (e.g. 2 8)")
    ap.add_argument("--out", type=Path, default=TINY / "live_results.json")
    a = ap.parse_args()
    variants: list[str | None] = [None] + GOOD + BROKEN
    if a.only is not None:
        variants = [v for v in variants if v is not None and any(o in v for o in a.only)]
    rows = json.loads(a.out.read_text()) if a.out.exists() else []
    for v in variants:
        key = (v or "(target only)", ())
        rows = [r for r in rows if (r["variant"], tuple(r["args"])) != key]
        r = run(v, [])
        print(json.dumps(r), flush=True)
        rows.append(r)
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    for tp in a.tp:
        v = "drafts/mla-torchspec"
        rows = [r for r in rows if not (r["variant"] == v and r["args"] == ["--tp", str(tp)])]
        r = run(v, ["--tp", str(tp)])
        print(json.dumps(r), flush=True)
        rows.append(r)
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| variant | AL | acceptance rate | per-position rate | drafts | outputs sha |\n|---|---|---|---|---|---|")
    for r in rows:
        if "crash" in r:
            print(f"| {r['variant']} {' '.join(r['args'])} | crash | `{r['crash']}` | | | |")
        else:
            print(f"| {r['variant']} {' '.join(r['args'])} | {r.get('mean_acceptance_length')} | "
                  f"{r.get('acceptance_rate')} | {r.get('per_pos_rate')} | {r.get('drafts')} | {r['outputs_sha256']} |")


if __name__ == "__main__":
    main()
