"""Measure how far the tiny example's live acceptance moves between machines of one kind, on one machine.

    .venv/bin/python examples/build/measure_spread.py [--drafts mla llama] [--configs NAME ...] [--list]

Live acceptance on CPU is stable on one machine and differs between machines: the numbers (bf16 above all) come
from the kernels the machine's ISA selects and from how work is split over cores. This script runs
`kconvert verify` (the demo's own command: all 96 prompts x 64 tokens, k=3, greedy) for each good draft under
every numeric configuration this machine can force, and writes examples/tiny/spread.json:

- dtype: bfloat16 (as served) and float32;
- tensor parallel 1, 2 and 8 (8 CPU workers on the machine's cores, bound by kconvert);
- the CPU kernel paths: oneDNN's ISA cap (`ONEDNN_MAX_CPU_ISA`: the GEMMs and convolutions of torch), ATen's
  vector ISA (`ATEN_CPU_CAPABILITY`: norms, softmax, elementwise), MKL's (`MKL_ENABLE_INSTRUCTIONS`), and one OMP
  thread instead of one per core (another split of every reduction). vLLM's own CPU kernels come in three
  builds (`_C` for AVX-512 with bf16/AMX, `_C_AVX512`, `_C_AVX2`), chosen by the CPU's features at import; a
  machine can only run the builds its CPU supports, so the script records which one ran (`vllm_kernels`).

The caps only lower the ISA: on an AVX2 machine they imitate older machines, on an AVX-512/AMX machine they also
imitate AVX2 ones. Run it on each kind of machine you have and compare the files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TINY = REPO / "examples" / "tiny"
KCONVERT = [sys.executable, "-m", "kconvert"]

DRAFTS = {"mla": "drafts/mla-torchspec", "llama": "drafts/llama-speculators"}
# name -> (extra verify arguments, extra environment)
CONFIGS: dict[str, tuple[list[str], dict[str, str]]] = {
    "bf16": ([], {}),
    "bf16-tp2": (["--tp", "2"], {}),
    "bf16-tp8": (["--tp", "8"], {}),
    "bf16-onednn-avx": ([], {"ONEDNN_MAX_CPU_ISA": "AVX"}),
    "bf16-onednn-sse41": ([], {"ONEDNN_MAX_CPU_ISA": "SSE41"}),
    "bf16-aten-default": ([], {"ATEN_CPU_CAPABILITY": "default"}),
    "bf16-mkl-sse42": ([], {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}),
    "bf16-1thread": ([], {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
    "fp32": (["--engine-arg", "dtype=float32"], {}),
    "fp32-tp2": (["--engine-arg", "dtype=float32", "--tp", "2"], {}),
    "fp32-tp8": (["--engine-arg", "dtype=float32", "--tp", "8"], {}),
    "fp32-onednn-sse41": (["--engine-arg", "dtype=float32"], {"ONEDNN_MAX_CPU_ISA": "SSE41"}),
    "fp32-aten-default": (["--engine-arg", "dtype=float32"], {"ATEN_CPU_CAPABILITY": "default"}),
    "fp32-1thread": (["--engine-arg", "dtype=float32"], {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
}


def machine() -> dict:
    import torch

    flags = ""
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f" {f}" in flags]
    kernels = ("_C (AVX-512 + bf16)" if torch.cpu._is_avx512_bf16_supported() else
               "_C_AVX512" if torch.cpu._is_avx512_supported() else "_C_AVX2")
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    return {"cpu": model, "cores": os.cpu_count(), "isa": isa, "vllm_kernels": kernels,
            "torch": torch.__version__, "python": platform.python_version()}


def run(draft: str, config: str, tiny: Path = TINY) -> dict:
    args, env = CONFIGS[config]
    cmd = KCONVERT + ["verify", str(tiny / draft), "--target", str(tiny / "target"), "--prompts", "all",
                      "--max-tokens", "64", "-k", "3", "--no-lossless", "--json"] + args
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, "CI": "", **env},
                       timeout=1800)
    row = {"draft": draft, "config": config, "args": args, "env": env, "rc": p.returncode,
           "wall_s": round(time.time() - t0, 1)}
    try:
        doc = json.loads(p.stdout)
        live = doc["live"]
        acc = live["acceptance"]
        row.update(al=round(acc["mean_acceptance_length"], 4), per_position=[round(x, 4) for x in acc["per_position"]],
                   drafts=live["counters"]["drafts"], engine_start_s=round(live["timings"]["engine_start_s"], 1),
                   generate_s=round(live["timings"]["generate_s"], 1))
    except (json.JSONDecodeError, KeyError, TypeError):
        row["error"] = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafts", nargs="*", default=list(DRAFTS), choices=list(DRAFTS))
    ap.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--tiny", type=Path, default=TINY, help="the example folder (a rebuild elsewhere)")
    ap.add_argument("--out", type=Path, default=None, help="default: TINY/spread.json")
    a = ap.parse_args()
    a.out = a.out or a.tiny / "spread.json"
    doc = json.loads(a.out.read_text()) if a.out.exists() else {"machines": []}
    m = machine()
    entry = next((e for e in doc["machines"] if e["machine"] == m), None)
    if entry is None:
        entry = {"machine": m, "runs": []}
        doc["machines"].append(entry)
    for d in a.drafts:
        for c in a.configs:
            row = run(DRAFTS[d], c, a.tiny)
            print(json.dumps(row), flush=True)
            entry["runs"] = [r for r in entry["runs"] if (r["draft"], r["config"]) != (row["draft"], c)] + [row]
            a.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{m['cpu']} ({', '.join(m['isa'])}; vLLM kernels {m['vllm_kernels']})")
    print("| draft | config | AL | per position | drafts |\n|---|---|---|---|---|")
    for r in entry["runs"]:
        print(f"| {r['draft']} | {r['config']} | {r.get('al', 'error: ' + r.get('error', ''))} | "
              f"{r.get('per_position', '')} | {r.get('drafts', '')} |")
    for d in a.drafts:
        als = [r["al"] for r in entry["runs"] if r["draft"] == DRAFTS[d] and "al" in r]
        if als:
            print(f"{d}: lowest {min(als)}, highest {max(als)}, spread {round(max(als) - min(als), 4)} "
                  f"over {len(als)} configurations")


if __name__ == "__main__":
    main()
