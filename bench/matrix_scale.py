"""How `kconvert matrix` scales: static cells per second locally and on Ray, a Hub with latency against the bound
it sets, a rerun from the cell cache, and score cells sequential against Ray. Every ratio is of figures measured
in this run, on this machine, with the load average printed beside them.

1. Static: N sparse Kimi-K2.5-shaped drafts (tests/factories.py `make_draft(shape="kimi")`: real headers, the
   weights holes of sparse files; eight producer/family/shard variants in turn) x 5 engine rows against the
   kimi-k2.5 profile, through `kconvert.matrix.run_matrix` with the local pool at 1 and 2 workers and a local Ray
   instance with 2 CPUs (its start-up timed apart). Cells per second = cells / the cell phase (`timings.cells_s`);
   the three documents are compared less their timings and must be identical.
2. Cache: the same matrix with a cell cache file, then again: the rerun computes nothing.
3. Hub: the same drafts served by the loopback Hub stand-in (tests/fake_hub_read.py) with an injected latency per
   request (default 50 ms), in a child process so HF_ENDPOINT is set before huggingface_hub is imported. Every
   request is counted per phase (gathering: resolving each draft's commit and small files, in the driver,
   `HUB_RESOLVE_THREADS` drafts at a time; cells: range reads of the headers and small tensors, on the workers,
   each process keeping what it read at a commit), and each phase is set against its bound: latency x requests
   / concurrency (the resolving threads for gathering, the workers for cells). Then a rerun from the cell cache
   with a fresh HF cache. Each run's document, less timings, is written to WORK/hub-RUN.doc.json (to compare
   with another checkout's).
4. Score: tiny real-weight checkpoints of one run (`runs/step-N`, tests/factories.py) against a trace built to
   follow one of them (tests/score_factories.py `consistent_trace`), sequential (1 worker) against Ray (2 CPUs),
   one torch thread per cell; documents compared less timings.

    .venv/bin/python bench/matrix_scale.py [--drafts 200] [--latency-ms 50] [--hub-runs local:2,local:8,ray:8,rerun-cache:8] [--skip-hub]
        [--skip-score] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = "kimi-k2.5"
ROWS = "vllm:0.32,vllm:0.33,sglang:post-25454,sglang:post-32334,sglang:0.5.23"
# producer, family, shards: the mix of a public matrix (SpecForge, speculators, TorchSpec MLA, EAGLE, ModelOpt)
VARIANTS = [("specforge", "llama", 1), ("speculators", "llama", 1), ("torchspec", "mla", 1),
            ("torchspec", "llama", 1), ("eagle", "llama", 1), ("modelopt", "llama", 1), ("specforge", "llama", 2),
            ("unknown", "llama", 1)]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every descendant: the live ones read from /proc (a Ray
    worker is the raylet's child, which this process started), the reaped ones from RUSAGE_CHILDREN. On a shared
    machine the wall time says how much of the cores a run was given (the scheduler's shares change with how its
    processes are grouped); the CPU seconds say what the cells cost."""
    import resource

    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)
    total += rc.ru_utime + rc.ru_stime
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def without_timings(doc: dict) -> dict:
    out = {k: v for k, v in doc.items() if k != "timings"}
    out["cells"] = [{k: v for k, v in c.items() if k not in ("seconds", "cached")} for c in doc["cells"]]
    return out


def autogroups() -> dict[str, str]:
    """The scheduler groups (/proc/PID/autogroup) of this process and of Ray's processes: with autogrouping on, a
    group gets one share of the CPU however many processes it has, and a Ray instance started in a session of
    its own is a group of its own."""
    import psutil

    out = {"driver": Path("/proc/self/autogroup").read_text().split()[0] if Path("/proc/self/autogroup").exists()
           else "n/a"}
    for p in psutil.Process().children(recursive=True):
        try:
            out.setdefault(Path(f"/proc/{p.pid}/autogroup").read_text().split()[0], p.name())
        except (OSError, psutil.Error):
            pass
    return out


def build_drafts(folder: Path, n: int) -> list[str]:
    from tests.factories import make_draft

    out = []
    for i in range(n):
        d = folder / f"kimi-eagle3-{i:03d}"
        if not (d / "config.json").exists():
            producer, family, shards = VARIANTS[i % len(VARIANTS)]
            make_draft(d, producer, shape="kimi", family=family, shards=shards)
        out.append(str(d))
    return out


def run(drafts: list[str], executor, cache=None, **req_kw) -> tuple[dict, float]:
    from kconvert.matrix import CellCache, MatrixRequest, run_matrix

    req = MatrixRequest(drafts=drafts, target=req_kw.pop("target", TARGET), engines=req_kw.pop("engines", ROWS),
                        **req_kw)
    t0, c0 = time.perf_counter(), cpu_seconds()
    doc = run_matrix(req, executor=executor, cache=cache if cache is not None else CellCache(None))
    wall = time.perf_counter() - t0
    # Pool workers are reaped only at the pool's shutdown, which run() waits for: their CPU is in RUSAGE_CHILDREN.
    doc["timings"]["cpu_s"] = cpu_seconds() - c0
    return doc, wall


def static_part(drafts: list[str], work: Path) -> dict:
    from kconvert.matrix import CellCache
    from kconvert.matrix.executors.local import LocalExecutor
    from kconvert.matrix.executors.ray import RayExecutor

    out: dict = {}
    docs = {}
    for name, ex in (("local-1", LocalExecutor(1)), ("local-2", LocalExecutor(2)), ("ray-2", None)):
        if ex is None:
            ex = RayExecutor(workers=2)
            t0 = time.perf_counter()
            ex.connect()
            out["ray_start_s"] = time.perf_counter() - t0
            out["ray_autogroup"] = autogroups()
        doc, wall = run(drafts, ex)
        if name == "ray-2":
            ex.close()
        n = len(doc["cells"])
        docs[name] = doc
        cpu = doc["timings"]["cpu_s"]
        out[name] = {"cells": n, "cells_s": doc["timings"]["cells_s"], "gather_s": doc["timings"]["gather_s"],
                     "wall_s": wall, "cells_per_s": n / doc["timings"]["cells_s"], "cpu_s": cpu,
                     "cpu_ms_per_cell": 1000 * cpu / n, "load": load()}
        print(f"static {name}: {n} cells in {doc['timings']['cells_s']:.2f} s (gather {doc['timings']['gather_s']:.2f} s)"
              f" = {out[name]['cells_per_s']:.1f} cells/s; {cpu:.1f} CPU-s = {1000 * cpu / n:.1f} CPU-ms per cell"
              f"  load {load()}", flush=True)
    base = without_timings(docs["local-1"])
    out["identical"] = {k: without_timings(d) == base for k, d in docs.items()}
    out["states"] = {s: sum(1 for c in docs["local-1"]["cells"] if c["state"] == s)
                     for s in ("pass", "warn", "fail", "error", "skipped")}
    print(f"static: documents identical apart from timings: {out['identical']}; states {out['states']}")
    # 2. the cell cache
    path = work / "cells.sqlite"
    path.unlink(missing_ok=True)
    store = CellCache(path)
    first, w1 = run(drafts, LocalExecutor(2), cache=store)
    again, w2 = run(drafts, LocalExecutor(2), cache=store)
    store.close()
    out["cache"] = {"first_wall_s": w1, "first_computed": first["timings"]["computed"], "rerun_wall_s": w2,
                    "rerun_computed": again["timings"]["computed"], "rerun_from_cache": again["timings"]["from_cache"],
                    "rerun_gather_s": again["timings"]["gather_s"], "identical": without_timings(again) ==
                    without_timings(first), "load": load()}
    print(f"cache: first run {w1:.2f} s ({first['timings']['computed']} computed), rerun {w2:.2f} s "
          f"({again['timings']['computed']} computed, {again['timings']['from_cache']} from the cache, gather "
          f"{again['timings']['gather_s']:.2f} s): {w1 / w2:.1f}x; identical {out['cache']['identical']}", flush=True)
    return out


# -- 3. the Hub stand-in (child process) -------------------------------------------------------------------------
def hub_child(args: argparse.Namespace) -> None:
    """Serve the drafts from the stand-in with latency, run the matrix over their Hub ids, print one JSON line."""
    import hashlib
    import importlib

    import tests.fake_hub_read as fhr

    real_digests = fhr._digests

    def digests(p: Path) -> tuple[str, str]:
        # The stand-in names each blob by its sha256; hashing 200 sparse multi-GB shards (zeros) would take
        # minutes and names nothing kconvert checks here, so a large file is named by its path and size instead.
        if p.stat().st_size <= 64 << 20:
            return real_digests(p)
        h = hashlib.sha256(f"{p}\0{p.stat().st_size}".encode()).hexdigest()
        return h, hashlib.sha1(h.encode()).hexdigest()

    fhr._digests = digests
    latency = args.latency_ms / 1000

    class SlowHub(fhr.FakeReadHub):
        def _handler(self, server):
            base = super()._handler(server)

            class Handler(base):
                def _route(self):
                    time.sleep(latency)  # a round trip to a distant Hub, before anything is answered
                    return base._route(self)

            return Handler

    drafts = sorted(p for p in Path(args.hub_child).iterdir() if p.is_dir())[: args.drafts]
    repos = {f"acme/{p.name}": p for p in drafts}
    kind, workers = args.hub_run.split(":")
    workers = int(workers)
    with SlowHub(repos) as hub:
        # Set before huggingface_hub is imported (it reads HF_ENDPOINT and HF_HOME once): a cold HF cache.
        os.environ.clear()
        os.environ.update(fhr.hub_read_env(hub, Path(tempfile.mkdtemp(prefix="matrix-hub-home-"))))
        import kconvert.matrix.build as build
        from kconvert.matrix import CellCache
        from kconvert.matrix.executors.local import LocalExecutor
        from kconvert.matrix.executors.ray import RayExecutor

        marks: dict[str, int] = {}
        gather = build.gather

        def counted_gather(*a, **kw):
            marks["before"] = len(hub.requests)
            try:
                return gather(*a, **kw)
            finally:
                marks["after"] = len(hub.requests)

        build.gather = counted_gather
        store = CellCache(None)
        if kind == "rerun-cache":  # fill the cell cache first (not timed); the rerun is the figure
            store = CellCache(Path(tempfile.mkdtemp(prefix="matrix-hub-cells-")) / "cells.sqlite")
            run(list(repos), LocalExecutor(workers), cache=store)
        ex = RayExecutor(workers=workers) if kind == "ray" else LocalExecutor(workers)
        if kind == "ray":
            ex.connect()
        start = len(hub.requests)
        doc, wall = run(list(repos), ex, cache=store)
        store.close()
        if kind == "ray":
            ex.close()
        r_gather = marks["after"] - marks["before"]
        r_cells = len(hub.requests) - start - r_gather
        # how many drafts gathering resolves at once (1 in a checkout from before it had threads)
        threads = min(getattr(importlib.import_module("kconvert.matrix.gather"), "HUB_RESOLVE_THREADS", 1),
                      len(repos))
        results = {"run": f"{kind}-{workers}", "workers": workers, "wall_s": wall, "gather_threads": threads,
                   "gather_s": doc["timings"]["gather_s"], "cells_s": doc["timings"]["cells_s"],
                   "cells": len(doc["cells"]), "computed": doc["timings"]["computed"], "requests_gather": r_gather,
                   "requests_cells": r_cells, "bound_gather_s": latency * r_gather / threads,
                   "bound_cells_s": latency * r_cells / workers, "load": load(),
                   "errors": sum(1 for c in doc["cells"] if c["state"] == "error"),
                   "doc": without_timings(doc)}
    print("@@" + json.dumps(results))


def hub_part(work: Path, drafts: list[str], args: argparse.Namespace) -> list[dict]:
    """One child process per run, so each starts with a cold HF cache (huggingface_hub reads HF_HOME once)."""
    results, base = [], None
    for spec in args.hub_runs:
        cmd = [sys.executable, __file__, "--hub-child", str(work / "drafts"), "--drafts", str(len(drafts)),
               "--latency-ms", str(args.latency_ms), "--hub-run", spec]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("@@")), None)
        if p.returncode or line is None:
            raise SystemExit(f"hub child failed ({p.returncode}):\n{p.stderr[-3000:]}")
        r = json.loads(line[2:])
        doc = r.pop("doc")
        (work / f"hub-{r['run']}.doc.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
        base = base or doc
        r["identical"] = doc == base
        results.append(r)
        cells = (f"cells {r['cells_s']:.1f} s for {r['requests_cells']} requests over {r['workers']} workers (bound "
                 f"{r['bound_cells_s']:.1f} s: {r['cells_s'] / r['bound_cells_s']:.2f}x)" if r["requests_cells"]
                 else f"cells {r['cells_s']:.2f} s, no request")
        print(f"hub {r['run']}: {r['cells']} cells ({r['computed']} computed), {r['wall_s']:.1f} s wall; gather "
              f"{r['gather_s']:.1f} s for {r['requests_gather']} requests, {r['gather_threads']} drafts at once (bound "
              f"{r['bound_gather_s']:.1f} s: {r['gather_s'] / max(r['bound_gather_s'], 1e-9):.2f}x); {cells}; "
              f"errors {r['errors']}; identical {r['identical']}  load {r['load']}", flush=True)
    return results


# -- 4. score cells ----------------------------------------------------------------------------------------------
def score_part(work: Path, n: int) -> dict:
    from kconvert.matrix.executors.local import LocalExecutor
    from kconvert.matrix.executors.ray import RayExecutor
    from tests.factories import make_draft
    from tests.score_factories import consistent_trace
    from tests.test_score import _ids, _reading

    runs = work / "runs"
    ids = [[2, 5, 7], [3, 5, 7], [2, 4, 7], [1, 5, 7], [2, 5, 6], [3, 4, 6], [2, 3, 7], [4, 5, 7]]
    drafts = []
    for i in range(n):
        d = runs / f"step-{(i + 1) * 100}"
        if not (d / "config.json").exists():
            make_draft(d, "torchspec", config=lambda c, a=ids[i % len(ids)]: _ids(c, a))
        drafts.append(str(d))
    trace = work / "trace"
    if not trace.exists():
        _, reading = _reading(Path(drafts[0]))
        consistent_trace(trace, Path(drafts[0]), reading, n_seqs=96, output_len=64)
    out: dict = {}
    docs = {}
    kw = dict(target=None, engines="vllm:0.32", trace=str(trace), score_threads=1)
    for name in ("sequential", "ray-2"):
        ex = LocalExecutor(1) if name == "sequential" else RayExecutor(workers=2)
        if name == "ray-2":
            ex.connect()
        doc, wall = run(drafts, ex, **dict(kw))
        if name == "ray-2":
            ex.close()
        docs[name] = doc
        n_score = sum(1 for d in doc["drafts"] if d.get("score"))
        out[name] = {"wall_s": wall, "cells_s": doc["timings"]["cells_s"], "scored": n_score,
                     "cpu_s": doc["timings"]["cpu_s"], "load": load()}
        print(f"score {name}: {len(drafts)} drafts ({n_score} scored) + their static cells in "
              f"{doc['timings']['cells_s']:.2f} s, {doc['timings']['cpu_s']:.1f} CPU-s  load {load()}", flush=True)
    out["identical"] = without_timings(docs["ray-2"]) == without_timings(docs["sequential"])
    out["ranking"] = docs["sequential"]["ranking"]["order"]
    print(f"score: sequential / ray-2 = {out['sequential']['cells_s'] / out['ray-2']['cells_s']:.2f}x; identical "
          f"{out['identical']}; ranking {[Path(d).name for d in out['ranking']]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafts", type=int, default=200)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--hub-runs", type=lambda s: s.split(","), default=["local:2", "local:8", "ray:8", "rerun-cache:8"],
                    help="executor:workers per Hub run (local, ray, rerun-cache = a rerun from the cell cache)")
    ap.add_argument("--score-drafts", type=int, default=16)
    ap.add_argument("--skip-static", action="store_true")
    ap.add_argument("--skip-hub", action="store_true")
    ap.add_argument("--skip-score", action="store_true")
    ap.add_argument("--work", type=Path, default=None, help="keep the drafts here between runs")
    ap.add_argument("--hub-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--hub-run", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hub_child:
        return hub_child(args)
    work = args.work or Path(tempfile.mkdtemp(prefix="matrix-scale-"))
    t0 = time.perf_counter()
    drafts = build_drafts(work / "drafts", args.drafts)
    print(f"built {len(drafts)} sparse Kimi-K2.5-shaped drafts in {time.perf_counter() - t0:.1f} s under {work}; "
          f"{os.cpu_count()} CPUs, load {load()}", flush=True)
    report: dict = {"drafts": len(drafts), "rows": ROWS}
    if not args.skip_static:
        report["static"] = static_part(drafts, work)
        s = report["static"]
        print(f"static ratios: local-2 / local-1 = {s['local-2']['cells_per_s'] / s['local-1']['cells_per_s']:.2f}x, "
              f"ray-2 / local-1 = {s['ray-2']['cells_per_s'] / s['local-1']['cells_per_s']:.2f}x, "
              f"ray-2 / local-2 = {s['ray-2']['cells_per_s'] / s['local-2']['cells_per_s']:.2f}x "
              f"(Ray start {s['ray_start_s']:.1f} s, not in cells/s); CPU-ms per cell local-1 "
              f"{s['local-1']['cpu_ms_per_cell']:.1f}, local-2 {s['local-2']['cpu_ms_per_cell']:.1f}, ray-2 "
              f"{s['ray-2']['cpu_ms_per_cell']:.1f}; scheduler groups {s['ray_autogroup']}")
    if not args.skip_hub:
        report["hub"] = hub_part(work, drafts, args)
    if not args.skip_score:
        report["score"] = score_part(work, args.score_drafts)
    (work / "matrix_scale.json").write_text(json.dumps(report, indent=2))
    print(f"figures: {work / 'matrix_scale.json'}")


if __name__ == "__main__":
    main()
