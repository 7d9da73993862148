"""Run one EAGLE-3 draft next to the tiny target on vLLM (CPU build) and print acceptance.

Plain vLLM, no kconvert code:
    .venv/bin/python examples/build/live_check.py --draft examples/tiny/drafts/mla-torchspec
    .venv/bin/python examples/build/live_check.py            # target alone (no speculation)
    .venv/bin/python examples/build/live_check.py --draft ... --tp 8   # sets VLLM_CPU_OMP_THREADS_BIND=0|1|0|1|...

Llama-layer drafts next to the MLA target need VLLM_MLA_DISABLE=1 on vLLM CPU ("No common block size for
16 (CPU_MLA: [16]; CPU_ATTN: [MultipleOf(32)])"); it is set automatically when the draft is not MLA
(override with --mla-disable / --no-mla-disable).
Prints one JSON object on the last stdout line (prefixed "RESULT ").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def draft_is_mla(draft: Path) -> bool:
    cfg = json.loads((draft / "config.json").read_text())
    if "transformer_layer_config" in cfg:
        cfg = cfg["transformer_layer_config"]
    return "kv_lora_rank" in cfg


def load_prompts(prompts_dir: Path, sets: list[str]) -> list[dict]:
    rows = []
    for s in sets:
        with open(prompts_dir / f"{s}.jsonl") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=Path, default=REPO / "examples/tiny/target")
    ap.add_argument("--draft", type=Path, default=None)
    ap.add_argument("--prompts-dir", type=Path, default=REPO / "kconvert/prompts")
    ap.add_argument("--sets", default="math,chat,code")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--num-spec", type=int, default=3)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--mla-disable", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--save-outputs", type=Path, default=None)
    a = ap.parse_args()

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if a.tp > 1:
        # one CPU worker per rank, bound round-robin to the cores this process may use (8 ranks on 2 cores: 0|1|0|1|...)
        cores = sorted(os.sched_getaffinity(0))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(cores[i % len(cores)]) for i in range(a.tp)))
    mla_disable = a.mla_disable
    if mla_disable is None:
        mla_disable = a.draft is not None and not draft_is_mla(a.draft)
    if mla_disable:
        os.environ["VLLM_MLA_DISABLE"] = "1"

    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(str(a.target))
    rows = load_prompts(a.prompts_dir, a.sets.split(","))
    prompts = []
    for r in rows:
        ids = tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], add_generation_prompt=True,
                                      tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        prompts.append({"prompt_token_ids": list(ids)})

    kw = dict(model=str(a.target), max_model_len=a.max_model_len, dtype="bfloat16", enforce_eager=True,
              gpu_memory_utilization=0.5, disable_log_stats=False, limit_mm_per_prompt={"vision_chunk": 0},
              tensor_parallel_size=a.tp, seed=0)
    if a.draft is not None:
        kw["speculative_config"] = {"model": str(a.draft), "method": "eagle3",
                                    "num_speculative_tokens": a.num_spec}
    t0 = time.time()
    llm = LLM(**kw)
    t_start = time.time() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens)
    t1 = time.time()
    outs = llm.generate(prompts, sp, use_tqdm=False)
    t_gen = time.time() - t1
    token_ids = [list(o.outputs[0].token_ids) for o in outs]

    res: dict = {"target": str(a.target), "draft": str(a.draft) if a.draft else None, "tp": a.tp,
                 "VLLM_MLA_DISABLE": bool(mla_disable), "prompts": len(prompts),
                 "generated_tokens": sum(map(len, token_ids)),
                 "outputs_sha256": hashlib.sha256(json.dumps(token_ids).encode()).hexdigest()[:16],
                 "engine_start_s": round(t_start, 1), "generate_s": round(t_gen, 1)}
    if a.draft is not None:
        vals: dict = {}
        for m in llm.get_metrics():
            if m.name in ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                          "vllm:spec_decode_num_accepted_tokens"):
                vals[m.name.split(":")[1]] = vals.get(m.name.split(":")[1], 0) + int(m.value)
            elif m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
                vals["per_pos"] = [int(v) for v in m.values]
        drafts = vals.get("spec_decode_num_drafts", 0)
        dtoks = vals.get("spec_decode_num_draft_tokens", 0)
        acc = vals.get("spec_decode_num_accepted_tokens", 0)
        res.update({"drafts": drafts, "draft_tokens": dtoks, "accepted": acc,
                    "acceptance_rate": round(acc / dtoks, 4) if dtoks else None,
                    "mean_acceptance_length": round(1 + acc / drafts, 4) if drafts else None,
                    "accepted_per_pos": vals.get("per_pos"),
                    "per_pos_rate": [round(v / drafts, 4) for v in vals.get("per_pos", [])] if drafts else None})
    if a.save_outputs:
        a.save_outputs.write_text(json.dumps({"ids": [r["id"] for r in rows], "token_ids": token_ids,
                                              "text": [tok.decode(t) for t in token_ids]}, indent=1))
    print("SAMPLE " + json.dumps([tok.decode(t) for t in token_ids[:3]]))
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # os._exit skips vLLM's slow teardown, so end the engine processes this run started first
    # (otherwise they keep the parent's pipes open and outlive it).
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    os._exit(0)
