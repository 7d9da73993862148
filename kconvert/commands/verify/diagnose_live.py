"""`verify --diagnose`: when acceptance is low, or the files could not settle a convention, run the candidate
readings live (aux ids as written vs shifted by one; declared layers vs engine defaults; d2t as offsets vs as
absolute ids), one engine start each, and name the best with the `kconvert fix` command that applies it."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kconvert.commands.fix import fix
from kconvert.engines.fed_streams import fed_ids
from kconvert.errors import KConvertError
from kconvert.plan import candidates as plan_candidates  # the module; `candidates()` below is this file's
from kconvert.plan.candidates import LOW_AL_FRACTION, Candidate
from kconvert.results.inspection import Inspection
from kconvert.results.verify import VerifyResult
from kconvert.rules import Decisions
from kconvert.rules.vocab_mapping import d2t_rule
from kconvert.runners.vllm_offline import run_vllm

__all__ = ["LOW_AL_FRACTION", "Candidate", "DiagnosisPlan", "candidates", "candidates_for", "needed", "plan_diagnosis", "diagnose"]


@dataclass
class DiagnosisPlan:
    """What `--diagnose` would run for one verify result, before any engine starts."""

    needed: bool
    reason: str  # why it is not needed, when it is not
    candidates: list[Candidate]
    estimate_s: float  # one engine start and one generation per candidate, as the verify run took

    def summary(self) -> str:
        return (f"{len(self.candidates)} candidate(s), one engine run each (about {self.estimate_s:.0f} s): "
                f"{', '.join(c.name for c in self.candidates)}")


def _ids_override(ids: list[int] | None) -> dict[str, Any]:
    return {"eagle_aux_hidden_state_layer_ids": ids, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


def candidates(vr: VerifyResult) -> list[Candidate]:
    return candidates_for(vr.inspect)


def candidates_for(res: Inspection) -> list[Candidate]:
    """The readings a live diagnosis of `res` (an inspect result) runs, each of a kind in
    `plan.candidates.LIVE_READINGS`: known before any engine starts."""
    d = res.draft
    out: list[Candidate] = []
    L = res.target.num_hidden_layers if res.target else None
    # what the engine feeds as loaded: the ids at the keys this row reads, else its defaults (Model Runner V2 reads
    # no eagle_config.eagle_aux_hidden_state_layer_ids: K405), the readings shifted from there
    fed = (list(fed_ids(d, res.engine, L, res.target)[0]) if L else
           res.engine.physical_ids(d.aux.ids, res.target) if d.aux.ids is not None else None)
    aux = plan_candidates.READINGS["aux-layers"]
    if fed:
        for shift in (-1, 1):
            ids = [i + shift for i in fed]
            if L and not all(1 <= i <= res.engine.collectable(L, res.target)[1] for i in ids):
                continue
            out.append(Candidate(plan_candidates.aux_ids_name(ids), f"aux ids as fed ({fed}) shifted by {shift:+d}",
                                 plan_candidates.aux_ids_args(ids), kind=aux, overrides=_ids_override(ids)))
        if d.aux.ids is not None and L:
            dflt = res.engine.default_physical_ids(L)
            if dflt != fed:
                out.append(Candidate(plan_candidates.engine_default_name(dflt), "ignore the declared ids",
                                     list(plan_candidates.AUX_DEFAULT_ARGS), kind=aux, overrides=_ids_override(None)))
    if "d2t" in d.tensors:
        out.append(Candidate(plan_candidates.D2T_ABSOLUTE_NAME, "rewrite d2t as if it held absolute target ids",
                             fix_args=list(plan_candidates.D2T_ABSOLUTE_ARGS),
                             kind=plan_candidates.READINGS["vocab-mapping"], d2t_absolute=True))
    return out


def needed(vr: VerifyResult) -> bool:
    acc = vr.acceptance or {}
    al = acc.get("mean_acceptance_length")
    low = plan_candidates.is_low(al, vr.settings.num_speculative_tokens)
    unsettled = any(f.needs_decision for f in vr.inspect.findings)
    return low or unsettled


def plan_diagnosis(vr: VerifyResult) -> DiagnosisPlan:
    base_al = (vr.acceptance or {}).get("mean_acceptance_length")
    if not needed(vr):
        return DiagnosisPlan(False, f"acceptance length {base_al:.3f} is not low and no convention is unsettled", [],
                             0.0)
    cands = candidates(vr)
    timings = vr.live.timings if vr.live else None
    start = (timings.engine_start_s if timings else None) or 30.0
    gen = (timings.generate_s if timings else None) or 10.0
    return DiagnosisPlan(True, "", cands, len(cands) * (start + gen))


def diagnose(vr: VerifyResult, plan: DiagnosisPlan | None = None, *,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the plan's candidates (`plan_diagnosis(vr)` when none is given) and name the best reading; the result
    is the report's `diagnosis` section."""
    say = progress or (lambda _s: None)
    plan = plan or plan_diagnosis(vr)
    base_al = (vr.acceptance or {}).get("mean_acceptance_length")
    if not plan.needed:
        return {"ran": False, "reason": plan.reason, "baseline": base_al, "candidates": []}
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="kconvert-diagnose-"))
    try:
        for c in plan.candidates:
            say(f"diagnose: {c.name}")
            results.append(_run_candidate(vr, c, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = [r for r in results if r.get("mean_acceptance_length") is not None]
    best = max(ok, key=lambda r: r["mean_acceptance_length"], default=None)
    out: dict[str, Any] = {"ran": True, "baseline": base_al, "candidates": results, "best": None, "fix_command": None}
    if best and base_al is not None and best["mean_acceptance_length"] > base_al + 0.05:
        out["best"] = best["candidate"]
        out["fix_command"] = _fix_command(vr, best["fix_args"] or [])
    return out


def _run_candidate(vr: VerifyResult, c: Candidate, scratch: Path) -> dict[str, Any]:
    draft_root = Path(str(vr.inspect.checkpoint.root))
    draft_path = str(draft_root)
    if c.d2t_absolute:
        outdir = scratch / "d2t"
        try:
            fix(str(draft_root), outdir, target=vr.inspect.target, decisions=Decisions(d2t_kind="absolute"),
                only={d2t_rule.id}, partial=True)
        except KConvertError as e:
            return {"candidate": c.name, "error": e.message}
        draft_path = str(outdir)
    req = vr.settings.live_request(vr.engine_target, draft_path, vr.prompts, draft_overrides=c.overrides,
                                   replayed=False)
    try:
        acc = run_vllm(req).acceptance()
        return {"candidate": c.name, "description": c.description,
                "mean_acceptance_length": acc["mean_acceptance_length"], "acceptance_rate": acc["acceptance_rate"],
                "fix_args": c.fix_args}
    except KConvertError as e:
        return {"candidate": c.name, "description": c.description, "error": e.message, "fix_args": c.fix_args}


def _fix_command(vr: VerifyResult, fix_args: list[str]) -> str:
    tgt = vr.inspect.target
    return plan_candidates.fix_command(vr.inspect.checkpoint.ref, fix_args,
                                       target_ref=tgt.name if tgt is not None else None)
