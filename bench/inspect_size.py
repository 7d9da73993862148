"""inspect time versus declared checkpoint size: it must stay flat.

Builds Kimi-K2.5-shaped EAGLE-3 drafts whose declared size grows from ~1 GB to ~60 GB (the MLP intermediate
size and the number of shards grow; large tensors are holes in sparse files, so no disk is used), then times
`kconvert inspect` on each: in-process (median of 5 runs of open + analyse) and as a CLI process (median of 3),
against the time of `python -c pass` measured in the same run as the process-start baseline.

    .venv/bin/python bench/inspect_size.py [--keep DIR]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.factories import KIMI, make_draft  # noqa: E402


def timed(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", help="build under this folder and keep it")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kconvert-bench-"))
    from dataclasses import replace

    import tests.factories as fx
    from kconvert.engines.expectations import engine_rules
    from kconvert.commands.inspect import analyse
    from kconvert.source import open_checkpoint
    from kconvert.targets import load_target

    target = load_target("kimi-k2.5")
    rules = engine_rules("vllm")
    baseline = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 3)
    print(f"process start baseline (python -c pass): {baseline * 1000:.0f} ms")
    print(f"{'declared GB':>11} {'shards':>6} {'disk MB':>8} {'inspect ms':>10} {'CLI ms':>8} {'CLI/baseline':>12}")
    try:
        for mult, shards in ((1, 1), (4, 2), (16, 4), (32, 8), (64, 16)):
            shape = replace(KIMI, inter=KIMI.inter * mult)
            fx.SHAPES["bench"] = shape
            folder = make_draft(base / f"x{mult}", "specforge", shape="bench", full_vocab=True, embeddings=True,
                                shards=shards)
            declared = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
            disk = sum(p.stat().st_blocks * 512 for p in folder.glob("*"))
            t_lib = timed(lambda: analyse(open_checkpoint(str(folder)), target, rules), 5)
            t_cli = timed(lambda: subprocess.run([sys.executable, "-m", "kconvert", "inspect", str(folder),
                                                  "--target", "kimi-k2.5", "--json"],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), 3)
            print(f"{declared / 1e9:11.1f} {shards:6d} {disk / 1e6:8.1f} {t_lib * 1000:10.1f} {t_cli * 1000:8.0f} "
                  f"{t_cli / baseline:12.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
