"""kconvert verify against a plain vLLM script with the same engine arguments and prompts, in the same run.

Both run as fresh processes (interpreter start, vLLM import, engine start, generation, shutdown), alternating,
`--rounds` times; the plain script gets exactly the engine arguments, environment and rendered prompts that
kconvert's report says it used. Target: verify <= 1.1x the plain script.

    .venv/bin/python bench/verify_overhead.py [--draft D --target T] [--rounds 2] [--max-tokens 64]

Default pair: examples/tiny (MLA draft next to the Kimi-K2.5-shaped target) when present, else a tiny Llama pair
built by tests/live_factories.py.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAIN = r'''
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

def main():
    spec = json.load(open(sys.argv[1]))
    llm = LLM(**spec["engine_args"])
    tok = llm.get_tokenizer()
    prompts = [TokensPrompt(prompt_token_ids=tok.encode(
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
        add_special_tokens=False)) for p in spec["prompts"]]
    out = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=spec["max_tokens"]))
    print(sum(len(o.outputs[0].token_ids) for o in out), "tokens")

if __name__ == "__main__":
    main()
'''


def default_pair() -> tuple[str, str]:
    ex = ROOT / "examples" / "tiny"
    if (ex / "target" / "config.json").is_file() and (ex / "drafts" / "mla-torchspec" / "config.json").is_file():
        return str(ex / "drafts" / "mla-torchspec"), str(ex / "target")
    from tests.live_factories import build_pair

    t, d = build_pair(Path(tempfile.mkdtemp(prefix="kconvert-bench-pair-")))
    return str(d), str(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft")
    ap.add_argument("--target")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", default="all")
    args = ap.parse_args()
    draft, target = (args.draft, args.target) if args.draft else default_pair()
    work = Path(tempfile.mkdtemp(prefix="kconvert-bench-verify-"))
    exe = [sys.executable, "-m", "kconvert", "verify", draft, "--target", target, "--prompts", args.prompts,
           "--max-tokens", str(args.max_tokens), "--no-lossless", "--json"]
    t_v, t_p = [], []
    spec_path = work / "plain.json"
    script = work / "plain.py"
    script.write_text(PLAIN)
    for r in range(args.rounds):
        t = time.perf_counter()
        res = subprocess.run(exe, capture_output=True, text=True)
        t_v.append(time.perf_counter() - t)
        if res.returncode not in (0, 1):
            sys.exit(f"verify failed ({res.returncode}): {res.stderr[-2000:]}")
        doc = json.loads(res.stdout)
        live = doc["live"]
        from kconvert.prompts import load_prompts

        spec = {"engine_args": live["engine_args"], "prompts": load_prompts(args.prompts)[1],
                "max_tokens": args.max_tokens}
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ, **live["env"])
        t = time.perf_counter()
        res = subprocess.run([sys.executable, str(script), str(spec_path)], capture_output=True, text=True, env=env)
        t_p.append(time.perf_counter() - t)
        if res.returncode != 0:
            sys.exit(f"plain script failed: {res.stderr[-2000:]}")
        print(f"round {r + 1}: kconvert verify {t_v[-1]:.1f} s, plain vLLM script {t_p[-1]:.1f} s "
              f"(verify AL {live['acceptance']['mean_acceptance_length']:.3f})", flush=True)
    mv, mp = statistics.median(t_v), statistics.median(t_p)
    print(f"median: verify {mv:.1f} s, plain {mp:.1f} s, ratio {mv / mp:.3f} (target <= 1.1)")


if __name__ == "__main__":
    main()
