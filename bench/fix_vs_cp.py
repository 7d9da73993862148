"""Benchmark: `kconvert fix`'s writer against `cp -r` on a ~3 GB draft at Kimi-K2.5 shapes.

    .venv/bin/python bench/fix_vs_cp.py [--workdir DIR] [--rounds 3] [--copy-mode read_write|copy_file_range]

Three fix variants run in every round, each against the `cp -r` of the same round:
- `durable, cold`: the default (`kconvert fix`): fsync before the rename, every input digest computed;
- `no-fsync, cold`: `kconvert fix --no-fsync`, input digests computed (first fix of a local folder);
- `no-fsync, warm`: `--no-fsync` with the input digests known (kconvert's hash cache after an earlier fix or
  verify of the same files, or a Hub cache whose blob names are the digests): only the output is hashed.
The run also measures sha256 and memcpy throughput on this machine, and prints the floor they set: the output
(and, cold, the input) must be hashed in full whatever the writer does.

Builds a 2-shard draft of real (random, not sparse) bytes: hidden 7168, lm_head [32000, 7168] bf16, fc
[7168, 21504], llama-style midlayer (q/k/v/o, gate/up/down with the intermediate size scaled so the draft is
about 3 GB), norms, d2t [32000] int64 holding ABSOLUTE target ids, t2d [163840] bool; every key but lm_head
carries a `model.` prefix (the HF CausalLM habit). Warms the page cache with one cp and one fix, then alternates
cp and the fixes `--rounds` times (`sync` between runs, untimed, so one run's write-back does not land on the
next) and reports medians. The fix is the real command, `kconvert fix <src> -o <dst> --target kimi-k2.5
--aux-ids 2,30,58 --rope-from-target`: inspect, plan (strip the `model.` prefix from every key, d2t absolute ids
-> offsets, config ops), the streaming write, and the self-check inspect of the output. Its wall time includes
interpreter start-up; its peak RSS is measured by /usr/bin/time -f %M. cp does not fsync while the default fix
does (durable output), so `cp -r && sync` is reported as well. The files are removed at the end.
"""
from __future__ import annotations

import argparse
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
HIDDEN = 7168
TARGET_VOCAB = 163840
DRAFT_VOCAB = 32000
INTERMEDIATE = 40960  # Kimi-K2.5 drafts use 18432; scaled so that the draft is ~3 GB of real bytes
HEADS_DIM = 8192  # 64 heads x 128
KV_DIM = 1024  # 8 kv heads x 128


def _tensors() -> list[tuple[str, str, tuple[int, ...]]]:
    return [
        ("fc.weight", "BF16", (HIDDEN, 3 * HIDDEN)),
        ("midlayer.hidden_norm.weight", "BF16", (HIDDEN,)),
        ("midlayer.input_layernorm.weight", "BF16", (HIDDEN,)),
        ("midlayer.self_attn.q_proj.weight", "BF16", (HEADS_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.k_proj.weight", "BF16", (KV_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.v_proj.weight", "BF16", (KV_DIM, 2 * HIDDEN)),
        ("midlayer.self_attn.o_proj.weight", "BF16", (HIDDEN, HEADS_DIM)),
        ("midlayer.mlp.gate_proj.weight", "BF16", (INTERMEDIATE, HIDDEN)),
        # second shard
        ("midlayer.post_attention_layernorm.weight", "BF16", (HIDDEN,)),
        ("midlayer.mlp.up_proj.weight", "BF16", (INTERMEDIATE, HIDDEN)),
        ("midlayer.mlp.down_proj.weight", "BF16", (HIDDEN, INTERMEDIATE)),
        ("norm.weight", "BF16", (HIDDEN,)),
        ("lm_head.weight", "BF16", (DRAFT_VOCAB, HIDDEN)),
        ("d2t", "I64", (DRAFT_VOCAB,)),
        ("t2d", "BOOL", (TARGET_VOCAB,)),
    ]


SIZES = {"BF16": 2, "I64": 8, "BOOL": 1}


def build(src: Path) -> int:
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    block = rng.bytes(64 << 20)
    ids = np.sort(rng.choice(TARGET_VOCAB, DRAFT_VOCAB, replace=False)).astype("<i8")
    mask = np.zeros(TARGET_VOCAB, np.uint8)
    mask[ids] = 1
    special = {"d2t": ids.tobytes(), "t2d": mask.tobytes()}
    all_t = _tensors()
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
        "draft_vocab_size": DRAFT_VOCAB, "intermediate_size": INTERMEDIATE}, indent=2))
    (src / "tokenizer_config.json").write_text("{}\n")
    return total


def run_fix(src: str, dst: str, copy_mode: str, durable: bool = True) -> None:
    """Child process body: apply the fix and print peak RSS."""
    sys.path.insert(0, str(REPO))
    from kconvert.writer.ops import RenameTensor, RewriteD2TOffsets
    from kconvert.source.checkpoint import load_folder
    from kconvert.writer import write_checkpoint

    ckpt = load_folder(Path(src), ref=src)
    ops = [RenameTensor(n, n[len("model."):]) for n in sorted(ckpt.tensors) if n.startswith("model.")]
    ops.append(RewriteD2TOffsets("model.d2t"))
    write_checkpoint(ckpt, ops, Path(dst), provenance={}, copy_mode=copy_mode, durable=durable)
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})})
    return time.perf_counter() - t, p.stdout + p.stderr


def machine_rates() -> tuple[float, float]:
    """sha256 and memcpy throughput of one core, GB/s, over 256 MB of random bytes."""
    import hashlib

    buf = np.random.default_rng(1).bytes(256 << 20)
    best_h = best_c = 0.0
    for _ in range(3):
        t = time.perf_counter()
        hashlib.sha256(buf).hexdigest()
        best_h = max(best_h, 0.256 / (time.perf_counter() - t))
        dst = bytearray(len(buf))
        t = time.perf_counter()
        dst[:] = buf
        best_c = max(best_c, 0.256 / (time.perf_counter() - t))
    return best_h, best_c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=str(REPO / "tmp"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copy-mode", default="read_write", choices=["read_write", "copy_file_range"])
    ap.add_argument("--keep", action="store_true", help="keep the built draft (for repeated runs)")
    ap.add_argument("--run-fix", nargs=2, metavar=("SRC", "DST"), help=argparse.SUPPRESS)
    ap.add_argument("--no-fsync", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run_fix:
        run_fix(*a.run_fix, a.copy_mode, durable=not a.no_fsync)
        return
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kconvert-bench-", dir=a.workdir))
    try:
        src = work / "src"
        t = time.perf_counter()
        total = build(src)
        subprocess.run(["sync"], check=True)
        print(f"built {total / 1e9:.2f} GB of tensors in 2 shards in {time.perf_counter() - t:.1f} s ({src})")
        # /usr/bin/time forks from a small process: the child's ru_maxrss would otherwise start at this
        # (large) process's RSS, which fork copies.
        hash_rate, copy_rate = machine_rates()
        cores = os.cpu_count() or 1
        print(f"this machine: sha256 {hash_rate:.2f} GB/s per core, memcpy {copy_rate:.2f} GB/s, {cores} cores")

        def fix_cmd(durable: bool) -> list[str]:
            if a.copy_mode != "read_write":
                return ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, str(Path(__file__).resolve()),
                        "--copy-mode", a.copy_mode, *([] if durable else ["--no-fsync"]),
                        "--run-fix", str(src), str(work / "fix")]
            return ["/usr/bin/time", "-f", "maxrss_kb=%M", sys.executable, "-m", "kconvert", "fix", str(src),
                    "-o", str(work / "fix"), "--target", "kimi-k2.5", "--aux-ids", "2,30,58", "--rope-from-target",
                    *([] if durable else ["--no-fsync"])]

        cold = {"KCONVERT_HASH_CACHE": "off"}
        warm = {"KCONVERT_HASH_CACHE": str(work / "hashcache.sqlite")}
        variants = [("durable, cold", fix_cmd(True), cold), ("no-fsync, cold", fix_cmd(False), cold),
                    ("no-fsync, warm", fix_cmd(False), warm)]
        cp_cmd = ["cp", "-r", str(src), str(work / "cp")]

        def clean() -> None:
            shutil.rmtree(work / "cp", ignore_errors=True)
            shutil.rmtree(work / "fix", ignore_errors=True)
            subprocess.run(["sync"], check=True)

        # warm-up: the page cache holds the source for every run; the warm variant's hash cache learns the
        # input digests (the files are older than the cache's racy window by now)
        time.sleep(2.5)
        _timed(cp_cmd); clean()  # noqa: E702
        _timed(fix_cmd(False), warm); clean()  # noqa: E702
        cp_t, cps_t = [], []
        fix_t: dict[str, list[float]] = {v[0]: [] for v in variants}
        rss: dict[str, list[float]] = {v[0]: [] for v in variants}
        for r in range(a.rounds):
            dt, _ = _timed(cp_cmd)
            t = time.perf_counter()
            subprocess.run(["sync"], check=True)
            cp_t.append(dt)
            cps_t.append(dt + time.perf_counter() - t)
            clean()
            line = f"round {r + 1}: cp {cp_t[-1]:.2f} s (cp+sync {cps_t[-1]:.2f} s)"
            for name, cmd, env in variants:
                dt, out = _timed(cmd, env)
                fix_t[name].append(dt)
                rss[name].append(int(out.rsplit("maxrss_kb=", 1)[1].split()[0]) / 1024)
                clean()
                line += f", {name} {dt:.2f} s"
            print(line, flush=True)
        cp_m, cps_m = statistics.median(cp_t), statistics.median(cps_t)
        gb = total / 1e9
        what = ("`kconvert fix` (strip model. from every key, d2t offsets, config ops, self-check)"
                if a.copy_mode == "read_write" else "write_checkpoint (strip model., d2t offsets)")
        print(f"copy mode        : {a.copy_mode}; fix = {what}, sha256 of inputs and outputs, kconvert.json")
        print(f"cp -r   (median) : {cp_m:.2f} s   cp -r + sync: {cps_m:.2f} s")
        for name, _, _ in variants:
            m = statistics.median(fix_t[name])
            print(f"fix {name:<14}: {m:.2f} s   fix/cp {m / cp_m:.2f} (target <= 1.2)   "
                  f"fix/(cp+sync) {m / cps_m:.2f}   peak RSS {max(rss[name]):.0f} MB (target <= 300)")
        floor_cold = 2 * gb / (hash_rate * cores)
        floor_warm = gb / (hash_rate * min(cores, 2))
        print(f"floor            : hashing alone takes >= {floor_cold:.2f} s cold ({floor_cold / cp_m:.2f}x cp: "
              f"input + output sha256 over {cores} cores) and >= {floor_warm:.2f} s warm "
              f"({floor_warm / cp_m:.2f}x cp: output only, 2 shards on 2 cores)")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    main()
