"""What to run next, as exact command lines, and what a static PASS cannot see.

inspect names the `kconvert fix` command that repairs its fixable findings (with the decisions already given on
its own command line); a static PASS names the defect classes that only a live run reveals and the
`kconvert verify` command that runs it; fix names the `verify` command for what it wrote.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kconvert.inspect import InspectResult

TARGET_PLACEHOLDER = "<target>"  # verify needs a target; fix and inspect may have run without one


def quote(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def fix_output_dir(source: str, engine: str, *, hub: bool) -> str:
    """A destination beside a local draft (`drafts/x` -> `drafts/x-vllm`), in the working directory for a Hub id."""
    if hub:
        return f"{source.split('@', 1)[0].rstrip('/').rsplit('/', 1)[-1]}-{engine}"
    p = Path(source.rstrip("/") or ".")
    return str(p.with_name(f"{p.name}-{engine}")) if p.name else f"draft-{engine}"


def _engine_flags(result: InspectResult) -> list[str]:
    from kconvert.engines.expectations import engine_rules

    eng = result.engine
    flags = [] if eng.engine == "vllm" else ["--engine", eng.engine]
    try:
        default = engine_rules(eng.engine, None).version
    except Exception:  # an engine whose default cannot be resolved here: name the version explicitly
        default = None
    if eng.version != default:
        flags += ["--engine-version", str(eng.version)]
    return flags


def fix_command(result: InspectResult) -> str:
    ck = result.checkpoint
    source = ck.ref
    argv = ["kconvert", "fix", source, "-o", fix_output_dir(source, result.engine.engine, hub=ck.kind == "hub")]
    if result.target is not None:
        argv += ["--target", result.target.name]
    return quote(argv + _engine_flags(result) + result.decisions.flags())


def verify_steps(draft: str, result: InspectResult, why: str) -> list[dict[str, str]]:
    """The live step: `kconvert verify` for vLLM; for SGLang (which kconvert does not start) the launch line and
    `kconvert verify --server` against it."""
    if result.engine.engine == "sglang":
        from kconvert.engines.serve_lines import sglang_next_lines

        target = result.target.name if result.target else TARGET_PLACEHOLDER
        launch, measure = sglang_next_lines(draft, target, tp=result.decisions.tp or 1)
        return [{"command": launch, "why": f"{why}: start SGLang with the draft (topk 1, k+1 draft tokens)"},
                {"command": measure, "why": "measure that server's acceptance (SGLang's accept_length and vLLM's "
                                            "mean acceptance length)"}]
    return [{"command": verify_command(draft, result), "why": why}]


def verify_command(draft: str, result: InspectResult) -> str:
    argv = ["kconvert", "verify", draft, "--target", result.target.name if result.target else TARGET_PLACEHOLDER]
    if result.engine.engine != "vllm":
        argv += ["--engine", result.engine.engine]
    return quote(argv + result.decisions.flags())


def not_checked(result: InspectResult) -> list[str]:
    """Defect classes that load without a trace, so static checks pass them: only a live run measures them."""
    d = result.draft
    out = []
    if d.aux.ids is None:
        out.append("no aux layer ids are recorded, so the engine feeds its default layers: a draft trained on other "
                   "layers loads and accepts little (vLLM PR #50170: 1.2% instead of 58.9%)")
    else:
        out.append(f"whether the recorded aux ids {list(d.aux.ids)} are the layers the draft was trained on")
    if "d2t" in d.tensors:
        out.append("an lm_head pruned to the draft vocabulary with the wrong index (lm_head[d2t] instead of "
                   "lm_head[d2t + arange]): right shape, wrong rows")
    out.append("weights that load but were not trained for this target (e.g. randomly initialised embed_tokens, "
               "TorchSpec #38)")
    return out


def next_steps(result: InspectResult, *, command: str, written: str | None = None,
               live: bool = False) -> dict[str, Any]:
    """`{"next_steps": [{"command", "why"}], "not_checked": [...]}` for a report of `command`."""
    steps: list[dict[str, str]] = []
    checked: list[str] = []
    if command == "fix" and written:
        steps += verify_steps(written, result, "measure the corrected draft live next to the target")
        return {"next_steps": steps, "not_checked": checked}
    failing = result.failing
    fixable = [f for f in failing if f.fixable]
    if fixable and command in ("inspect", "verify"):
        why = f"repairs {', '.join(sorted({f.id for f in fixable}))}"
        blocking = [f for f in fixable if f.needs_decision and not f.ops]
        if blocking:
            why += "; first add " + "; ".join(f"{f.id}: {f.needs_decision}" for f in blocking)
        steps.append({"command": fix_command(result), "why": why})
    if not failing and command == "inspect" and not live:
        checked = not_checked(result)
        steps += verify_steps(result.checkpoint.ref, result, "static checks passed; measure acceptance live")
    return {"next_steps": steps, "not_checked": checked}
