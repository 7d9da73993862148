"""`verify --diagnose`: when acceptance is low, or the files could not settle a convention, run the candidate
readings live (aux ids as written vs shifted by one; declared layers vs engine defaults; d2t as offsets vs as
absolute ids), one engine start each, and name the best with the `kconvert fix` command that applies it."""
from __future__ import annotations

import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kconvert.errors import KConvertError

LOW_AL_FRACTION = 0.6  # below 60% of the maximum (k + 1) counts as low


@dataclass
class Candidate:
    name: str
    description: str
    overrides: dict[str, Any] | None = None  # config overrides (vLLM reads input-of-layer ids at top level)
    fix_args: list[str] | None = None
    d2t_absolute: bool = False


def _ids_override(ids: list[int] | None) -> dict[str, Any]:
    return {"eagle_aux_hidden_state_layer_ids": ids, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


def candidates(vr) -> list[Candidate]:
    res = vr.inspect
    d = res.draft
    out: list[Candidate] = []
    L = res.target.num_hidden_layers if res.target else None
    fed = res.engine.physical_ids(d.aux.ids, res.target) if d.aux.ids is not None else (
        res.engine.default_physical_ids(L) if L else None)
    if fed:
        for shift in (-1, 1):
            ids = [i + shift for i in fed]
            if L and not all(1 <= i <= res.engine.collectable(L, res.target)[1] for i in ids):
                continue
            out.append(Candidate(f"aux ids {ids}", f"aux ids as fed ({fed}) shifted by {shift:+d}",
                                 _ids_override(ids), ["--aux-ids", ",".join(map(str, ids))]))
        if d.aux.ids is not None and L:
            dflt = res.engine.default_physical_ids(L)
            if dflt != fed:
                out.append(Candidate(f"engine default layers {dflt}", "ignore the declared ids",
                                     _ids_override(None), ["--aux-ids", "default"]))
        elif d.aux.ids is None and L:
            pass
    if "d2t" in d.tensors:
        out.append(Candidate("d2t read as absolute ids", "rewrite d2t as if it held absolute target ids",
                             fix_args=["--d2t", "absolute"], d2t_absolute=True))
    return out


def needed(vr) -> bool:
    acc = vr.acceptance or {}
    al = acc.get("mean_acceptance_length")
    k = vr.settings.num_speculative_tokens
    low = al is None or al < LOW_AL_FRACTION * (k + 1)
    unsettled = any(f.needs_decision for f in vr.inspect.findings)
    return low or unsettled


def diagnose(vr, *, progress: Callable[[str], None] | None = None, console=None) -> dict[str, Any]:
    from kconvert.engines.live_run import LiveRequest
    from kconvert.engines.vllm_offline import run_vllm
    from kconvert.fix import fix
    from kconvert.rules import Decisions
    from kconvert.rules.vocab import d2t_rule

    say = progress or (lambda _s: None)
    base_al = (vr.acceptance or {}).get("mean_acceptance_length")
    if not needed(vr):
        return {"ran": False, "reason": f"acceptance length {base_al:.3f} is not low and no convention is unsettled",
                "baseline": base_al, "candidates": []}
    cands = candidates(vr)
    start = vr.live.timings.engine_start_s or 30.0
    gen = vr.live.timings.generate_s or 10.0
    plan = [c.name for c in cands]
    if console is not None:
        console.print(f"[bold]diagnose:[/] {len(cands)} candidate(s), one engine run each "
                      f"(about {len(cands) * (start + gen):.0f} s): {', '.join(plan)}")
    draft_root = Path(vr.inspect.checkpoint.root)
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="kconvert-diagnose-"))
    try:
        for c in cands:
            say(f"diagnose: {c.name}")
            draft_path = str(draft_root)
            overrides = c.overrides
            if c.d2t_absolute:
                outdir = tmp / "d2t"
                try:
                    fix(str(draft_root), outdir, target=vr.inspect.target,
                        decisions=Decisions(d2t_kind="absolute"), only={d2t_rule.id}, partial=True)
                except KConvertError as e:
                    results.append({"candidate": c.name, "error": e.message})
                    continue
                draft_path = str(outdir)
            req = LiveRequest(target=vr.engine_target, draft=draft_path, prompts=_prompts(vr),
                              num_speculative_tokens=vr.settings.num_speculative_tokens, tp=vr.settings.tp,
                              draft_tp=vr.settings.draft_tp, max_tokens=vr.settings.max_tokens,
                              trust_remote_code=vr.settings.trust_remote_code,
                              engine_args=dict(vr.settings.engine_args), draft_overrides=overrides,
                              timeout_s=vr.settings.timeout_s)
            try:
                lv = run_vllm(req)
                acc = lv.acceptance()
                results.append({"candidate": c.name, "description": c.description,
                                "mean_acceptance_length": acc["mean_acceptance_length"],
                                "acceptance_rate": acc["acceptance_rate"], "fix_args": c.fix_args})
            except KConvertError as e:
                results.append({"candidate": c.name, "description": c.description, "error": e.message,
                                "fix_args": c.fix_args})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = [r for r in results if r.get("mean_acceptance_length") is not None]
    best = max(ok, key=lambda r: r["mean_acceptance_length"], default=None)
    out: dict[str, Any] = {"ran": True, "baseline": base_al, "candidates": results, "best": None, "fix_command": None}
    if best and base_al is not None and best["mean_acceptance_length"] > base_al + 0.05:
        out["best"] = best["candidate"]
        args = ["kconvert", "fix", vr.inspect.checkpoint.ref, "-o", f"{vr.inspect.checkpoint.ref.rstrip('/')}-fixed"]
        if vr.inspect.target is not None:
            args += ["--target", vr.engine_target]
        args += best["fix_args"] or []
        out["fix_command"] = shlex.join(args)
    return out


def _prompts(vr) -> list[str]:
    from kconvert.prompts import load_prompts

    _, prompts = load_prompts(vr.settings.prompts)
    return prompts[: vr.settings.max_prompts] if vr.settings.max_prompts else prompts


def render_diagnosis(console, diag: dict[str, Any]) -> None:
    from rich.table import Table

    if not diag.get("ran"):
        console.print(f"[dim]diagnose: not needed ({diag.get('reason')})[/]")
        return
    tab = Table(title=f"Diagnosis (as loaded: AL {diag['baseline']:.3f})")
    tab.add_column("candidate")
    tab.add_column("mean acceptance length", justify="right")
    for r in diag["candidates"]:
        tab.add_row(r["candidate"], f"{r['mean_acceptance_length']:.3f}" if r.get("mean_acceptance_length")
                    is not None else f"engine failed: {r.get('error', '')[:60]}")
    console.print(tab)
    if diag.get("fix_command"):
        console.print(f"[bold green]best: {diag['best']}[/] — apply it with:\n  {diag['fix_command']}")
    else:
        console.print("no candidate beats the draft as loaded")
