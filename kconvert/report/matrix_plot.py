"""The checkpoint-selection plot of a matrix document (schemas/matrix.schema.json): scored AL per training step.

Pure: the document in, an SVG string (for the HTML page) or plain text (for the terminal) out, None when no draft
has both a `step` and a `score`. The points are the drafts that carry both, in step order; a draft that fails
statically still shows its score but is drawn hollow and marked "not ranked" (issue 22: such cells are never
ranked). The SVG is drawn here by hand rather than with a plotting library so the page stays one self-contained
file with no dependency beyond the standard library.
"""
from __future__ import annotations

import math
from html import escape
from typing import Any

from kconvert.guard.text import visible

_BLOCKS = " ▏▎▍▌▋▊▉█"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def plot_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The drafts with a step and a scored AL, ordered by step (then by their row order)."""
    best = (doc.get("ranking") or {}).get("best")
    pts = []
    for i, d in enumerate(doc.get("drafts") or []):
        score = d.get("score") or {}
        al = score.get("acceptance_length")
        if not _is_int(d.get("step")) or not _is_num(al):
            continue
        rank = d.get("rank") if _is_int(d.get("rank")) else None
        pts.append({"draft": str(d.get("draft", "")), "step": d["step"], "al": float(al), "rank": rank,
                    "best": (best is not None and d.get("draft") == best) or rank == 1, "order": i})
    pts.sort(key=lambda p: (p["step"], p["order"]))
    return pts


def plain(s: Any) -> str:
    """A document string made safe for a terminal: control characters (an ANSI escape in a draft's name) shown
    as escapes instead of acting on the terminal (the one escape, kconvert.guard.text)."""
    return visible(str(s))


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def _al_range(pts: list[dict[str, Any]]) -> tuple[float, float]:
    # AL counts the bonus token, so 1.0 is the floor of any real run: the axis starts there (or lower, for a
    # document that says otherwise) so the heights compare with "no draft token accepted".
    lo = min(1.0, min(p["al"] for p in pts))
    hi = max(p["al"] for p in pts)
    if hi - lo < 1e-9:
        hi = lo + 1.0
    return lo, hi


def svg_plot(doc: dict[str, Any], width: int = 640, height: int = 300) -> str | None:
    """AL per training step as an inline SVG, or None when no draft has a step and a score."""
    pts = plot_points(doc)
    if not pts:
        return None
    left, right, top, bottom = 56, 16, 16, 44
    pw, ph = width - left - right, height - top - bottom
    lo, hi = _al_range(pts)
    yt = _ticks(lo, hi)
    lo, hi = min(lo, yt[0]), max(hi, yt[-1])
    smin, smax = pts[0]["step"], pts[-1]["step"]

    def x(step: int) -> float:
        return left + (pw / 2 if smax == smin else (step - smin) / (smax - smin) * pw)

    def y(al: float) -> float:
        return top + ph - (al - lo) / (hi - lo) * ph

    steps = sorted({p["step"] for p in pts})
    xt = steps if len(steps) <= 8 else [int(round(t)) for t in _ticks(smin, smax, 6)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-labelledby="plot-title">',
             '<title id="plot-title">Scored acceptance length (AL) per training step</title>',
             f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']
    for t in yt:
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>')
    for t in xt:
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top + ph}" y2="{top + ph + 4}" stroke="#888"/>'
                     f'<text x="{x(t):.1f}" y="{top + ph + 17}" text-anchor="middle" font-size="11">{t}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle" font-size="12">training step</text>'
                 f'<text x="14" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 14 {top + ph / 2})">AL (scored)</text>')
    line = " ".join(f"{x(p['step']):.1f},{y(p['al']):.1f}" for p in pts)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#0072B2" stroke-width="2"/>')
    for p in pts:
        ranked = p["rank"] is not None
        label = (f"{p['draft']}: step {p['step']}, AL {p['al']:.3f}, "
                 + (f"rank {p['rank']}" if ranked else "not ranked"))
        r = 6 if p["best"] else 4
        fill = "#0072B2" if ranked else "#fff"
        parts.append(f'<circle class="pt" cx="{x(p["step"]):.1f}" cy="{y(p["al"]):.1f}" r="{r}" fill="{fill}" '
                     f'stroke="#0072B2" stroke-width="2"><title>{escape(label)}</title></circle>')
        if p["best"]:
            parts.append(f'<text x="{x(p["step"]):.1f}" y="{y(p["al"]) - 10:.1f}" text-anchor="middle" '
                         f'font-size="11" font-weight="bold">best</text>')
    parts.append("</svg>")
    return "".join(parts)


def text_plot(doc: dict[str, Any], bar_width: int = 30) -> str | None:
    """AL per training step for the terminal: one line per checkpoint (step, a bar, AL, rank, name), or None."""
    pts = plot_points(doc)
    if not pts:
        return None
    lo, hi = _al_range(pts)
    sw = max(len(str(p["step"])) for p in pts)
    lines = [f"AL per training step (scored; bars from {lo:g} to {hi:.3f})"]
    for p in pts:
        eighths = round((p["al"] - lo) / (hi - lo) * bar_width * 8)
        full, part = divmod(max(eighths, 0), 8)
        bar = ("█" * full + (_BLOCKS[part] if part else "")).ljust(bar_width)
        rank = "unranked" if p["rank"] is None else f"#{p['rank']}" + (" best" if p["best"] else "")
        lines.append(f"step {p['step']:>{sw}} {bar} {p['al']:.3f} {rank:<8} {plain(p['draft'])}")
    return "\n".join(lines)
