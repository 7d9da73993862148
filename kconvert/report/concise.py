"""The concise format: one line per finding, for CI logs and grep (ruff's `--output-format concise`).

    path[:line]: K404 error [aux-layers] message (where: observed → expected) [fixable]

The message and its evidence are printed whole, never cut (ruff prints its message whole): the rules keep their
messages short enough for one line (tests/test_messages.py). The lines after the findings carry
the live figures and gate checks of a verify report, the plan of a fix report, a summary with the verdict, and
the next command to run. Pure: a report dict (schemas/report.schema.json) in, text out.
"""
from __future__ import annotations

import json
from typing import Any

from kconvert.engines.output_health import health_line
from kconvert.guard.text import visible
from kconvert.report.figures import attention_text, number, percent, runner_line, series
from kconvert.report.anchors import display_path


def one_line(s: Any) -> str:
    """`s` on one line, as every format shows text (kconvert.guard.text: every character str.splitlines() breaks
    a line at is among those it escapes)."""
    return visible(str(s))


def value(v: Any) -> str:
    """An evidence value in full: strings as they are, everything else as compact JSON; None as a dash."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return one_line(v)
    return one_line(json.dumps(v, ensure_ascii=False, default=str))


def evidence_text(e: dict[str, Any]) -> str:
    return f"{one_line(e.get('where'))}: {value(e.get('observed'))} → {value(e.get('expected'))}"


def message_lines(f: dict[str, Any]) -> list[str]:
    """A finding as the lines of an annotation's message (GitHub, SARIF): the message, each evidence, and what fix
    can do with it."""
    lines = [f["message"]]
    lines += [f"evidence: {evidence_text(e)}" for e in f.get("evidence") or []]
    if f.get("needs_decision"):
        lines.append(f"fix needs a decision: {f['needs_decision']}")
    elif f.get("fixable"):
        lines.append("fixable by `kconvert fix`")
    return lines


def fix_tag(f: dict[str, Any]) -> str:
    if f.get("needs_decision"):
        return f"[needs {one_line(f['needs_decision'].split(' (')[0])}]"
    return "[fixable]" if f.get("fixable") else ""


def finding_path(doc: dict[str, Any], f: dict[str, Any]) -> str:
    loc = f.get("location") or {}
    path = display_path(doc, loc.get("file"))
    return f"{path}:{loc['line']}" if loc.get("line") else path


def finding_line(doc: dict[str, Any], f: dict[str, Any]) -> str:
    """`path[:line]: ID severity [category] message (where: observed → expected; ...) [fixable]`: the message and
    its evidence whole, on one line (ruff's concise line prints its message whole; issue #48: a cut K405 line lost
    the one fact that mattered). The rules keep their messages short enough for that."""
    ev = "; ".join(evidence_text(e) for e in f.get("evidence") or [])
    category = f" [{f['category']}]" if f.get("category") else ""
    parts = [f"{finding_path(doc, f)}: {f['id']} {f.get('severity', 'error')}{category} {one_line(f.get('message', ''))}"]
    if ev:
        parts.append(f"({ev})")
    tag = fix_tag(f)
    if tag:
        parts.append(tag)
    return " ".join(parts)


finding_line_full = finding_line  # JUnit's failure text: the same whole line


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 or word == "info" else "s")


def live_lines(doc: dict[str, Any]) -> list[str]:
    """The live run of a verify report and its gate checks, one line each."""
    live = doc.get("live")
    out: list[str] = []
    if doc.get("static_blocked") and doc.get("command") == "score" and not doc.get("score"):
        out.append("score: not run: static checks failed (fix them with `kconvert fix`, or measure the defect with "
                   "--skip-static or --diagnose)")
    elif doc.get("static_blocked") and doc.get("command") != "score":
        out.append("live: not run: static checks failed, no engine was started (fix them with `kconvert fix`, or "
                   "measure the defect with --skip-static)")
    if live or (doc.get("static_blocked") and doc.get("command") == "verify"):
        if runner_line(doc):
            out.append(runner_line(doc))
    if live:
        acc = live.get("acceptance") or {}
        c = live.get("counters") or {}
        out.append(
            f"live: {live.get('engine')} {live.get('engine_version')} on {live.get('platform')}, "
            f"k={live.get('num_speculative_tokens')}, {live.get('num_prompts')} prompts of "
            f"'{live.get('prompt_set')}': mean acceptance length {number(acc.get('mean_acceptance_length'))}, "
            f"acceptance rate {percent(acc.get('acceptance_rate'))}, per position {series(acc.get('per_position'))} "
            f"(drafts {c.get('drafts')}, draft tokens {c.get('draft_tokens')}, accepted {c.get('accepted')})")
        backends = live.get("attention_backends") or {}
        if any(backends.values()):
            # the backend each model ran on (read from the engine's built layers): figures differ between backends
            out.append("attention backend: " + attention_text(backends))
        if live.get("output_health"):
            out.append("output health: " + health_line(live["output_health"]))
        ll = live.get("lossless")
        if ll is not None:
            out.append("lossless: greedy outputs identical with and without the draft" if ll.get("identical")
                       else f"lossless: outputs DIFFER, first difference {json.dumps(ll.get('first_difference'))}")
    sc = doc.get("score")
    if sc:
        acc = sc.get("acceptance") or {}
        c = sc.get("counters") or {}
        per = " / ".join(number(x) for x in acc.get("per_position") or [])
        rate = acc.get("acceptance_rate")
        out.append(
            f"score: {one_line(sc.get('engine_model'))} on trace {one_line((sc.get('trace') or {}).get('path'))}, "
            f"k={sc.get('num_speculative_tokens')}, {sc.get('dtype')}: "
            + (f"the engine could not run the draft as read: {one_line(sc['error'])}" if sc.get("error") else
               f"mean acceptance length {number(acc.get('mean_acceptance_length'))}, acceptance rate "
               f"{'n/a' if rate is None else f'{rate:.2%}'}, per position {per or 'n/a'} (drafts {c.get('drafts')}, "
               f"draft tokens {c.get('draft_tokens')}, accepted {c.get('accepted')})"))
    for chk in (doc.get("thresholds") or {}).get("checks") or []:
        out.append(f"gate: {'pass' if chk.get('passed') else 'FAIL'} {one_line(chk.get('message') or chk.get('name'))}")
    diag = doc.get("diagnosis")
    if diag:
        for c in diag.get("candidates") or []:
            al = c.get("mean_acceptance_length")
            out.append(f"diagnose: {one_line(c.get('candidate'))}: "
                       + (f"mean acceptance length {number(al)}" if al is not None else f"error {one_line(c.get('error'))}"))
        if diag.get("best"):
            out.append(f"diagnose: best reading {one_line(diag['best'])}; apply it with: {one_line(diag.get('fix_command'))}")
        elif not diag.get("ran"):
            out.append(f"diagnose: not run: {one_line(diag.get('reason'))}")
        else:
            out.append("diagnose: no candidate beats the draft as loaded")
    return out


def refused_lines(doc: dict[str, Any]) -> list[str]:
    """The one-line refusal of verify, score or fix on another method's checkpoint (K105)."""
    ref = doc.get("refused")
    return [f"refused: {one_line(ref['reason'])}"] if ref else []


def dry_run_lines(doc: dict[str, Any]) -> list[str]:
    """`verify --dry-run`: what the live run would start, one fact per line."""
    if not doc.get("dry_run"):
        return []
    plan = doc["dry_run"]
    out = [f"dry run: {'would start' if plan.get('would_start') else 'would not start'} {plan['engine']} "
           f"({plan['platform']} platform) with target {plan['target']}, {plan['num_prompts']} prompts of "
           f"'{plan['prompt_set']}', k={plan['num_speculative_tokens']}; nothing started"]
    if runner_line(doc):
        out.append(runner_line(doc))
    if doc.get("refused"):
        return out  # no engine line is planned for another method's checkpoint: the refusal says why
    if plan["engine"] == "vllm":
        out.append("engine args: " + json.dumps(plan["engine_args"], sort_keys=True, default=str))
        if plan.get("env"):
            out.append("engine env: " + " ".join(f"{k}={v}" for k, v in sorted(plan["env"].items())))
        out += [f"auto setting: {s}" for s in plan.get("auto_settings") or []]
        out.append(f"serve line (vllm): {plan['serve_line']}")
    else:
        out.append(f"serve line ({plan['engine']}): {plan[plan['engine'] + '_launch_line']}")
    if plan.get("diagnose"):
        out.append(f"diagnose: {plan['diagnose']}")
    if plan.get("note"):
        out.append(f"note: {plan['note']}")
    return out


def fix_lines(doc: dict[str, Any]) -> list[str]:
    fx = doc.get("fix")
    if not fx:
        return []
    out = [f"plan: {one_line(s)}" for s in fx.get("steps") or []]
    for rid in fx.get("only_without_finding") or []:
        out.append(f"only: {rid} has no finding in this checkpoint")
    for f in fx.get("left_as_is") or []:
        rec = f.get("recommended")
        out.append(f"left as is: {f['id']} {one_line((f.get('message') or '').split(': ')[0])}; decide with {one_line(f['decide_with'])}"
                   + (f"; measured: {rec['flag']} ({rec['figure']}, {rec['source']})" if rec else ""))
    if fx.get("output"):
        out.append(f"wrote: {fx['output']} (provenance in kconvert.json)")
    elif fx.get("noop") and not fx.get("dry_run"):
        out.append("nothing to change: nothing written (the input serves as it is)")
    elif fx.get("dry_run"):
        out.append(f"dry run: {len(fx.get('ops') or [])} op(s) planned, nothing written")
    return out


def set_aside_note(doc: dict[str, Any]) -> str:
    """"; 1 set aside (K404: the reason)" when --ignore or the configuration set findings aside."""
    sel = doc.get("rule_selection") or {}
    aside = sel.get("set_aside") or []
    if not aside:
        return ""
    ids = sorted({a["id"] for a in aside})
    return f"; {len(aside)} set aside by the rule selection ({', '.join(ids)})"


def summary_line(doc: dict[str, Any]) -> str:
    s = doc.get("summary") or {}
    fail_on = " (--fail-on warning)" if doc.get("fail_on") == "warning" else ""
    parts = ([f"{s['fixable']} fixable"] if s.get("fixable") else []) + \
        ([f"{s['needs_decision']} {'needs' if s['needs_decision'] == 1 else 'need'} a decision"]
         if s.get("needs_decision") else [])
    fixable = f" ({', '.join(parts)})" if parts else ""
    counts = f"{_n(s.get('errors', 0), 'error')}, {_n(s.get('warnings', 0), 'warning')}, {s.get('info', 0)} info"
    if doc.get("command") == "fix":  # the findings are the input's; the verdict is the fix's
        return f"{display_path(doc, None)}: input has {counts}{fixable}{set_aside_note(doc)}; fix verdict: {str(doc.get('verdict')).upper()}"
    dry = " (dry run: static checks only, no engine started, nothing measured)" if doc.get("dry_run") else ""
    return (f"{display_path(doc, None)}: {counts}{fixable}{set_aside_note(doc)}; verdict: "
            f"{str(doc.get('verdict')).upper()}{fail_on}{dry}")


def next_lines(doc: dict[str, Any]) -> list[str]:
    out = [f"not checked statically: {one_line(x)}" for x in doc.get("not_checked") or []]
    out += [f"next: {one_line(s['command'])}  # {one_line(s['why'])}" for s in doc.get("next_steps") or []]
    return out


def render_concise(doc: dict[str, Any]) -> str:
    lines = [finding_line(doc, f) for f in doc.get("findings") or []]
    lines += refused_lines(doc) + fix_lines(doc) + live_lines(doc) + dry_run_lines(doc) + [summary_line(doc)] + next_lines(doc)
    return "\n".join(lines) + "\n"
