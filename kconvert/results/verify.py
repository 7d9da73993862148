"""What `kconvert.verify` returns: the settings it ran with, the inspection, the live run's counters and
acceptance, the lossless comparison and the gate's checks, and its JSON report (the one report shape with the live
run's section)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kconvert.engines.live_messages import LiveRequest, LiveResult
from kconvert.engines.method_detection import Resolution
from kconvert.engines.serve_lines import ServeReplay, serve_lines
from kconvert.results.document import build_report
from kconvert.results.inspection import Gated, Inspection
from kconvert.results.thresholds import Check, Thresholds


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
    # the replayed line's speculative_config as written (its `model` and `method` decide the method the engine
    # serves the draft with: kconvert/engines/method_detection.py), and that method
    replayed_line: dict[str, Any] | None = None
    method: str = "eagle3"

    def replay(self, replay: ServeReplay) -> VerifySettings:
        """These settings with what a production serve line sets (its TP, k, draft TP and further keys)."""
        return replace(
            self,
            tp=replay.tp if replay.tp is not None else self.tp,
            draft_tp=replay.draft_tp if replay.draft_tp is not None else self.draft_tp,
            num_speculative_tokens=(replay.num_speculative_tokens if replay.num_speculative_tokens is not None
                                    else self.num_speculative_tokens),
            speculative_extra={**self.speculative_extra, **replay.extra},
            production_draft=replay.production_draft or self.production_draft,
            replayed_line=dict(replay.line) if replay.line else self.replayed_line)

    def live_request(self, target: str, draft: str | None, prompts: list[str], *,
                     draft_overrides: dict[str, Any] | None = None, replayed: bool = True) -> LiveRequest:
        """The engine run these settings ask for (`replayed`: with the serve line's further speculative keys)."""
        return LiveRequest(target=target, draft=draft, prompts=list(prompts),
                           num_speculative_tokens=self.num_speculative_tokens, tp=self.tp, draft_tp=self.draft_tp,
                           max_tokens=self.max_tokens, trust_remote_code=self.trust_remote_code,
                           engine_args=dict(self.engine_args), draft_overrides=draft_overrides,
                           timeout_s=self.timeout_s, method=self.method,
                           speculative_extra=dict(self.speculative_extra) if replayed else {})


@dataclass
class VerifyResult(Gated):
    inspect: Inspection
    settings: VerifySettings
    engine_target: str
    prompt_set: str = ""
    prompts: list[str] = field(default_factory=list)  # the prompts the engine ran
    live: LiveResult | None = None
    acceptance: dict[str, Any] | None = None
    # how degenerate the target's outputs of the live run were (kconvert.engines.output_health.summarize_health)
    output_health: dict[str, Any] | None = None
    lossless: dict[str, Any] | None = None
    checks: list[Check] = field(default_factory=list)
    thresholds: Thresholds | None = None
    static_blocked: bool = False
    diagnosis: dict[str, Any] | None = None
    # `--dry-run`: what the live run would start (engine arguments, environment, serve line); nothing started
    planned: dict[str, Any] | None = None
    # Another method's checkpoint (K105, `Inspection.refusal`): nothing planned or started; the verdict is fail
    refused: dict[str, Any] | None = None
    # vLLM's model runner: the row's, the one run here and why, and the findings only one runner's row gives
    runner: dict[str, Any] | None = None
    # a replayed line's method as the engine resolves it (K109 fails an EAGLE-3 draft served otherwise)
    served: Resolution | None = None

    @property
    def dry_run(self) -> bool:
        return self.planned is not None

    @property
    def passed(self) -> bool:
        if self.refused:
            return False
        if self.dry_run:
            return not self.inspect.failing  # a dry run's verdict is the static one
        if self.static_blocked:
            return False
        if self.lossless is not None and not self.lossless.get("identical", False):
            return False
        return all(c.passed for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (schemas/report.schema.json), as `kconvert verify --json` prints it."""
        return build_verify_report(self)


def build_verify_report(vr: VerifyResult) -> dict[str, Any]:
    th = vr.thresholds.to_dict() if vr.thresholds else None
    if th is not None:
        th["checks"] = [c.to_dict() for c in vr.checks]
    # A dry run binds no measurement to the files, so it reads no weights to hash them (a preflight stays cheap).
    doc = build_report(vr.inspect, command="verify", hashes=not vr.dry_run, live=live_section(vr), thresholds=th,
                       verdict="pass" if vr.passed else "fail", exit_code=vr.exit_code,
                       extra={"static_blocked": vr.static_blocked, "diagnosis": vr.diagnosis, "refused": vr.refused,
                              "runner": vr.runner, **({"dry_run": vr.planned} if vr.dry_run else {})})
    doc["engine"]["version"] = vr.live.engine_version if vr.live else None
    return doc


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
        "serve_line": serve_line(vr),
        "production_draft": vr.settings.production_draft,
        "chat_template_applied": lv.chat_template_applied,
        "engine_args": lv.engine_args,
        "env": lv.env,
        "auto_settings": lv.auto_settings,
        "attention_backends": lv.attention_backends,
        # every setting that changes what acceptance means, as the engine resolved it (kconvert.engines.arg_policy)
        "engine_settings": lv.engine_settings,
        "served_method": vr.served.to_dict() if vr.served is not None else None,
        "counters": {"drafts": lv.counters.drafts, "draft_tokens": lv.counters.draft_tokens,
                     "accepted": lv.counters.accepted, "accepted_per_pos": list(lv.counters.accepted_per_pos)},
        "acceptance": vr.acceptance,
        "output_health": vr.output_health,
        "timings": {"engine_start_s": lv.timings.engine_start_s, "generate_s": lv.timings.generate_s,
                    "total_s": lv.timings.total_s},
        "lossless": vr.lossless,
    }


def _engine_speculative_config(engine_args: dict[str, Any]) -> dict[str, Any] | None:
    spec = engine_args.get("speculative_config")
    return dict(spec) if isinstance(spec, dict) else None


def serve_line(vr: VerifyResult) -> str:
    """The `vllm serve` line that runs what this check ran: the draft as the user named it (a folder or Hub id),
    the target as the engine loaded it, the TP, k, draft TP and every replayed speculative_config key."""
    return serve_lines(vr.inspect.checkpoint.ref, vr.engine_target, k=vr.settings.num_speculative_tokens,
                       tp=vr.settings.tp, draft_tp=vr.settings.draft_tp, engine_aux_note=False,
                       extra=vr.settings.speculative_extra, method=vr.settings.method,
                       recorded=vr.live.engine_settings if vr.live else None,
                       engine_args=vr.live.engine_args if vr.live else None,
                       env={**dict(vr.inspect.engine.serve_env), **(vr.live.env if vr.live else {})})["vllm"]
