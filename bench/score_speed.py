"""How fast `kconvert score` is, against a live `verify` measured in the same run, and on a Kimi-K2.5-shaped draft.

1. Tiny example (examples/tiny, the MLA draft, all 96 prompts, 64 tokens, k=3, bf16): wall time of a live
   `kconvert verify` (engine start + generation, a child process), of recording the trace once
   (`kconvert trace`, transformers), and of `kconvert score` (the CLI, a child process: imports, weights,
   scoring); tokens scored per second (target tokens the walk covered / scoring seconds).
2. A Kimi-K2.5-shaped MLA draft (hidden 7168, 64 heads, q_lora 1536, kv_lora 512, MLP 18432, draft vocabulary
   32000, fc over 3 x 7168; random bf16 weights written as real bytes, 1.8 GB) scored on CPU over a synthetic
   trace of 2,000 positions (20 sequences of 32 prompt + 64 output + 4 lookahead tokens, streams [2, 30, 58]):
   wall time and peak RSS of the `kconvert score` child process, the FLOPs its matmuls ran (counted by the
   runner), and the FLOP-bound time at this machine's measured matmul throughput (same dtype, same threads).

    flock /tmp/kconvert-engine.lock .venv/bin/python bench/score_speed.py [--threads 1] [--skip-live] [--skip-kimi]
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
TINY = ROOT / "examples" / "tiny"
PY = sys.executable


def run_child(args: list[str], env_extra: dict | None = None) -> tuple[float, int, subprocess.CompletedProcess]:
    """(wall seconds, peak RSS in MB of this child, result). Children run one at a time, so the high-water
    mark of RUSAGE_CHILDREN after each is that child's when it is the largest so far; each is measured in its
    own grandchild-free `python -c` wrapper to be exact."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
    wrapper = ("import resource, subprocess, sys, json; "
               "r = subprocess.run(sys.argv[1:]); "
               "print('@@rss', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
               "sys.exit(r.returncode)")
    t0 = time.perf_counter()
    res = subprocess.run([PY, "-c", wrapper, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    rss = next((int(line.split()[1]) for line in res.stderr.splitlines() if line.startswith("@@rss")), 0)
    return wall, rss // 1024, res


def tiny(threads: int, work: Path, skip_live: bool) -> dict:
    out: dict = {}
    draft = TINY / "drafts" / "mla-torchspec"
    target = TINY / "target"
    if not skip_live:
        from kconvert.commands.verify import VerifySettings, verify

        t0 = time.perf_counter()
        vr = verify(str(draft), str(target), settings=VerifySettings(prompts="all", max_tokens=64,
                                                                      num_speculative_tokens=3, lossless=False))
        out["verify_wall_s"] = time.perf_counter() - t0
        out["verify_engine_start_s"] = vr.live.timings.engine_start_s
        out["verify_generate_s"] = vr.live.timings.generate_s
        out["verify_al"] = vr.acceptance["mean_acceptance_length"]
    trace = work / "tiny-trace"
    wall, rss, res = run_child([PY, "-m", "kconvert", "trace", str(target), "--prompts", "all", "-o", str(trace),
                                "--aux-ids", "2,5,7", "--dtype", "bfloat16", "--threads", str(threads),
                                "--batch-size", "96", "--force", "--json"])
    if res.returncode:
        raise SystemExit(res.stderr[-2000:])
    out["trace_wall_s"], out["trace_peak_rss_mb"] = wall, rss
    out["trace_positions"] = json.loads(res.stdout)["num_positions"]
    wall, rss, res = run_child([PY, "-m", "kconvert", "score", str(draft), "--trace", str(trace), "--json",
                                "--threads", str(threads)])
    if res.returncode not in (0, 1):
        raise SystemExit(res.stderr[-2000:])
    doc = json.loads(res.stdout)
    sc = doc["score"]
    out["score_wall_s"], out["score_peak_rss_mb"] = wall, rss
    out["score_scoring_s"] = sc["timings"]["score_s"]
    out["score_al"] = sc["acceptance"]["mean_acceptance_length"]
    out["target_tokens"] = sc["trace"]["num_output_tokens"]
    out["tokens_per_s"] = out["target_tokens"] / sc["timings"]["score_s"]
    out["positions_scored"] = sc["positions_scored"]
    out["gflop"] = sc["timings"]["flops"] / 1e9
    return out


KIMI = dict(hidden=7168, heads=64, q_lora=1536, kv_lora=512, rope=64, nope=128, v_head=128, inter=18432,
            vocab=163840, draft_vocab=32000, layers=61, aux=[2, 30, 58])


def kimi_draft(folder: Path, seed: int = 0) -> int:
    """Random bf16 weights at Kimi-K2.5 MLA-draft shapes, every byte written (no sparse holes)."""
    import torch
    from safetensors.torch import save_file

    k = KIMI
    H = k["hidden"]
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    p = "midlayer."
    t = {
        p + "self_attn.q_a_proj.weight": w(k["q_lora"], 2 * H), p + "self_attn.q_a_layernorm.weight": ones(k["q_lora"]),
        p + "self_attn.q_b_proj.weight": w(k["heads"] * (k["nope"] + k["rope"]), k["q_lora"]),
        p + "self_attn.kv_a_proj_with_mqa.weight": w(k["kv_lora"] + k["rope"], 2 * H),
        p + "self_attn.kv_a_layernorm.weight": ones(k["kv_lora"]),
        p + "self_attn.kv_b_proj.weight": w(k["heads"] * (k["nope"] + k["v_head"]), k["kv_lora"]),
        p + "self_attn.o_proj.weight": w(H, k["heads"] * k["v_head"]),
        p + "mlp.gate_proj.weight": w(k["inter"], H), p + "mlp.up_proj.weight": w(k["inter"], H),
        p + "mlp.down_proj.weight": w(H, k["inter"]),
        p + "input_layernorm.weight": ones(H), p + "hidden_norm.weight": ones(H),
        p + "post_attention_layernorm.weight": ones(H),
        "fc.weight": w(H, 3 * H), "norm.weight": ones(H), "lm_head.weight": w(k["draft_vocab"], H),
    }
    ids = torch.sort(torch.randperm(k["vocab"], generator=g)[: k["draft_vocab"]]).values
    t["d2t"] = (ids - torch.arange(k["draft_vocab"])).to(torch.int64)
    t2d = torch.zeros(k["vocab"], dtype=torch.bool)
    t2d[ids] = True
    t["t2d"] = t2d
    folder.mkdir(parents=True, exist_ok=True)
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "_torchspec_version": "0.1.0",
           "vocab_size": k["vocab"], "draft_vocab_size": k["draft_vocab"], "hidden_size": H, "target_hidden_size": H,
           "intermediate_size": k["inter"], "num_hidden_layers": 1, "num_attention_heads": k["heads"],
           "num_key_value_heads": k["heads"], "q_lora_rank": k["q_lora"], "kv_lora_rank": k["kv_lora"],
           "qk_nope_head_dim": k["nope"], "qk_rope_head_dim": k["rope"], "v_head_dim": k["v_head"], "head_dim": 128,
           "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
           "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                            "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
           "max_position_embeddings": 262144, "tie_word_embeddings": False, "norm_before_residual": False,
           "eagle_aux_hidden_state_layer_ids": k["aux"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": k["aux"], "use_aux_hidden_state": True},
           "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return sum(v.numel() * v.element_size() for v in t.values())


def kimi_trace(folder: Path, seed: int = 0) -> int:
    import torch

    from kconvert.score.trace import TraceMeta, TraceWriter
    from kconvert.target import load_profile

    k = KIMI
    H = k["hidden"]
    prof = load_profile("kimi-k2.5")
    config = {"architectures": prof.architectures, "model_type": prof.model_type,
              "text_config": {"num_hidden_layers": k["layers"], "hidden_size": H, "vocab_size": k["vocab"],
                              "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
                              "kv_lora_rank": k["kv_lora"], "q_lora_rank": k["q_lora"],
                              "qk_rope_head_dim": k["rope"], "qk_nope_head_dim": k["nope"], "v_head_dim": k["v_head"],
                              "num_attention_heads": k["heads"], "max_position_embeddings": 262144,
                              "rope_theta": 50000.0, "torch_dtype": "bfloat16",
                              "rope_scaling": {"type": "yarn", "factor": 64.0,
                                               "original_max_position_embeddings": 4096}}}
    meta = TraceMeta(target={"source": "synthetic Kimi-K2.5-shaped target (bench)", "config": config},
                     dtype="bfloat16", layers=k["aux"], hidden_size=H, vocab_size=k["vocab"],
                     num_hidden_layers=k["layers"], prompt_set={"name": "synthetic", "num_prompts": 20},
                     continuation={"source": "greedy", "max_tokens": 64, "lookahead": 4},
                     recorder={"tool": "bench/score_speed.py", "version": "0"})
    g = torch.Generator().manual_seed(seed)
    with TraceWriter(folder, meta, force=True) as w:
        for _ in range(20):
            n = 32 + 64 + 4
            ids = torch.randint(0, k["vocab"], (n,), generator=g)
            w.add_sequence(ids.tolist(), ids.roll(-1).tolist(), 32, 64,
                           {layer: torch.randn(n, H, generator=g).to(torch.bfloat16) for layer in k["aux"]})
        w.finish(lambda used: (torch.randn(len(used), H, generator=g) * 0.02).to(torch.bfloat16))
    return 20 * 100


def gemm_gflops(dtype: str, threads: int) -> float:
    import torch

    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    a = torch.randn(1024, 7168, dtype=dt)
    b = torch.randn(7168, 7168, dtype=dt)
    torch.nn.functional.linear(a, b)
    t0 = time.perf_counter()
    n = 3
    for _ in range(n):
        torch.nn.functional.linear(a, b)
    return 2 * 1024 * 7168 * 7168 * n / (time.perf_counter() - t0) / 1e9


def kimi(threads: int, work: Path, dtype: str) -> dict:
    out: dict = {}
    draft = work / "kimi-draft"
    trace = work / "kimi-trace"
    t0 = time.perf_counter()
    out["draft_bytes"] = kimi_draft(draft)
    out["positions"] = kimi_trace(trace)
    out["build_s"] = time.perf_counter() - t0
    wall, rss, res = run_child([PY, "-m", "kconvert", "score", str(draft), "--trace", str(trace), "--json",
                                "--threads", str(threads), "--dtype", dtype, "--skip-static"])
    if res.returncode not in (0, 1):
        raise SystemExit(res.stderr[-3000:])
    sc = json.loads(res.stdout)["score"]
    out.update(score_wall_s=wall, score_peak_rss_mb=rss, scoring_s=sc["timings"]["score_s"],
               gflop=sc["timings"]["flops"] / 1e9, drafts=sc["counters"]["drafts"], error=sc["error"])
    out["gemm_gflops"] = gemm_gflops(dtype, threads)
    out["flop_bound_s"] = out["gflop"] / out["gemm_gflops"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--skip-live", action="store_true")
    ap.add_argument("--skip-kimi", action="store_true")
    ap.add_argument("--kimi-dtype", default="float32", help="compute dtype on CPU (bf16 matmuls are slow without "
                                                            "AVX512-BF16/AMX)")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="kconvert-score-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    res = {"threads": a.threads, "cpus": os.cpu_count()}
    res["tiny"] = tiny(a.threads, work, a.skip_live)
    t = res["tiny"]
    print(f"tiny example ({t['target_tokens']} target tokens, k=3, bf16):")
    if "verify_wall_s" in t:
        print(f"  live verify           {t['verify_wall_s']:7.1f} s wall (engine start {t['verify_engine_start_s']:.1f} s, "
              f"generate {t['verify_generate_s']:.1f} s), AL {t['verify_al']:.4f}")
    print(f"  trace (once)          {t['trace_wall_s']:7.1f} s wall, peak RSS {t['trace_peak_rss_mb']} MB, "
          f"{t['trace_positions']} positions")
    print(f"  score (CLI)           {t['score_wall_s']:7.1f} s wall, scoring {t['score_scoring_s']:.2f} s, "
          f"peak RSS {t['score_peak_rss_mb']} MB, AL {t['score_al']:.4f}")
    print(f"  tokens scored / s     {t['tokens_per_s']:9.0f}  ({t['gflop']:.2f} GFLOP)")
    if "verify_wall_s" in t:
        print(f"  score vs verify       {t['score_wall_s'] / t['verify_wall_s']:.3f}x wall")
    if not a.skip_kimi:
        res["kimi"] = k = kimi(a.threads, work, a.kimi_dtype)
        print(f"Kimi-K2.5-shaped MLA draft ({k['draft_bytes'] / 1e9:.2f} GB bf16), {k['positions']} positions, "
              f"{a.kimi_dtype} on CPU, {a.threads} thread(s):")
        print(f"  score (CLI)           {k['score_wall_s']:7.1f} s wall, scoring {k['scoring_s']:.1f} s, "
              f"peak RSS {k['score_peak_rss_mb']} MB")
        print(f"  matmul work           {k['gflop']:.0f} GFLOP; measured GEMM {k['gemm_gflops']:.1f} GFLOP/s -> "
              f"FLOP bound {k['flop_bound_s']:.1f} s ({k['scoring_s'] / k['flop_bound_s']:.2f}x of it)")
    (work / "score_speed.json").write_text(json.dumps(res, indent=1))
    print(f"figures: {work / 'score_speed.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
