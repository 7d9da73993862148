"""Benchmark: how fast kconvert's command line starts; exits 1 when a command is above 0.25 s wall (issue 23 item 2).

    .venv/bin/python bench/startup.py [--runs 15] [--max-wall 0.25] [--json]

Each command runs as a child of this interpreter (`sys.executable -m kconvert ...`, with this checkout first on
PYTHONPATH, so it times this tree's code), N times, interleaved (one run of each command per round, so a burst of
load on the shared machine lands on all of them alike). Reported per command: the median wall time, the median CPU
time of the child (user + sys, from `resource.getrusage(RUSAGE_CHILDREN)` deltas: less noisy than wall on a loaded
machine) and both as a ratio to `python -c pass` measured in the same run, the anchor a Python CLI cannot beat.
The load average (`os.getloadavg`) before and after is printed beside the figures: on 2 busy cores wall times
stretch, so read them with it.

The commands:
- `kconvert --help`;
- `kconvert rules` (the rule table: every rule module imported, nothing read);
- `kconvert inspect examples/tiny/drafts/mla-torchspec --target examples/tiny/target` (a local tiny draft: the
  static checks, no Hub, no engine).
Bytecode: an installed kconvert runs from .pyc files (pip compiles them at install; Python writes them on first
import), so by default the children run with a bytecode cache of their own (PYTHONPYCACHEPREFIX, a temporary
folder, filled by one untimed run of each command; PYTHONDONTWRITEBYTECODE is dropped for them): this measures
what a user starts, and writes nothing into the checkout. `--no-bytecode-cache` keeps the caller's environment
instead: with PYTHONDONTWRITEBYTECODE=1 (as in this sandbox) and no __pycache__ in the tree, every run compiles
kconvert's ~70 modules from source (~50 ms more per command).

The exit status is 1 when the median wall time of one of them is above --max-wall, else 0. Runs outside the test
suite (tests/test_startup_imports.py asserts the import set instead, which load does not move).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "examples" / "tiny"

COMMANDS: list[tuple[str, list[str], tuple[int, ...]]] = [
    # (label, argv after the interpreter, exit codes that mean the command ran as designed)
    ("python -c pass", ["-c", "pass"], (0,)),
    ("kconvert --help", ["-m", "kconvert", "--help"], (0,)),
    ("kconvert rules", ["-m", "kconvert", "rules"], (0,)),
    ("kconvert inspect <tiny mla-torchspec>",
     ["-m", "kconvert", "inspect", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target")],
     (0, 1)),  # 1: the draft has error-level findings (it is an example of a broken draft); still a full run
]


def _env(pycache: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.setdefault("COLUMNS", "80")
    return env


def _run_once(argv: list[str], ok: tuple[int, ...], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *argv], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        sys.exit(f"{' '.join(argv)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs of each command (the median is reported)")
    ap.add_argument("--max-wall", type=float, default=0.25, help="seconds; exit 1 when a kconvert command is above")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="run the children in this environment as is (no .pyc cache of their own)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kconvert-startup-pycache-") as pycache:
        return _bench(args, None if args.no_bytecode_cache else pycache)


def _bench(args: argparse.Namespace, pycache: str | None) -> int:
    env = _env(pycache)
    bytecode = ("own .pyc cache (as installed)" if pycache is not None else
                "caller's environment" + (", PYTHONDONTWRITEBYTECODE set" if env.get("PYTHONDONTWRITEBYTECODE") else ""))
    for _, argv, ok in COMMANDS:  # one untimed run each: the page cache and .pyc files are warm for all of them
        _run_once(argv, ok, env)
    load_before = os.getloadavg()
    walls: dict[str, list[float]] = {label: [] for label, _, _ in COMMANDS}
    cpus: dict[str, list[float]] = {label: [] for label, _, _ in COMMANDS}
    for _ in range(args.runs):
        for label, argv, ok in COMMANDS:
            w, c = _run_once(argv, ok, env)
            walls[label].append(w)
            cpus[label].append(c)
    load_after = os.getloadavg()

    base_label = COMMANDS[0][0]
    base_wall = statistics.median(walls[base_label])
    base_cpu = statistics.median(cpus[base_label])
    rows = []
    for label, _, _ in COMMANDS:
        w, c = statistics.median(walls[label]), statistics.median(cpus[label])
        rows.append({"command": label, "wall_s": round(w, 4), "cpu_s": round(c, 4),
                     "wall_ratio": round(w / base_wall, 2), "cpu_ratio": round(c / base_cpu, 2) if base_cpu else None,
                     "wall_min_s": round(min(walls[label]), 4), "over": label != base_label and w > args.max_wall})
    failed = [r["command"] for r in rows if r["over"]]
    if args.json:
        print(json.dumps({"runs": args.runs, "max_wall_s": args.max_wall, "cores": os.cpu_count(), "bytecode": bytecode,
                          "loadavg_before": [round(x, 2) for x in load_before],
                          "loadavg_after": [round(x, 2) for x in load_after], "rows": rows, "failed": failed},
                         indent=2))
    else:
        print(f"{args.runs} runs each, median; {os.cpu_count()} cores; load average (1, 5, 15 min) before "
              f"{', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load_after)}; "
              f"bytecode: {bytecode}")
        print(f"{'command':<40} {'wall s':>7} {'x pass':>7} {'min s':>7} {'cpu s':>7} {'x pass':>7}")
        for r in rows:
            cr = f"{r['cpu_ratio']:.1f}" if r["cpu_ratio"] is not None else "-"
            flag = f"  > {args.max_wall} s" if r["over"] else ""
            print(f"{r['command']:<40} {r['wall_s']:>7.3f} {r['wall_ratio']:>7.1f} {r['wall_min_s']:>7.3f} "
                  f"{r['cpu_s']:>7.3f} {cr:>7}{flag}")
        print("FAIL: above the limit: " + ", ".join(failed) if failed else
              f"ok: every command at or under {args.max_wall} s wall (median)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
