"""Matrix documents built by hand (schemas/matrix.schema.json) for the renderers' tests: no drafts; a fleet of
published-looking drafts with failed, error and skipped cells, an unknown target, live cells and hostile strings;
one training run's checkpoints with steps and scores. Each factory returns a fresh dict; `validate` checks it
against the schema file the matrix command is held to. The rule texts are kconvert's own (its registry), as
`kconvert matrix` copies them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "schemas" / "matrix.schema.json").read_text())

ENGINES = [
    {"row": "vllm:0.32", "engine": "vllm", "engine_version": "0.32.0", "installed": True},
    {"row": "vllm:0.11", "engine": "vllm", "engine_version": "0.11.0", "installed": False},
    {"row": "sglang:post-32334", "engine": "sglang", "engine_version": "post-32334", "installed": False},
]
STATES = ("pass", "warn", "fail", "error", "skipped")

# Names and messages a hostile draft could carry: markup that would run if it reached the page unescaped.
SCRIPT_NAME = "<script>window.__pwned=1</script>"
IMG_PRODUCER = '"><img src=x onerror="window.__pwned=2">'
HOSTILE_MESSAGE = "</details></td></tr><script>window.__pwned=3</script><b>bold?</b>"
PIPE_NAME = "org/pipe|name|=1+2"
FORMULA_NAME = "=HYPERLINK(\"http://evil\",\"x\")"


def validate(doc: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    return doc


def _rules(ids: set[str]) -> dict[str, Any]:
    from kconvert.rules import REGISTRY

    out = {}
    for rid in sorted(ids):
        d = REGISTRY[rid].doc()
        out[rid] = {k: d[k] for k in ("name", "category", "severity", "summary", "why", "fix")}
    return out


def draft(name: str, *, target: str | None, state: str | None = None, evidence=(), producer: str | None = None,
          source: str = "local", revision: str | None = None, step: int | None = None, score: float | None = None,
          rate: float | None = None, rank: int | None = None, fix_command: str | None = None,
          method: str | None = "eagle3", error: str | None = None) -> dict[str, Any]:
    acc = None
    if score is not None:
        acc = {"acceptance_length": score, "acceptance_rate": rate if rate is not None else (score - 1) / 3,
               "per_position": [0.7, 0.5, 0.3], "num_speculative_tokens": 3, "trace": "traces/math"}
    return {"draft": name, "revision": revision or "sha256:" + hashlib.sha256(name.encode()).hexdigest(), "source": source,
            "producer": producer, "method": method,
            "target": {"id": target, "state": state or ("unknown" if target is None else "inferred"),
                       "evidence": list(evidence)},
            "step": step, "fix_command": fix_command, "score": acc, "rank": rank, "error": error}


def cell(d: dict[str, Any], engine: int, state: str, ids=(), *, kind: str = "static", message: str | None = None,
         fix: dict[str, Any] | None = None, live: float | None = None, severity: str = "error") -> dict[str, Any]:
    e = ENGINES[engine]
    c = {"draft": d["draft"], "revision": d["revision"], "target": d["target"]["id"], "engine": e["engine"],
         "engine_version": e["engine_version"], "kind": kind, "state": state, "finding_ids": list(ids),
         "findings": [{"id": i, "severity": severity, "message": f"{i} seen in {d['draft']}", "fixable": True}
                      for i in ids],
         "fix": fix, "message": message, "exit_code": {"pass": 0, "warn": 0, "fail": 1}.get(state, 2),
         "cached": False, "seconds": 0.01}
    if live is not None:
        c["live"] = {"acceptance_length": live, "acceptance_rate": (live - 1) / 3, "per_position": [0.8, 0.6, 0.4],
                     "num_speculative_tokens": 3, "verdict": "pass"}
    return c


def matrix(drafts: list[dict[str, Any]], cells: list[dict[str, Any]], ranking: dict[str, Any] | None = None,
           exit_code: int = 0) -> dict[str, Any]:
    summary = {"cells": len(cells), **{s: sum(c["state"] == s for c in cells) for s in STATES}}
    ids = {i for c in cells for i in c["finding_ids"]}
    return validate({"schema_version": 1, "kind": "matrix", "tool": {"name": "kconvert", "version": "0.1.0"},
                     "engines": [dict(e) for e in ENGINES], "drafts": drafts, "cells": cells, "rules": _rules(ids),
                     "ranking": ranking, "summary": summary, "exit_code": exit_code,
                     "timings": {"static": 1.5, "total": 2.0}})


def empty_doc() -> dict[str, Any]:
    return matrix([], [])


def fleet_doc() -> dict[str, Any]:
    """Hub-shaped drafts over three engine rows, with every cell state, live cells on the installed row, an unknown
    target, an unreadable draft, a DFlash draft and hostile names. The draft names are made up (example-org/...):
    the verdicts here are rendering input, not claims about any published draft."""
    aq = draft("example-org/kimi-draft-specforge", target="moonshotai/Kimi-K2.6", producer="specforge", source="hub",
               revision="0123456789abcdef0123456789abcdef01234567",
               evidence=["model card base_model: moonshotai/Kimi-K2.6"],
               fix_command="kconvert fix example-org/kimi-draft-specforge out/aq --target kimi-k2.6 --engine vllm:0.11")
    nv = draft("example-org/kimi-draft-modelopt", target="moonshotai/Kimi-K2.6", producer="modelopt", source="hub",
               revision="89abcdef0123456789abcdef0123456789abcdef", evidence=["name contains kimi"])
    llama = draft("example-org/llama-draft-eagle", target="meta-llama/Llama-3.1-8B-Instruct",
                  producer="eagle", source="hub", revision="fedcba9876543210fedcba9876543210fedcba98",
                  state="given", evidence=["--target meta-llama/Llama-3.1-8B-Instruct"],
                  fix_command="kconvert fix example-org/llama-draft-eagle out/llama --engine sglang")
    unknown = draft("runs/mystery-draft", target=None, producer=None,
                    evidence=["no speculators_config.verifier", "no model card base_model"])
    broken = draft("broken/truncated-header", target="moonshotai/Kimi-K2.6", producer=None,
                   evidence=["--target"], state="given", error="model.safetensors: header length exceeds the file")
    dflash = draft("example-org/qwen3-dflash", target="Qwen/Qwen3-8B", producer=None, method="dflash", source="hub",
                   revision="00112233445566778899aabbccddeeff00112233", evidence=["config target_layer_ids"])
    hostile = draft(SCRIPT_NAME, target="moonshotai/Kimi-K2.6", producer=IMG_PRODUCER,
                    evidence=["<b>evidence</b> & <i>more</i>"],
                    fix_command="kconvert fix '<script>alert(1)</script>' out --target \"x|y\"")
    pipe = draft(PIPE_NAME, target="meta-llama/Llama-3.1-8B-Instruct", producer="speculators")
    formula = draft(FORMULA_NAME, target="meta-llama/Llama-3.1-8B-Instruct", producer="speculators")
    drafts = [aq, nv, llama, unknown, broken, dflash, hostile, pipe, formula]
    fix_aq = {"available": True, "certain": False, "decisions": ["--aux-convention hidden-states"],
              "command": aq["fix_command"]}
    no_target = "no target: the draft names none; pass --target"
    unreadable = broken["error"]
    not_eagle = "DFlash draft (method: dflash), not EAGLE-3: served by vLLM's dflash method"
    cells = [
        cell(aq, 0, "pass"), cell(aq, 1, "fail", ["K404"], fix=fix_aq),
        cell(aq, 2, "warn", ["K405"], severity="warning"),
        cell(nv, 0, "warn", ["K606"], severity="warning"), cell(nv, 1, "fail", ["K102", "K201"]),
        cell(nv, 2, "pass"),
        cell(llama, 0, "pass"), cell(llama, 1, "pass"), cell(llama, 2, "fail", ["K201"],
                                                             fix={"available": True, "certain": True,
                                                                  "command": llama["fix_command"]}),
        *[cell(unknown, i, "skipped", message=no_target) for i in range(3)],
        *[cell(broken, i, "error", message=unreadable) for i in range(3)],
        *[cell(dflash, i, "skipped", message=not_eagle) for i in range(3)],
        cell(hostile, 0, "fail", ["K201"], message=HOSTILE_MESSAGE), cell(hostile, 1, "error", message=HOSTILE_MESSAGE),
        cell(hostile, 2, "warn", ["K911"], severity="warning"),
        cell(pipe, 0, "pass"), cell(pipe, 1, "warn", ["K911"], severity="warning"), cell(pipe, 2, "pass"),
        cell(formula, 0, "pass"), cell(formula, 1, "pass"), cell(formula, 2, "pass"),
        # live cells on the installed row
        cell(aq, 0, "pass", kind="live", live=2.38), cell(nv, 0, "error", kind="live",
                                                          message="engine exited: out of memory"),
    ]
    cells[-1]["exit_code"] = 3
    return matrix(drafts, cells, exit_code=3)


RUN = [  # (name, step, scored AL, static state, finding ids)
    ("runs/exp1/epoch_1", 1000, 1.82, "pass", ()),
    ("runs/exp1/epoch_2", 2000, 2.31, "warn", ("K911",)),
    ("runs/exp1/epoch_3", 3000, 2.74, "fail", ("K202",)),  # best AL, but a static fail is never ranked
    ("runs/exp1/epoch_4", 4000, 2.58, "pass", ()),
    ("runs/exp1/final", None, 2.0, "pass", ()),  # an export with no step in its name: ranked, not plotted
]


def run_doc() -> dict[str, Any]:
    """One training run's checkpoints in step order, scored against a trace."""
    ranked = sorted((r for r in RUN if r[3] != "fail"), key=lambda r: -r[2])
    rank = {r[0]: i + 1 for i, r in enumerate(ranked)}
    drafts, cells = [], []
    for name, step, al, state, ids in RUN:
        d = draft(name, target="meta-llama/Llama-3.1-8B-Instruct", producer="specforge", step=step, score=al,
                  rank=rank.get(name), evidence=["speculators_config.verifier"],
                  fix_command=f"kconvert fix {name} {name}-fixed" if state == "fail" else None)
        drafts.append(d)
        cells += [cell(d, 0, state, ids, severity="error" if state == "fail" else "warning"),
                  cell(d, 2, "pass")]
    order = [r[0] for r in ranked]
    return matrix(drafts, cells, ranking={"trace": "traces/math", "order": order, "best": order[0]}, exit_code=1)


# ------------------------------------------------------------------------------------ many drafts, every row (#48)

# Names as a fleet's really are: deep local paths with dates and hyper-parameters, long Hub ids, producer names
# of export pipelines, and one path part longer than any column (it cannot break at a separator).
LONG_PRODUCER = "specforge-0.9.1+nvidia-modelopt_export_pipeline.eagle3-distillation"
UNBROKEN = "checkpointnamedwithoutanyseparator" + "x" * 40
LONG_NAMES = [
    "/home/researcher/experiments/2026-11-eagle3-kimi-k2.5-distillation/runs/lr3e-4_bs512_warmup2000/epoch_12",
    "organisation-with-a-rather-long-name/Kimi-K2.5-Instruct-EAGLE3-draft-specforge-distilled-v2",
    "runs/exp-2026-12-04/ablation_no-norm-before-residual/checkpoints/global_step_0048000",
    f"/mnt/shared/drafts/{UNBROKEN}/final",
    "nvidia/gpt-oss-120b-Eagle3-long-context-speculative-decoding-draft-model",
]


def every_row_engines() -> list[dict[str, Any]]:
    """kconvert's own engine rows (`matrix --engines all`), whatever releases they hold when the test runs."""
    from kconvert.engines.expectations import ALL_ROWS

    return [{"row": f"{r.engine}:{r.version}", "engine": r.engine, "engine_version": r.version,
             "installed": i == 0} for i, r in enumerate(ALL_ROWS)]


def many_doc(n: int = 18) -> dict[str, Any]:
    """`n` drafts over every engine row kconvert has: long paths, long producer names, Hub revisions and
    sha256 content digests, every cell state, a fix command per failing draft; a live column on the first row."""
    engines = every_row_engines()
    drafts, cells = [], []
    for i in range(n):
        base = LONG_NAMES[i % len(LONG_NAMES)]
        name = base if i < len(LONG_NAMES) else f"{base}-{i}"
        hub = not name.startswith(("/", "runs/"))
        rev = hashlib.sha1(name.encode()).hexdigest() if hub else None  # a Hub commit; else a content digest
        fails = [j for j in range(len(engines)) if (i + j) % 3 == 0]
        # one output per engine (the layouts differ), the larger group first, as kconvert.matrix.fixes orders them
        by_engine: dict[str, list[int]] = {}
        for j in fails:
            by_engine.setdefault(engines[j]["engine"], []).append(j)
        fixes = []
        for eng, js in sorted(by_engine.items(), key=lambda kv: -len(kv[1])):
            out = f"kconvert-fixed/{name.strip('/').replace('/', '_')}-{eng}"
            rows = [engines[j]["row"] for j in js]
            fixes.append({"command": f"kconvert fix {name} -o {out} --engine {eng} --engine-version "
                                     f"{engines[js[0]]['engine_version']}",
                          "rows": rows, "repairs": ["K404", "K502"], "why": f"repairs K404, K502 on {', '.join(rows)}"})
        command_of = {r: f["command"] for f in fixes for r in f["rows"]}
        fix = fixes[0]["command"]
        d = draft(name, target="moonshotai/Kimi-K2.5" if i % 2 else "meta-llama/Llama-3.1-8B-Instruct",
                  producer=LONG_PRODUCER if i % 4 == 0 else ("speculators" if i % 4 == 1 else "specforge"),
                  source="hub" if hub else "local", revision=rev, evidence=["speculators_config.verifier"],
                  fix_command=fix)
        d["fixes"] = fixes
        drafts.append(d)
        for j, e in enumerate(engines):
            state = "fail" if j in fails else ("pass", "warn", "error", "skipped")[(i + j) % 4]
            ids = ["K404", "K502"] if state == "fail" else (["K911"] if state == "warn" else [])
            c = {"draft": name, "revision": d["revision"], "target": d["target"]["id"], "engine": e["engine"],
                 "engine_version": e["engine_version"], "kind": "static", "state": state, "finding_ids": ids,
                 "findings": [{"id": x, "severity": "error" if state == "fail" else "warning",
                               "message": f"{x} seen", "fixable": True} for x in ids],
                 "fix": {"available": True, "certain": True, "decisions": [], "command": command_of[e["row"]]}
                 if state == "fail" else None,
                 "message": "the draft's target is unknown" if state in ("error", "skipped") else None,
                 "exit_code": {"pass": 0, "warn": 0, "fail": 1}.get(state, 2), "cached": False,
                 "seconds": 0.0123 * (j + 1)}
            cells.append(c)
        if i % 3 == 0:
            cells.append({**cells[-len(engines)], "kind": "live", "state": "pass", "finding_ids": [], "findings": [],
                          "fix": None, "message": None, "exit_code": 0,
                          "live": {"acceptance_length": 2.5 + i / 100, "acceptance_rate": 0.5,
                                   "per_position": [0.7, 0.5, 0.3], "num_speculative_tokens": 3,
                                   "verdict": "pass"}})
    doc = matrix(drafts, cells, exit_code=1)
    doc["engines"] = engines
    doc["timings"] = {"gather_s": 0.52, "cells_s": 12.0, "total_s": 12.6, "computed": 120, "from_cache": 12,
                      "executor": "local"}
    return validate(doc)
