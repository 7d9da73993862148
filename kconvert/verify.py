"""`kconvert verify`: static checks, then the draft next to the target in a real engine, acceptance measured from
the engine's own counters, an optional lossless check, thresholds, and one report."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from kconvert.engines.expectations import engine_rules
from kconvert.engines.serve_lines import ServeReplay
from kconvert.errors import UsageError
from kconvert.gate import Check, Thresholds, evaluate
from kconvert.inspect import InspectResult, analyse, open_draft
from kconvert.rules import Decisions
from kconvert.target import TargetModel, load_profile, load_target, profile_names

Progress = Callable[[str], None]


@dataclass
class VerifySettings:
    tp: int = 1
    draft_tp: int | None = None
    num_speculative_tokens: int = 3
    prompts: str = "all"
    max_tokens: int = 64
    trust_remote_code: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 1200.0
    skip_static: bool = False
    # Opt-in: in bf16 a k+1-token verify step and a one-token decode step round differently, so a good draft can
    # change greedy outputs; the check proves losslessness in float32 (engine_args={"dtype": "float32"}).
    lossless: bool = False
    max_prompts: int | None = None
    # further keys of vLLM's speculative_config from a replayed production serve line (passed as written)
    speculative_extra: dict[str, Any] = field(default_factory=dict)
    production_draft: str | None = None  # the serve line's "model", replaced by the draft under test

    def replay(self, replay: "ServeReplay") -> "VerifySettings":
        """These settings with what a production serve line sets (its TP, k, draft TP and further keys)."""
        from dataclasses import replace

        return replace(
            self,
            tp=replay.tp if replay.tp is not None else self.tp,
            draft_tp=replay.draft_tp if replay.draft_tp is not None else self.draft_tp,
            num_speculative_tokens=(replay.num_speculative_tokens if replay.num_speculative_tokens is not None
                                    else self.num_speculative_tokens),
            speculative_extra={**self.speculative_extra, **replay.extra},
            production_draft=replay.production_draft or self.production_draft)


@dataclass
class VerifyResult:
    inspect: InspectResult
    settings: VerifySettings
    engine_target: str
    prompt_set: str = ""
    live: Any = None  # LiveResult
    acceptance: dict[str, Any] | None = None
    lossless: dict[str, Any] | None = None
    checks: list[Check] = field(default_factory=list)
    thresholds: Thresholds | None = None
    static_blocked: bool = False
    diagnosis: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        if self.static_blocked:
            return False
        if self.lossless is not None and not self.lossless.get("identical", False):
            return False
        return all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json), as `kconvert verify --json` prints it."""
        return build_verify_report(self)


def resolve_target(ref: str) -> tuple[TargetModel, str]:
    """The target's facts for the static checks, and what the engine loads (a profile maps to its Hub id)."""
    if ref in profile_names():
        prof = load_profile(ref)
        hub = _profile_hub_id(ref)
        return prof, hub
    return load_target(ref), ref


def _profile_hub_id(name: str) -> str:
    import json
    from importlib import resources

    data = json.loads((resources.files("kconvert.target") / "profiles" / f"{name}.json").read_text())
    if not data.get("hub_id"):
        raise UsageError(f"profile {name} names no Hub id; pass the target's folder or Hub id")
    return data["hub_id"]


def compare_outputs(spec: list[list[int]], base: list[list[int]]) -> dict[str, Any]:
    """The lossless check: greedy outputs with the draft must equal those without it, token for token. Names the
    first request and position where they differ, with both tokens there."""
    for i, (a, b) in enumerate(zip(spec, base)):
        n = first_divergence(a, b)
        if n is not None:
            return {"identical": False, "requests": len(spec), "first_difference": {
                "request": i, "position": n, "speculative_token": a[n] if n < len(a) else None,
                "baseline_token": b[n] if n < len(b) else None}}
    if len(spec) != len(base):
        return {"identical": False, "requests": len(spec), "first_difference": {"request": min(len(spec), len(base)),
                                                                                "position": 0}}
    return {"identical": True, "requests": len(spec), "tokens_compared": sum(len(a) for a in spec),
            "first_difference": None}


def first_divergence(x: list[int], y: list[int]) -> int | None:
    """First token position where two outputs differ (a length difference diverges at the shorter length)."""
    if x == y:
        return None
    return next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))


def refuse_parallel_split(res: InspectResult, st: VerifySettings) -> None:
    """Refuse, before any engine starts, a TP the engine cannot run: a draft TP other than 1 or the target's,
    target heads that do not divide, or (with the static gate skipped) draft heads that do not divide. With the
    static gate on, the draft's own split problems are K304 findings and block the run like any error."""
    from kconvert.rules.parallel import draft_tp_in_effect, draft_tp_problem, head_problems

    bad = draft_tp_problem(st.tp, st.draft_tp)
    if bad:
        raise UsageError(bad)
    problems = []
    if res.target is not None:
        problems += [p for p in head_problems("target", res.target.num_attention_heads,
                                              res.target.num_key_value_heads, st.tp, mla=res.target.is_mla)
                     if p.fatal]
    if st.skip_static:
        d = res.draft
        problems += [p for p in head_problems("draft", d.num_attention_heads, d.num_key_value_heads,
                                              draft_tp_in_effect(st.tp, st.draft_tp), mla=d.layer_family == "mla")
                     if p.fatal]
    if problems:
        raise UsageError(f"--tp {st.tp}" + (f" --draft-tp {st.draft_tp}" if st.draft_tp is not None else "") +
                         ": " + "; ".join(p.message for p in problems),
                         hint="choose a TP the heads divide by (the draft can stay on one rank with --draft-tp 1)")


def verify(draft: str, target: str, *, engine: str = "vllm", engine_version: str | None = None,
           settings: VerifySettings | None = None, thresholds: Thresholds | None = None,
           decisions: Decisions | None = None, progress: Progress | None = None, fail_on: str = "error") -> VerifyResult:
    """Static checks, then a live engine run; see `kconvert.verify` (the package-level function) for the arguments."""
    from kconvert.engines.live_run import LiveRequest
    from kconvert.prompts import load_prompts

    if engine != "vllm":
        raise UsageError("live verify runs vLLM; measure a running SGLang server with --server URL --engine sglang")
    st = settings or VerifySettings()
    say = progress or (lambda _s: None)
    tgt, engine_target = resolve_target(target)
    ckpt = open_draft(draft)
    decided = replace(decisions or Decisions(), tp=st.tp, draft_tp=st.draft_tp)
    res = analyse(ckpt, tgt, engine_rules(engine, engine_version), decided, fail_on=fail_on)
    refuse_parallel_split(res, st)
    out = VerifyResult(inspect=res, settings=st, engine_target=engine_target, thresholds=thresholds)
    set_name, prompts = load_prompts(st.prompts)
    if st.max_prompts:
        prompts = prompts[: st.max_prompts]
    out.prompt_set = set_name
    if res.failing and not st.skip_static:
        out.static_blocked = True
        return out
    if ckpt.root is None:
        raise UsageError(f"{draft}: the live test needs the weights; download the draft first")
    from kconvert.engines.vllm_offline import run_vllm

    req = LiveRequest(target=engine_target, draft=str(ckpt.root), prompts=prompts,
                      num_speculative_tokens=st.num_speculative_tokens, tp=st.tp, draft_tp=st.draft_tp,
                      max_tokens=st.max_tokens, trust_remote_code=st.trust_remote_code,
                      engine_args=dict(st.engine_args), timeout_s=st.timeout_s,
                      speculative_extra=dict(st.speculative_extra))
    say("speculative run")
    out.live = run_vllm(req, progress=say)
    out.acceptance = out.live.acceptance()
    if st.lossless:
        say("lossless baseline (no draft)")
        base = run_vllm(LiveRequest(**{**req.to_dict(), "draft": None}), progress=say)
        out.lossless = compare_outputs(out.live.output_token_ids, base.output_token_ids)
        out.lossless["baseline_generate_s"] = base.timings.generate_s
    if thresholds is not None:
        out.checks = evaluate(thresholds, out.acceptance)
    return out


def live_section(vr: VerifyResult) -> dict[str, Any] | None:
    if vr.live is None:
        return None
    lv = vr.live
    return {
        "engine": lv.engine,
        "engine_version": lv.engine_version,
        "platform": lv.platform,
        "target": vr.engine_target,
        "prompt_set": vr.prompt_set,
        "num_prompts": lv.num_prompts,
        "max_tokens": vr.settings.max_tokens,
        "num_speculative_tokens": vr.settings.num_speculative_tokens,
        "tp": vr.settings.tp,
        "draft_tp": vr.settings.draft_tp,
        "speculative_config": _engine_speculative_config(lv.engine_args),
        "serve_line": _serve_line(vr),
        "production_draft": vr.settings.production_draft,
        "chat_template_applied": lv.chat_template_applied,
        "engine_args": lv.engine_args,
        "env": lv.env,
        "auto_settings": lv.auto_settings,
        "counters": {"drafts": lv.counters.drafts, "draft_tokens": lv.counters.draft_tokens,
                     "accepted": lv.counters.accepted, "accepted_per_pos": list(lv.counters.accepted_per_pos)},
        "acceptance": vr.acceptance,
        "timings": {"engine_start_s": lv.timings.engine_start_s, "generate_s": lv.timings.generate_s,
                    "total_s": lv.timings.total_s},
        "lossless": vr.lossless,
    }


def _engine_speculative_config(engine_args: dict[str, Any]) -> dict[str, Any] | None:
    spec = engine_args.get("speculative_config")
    return dict(spec) if isinstance(spec, dict) else None


def _serve_line(vr: VerifyResult) -> str:
    """The `vllm serve` line that runs what this check ran: the draft as the user named it (a folder or Hub id),
    the target as the engine loaded it, the TP, k, draft TP and every replayed speculative_config key."""
    from kconvert.engines.serve_lines import serve_lines

    return serve_lines(vr.inspect.checkpoint.ref, vr.engine_target, k=vr.settings.num_speculative_tokens,
                       tp=vr.settings.tp, draft_tp=vr.settings.draft_tp, engine_aux_note=False,
                       extra=vr.settings.speculative_extra)["vllm"]


def build_verify_report(vr: VerifyResult) -> dict[str, Any]:
    from kconvert.report.document import build_report

    th = vr.thresholds.to_dict() if vr.thresholds else None
    if th is not None:
        th["checks"] = [c.to_dict() for c in vr.checks]
    doc = build_report(vr.inspect, command="verify", hashes=True, live=live_section(vr), thresholds=th,
                       verdict="pass" if vr.passed else "fail", exit_code=vr.exit_code,
                       extra={"static_blocked": vr.static_blocked, "diagnosis": vr.diagnosis})
    doc["engine"]["version"] = vr.live.engine_version if vr.live else None
    return doc
