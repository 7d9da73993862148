"""A matrix document (schemas/matrix.schema.json) as a table: Markdown for a README or a model card, CSV for a
spreadsheet, and the grid both they and the HTML page (matrix_page.py) are drawn from.

Pure: the document in, text out. The grid is one row per draft (in the document's row order) and one column per
engine row and cell kind (static columns in `engines` order, then the live ones); a cell whose draft or engine
row is missing from `drafts` / `engines` still gets a row or a column, so nothing the document holds is dropped.
Every string in the document is untrusted (draft names come from the Hub or a file system): the Markdown escapes
what would break the table or be read as HTML, the CSV defuses spreadsheet formulas.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

from kconvert.report.figures import number, percent
from kconvert.report.matrix_plot import plain

STATES = ("pass", "warn", "fail", "error", "skipped")
# Shown beside the state's name and colour, so the state reads without colour too.
SYMBOL = {"pass": "✓", "warn": "!", "fail": "✗", "error": "⊘", "skipped": "–"}


@dataclass
class Column:
    key: tuple[str, str, str]  # (engine, engine_version, kind)
    row: str  # engine:version as --engines takes it
    kind: str  # static or live
    installed: bool = False

    @property
    def label(self) -> str:
        return self.row if self.kind == "static" else f"{self.row} (live)"


@dataclass
class Row:
    draft: dict[str, Any]
    cells: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.draft.get("draft", ""))

    @property
    def target_id(self) -> str | None:
        t = self.draft.get("target") or {}
        return t.get("id") if isinstance(t, dict) else None

    @property
    def target_state(self) -> str:
        t = self.draft.get("target") or {}
        return str(t.get("state") or "unknown") if isinstance(t, dict) else "unknown"


@dataclass
class Grid:
    columns: list[Column]
    rows: list[Row]
    has_score: bool
    has_rank: bool
    has_live: bool


def _kind(cell: dict[str, Any]) -> str:
    return "live" if cell.get("kind") == "live" else "static"


def grid(doc: dict[str, Any]) -> Grid:
    engines = [e for e in doc.get("engines") or [] if isinstance(e, dict)]
    cells = [c for c in doc.get("cells") or [] if isinstance(c, dict)]
    kinds_seen = {_kind(c) for c in cells}
    columns: list[Column] = []
    index: dict[tuple[str, str, str], int] = {}

    def add(engine: str, version: str, kind: str, row: str | None = None, installed: bool = False) -> int:
        key = (engine, version, kind)
        if key not in index:
            index[key] = len(columns)
            columns.append(Column(key, row or f"{engine}:{version}", kind, installed))
        return index[key]

    for e in engines:
        add(str(e.get("engine")), str(e.get("engine_version")), "static", e.get("row"), bool(e.get("installed")))
    for c in cells:
        if _kind(c) == "static":
            add(str(c.get("engine")), str(c.get("engine_version")), "static")
    if "live" in kinds_seen:
        rows_of = {(str(e.get("engine")), str(e.get("engine_version"))): e for e in engines}
        for c in cells:
            if _kind(c) == "live":
                e = rows_of.get((str(c.get("engine")), str(c.get("engine_version")))) or {}
                add(str(c.get("engine")), str(c.get("engine_version")), "live", e.get("row"), bool(e.get("installed")))

    rows: list[Row] = []
    by_key: dict[tuple[str, Any], Row] = {}
    by_name: dict[str, Row] = {}
    for d in doc.get("drafts") or []:
        if not isinstance(d, dict):
            continue
        r = Row(d)
        rows.append(r)
        by_key.setdefault((r.name, d.get("revision")), r)
        by_name.setdefault(r.name, r)
    for c in cells:
        name = str(c.get("draft", ""))
        r = by_key.get((name, c.get("revision"))) or by_name.get(name)
        if r is None:
            r = Row({"draft": name, "revision": c.get("revision"), "source": None,
                     "target": {"id": c.get("target"), "state": "unknown" if c.get("target") is None else "given",
                                "evidence": []}})
            rows.append(r)
            by_key[(name, c.get("revision"))] = r
            by_name[name] = r
        col = index[(str(c.get("engine")), str(c.get("engine_version")), _kind(c))]
        r.cells.setdefault(col, []).append(c)

    has_score = any(acceptance_length(r.draft.get("score")) is not None for r in rows)
    has_rank = any(isinstance(r.draft.get("rank"), int) and not isinstance(r.draft.get("rank"), bool) for r in rows)
    return Grid(columns, rows, has_score, has_rank, "live" in kinds_seen)


def acceptance_length(acc: Any) -> float | None:
    if not isinstance(acc, dict):
        return None
    v = acc.get("acceptance_length")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def state_of(cell: dict[str, Any]) -> str:
    s = cell.get("state")
    return s if s in STATES else "error"


def cell_text(cell: dict[str, Any]) -> str:
    """`✗ fail K404 K405`: symbol, state and finding ids (plus the live AL of a live cell)."""
    s = state_of(cell)
    parts = [SYMBOL[s], s]
    ids = [str(i) for i in cell.get("finding_ids") or []]
    if ids:
        parts.append(" ".join(ids))
    for key in ("live", "score"):
        al = acceptance_length(cell.get(key))
        if al is not None:
            parts.append(f"AL {number(al)}")
    return " ".join(parts)


def score_text(draft: dict[str, Any]) -> str:
    al = acceptance_length(draft.get("score"))
    if al is None:
        return ""
    rate = (draft.get("score") or {}).get("acceptance_rate")
    out = f"AL {number(al)}"
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        out += f" ({percent(rate)})"
    return out


def target_text(row: Row) -> str:
    tid = row.target_id
    return f"{tid} ({row.target_state})" if tid else "unknown"


def md_escape(s: Any) -> str:
    """A document string as Markdown table text: `|` cannot end the cell, `<`/`>` cannot open HTML, brackets
    and backticks cannot start a link or code, and control characters are shown as escapes."""
    s = plain(s).replace("\\", "\\\\")
    for ch in "|`*_[]":
        s = s.replace(ch, "\\" + ch)
    return s.replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(doc: dict[str, Any]) -> str:
    g = grid(doc)
    head = ["Draft", "Target"] + [c.label for c in g.columns]
    if g.has_score:
        head.append("Score (AL)")
    if g.has_rank:
        head.append("Rank")
    lines = ["| " + " | ".join(md_escape(h) for h in head) + " |",
             "|" + "|".join(" --- " for _ in head) + "|"]
    for r in g.rows:
        vals = [r.name, target_text(r)]
        for i in range(len(g.columns)):
            vals.append("; ".join(cell_text(c) for c in r.cells.get(i, [])) or "—")
        if g.has_score:
            vals.append(score_text(r.draft) or "—")
        if g.has_rank:
            rank = r.draft.get("rank")
            vals.append(str(rank) if isinstance(rank, int) and not isinstance(rank, bool) else "—")
        lines.append("| " + " | ".join(md_escape(v) for v in vals) + " |")
    if not g.rows:
        lines.append("| " + " | ".join(["no drafts"] + ["—"] * (len(head) - 1)) + " |")
    s = doc.get("summary") or {}
    counts = ", ".join(f"{s.get(k, 0)} {k}" for k in STATES)
    lines.append("")
    n = s.get('cells', 0)
    lines.append(f"{n} cell{'' if n == 1 else 's'}: {counts}. Legend: "
                 + ", ".join(f"{SYMBOL[k]} {k}" for k in STATES) + ".")
    nexts = [f for d in g.rows if (f := next(iter(d.draft.get("fixes") or []), None)) and f.get("command")]
    if nexts:
        # the terminal's `next:` lines, one per draft (kconvert.matrix.fixes), the command whole in a code span
        lines += ["", "Next, one fix line per draft:", ""]
        lines += [f"- {md_code(f['command'])}: {md_escape(f.get('why') or '')}" for f in nexts]
    return "\n".join(lines) + "\n"


def md_code(s: Any) -> str:
    """A document string as a Markdown code span, whole: fenced by one more backtick than its longest run (CommonMark
    code spans), control characters shown as escapes."""
    text = plain(s)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


CSV_FIELDS = ("draft", "revision", "target", "target_state", "producer", "step", "engine_row", "engine",
              "engine_version", "kind", "state", "finding_ids", "fix_available", "fix_certain", "fix_command",
              "message", "exit_code", "score_acceptance_length", "score_acceptance_rate",
              "live_acceptance_length", "live_acceptance_rate", "cached", "seconds")


def _csv_text(v: Any) -> Any:
    # A cell starting with = + - @ (or a tab / CR) is run as a formula by spreadsheets (OWASP "CSV injection"):
    # a document string is prefixed with ' so it reads as text. Numbers are written as numbers.
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return v


def _flag(v: Any) -> str:
    return "" if v is None else ("true" if v else "false")


def render_csv(doc: dict[str, Any]) -> str:
    """One row per cell (stdlib csv, RFC 4180 quoting)."""
    g = grid(doc)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in g.rows:
        for i, col in enumerate(g.columns):
            for c in r.cells.get(i, []):
                fix = c.get("fix") if isinstance(c.get("fix"), dict) else {}
                score, live = c.get("score") or {}, c.get("live") or {}
                vals = [r.name, c.get("revision"), c.get("target"), r.target_state, r.draft.get("producer"),
                        r.draft.get("step"), col.row, c.get("engine"), c.get("engine_version"), col.kind,
                        state_of(c), " ".join(str(i) for i in c.get("finding_ids") or []),
                        _flag(fix.get("available")), _flag(fix.get("certain")), fix.get("command"),
                        c.get("message"), c.get("exit_code"), acceptance_length(score), score.get("acceptance_rate"),
                        acceptance_length(live), live.get("acceptance_rate"), _flag(c.get("cached")),
                        c.get("seconds")]
                w.writerow(["" if v is None else _csv_text(v) for v in vals])
    return buf.getvalue()
