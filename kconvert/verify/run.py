"""The live run of `kconvert verify`: the static checks, a refusal of a TP the engine cannot run, the draft next to
the target in vLLM (child process, hard timeout), the acceptance from the engine's own counters, the optional
lossless baseline and the gate."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from kconvert.engines.expectations import engine_rules
from kconvert.engines.live_run import LiveRequest, LiveResult
from kconvert.engines.serve_lines import ServeReplay
from kconvert.errors import UsageError
from kconvert.inspect import InspectResult, analyse, open_draft
from kconvert.rules import Decisions
from kconvert.rules.decisions import given
from kconvert.rules.selection import Selection
from kconvert.target import TargetModel, load_profile, load_target, profile_hub_id, profile_names
from kconvert.verify.lossless import compare_outputs
from kconvert.verify.thresholds import Check, Thresholds, evaluate

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

    def replay(self, replay: ServeReplay) -> VerifySettings:
        """These settings with what a production serve line sets (its TP, k, draft TP and further keys)."""
        return replace(
            self,
            tp=replay.tp if replay.tp is not None else self.tp,
            draft_tp=replay.draft_tp if replay.draft_tp is not None else self.draft_tp,
            num_speculative_tokens=(replay.num_speculative_tokens if replay.num_speculative_tokens is not None
                                    else self.num_speculative_tokens),
            speculative_extra={**self.speculative_extra, **replay.extra},
            production_draft=replay.production_draft or self.production_draft)

    def live_request(self, target: str, draft: str | None, prompts: list[str], *,
                     draft_overrides: dict[str, Any] | None = None, replayed: bool = True) -> LiveRequest:
        """The engine run these settings ask for (`replayed`: with the serve line's further speculative keys)."""
        return LiveRequest(target=target, draft=draft, prompts=list(prompts),
                           num_speculative_tokens=self.num_speculative_tokens, tp=self.tp, draft_tp=self.draft_tp,
                           max_tokens=self.max_tokens, trust_remote_code=self.trust_remote_code,
                           engine_args=dict(self.engine_args), draft_overrides=draft_overrides,
                           timeout_s=self.timeout_s,
                           speculative_extra=dict(self.speculative_extra) if replayed else {})


@dataclass
class VerifyResult:
    inspect: InspectResult
    settings: VerifySettings
    engine_target: str
    prompt_set: str = ""
    prompts: list[str] = field(default_factory=list)  # the prompts the engine ran
    live: LiveResult | None = None
    acceptance: dict[str, Any] | None = None
    lossless: dict[str, Any] | None = None
    checks: list[Check] = field(default_factory=list)
    thresholds: Thresholds | None = None
    static_blocked: bool = False
    diagnosis: dict[str, Any] | None = None
    # `--dry-run`: what the live run would start (engine arguments, environment, serve line); nothing started
    planned: dict[str, Any] | None = None

    @property
    def dry_run(self) -> bool:
        return self.planned is not None

    @property
    def passed(self) -> bool:
        if self.dry_run:
            return not self.inspect.failing  # a dry run's verdict is the static one
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
        from kconvert.verify.document import build_verify_report

        return build_verify_report(self)


def resolve_target(ref: str) -> tuple[TargetModel, str]:
    """The target's facts for the static checks, and what the engine loads (a profile maps to its Hub id)."""
    if ref in profile_names():
        hub = profile_hub_id(ref)
        if not hub:
            raise UsageError(f"profile {ref} names no Hub id; pass the target's folder or Hub id")
        return load_profile(ref), hub
    return load_target(ref), ref


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
           decisions: Decisions | None = None, options: Decisions | None = None, progress: Progress | None = None,
           fail_on: str = "error", selection: Selection | None = None,
           dry_run: bool = False) -> VerifyResult:
    """Static checks, then a live engine run; see `kconvert.verify` (the package-level function) for the arguments.
    `dry_run`: the static checks, the target resolved and the engine's arguments planned; no engine started (and
    no engine package imported), the verdict the static one."""
    decisions = given(decisions, options)
    from kconvert.prompts import load_prompts

    if engine != "vllm" and not dry_run:
        raise UsageError("live verify runs vLLM; measure a running SGLang server with --server URL --engine sglang")
    st = settings or VerifySettings()
    say = progress or (lambda _s: None)
    tgt, engine_target = resolve_target(target)
    ckpt = open_draft(draft)
    decided = replace(decisions or Decisions(), tp=st.tp, draft_tp=st.draft_tp)
    res = analyse(ckpt, tgt, engine_rules(engine, engine_version), decided, fail_on=fail_on, selection=selection)
    refuse_parallel_split(res, st)
    out = VerifyResult(inspect=res, settings=st, engine_target=engine_target, thresholds=thresholds)
    out.prompt_set, prompts = load_prompts(st.prompts)
    out.prompts = prompts[: st.max_prompts] if st.max_prompts else prompts
    if dry_run:
        out.planned = plan_live(out, str(ckpt.root) if ckpt.root is not None else ckpt.ref, tgt)
        return out
    if res.failing and not st.skip_static:
        out.static_blocked = True
        return out
    if ckpt.root is None:
        raise UsageError(f"{draft}: the live test needs the weights; download the draft first")
    _run_live(out, str(ckpt.root), say)
    if thresholds is not None:
        out.checks = evaluate(thresholds, out.acceptance or {})
    return out


def plan_live(out: VerifyResult, draft_dir: str, tgt: TargetModel) -> dict[str, Any]:
    """What `_run_live` would start, computed without starting it (and without importing vLLM): the platform,
    the engine arguments and environment kconvert would set, the settings it chose by itself, and the serve
    lines of the same run."""
    from pathlib import Path

    from kconvert.engines.installed import detect_platform
    from kconvert.engines.serve_lines import serve_lines
    from kconvert.engines.vllm_args import build_engine_args, read_model_config

    req = out.settings.live_request(out.engine_target, draft_dir, out.prompts)
    engine = out.inspect.engine.engine
    # A Hub target is not fetched for a dry run: its facts come from the profile or config already read.
    target_config = (read_model_config(out.engine_target) if Path(out.engine_target).is_dir()
                     else _config_of(tgt))
    platform = detect_platform()
    args, env, auto = build_engine_args(req, platform=platform, target_config=target_config,
                                        draft_config=read_model_config(draft_dir) if Path(draft_dir).is_dir() else None)
    lines = serve_lines(out.inspect.checkpoint.ref, out.engine_target, k=out.settings.num_speculative_tokens,
                        tp=out.settings.tp, draft_tp=out.settings.draft_tp, engine_aux_note=False,
                        extra=out.settings.speculative_extra)
    planned: dict[str, Any] = {
        "engine": engine, "platform": platform, "target": out.engine_target, "prompt_set": out.prompt_set,
        "num_prompts": len(out.prompts), "num_speculative_tokens": out.settings.num_speculative_tokens,
        "engine_args": args, "env": env, "auto_settings": auto, "serve_line": lines["vllm"],
        "sglang_launch_line": lines["sglang"],
        "would_start": not (out.inspect.failing and not out.settings.skip_static) and engine == "vllm",
    }
    if engine != "vllm":
        planned["note"] = ("live verify starts vLLM only; for SGLang, launch the server with the line above and "
                           "measure it with `kconvert verify --server URL --engine sglang`")
    elif not planned["would_start"]:
        planned["note"] = "static checks fail: verify would stop here and start no engine (--skip-static runs it)"
    return planned


def _config_of(tgt: TargetModel) -> dict[str, Any]:
    """The few config.json keys the engine arguments depend on (multimodal wrapper, MLA, max positions)."""
    cfg: dict[str, Any] = {"architectures": list(tgt.architectures), "model_type": tgt.model_type,
                           "max_position_embeddings": tgt.max_position_embeddings}
    if tgt.mla:
        cfg["kv_lora_rank"] = tgt.mla.get("kv_lora_rank")
    return cfg


def _run_live(out: VerifyResult, draft_dir: str, say: Progress) -> None:
    from kconvert.engines.vllm_offline import run_vllm

    req = out.settings.live_request(out.engine_target, draft_dir, out.prompts)
    say("speculative run")
    out.live = run_vllm(req, progress=say)
    out.acceptance = out.live.acceptance()
    if out.settings.lossless:
        say("lossless baseline (no draft)")
        base = run_vllm(LiveRequest(**{**req.to_dict(), "draft": None}), progress=say)
        out.lossless = compare_outputs(out.live.output_token_ids, base.output_token_ids)
        out.lossless["baseline_generate_s"] = base.timings.generate_s
