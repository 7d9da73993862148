"""Benchmark: `kconvert fix` against its floor on a ~3 GB draft at Kimi-K2.5 shapes; exits 1 above 1.3x.

    .venv/bin/python bench/fix_vs_cp.py [--workdir DIR] [--src DIR] [--rounds 3] [--max-ratio 1.3]
    .venv/bin/python bench/fix_vs_cp.py --profile [--src DIR]     # where one fix spends its time

The floor, measured in every round next to the fixes it bounds: the larger of
- `cp -r src dst && sync` (moving the bytes durably), and
- the sha256 of what the fix must hash, spread over the cores: cold, every input and every output file; warm
  (input digests known), the output files only. Measured as this process hashing those files (page cache hot)
  with one thread per core, each file on one thread, largest first: a file's sha256 is sequential, so the
  largest shard alone bounds the hashing however many cores there are.
The fix variants, each timed as the real command `kconvert fix <src> -o <dst> --target kimi-k2.5 --aux-ids
2,30,58 --rope-from-target` (interpreter start-up, inspect, plan: strip `model.` from every key, d2t absolute ids
-> offsets, config ops; the streaming write; the self-check inspect of the output):
- `durable, cold`: the default (fsync before the rename), every input digest computed (KCONVERT_HASH_CACHE=off);
- `no-fsync, warm`: `--no-fsync` with the input digests known (kconvert's hash cache after an earlier fix or
  verify of the same files, or a Hub cache whose blob names are the digests): only the output is hashed.
Beside the floor, the floor's two parts run at once on the same cores (`parts_at_once`: `cp -r` while the same
bytes are hashed), as a fix on this machine must run them: its ratio to the floor says how much of the 1.3x the
copy alone already spends here (on 2 cores: all of it, bench/NOTES.md).
Each ratio is fix / floor of the same round; the medians over `--rounds` are reported, with the load average
(`os.getloadavg`) at each round, and peak RSS (/usr/bin/time -f %M; target <= 300 MB).

Builds (unless --src names one built earlier with --keep) a 2-shard draft of real (random, not sparse) bytes:
hidden 7168, lm_head [32000, 7168] bf16, fc [7168, 21504], llama-style midlayer (q/k/v/o, gate/up/down with the
intermediate size scaled so the draft is about 3 GB; `--intermediate` makes it smaller), norms, d2t [32000] int64
holding ABSOLUTE target ids, t2d [163840] bool; every key but lm_head carries a `model.` prefix (the HF CausalLM
habit). `sync` runs (untimed) between runs so that one run's write-back does not land on the next.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
HIDDEN = 7168
TARGET_VOCAB = 163840
DRAFT_VOCAB = 32000
INTERMEDIATE = 40960  # Kimi-K2.5 drafts use 18432; scaled so that the draft is ~3 GB of real bytes
HEADS_DIM = 8192  # 64 heads x 128
KV_DIM = 1024  # 8 kv heads x 128


def _tensors(inter: int = INTERMEDIATE) -> list[tuple[str, str, tuple[int, ...]]]:
    return [
        ("fc.weight", "BF16", (HIDDEN, 3 * HIDDEN)),
        ("midlayer.hidden_norm.weight", "BF16", (HIDDEN,)),
        ("midlayer.input_layernorm.weight", "BF16", (HIDDEN,)),
        ("midlayer.self_attn.q_proj.weight", "BF16", (HEADS_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.k_proj.weight", "BF16", (KV_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.v_proj.weight", "BF16", (KV_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.o_proj.weight", "BF16", (HIDDEN, HEADS_DIM)),
        ("midlayer.mlp.gate_proj.weight", "BF16", (inter, HIDDEN)),
        # second shard
        ("midlayer.post_attention_layernorm.weight", "BF16", (HIDDEN,)),
        ("midlayer.mlp.up_proj.weight", "BF16", (inter, HIDDEN)),
        ("midlayer.mlp.down_proj.weight", "BF16", (HIDDEN, inter)),
        ("norm.weight", "BF16", (HIDDEN,)),
        ("lm_head.weight", "BF16", (DRAFT_VOCAB, HIDDEN)),
        ("d2t", "I64", (DRAFT_VOCAB,)),
        ("t2d", "BOOL", (TARGET_VOCAB,)),
    ]


SIZES = {"BF16": 2, "I64": 8, "BOOL": 1}


def build(src: Path, intermediate: int = INTERMEDIATE) -> int:
    import numpy as np  # here, not at the top: the profiled child runs this file and would pay its import

    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    block = rng.bytes(64 << 20)
    ids = np.sort(rng.choice(TARGET_VOCAB, DRAFT_VOCAB, replace=False)).astype("<i8")
    mask = np.zeros(TARGET_VOCAB, np.uint8)
    mask[ids] = 1
    special = {"d2t": ids.tobytes(), "t2d": mask.tobytes()}
    all_t = _tensors(intermediate)
    shards = [all_t[:8], all_t[8:]]
    wm, total = {}, 0
    shards = [[(t if t[0] == "lm_head.weight" else ("model." + t[0], *t[1:])) for t in part] for part in shards]
    special = {"model." + k: v for k, v in special.items()}
    for i, part in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header: dict = {"__metadata__": {"format": "pt"}}
        off = 0
        for tname, dt, shape in part:
            n = math.prod(shape) * SIZES[dt]
            header[tname] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            wm[tname] = name
        total += off
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(src / name, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for k, (tname, dt, shape) in enumerate(part):
                n = math.prod(shape) * SIZES[dt]
                if tname in special:
                    f.write(special[tname])
                    continue
                shift = (k * 4099) % len(block)  # vary the pattern between tensors
                while n > 0:
                    piece = block[shift:shift + n]
                    f.write(piece)
                    n -= len(piece)
                    shift = 0
    (src / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2))
    (src / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": HIDDEN, "vocab_size": TARGET_VOCAB,
        "draft_vocab_size": DRAFT_VOCAB, "intermediate_size": intermediate}, indent=2))
    (src / "tokenizer_config.json").write_text("{}\n")
    return total


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "KCONVERT_DEBUG": "1", **(env or {})})
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return time.perf_counter() - t, p.stdout + p.stderr


def _timed_cpu(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system, all threads) and output of `cmd`: under a loaded machine the
    CPU seconds say what the work costs where the wall time says mostly how long it waited for a core."""
    c = _cpu_children()
    dt, out = _timed(cmd, env)
    return dt, _cpu_children() - c, out


def hash_files(paths: list[Path], threads: int) -> float:
    """Wall seconds to sha256 `paths` with `threads` threads, one file per thread at a time, largest first."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    def one(path: Path) -> str:
        h = hashlib.sha256()
        buf = bytearray(8 << 20)
        mv = memoryview(buf)
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(mv[:n])
        return h.hexdigest()

    paths = sorted(paths, key=lambda q: q.stat().st_size, reverse=True)
    t, c = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, paths))
    hash_files.cpu = time.process_time() - c  # type: ignore[attr-defined]
    return time.perf_counter() - t


def parts_at_once(src: Path, dst: Path, durable: bool, threads: int) -> float:
    """Wall seconds of the floor's two parts run at the same time on the same cores, as any fix on this machine
    must run them: `cp -r src dst` (`&& sync` when durable) in a child while this process hashes the same bytes
    the fix hashes (warm: one pass over src, standing in for the outputs; cold: two, inputs and outputs). Not a
    bound a fix cannot beat (a fix may hash bytes the copy just brought into the cache, and preallocate), but what
    the floor's own tools take together: where it is above the ratio asked, the floor leaves out a cost on these
    cores that no pipeline removes."""
    files = _files(src)
    t = time.perf_counter()
    cp = subprocess.Popen(["sh", "-c", 'cp -r "$0" "$1" && sync' if durable else 'cp -r "$0" "$1"', str(src), str(dst)])
    hash_files(files + files if durable else files, threads)
    if cp.wait():
        sys.exit(f"cp -r {src} {dst} failed ({cp.returncode})")
    return time.perf_counter() - t


def _files(folder: Path) -> list[Path]:
    return [q for q in sorted(folder.rglob("*")) if q.is_file()]


def fix_cmd(src: Path, dst: Path, durable: bool) -> list[str]:
    return ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-m", "kconvert", "fix", str(src), "-o", str(dst),
            "--target", "kimi-k2.5", "--aux-ids", "2,30,58", "--rope-from-target",
            *([] if durable else ["--no-fsync"])]


def _load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def profile(src: Path, work: Path, durable: bool, cache: str) -> None:
    """One fix, in a child process, instrumented: wall time per phase and busy time per kind of work."""
    dst = work / "fix"
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--profile-child", str(src), str(dst),
                        *([] if durable else ["--no-fsync"])], capture_output=True, text=True,
                       env={**os.environ, "KCONVERT_HASH_CACHE": cache})
    wall = time.perf_counter() - t
    if p.returncode not in (0, 1):
        sys.exit(f"profiled fix failed ({p.returncode}): {p.stderr[-2000:]}")
    rep = json.loads(p.stdout.strip().splitlines()[-1])
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    print(f"profile of one `kconvert fix` ({'durable' if durable else '--no-fsync'}, "
          f"{'warm' if cache != 'off' else 'cold'}), {_load()}: {wall:.2f} s wall")
    print(f"  {'interpreter + imports (start-up)':<40} {wall - rep.pop('_in_main'):6.2f} s wall")
    rss, rc = rep.pop("peak RSS MB"), rep.pop("exit code")
    if rc not in (0, 1):
        sys.exit(f"profiled fix exited {rc}: {p.stdout[-2000:]}")
    for k, v in rep.items():
        print(f"  {k:<40} {v:6.2f} s")
    print(f"  {'peak RSS':<40} {rss:6.0f} MB")


def profile_child(src: str, dst: str, durable: bool) -> None:
    """Runs the CLI in this process with counters around its phases (wall) and its system calls (busy seconds,
    summed over threads). Instruments by name at run time, so it survives a change of the writer's internals."""
    t_start = time.perf_counter()
    import hashlib
    import threading

    busy: dict[str, float] = {}
    lock = threading.Lock()

    def add(k: str, dt: float) -> None:
        with lock:
            busy[k] = busy.get(k, 0.0) + dt

    def timed(k: str, fn):
        def w(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                add(k, time.perf_counter() - t)
        w.__wrapped__ = fn
        return w

    real_sha = hashlib.sha256

    class Sha:
        def __init__(self, data=b""):
            self.h = real_sha()
            if data:
                self.update(data)

        def update(self, data):
            t = time.perf_counter()
            self.h.update(data)
            add("busy: sha256 (all threads)", time.perf_counter() - t)

        def __getattr__(self, name):
            return getattr(self.h, name)

    hashlib.sha256 = Sha
    for name, k in (("pwrite", "busy: write (all threads)"), ("pwritev", "busy: write (all threads)"),
                    ("write", "busy: write (all threads)"), ("preadv", "busy: read (all threads)"),
                    ("pread", "busy: read (all threads)"), ("readv", "busy: read (all threads)"),
                    ("copy_file_range", "busy: kernel copy (all threads)"),
                    ("fsync", "busy: fsync (all threads)"), ("fdatasync", "busy: fsync (all threads)")):
        if hasattr(os, name):
            setattr(os, name, timed(k, getattr(os, name)))
    t_imp = time.perf_counter()
    import kconvert.cli
    import kconvert.writer.write as ww

    try:
        fixmod = importlib.import_module("kconvert.fix")
    except ImportError:
        fixmod = importlib.import_module("kconvert.commands.fix")
    phase: dict[str, float] = {}

    def wall(k: str, owner, name: str):
        fn = getattr(owner, name)

        def w(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                phase[k] = phase.get(k, 0.0) + time.perf_counter() - t
        setattr(owner, name, w)

    in_check = threading.local()
    real_wc = fixmod.__dict__.get("write_checkpoint") or ww.write_checkpoint

    def wc(*a, before_commit=None, **kw):
        def bc(folder):
            t = time.perf_counter()
            in_check.on = True
            try:
                return before_commit(folder)
            finally:
                in_check.on = False
                phase["self-check (inspect of the output)"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            return real_wc(*a, before_commit=bc if before_commit else None, **kw)
        finally:
            phase["write_checkpoint (all of it)"] = time.perf_counter() - t
    import kconvert.writer as wpkg
    wpkg.write_checkpoint = wc
    ww.write_checkpoint = wc
    real_an = fixmod.analyse

    def an(*a, **kw):
        t = time.perf_counter()
        try:
            return real_an(*a, **kw)
        finally:
            if not getattr(in_check, "on", False):
                phase["inspect: rules (analyse)"] = phase.get("inspect: rules (analyse)", 0) + time.perf_counter() - t
    fixmod.analyse = an
    wall("inspect: open (headers, config)", fixmod, "open_draft")
    wall("planning", fixmod, "plan_fix")
    run = ww._Run
    for name, k in (("write_shards", "write: shards (copy + hash)"), ("copy_files", "write: other files"),
                    ("hash_the_rest", "write: hash files left out"),
                    ("write_provenance", "write: provenance + wait for fsyncs")):
        if hasattr(run, name):
            wall(k, run, name)
    import kconvert.writer.atomic as at
    wall("commit (dir fsyncs + rename)", at.TempFolder, "commit")
    wall("remember digests (hash cache)", ww, "_remember_digests")
    phase["imports of kconvert (in start-up)"] = time.perf_counter() - t_imp
    t_main = time.perf_counter()
    rc = kconvert.cli.main(["fix", src, "-o", dst, "--target", "kimi-k2.5", "--aux-ids", "2,30,58",
                            "--rope-from-target", *([] if durable else ["--no-fsync"])])
    t_end = time.perf_counter()
    out = {"_in_main": t_end - t_main, "main (after start-up)": t_end - t_main}
    out.update(phase)
    out.update(sorted(busy.items()))
    out["peak RSS MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["exit code"] = rc
    del t_start
    sys.stdout.flush()
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / "tmp"))
    ap.add_argument("--src", help="a draft built earlier (--keep); default: build one")
    ap.add_argument("--intermediate", type=int, default=INTERMEDIATE, help="MLP width: the draft's size")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-ratio", type=float, default=1.3)
    ap.add_argument("--keep", action="store_true", help="keep the built draft (for repeated runs)")
    ap.add_argument("--profile", action="store_true", help="one instrumented fix per variant, no floor")
    ap.add_argument("--profile-child", nargs=2, metavar=("SRC", "DST"), help=argparse.SUPPRESS)
    ap.add_argument("--no-fsync", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.profile_child:
        profile_child(*a.profile_child, durable=not a.no_fsync)
        return
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kconvert-bench-", dir=a.workdir))
    rc = 0
    try:
        if a.src:
            src = Path(a.src).resolve()
        else:
            src = work / "src"
            t = time.perf_counter()
            build(src, a.intermediate)
            subprocess.run(["sync"], check=True)
            print(f"built in {time.perf_counter() - t:.1f} s ({src})")
        total = sum(q.stat().st_size for q in _files(src))
        cores = os.cpu_count() or 1
        print(f"draft: {total / 1e9:.2f} GB in {len(_files(src))} files; {cores} cores")
        cache = str(work / "hashcache.sqlite")
        cold = {"KCONVERT_HASH_CACHE": "off"}
        warm = {"KCONVERT_HASH_CACHE": cache}
        # The warm variant's hash cache learns the input digests (files older than the cache's racy window).
        time.sleep(max(0.0, 2.5 - (time.time() - max(q.stat().st_mtime for q in _files(src)))))
        _timed(fix_cmd(src, work / "fix", False), warm)
        shutil.rmtree(work / "fix")
        if a.profile:
            profile(src, work, True, "off")
            profile(src, work, False, cache)
            return
        cp_dst = work / "cp"

        def clean() -> None:
            shutil.rmtree(cp_dst, ignore_errors=True)
            shutil.rmtree(work / "fix", ignore_errors=True)
            subprocess.run(["sync"], check=True)

        _timed(["cp", "-r", str(src), str(cp_dst)]); clean()  # noqa: E702 - page cache warm-up
        variants = [("durable, cold", True, cold, "cold"), ("no-fsync, warm", False, warm, "warm")]
        rows: dict[str, list[tuple[float, ...]]] = {v[0]: [] for v in variants}  # fix, floor, ratio, CPU, ...
        rss: dict[str, float] = {v[0]: 0.0 for v in variants}
        floors: list[dict[str, float]] = []
        for r in range(a.rounds):
            load = _load()
            t = time.perf_counter()
            subprocess.run(["cp", "-r", str(src), str(cp_dst)], check=True)
            cp_t = time.perf_counter() - t
            subprocess.run(["sync"], check=True)
            cps_t = time.perf_counter() - t
            # the copy stands in for the fix's output (same files, same sizes within a header)
            h_cold = hash_files(_files(src) + _files(cp_dst), cores)
            c_cold = hash_files.cpu  # type: ignore[attr-defined]
            h_warm = hash_files(_files(cp_dst), cores)
            c_warm = hash_files.cpu  # type: ignore[attr-defined]
            clean()
            both = {}
            for which in ("cold", "warm"):
                both[which] = parts_at_once(src, cp_dst, which == "cold", cores)
                clean()
            fl = {"cp": cp_t, "cp+sync": cps_t, "sha cold": h_cold, "sha warm": h_warm,
                  "cold": max(cps_t, h_cold), "warm": max(cp_t, h_warm), "cpu cold": c_cold, "cpu warm": c_warm,
                  "both cold": both["cold"], "both warm": both["warm"]}
            floors.append(fl)
            line = (f"round {r + 1} ({load}): cp {cp_t:.2f} s, cp+sync {cps_t:.2f} s, sha256 in+out "
                    f"{h_cold:.2f} s ({c_cold:.2f} CPU s), out {h_warm:.2f} s ({c_warm:.2f} CPU s); at once: "
                    f"cp+sync with sha256 in+out {both['cold']:.2f} s = {both['cold'] / fl['cold']:.2f}x its floor, "
                    f"cp with sha256 out {both['warm']:.2f} s = {both['warm'] / fl['warm']:.2f}x")
            for name, durable, env, which in variants:
                dt, cpu, out = _timed_cpu(fix_cmd(src, work / "fix", durable), env)
                rss[name] = max(rss[name], int(out.rsplit("maxrss_kb=", 1)[1].split()[0]) / 1024)
                clean()
                rows[name].append((dt, fl[which], dt / fl[which], cpu, cpu / fl["cpu " + which],
                                   fl["both " + which] / fl[which], dt / fl["both " + which]))
                line += f"; {name} {dt:.2f} s = {dt / fl[which]:.2f}x ({cpu:.2f} CPU s)"
            print(line, flush=True)
        med = statistics.median
        print(f"floor parts (median): cp -r {med(f['cp'] for f in floors):.2f} s, cp -r && sync "
              f"{med(f['cp+sync'] for f in floors):.2f} s, sha256 of inputs+outputs over {cores} cores "
              f"{med(f['sha cold'] for f in floors):.2f} s, of outputs {med(f['sha warm'] for f in floors):.2f} s")
        for name, durable, _, which in variants:
            fix_m, floor_m, ratio_m, cpu_m, cpu_r, both_r, fix_both = (med(x[i] for x in rows[name]) for i in range(7))
            basis = ("max(cp -r && sync, sha256 in+out)" if which == "cold" else "max(cp -r, sha256 of outputs)")
            ok = ratio_m <= a.max_ratio
            rc |= not ok
            print(f"fix {name:<15}: {fix_m:.2f} s, floor {floor_m:.2f} s = {basis}; ratio {ratio_m:.2f} "
                  f"({'ok' if ok else 'ABOVE'} <= {a.max_ratio}); peak RSS {rss[name]:.0f} MB "
                  f"({'ok' if rss[name] <= 300 else 'ABOVE'} <= 300); CPU {cpu_m:.2f} s = {cpu_r:.2f}x the "
                  f"CPU of its hashing; the floor's parts at once take {both_r:.2f}x the floor, the fix "
                  f"{fix_both:.2f}x them")
            rc |= rss[name] > 300
        print(f"after: {_load()}")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    sys.exit(1 if rc else 0)


if __name__ == "__main__":
    main()
