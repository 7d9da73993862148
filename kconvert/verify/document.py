"""The verify report: the one JSON report shape (`kconvert.report.document`) with the live run's section."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kconvert.engines.serve_lines import serve_lines
from kconvert.report.document import build_report

if TYPE_CHECKING:
    from kconvert.verify.run import VerifyResult


def build_verify_report(vr: VerifyResult) -> dict[str, Any]:
    th = vr.thresholds.to_dict() if vr.thresholds else None
    if th is not None:
        th["checks"] = [c.to_dict() for c in vr.checks]
    # A dry run binds no measurement to the files, so it reads no weights to hash them (a preflight stays cheap).
    doc = build_report(vr.inspect, command="verify", hashes=not vr.dry_run, live=live_section(vr), thresholds=th,
                       verdict="pass" if vr.passed else "fail", exit_code=vr.exit_code,
                       extra={"static_blocked": vr.static_blocked, "diagnosis": vr.diagnosis,
                              **({"dry_run": vr.planned} if vr.dry_run else {})})
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


def serve_line(vr: VerifyResult) -> str:
    """The `vllm serve` line that runs what this check ran: the draft as the user named it (a folder or Hub id),
    the target as the engine loaded it, the TP, k, draft TP and every replayed speculative_config key."""
    return serve_lines(vr.inspect.checkpoint.ref, vr.engine_target, k=vr.settings.num_speculative_tokens,
                       tp=vr.settings.tp, draft_tp=vr.settings.draft_tp, engine_aux_note=False,
                       extra=vr.settings.speculative_extra)["vllm"]
