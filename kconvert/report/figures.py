"""How a figure is printed in the terminal and in one-line formats: three decimals, rates as percentages, and
"n/a" where there was nothing to divide by."""
from __future__ import annotations

from typing import Any


def number(v: Any, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def percent(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2%}"


def series(values: Any) -> str:
    """Per-position figures, ` / `-separated."""
    return " / ".join(number(x) for x in values or []) or "n/a"


def runner_line(doc: dict[str, Any]) -> str | None:
    """One line for the terminal, concise and Markdown views."""
    r = doc.get("runner")
    if not r:
        return None
    # nothing measured without a live run: a dry run, or a run the static checks stopped before the engine started
    verb = "measured" if doc.get("live") and not doc.get("dry_run") else "would run"
    line = f"model runner: {verb} {r['measured'].upper()} ({r['why']})"
    if r.get("measured") != r.get("row"):
        line += f"; the rules row is Model Runner {r['row'].upper()}"
    diffs = r.get("differs") or []
    if diffs:
        parts = [f"{d['id']} {d['severity']} only under {d['only_under'].upper()}" for d in diffs]
        line += f"; under {r.get('other_row')} the static checks differ: " + ", ".join(parts)
    elif r.get("other_row"):
        line += f"; {r['other_row']} gives the same findings"
    return line


def attention_text(backends: dict[str, list[str]]) -> str:
    """The attention backend each model ran on, read from the engine's built layers (report live.attention_backends):
    'target CPU_MLA, draft CPU_MLA'."""
    return ", ".join(f"{role} {'/'.join(names)}" for role, names in backends.items() if names)
