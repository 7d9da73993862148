"""Rebuild the whole tiny example from scratch on CPU.

    .venv/bin/python examples/build/build_all.py --seed 0

Steps: prompt sets (kconvert/prompts/*.jsonl + training examples in the work dir) -> tokenizer and trained
tiny Kimi-K2.5-shaped target (examples/tiny/target) -> greedy continuations, aux states, distilled MLA and
Llama drafts (examples/tiny/drafts) -> broken variants (examples/tiny/broken) -> build_info.json.
Runs with one torch thread: on a 2-core machine shared with anything else, two OMP threads were
10-50x slower than one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import build_target  # noqa: E402
import common as C  # noqa: E402
import distill  # noqa: E402
import make_prompts  # noqa: E402
import package  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=C.DEFAULT_WORK)
    ap.add_argument("--n-train", type=int, default=1200, help="training examples generated")
    ap.add_argument("--target-steps", type=int, default=0,
                    help="optional LM training steps for the target (0 = random init, the shipped design)")
    ap.add_argument("--init-std", type=float, default=0.085)
    ap.add_argument("--gain", type=float, default=2.0, help="layer k output projections scaled by gain**k")
    ap.add_argument("--n-distill", type=int, default=500, help="prompts continued by the target")
    ap.add_argument("--draft-steps", type=int, default=400)
    ap.add_argument("--draft-batch", type=int, default=24)
    ap.add_argument("--skip-target", action="store_true", help="reuse examples/tiny/target")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.time()
    times = {}
    make_prompts.build(a.seed, C.PROMPTS_DIR, a.work_dir, a.n_train)
    times["prompts_s"] = round(time.time() - t0, 1)
    if not a.skip_target:
        build_target.LAYER_GAIN = a.gain
        build_target.build(a.seed, a.work_dir, a.target_steps, 16, 1e-2, a.init_std)
    times["target_s"] = round(time.time() - t0, 1)
    res = distill.build(a.seed, a.work_dir, a.n_distill, a.draft_steps, a.draft_batch, 3e-3, ["mla", "llama"])
    times["distill_s"] = round(time.time() - t0, 1)
    package.write_drafts(res)
    times["total_s"] = round(time.time() - t0, 1)
    conts = res["conts"]
    ng = [tuple(c[i:i + 4]) for c in conts for i in range(len(c) - 3)]
    info = {
        "seed": a.seed,
        "num_layers": C.NUM_LAYERS,
        "aux_ids_vllm": C.AUX_IDS_VLLM,
        "aux_ids_specforge": C.AUX_IDS_SPECFORGE,
        "vllm_default_aux_ids": [2, C.NUM_LAYERS // 2, C.NUM_LAYERS - 3],
        "target_init_std": a.init_std,
        "layer_gain": a.gain,  # the target's gain (with --skip-target: the gain it was built with, default 2.0)
        "target_train_steps": a.target_steps,
        "adjacent_cosine_hf": {f"h{k}/h{k + 1}": round(v, 4) for k, v in res["cos"].items()},
        "draft_vocab_size": C.DRAFT_VOCAB,
        "draft_vocab_coverage": round(res["coverage"], 4),
        "distill_prompts": len(conts),
        "distill_generated_tokens": res["n_tokens"],
        "distill_continuation_distinct_4gram_ratio": round(len(set(ng)) / max(len(ng), 1), 4),
        "num_attention_heads": C.NUM_HEADS,
        "draft_numeric_views": {k: list(v) for k, v in distill.NUMERIC_VIEWS.items()},
        "draft_consistent_only": dict(distill.CONSISTENT_ONLY),
        "skip_target": a.skip_target,
        "times": times,
    }
    C.write_json(C.TINY / "build_info.json", info)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
