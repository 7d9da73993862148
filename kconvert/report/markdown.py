"""A report as Markdown: the acceptance section a model card (and `verify --markdown`) shows.

Pure: a report dict in (schemas/report.schema.json), Markdown out. Both acceptance conventions are printed side
by side because readers compare numbers across engines: vLLM's acceptance rate and mean acceptance length (AL,
bonus token included) and SGLang / SpecForge's ``accept_length`` (completion tokens per verify step, bonus
included, equal to AL on vLLM counters; comparable only at the same number of speculative tokens and topk 1).
"""
from __future__ import annotations

import json
from typing import Any

from kconvert._version import PYPI_URL
from kconvert.engines.expectations import ENGINE_LABELS as ENGINE_LABEL  # one table of the engines' names
from kconvert.engines.output_health import health_line
from kconvert.report.figures import runner_line


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * float(x):.2f} %"


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def engine_label(report: dict[str, Any]) -> str:
    """`vLLM 0.32.0` from the live section (else the engine block)."""
    live = report.get("live") or {}
    eng = report.get("engine") or {}
    name = live.get("engine") or eng.get("name") or "engine"
    version = live.get("engine_version") or eng.get("installed_version") or eng.get("version")
    label = ENGINE_LABEL.get(str(name), str(name))
    return f"{label} {version}" if version else label


def num_speculative_tokens(report: dict[str, Any]) -> int | None:
    """k of the live run: recorded where verify put it, else the length of the per-position counters."""
    live = report.get("live") or {}
    acc = live.get("acceptance") or {}
    for v in (live.get("num_speculative_tokens"), acc.get("num_speculative_tokens"),
              (live.get("request") or {}).get("num_speculative_tokens")):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    per_pos = (live.get("counters") or {}).get("accepted_per_pos") or acc.get("per_position") or []
    return len(per_pos) or None


def prompt_set(report: dict[str, Any]) -> str | None:
    """The prompt set as verify recorded it: a name (`math`), a dict with name/count, or a list of names."""
    live = report.get("live") or {}
    for v in (live.get("prompt_set"), report.get("prompt_set"), live.get("prompts"),
              (live.get("request") or {}).get("prompt_set")):
        if isinstance(v, str) and v:
            return v
        if isinstance(v, dict):
            name = v.get("name") or v.get("id") or "custom"
            n = v.get("count") or v.get("num_prompts")
            return f"{name} ({n} prompts)" if n else str(name)
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v) and len(v) <= 8:
            return ", ".join(v)
    return None


def _acceptance_table(live: dict[str, Any], k: int | None) -> list[str]:
    acc = live.get("acceptance") or {}
    c = live.get("counters") or {}
    return [
        "| Metric | Convention | Value |",
        "|---|---|---|",
        f"| Acceptance rate (accepted / drafted tokens) | vLLM | {_pct(acc.get('acceptance_rate'))} |",
        f"| Mean acceptance length, bonus token included | vLLM | {_num(acc.get('mean_acceptance_length'))} |",
        f"| `accept_length` (tokens per verify step, bonus included) | SGLang / SpecForge | "
        f"{_num(acc.get('sglang_accept_length', acc.get('mean_acceptance_length')))} |",
        f"| Speculative tokens per step (k) | both | {_num(k)} |",
        f"| Verify steps / drafted tokens / accepted tokens | counters | {_num(c.get('drafts'))} / "
        f"{_num(c.get('draft_tokens'))} / {_num(c.get('accepted'))} |",
    ]


def _per_position(live: dict[str, Any]) -> list[str]:
    acc = live.get("acceptance") or {}
    per = list(acc.get("per_position") or [])
    cond = list(acc.get("conditional") or [])
    if not per:
        return []
    n = len(per)
    cond += [None] * (n - len(cond))
    head = "| Position | " + " | ".join(str(i + 1) for i in range(n)) + " |"
    return [
        "Per-position acceptance (position *i* accepted, over verify steps; conditional = given position *i-1* "
        "was accepted):",
        "",
        head,
        "|---|" + "---|" * n,
        "| Rate | " + " | ".join(_num(x) for x in per) + " |",
        "| Conditional | " + " | ".join(_num(x) for x in cond[:n]) + " |",
    ]


def _lossless(live: dict[str, Any]) -> str | None:
    ll = live.get("lossless")
    if not isinstance(ll, dict) or not ll:
        return None
    verdict = ll.get("identical", ll.get("passed", ll.get("ok")))
    head = {True: "identical", False: "DIFFERENT"}.get(verdict, "recorded") if isinstance(verdict, bool) \
        else "recorded"
    rest = ", ".join(f"{k.replace('_', ' ')} {_num(v)}" for k, v in ll.items()
                     if k not in ("passed", "ok", "identical") and v is not None and not isinstance(v, (dict, list)))
    diff = ll.get("first_difference")
    if isinstance(diff, dict):
        rest = ", ".join(x for x in (rest, "first difference at " + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in diff.items() if v is not None)) if x)
    return f"- Lossless check (greedy outputs with and without the draft): {head}" + (f" ({rest})" if rest else "")


def _thresholds(th: dict[str, Any], h: str) -> list[str]:
    """The gate verify applied: its limits (kconvert.results.thresholds.Thresholds.to_dict) and each check's outcome."""
    limits = {k: v for k, v in th.items() if k not in ("checks", "notes", "source") and v not in (None, [], {})}
    checks = [c for c in th.get("checks") or [] if isinstance(c, dict)]
    if not limits and not checks:
        return []
    out = [f"{h}# Thresholds", ""]
    if th.get("source"):
        out += [f"Source: {th['source']}", ""]
    if limits:
        out += ["| Threshold | Value |", "|---|---|"]
        for k, v in sorted(limits.items()):
            if isinstance(v, list):
                val = " / ".join(_num(x) for x in v)
            elif isinstance(v, dict):
                val = ", ".join(f"{a} {_num(b)}" for a, b in v.items() if b is not None)
            else:
                val = _num(v)
            out.append(f"| `{_cell(k)}` | {_cell(val)} |")
        out.append("")
    if checks:
        out += [f"- {'✅' if c.get('passed') else '❌'} {c.get('message') or c.get('name')}" for c in checks]
        out.append("")
    for note in th.get("notes") or []:
        out.append(f"> {note}")
    return out + ([""] if th.get("notes") else [])


def measured_with(report: dict[str, Any], h: str) -> list[str]:
    """Every setting that changes what acceptance means, as the engine got it (the live block's engine_settings:
    sampling methods, method, k, dtype, backends ...; kconvert/engines/arg_policy.py), or as a dry run would give
    it, and how a replayed line's method was resolved."""
    live = report.get("live") or {}
    planned = report.get("dry_run") or {}
    settings = live.get("engine_settings") if live else planned.get("engine_settings")
    served = live.get("served_method") if live else planned.get("served_method")
    if not settings and not served:
        return []
    what = ("as the engine resolved them" if live else
            "as the engine would get them (dry run: vLLM's defaults where none is given)")
    out = [f"{h}# Measured with", "", f"Settings that change what acceptance means, {what}:", "",
           "| Setting | Value |", "|---|---|"]
    out += [f"| `{_cell(k)}` | `{_cell(json.dumps(v) if not isinstance(v, str) else v)}` |"
            for k, v in sorted((settings or {}).items())]
    if served and served.get("given") is None and served.get("model") is not None:
        out += ["", f"The replayed line named no method: {served['by']} gives `{_cell(served['model'])}` method "
                    f"`{served['method']}` ({_cell(served['rule'])})."]
    return out + [""]


def render_markdown_section(report: dict[str, Any], *, heading_level: int = 2) -> str:
    """The validation section of a verify report as Markdown (no YAML, no markers: callers frame it)."""
    h = "#" * heading_level
    live = report.get("live") or {}
    target = report.get("target") or {}
    k = num_speculative_tokens(report)
    lines = [f"{h} Validation", ""]
    verdict = report.get("verdict", "?")
    created = report.get("created")
    tool = (report.get("tool") or {}).get("version")
    if report.get("dry_run") is not None:
        # a dry run starts no engine: nothing below was measured, and it must never read as a live verification
        lines.append(f"Dry run of kconvert {tool or ''}".rstrip() + " verify: **no engine was started and nothing "
                     f"was measured**; static checks: **{verdict}**" + (f" ({created})" if created else "") + ".")
    else:
        lines.append(f"Verified live by [kconvert]({PYPI_URL}) {tool or ''}".rstrip()
                     + f": verdict **{verdict}**" + (f" ({created})" if created else "") + ".")
    lines.append("")
    facts = [f"- Engine: {engine_label(report)}"]
    if runner_line(report):
        facts.append(f"- {runner_line(report)[0].upper()}{runner_line(report)[1:]}")
    if target.get("name"):
        facts.append(f"- Target: `{target['name']}`")
    ps = prompt_set(report)
    n_prompts = live.get("num_prompts")
    if ps or n_prompts:
        facts.append(f"- Prompt set: {ps or 'n/a'}" + (f", {n_prompts} prompts" if n_prompts else ""))
    if live.get("max_tokens"):
        facts.append(f"- Max new tokens per prompt: {live['max_tokens']}"
                     + ("; chat template applied" if live.get("chat_template_applied") else ""))
    temp = live.get("temperature", (live.get("request") or {}).get("temperature"))
    if temp is not None:
        facts.append(f"- Sampling: temperature {temp}" + (" (greedy)" if not temp else ""))
    ll = _lossless(live)
    if ll:
        facts.append(ll)
    if isinstance(live.get("output_health"), dict):
        # the acceptance is only the draft's where the target's own outputs did not collapse into loops (issue #46)
        facts.append(f"- Output health of the target's outputs: {_cell(health_line(live['output_health']))}")
    lines += facts + [""]
    if live:
        lines += [f"{h}# Acceptance", ""] + _acceptance_table(live, k) + [""]
        pp = _per_position(live)
        if pp:
            lines += pp + [""]
    else:
        lines += ["No live results in this report.", ""]
    lines += measured_with(report, h)
    lines += _thresholds(report.get("thresholds") or {}, h)
    files = (report.get("subject") or {}).get("files") or []
    if files:
        lines += [f"{h}# Files verified", "", "| File | Size (bytes) | sha256 |", "|---|---:|---|"]
        lines += [f"| `{_cell(f['name'])}` | {_num(f.get('size'))} | `{f.get('sha256') or 'n/a'}` |" for f in files]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


__all__ = ["engine_label", "num_speculative_tokens", "prompt_set", "render_markdown_section"]
