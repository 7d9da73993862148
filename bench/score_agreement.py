"""How closely `kconvert score` reproduces live `kconvert verify` on the tiny example, draft by draft.

For every draft, broken variant and fixed variant of examples/tiny, in float32 and bfloat16 (k=3, all 96 prompts,
64 tokens, greedy), this runs:

- the live engine (`kconvert verify --skip-static`, with vLLM's per-request acceptance record:
  `per_request_spec_decode_metrics=detailed`), once, cached as JSON in the work folder;
- `kconvert score` against two traces:
  A. one trace recorded by `kconvert trace` (the target's own greedy continuation in HF transformers, same
     dtype), the same for every draft: the intended use;
  B. a trace teacher-forced on the tokens that live run produced (`--continuations`), so the reference tokens
     are the engine's own and only the hidden states (HF vs vLLM kernels) differ;
- and compares the counters (drafts, accepted, per position), the mean acceptance length, and per request the
  accepted count of every verify step (B; A where the request's tokens are identical).

    flock /tmp/kconvert-engine.lock .venv/bin/python bench/score_agreement.py --work /tmp/kconvert-score-agreement

Engine runs are cached in the work folder: rerunning only scores again. `--only NAME` restricts the drafts.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TINY = ROOT / "examples" / "tiny"
TARGET = str(TINY / "target")

DRAFTS = {
    "mla-torchspec": "drafts/mla-torchspec",
    "llama-speculators": "drafts/llama-speculators",
    "llama-fullvocab": "drafts/llama-fullvocab",
    "llama-specforge": "drafts/llama-specforge",
    "aux-ids-sglang-convention": "broken/aux-ids-sglang-convention",
    "d2t-absolute": "broken/d2t-absolute",
    "no-aux-ids": "broken/no-aux-ids",
    "norm-before-residual-missing": "broken/norm-before-residual-missing",
    "model-prefixed-keys": "broken/model-prefixed-keys",
    "lm-head-wrong-prune": "broken/lm-head-wrong-prune",
}
# variant -> fix options (kconvert.rules.Options fields) that bring it back
FIXES = {
    "aux-ids-sglang-convention": {},
    "d2t-absolute": {},
    "no-aux-ids": {"aux_ids": [2, 5, 7]},
    "norm-before-residual-missing": {},
    "model-prefixed-keys": {},
    "lm-head-wrong-prune": {"lm_head_source": str(TINY / "drafts" / "llama-fullvocab")},
}
DTYPES = ("float32", "bfloat16")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def live(name: str, path: str, dtype: str, work: Path) -> dict | None:
    """The live run's LiveResult as a dict, or {"error": ...}; cached."""
    f = work / "live" / f"{name}.{dtype}.json"
    if f.exists():
        return json.loads(f.read_text())
    from kconvert.errors import KConvertError
    from kconvert.commands.verify import VerifySettings, verify

    st = VerifySettings(prompts="all", max_tokens=64, num_speculative_tokens=3, timeout_s=900, lossless=False,
                        skip_static=True,
                        engine_args={"dtype": dtype, "per_request_spec_decode_metrics": "detailed"})
    log(f"live {name} {dtype}")
    t0 = time.perf_counter()
    try:
        vr = verify(path, TARGET, settings=st)
        doc = vr.live.to_dict()
    except KConvertError as e:
        doc = {"error": e.message, "last_lines": getattr(e, "last_lines", [])[-5:]}
    doc["wall_s"] = time.perf_counter() - t0
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(doc))
    return doc


def greedy_trace(dtype: str, work: Path) -> Path:
    from kconvert.trace.record_hf import record_trace
    from kconvert.trace.request import TraceRequest

    out = work / "traces" / f"greedy.{dtype}"
    if not (out / "trace.json").exists():
        log(f"trace (HF greedy) {dtype}")
        record_trace(TraceRequest(target=TARGET, out=str(out), prompts="all", max_tokens=64, layers=list(range(9)),
                                  dtype=dtype, lookahead=8, threads=1, batch_size=32, force=True))
    return out


def forced_trace(name: str, dtype: str, lv: dict, work: Path) -> Path:
    from kconvert.trace.record_hf import record_trace
    from kconvert.trace.request import TraceRequest

    out = work / "traces" / f"forced.{name}.{dtype}"
    if not (out / "trace.json").exists():
        log(f"trace (teacher-forced on the live tokens of {name}) {dtype}")
        items = [{"prompt_token_ids": p, "output_token_ids": o, "chat_template_applied": True}
                 for p, o in zip(lv["prompt_token_ids"], lv["output_token_ids"])]
        record_trace(TraceRequest(target=TARGET, out=str(out), layers=list(range(9)), dtype=dtype, lookahead=8,
                                  threads=1, batch_size=32, force=True, continuations=items,
                                  continuations_from=f"live {name} {dtype}"))
    return out


def scored(path: str, trace: Path) -> dict:
    from kconvert.score import ScoreSettings, score

    r = score(path, str(trace), settings=ScoreSettings(threads=1, skip_static=True))
    return {"error": r.error, "acceptance": r.acceptance, "counters": r.result.counters() if r.result else None,
            "steps": [s.steps for s in r.result.sequences] if r.result else None, "seconds": r.timings.get("score_s"),
            "reading": r.reading.describe() if r.reading else None}


def compare(lv: dict, sc: dict, same_tokens: list[bool] | None) -> dict:
    live_c = lv["counters"]
    out = {"live_al": 1 + live_c["accepted"] / live_c["drafts"] if live_c["drafts"] else None,
           "score_al": sc["acceptance"]["mean_acceptance_length"] if sc["acceptance"] else None,
           "live_counters": live_c, "score_counters": sc["counters"]}
    per = lv.get("spec_decode_per_request") or []
    if per and sc["steps"] is not None and all(p is not None for p in per):
        n_req = n_same = n_steps = n_steps_same = 0
        for i, (p, mine) in enumerate(zip(per, sc["steps"])):
            if same_tokens is not None and not same_tokens[i]:
                continue
            theirs = p.get("per_step_accepted") or []
            n_req += 1
            n_same += theirs == mine
            n_steps += max(len(theirs), len(mine))
            n_steps_same += sum(1 for a, b in zip(theirs, mine) if a == b) if theirs == mine else \
                next((j for j, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine)))
        out["requests_compared"] = n_req
        out["requests_identical"] = n_same
        out["steps_compared"] = n_steps
        out["steps_identical_before_first_difference"] = n_steps_same
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kconvert-score-agreement"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES))
    ap.add_argument("--no-fixed", action="store_true")
    a = ap.parse_args()
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    drafts = {n: str(TINY / p) for n, p in DRAFTS.items() if not a.only or n in a.only}
    if not a.no_fixed:
        from kconvert.commands.fix import fix
        from kconvert.rules import Options

        for n, opts in FIXES.items():
            if a.only and n not in a.only and f"{n}-fixed" not in a.only:
                continue
            out = work / "fixed" / n
            if not (out / "config.json").exists():
                fix(str(TINY / DRAFTS[n]), out, target=TARGET, options=Options(**opts), force=True)
            drafts[f"{n}-fixed"] = str(out)
    rows = []
    for dtype in a.dtypes:
        ga = greedy_trace(dtype, work)
        from kconvert.trace.format import open_trace

        tr = open_trace(ga)
        greedy_outputs = []
        for i in range(tr.num_sequences):
            s = tr.sequence(i)
            greedy_outputs.append(s.input_ids[s.prompt_len: s.stop].tolist())
        for name, path in drafts.items():
            lv = live(name, path, dtype, work)
            sa = scored(path, ga)
            row = {"draft": name, "dtype": dtype, "score_A": sa}
            if "error" in lv and lv.get("counters") is None:
                row["live_error"] = lv["error"]
                rows.append(row)
                log(f"{name} {dtype}: live failed ({lv['error'][:80]}); score A: "
                    f"{sa['error'] or sa['acceptance']['mean_acceptance_length']}")
                continue
            same = [o == g for o, g in zip(lv["output_token_ids"], greedy_outputs)]
            row["outputs_equal_to_trace_A"] = sum(same)
            row["A"] = compare(lv, sa, same)
            fb = forced_trace(name, dtype, lv, work)
            sb = scored(path, fb)
            row["score_B"] = sb
            row["B"] = compare(lv, sb, None)
            rows.append(row)
            log(f"{name} {dtype}: live AL {row['A']['live_al']:.4f}  A {row['A']['score_al']}  "
                f"B {row['B']['score_al']}  outputs = trace A: {sum(same)}/96")
    (work / "agreement.json").write_text(json.dumps(rows, indent=1))
    print()
    print("| draft | dtype | live AL | score AL (A: HF greedy trace) | score AL (B: live tokens) | live drafts / accepted "
          "| A drafts / accepted | B drafts / accepted | requests with identical steps (B) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "live_error" in r:
            sa = r["score_A"]
            print(f"| {r['draft']} | {r['dtype']} | engine failed | {sa['error'] or round(sa['acceptance']['mean_acceptance_length'], 4)} | | | | | |")
            continue
        A, B = r["A"], r["B"]
        lc, ac, bc = A["live_counters"], A["score_counters"], B["score_counters"]

        def f(x):
            return "error" if x is None else f"{x:.4f}"
        print(f"| {r['draft']} | {r['dtype']} | {f(A['live_al'])} | {f(A['score_al'])} | {f(B['score_al'])} | "
              f"{lc['drafts']} / {lc['accepted']} | {ac['drafts'] if ac else '-'} / {ac['accepted'] if ac else '-'} | "
              f"{bc['drafts'] if bc else '-'} / {bc['accepted'] if bc else '-'} | "
              f"{B.get('requests_identical', '-')}/{B.get('requests_compared', '-')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
