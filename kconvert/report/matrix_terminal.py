"""A matrix document (schemas/matrix.schema.json) in the terminal (rich), readable down to 80 columns: a grid of
drafts x engine rows when it fits, one block per draft when it does not, then the summary, each inferred target
with its evidence, the best draft and its plot, and one fix command per failing or warning cell.

Only draws: `kconvert matrix` computes the document (`kconvert.matrix.matrix`) and passes its console here, the
document's strings escaped (kconvert.guard.text). A draft name, a target or an error reaches rich only inside a
`Text`, never read as markup or emoji codes.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kconvert.report.matrix_plot import text_plot


def cell_text(c: dict[str, Any]) -> str:
    colour = {"pass": "green", "warn": "yellow", "fail": "red", "error": "magenta", "skipped": "dim"}[c["state"]]
    # info findings (a note that target checks were skipped, that headers came from the Hub) are in the JSON only
    ids = sorted({f["id"] for f in c["findings"] if f["severity"] != "info"}) if "findings" in c \
        else c.get("finding_ids", [])
    # whether a cell came from the cache is said once, in the summary line ("N cells: ... N from the cache")
    return f"[{colour}]{c['state']}[/]" + (f" {', '.join(ids)}" if ids else "")


def render_matrix(console: Console, doc: dict[str, Any]) -> None:
    """The document on `console`: the grid (or the stacked blocks when too many engine rows for its width), then
    the footer."""
    # At 80 columns six engine rows leave little room: a simple box, and each draft by its folder name when those
    # are unique (the document and --json keep the path as given).
    names = [d["draft"].rstrip("/").rsplit("/", 1)[-1] for d in doc["drafts"]]
    short = dict(zip([d["draft"] for d in doc["drafts"]], names)) if len(set(names)) == len(names) else {}
    if 14 + 16 * len(doc["engines"]) > console.width:
        render_stacked(console, doc, short)
    else:
        render_grid(console, doc, short)
    render_footer(console, doc)


def render_stacked(console: Console, doc: dict[str, Any], short: dict[str, str]) -> None:
    """Too many engine rows for the terminal (six at 80 columns): one block per draft, one line per engine row,
    so no finding id is cut and no name breaks mid-word."""
    n = doc["summary"]["cells"]
    console.print(f"[bold]kconvert matrix: {n} cell{'' if n == 1 else 's'}[/]")
    width = max(len(f"{e['engine']} {e['engine_version']}") for e in doc["engines"]) + 2
    for d in doc["drafts"]:
        console.print(Text(short.get(d["draft"], d["draft"]), style="bold"), soft_wrap=True, highlight=False)
        mine = {(c["engine"], c["engine_version"], c.get("kind", "static")): c for c in doc["cells"]
                if c["draft"] == d["draft"]}
        for e in doc["engines"]:
            c = mine.get((e["engine"], e["engine_version"], "static"))
            label = f"{e['engine']} {e['engine_version']}" + (" *" if e["installed"] else "")
            console.print(f"  {label:<{width}} " + (cell_text(c) if c else ""), soft_wrap=True, highlight=False)
        live = next((c for k, c in mine.items() if k[2] == "live"), None)
        if live is not None:
            console.print("  live AL " + (f"{live['live']['acceptance_length']:.4f}" if live.get("live")
                                          else cell_text(live)), soft_wrap=True, highlight=False)
        if d.get("score"):
            console.print(f"  score AL {d['score']['acceptance_length']:.4f}, rank {d.get('rank') or '-'}",
                          highlight=False)


def render_grid(console: Console, doc: dict[str, Any], short: dict[str, str]) -> None:
    n = doc["summary"]["cells"]
    title = f"kconvert matrix: {n} cell{'' if n == 1 else 's'}"
    # never narrower than its title: a one-column grid (`--engines vllm:0.32`) would fold "1 cell" over two lines
    t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, min_width=len(title))
    t.add_column("draft", overflow="fold", min_width=12)
    for e in doc["engines"]:
        t.add_column(f"{e['engine']}\n{e['engine_version']}" + (" *" if e["installed"] else ""), overflow="fold")
    has_live = any(c.get("kind") == "live" for c in doc["cells"])
    if has_live:
        t.add_column("live AL", overflow="fold")
    if doc.get("ranking"):
        t.add_column("score AL", justify="right")
        t.add_column("rank", justify="right")
    for d in doc["drafts"]:
        mine = {(c["engine"], c["engine_version"], c.get("kind", "static")): c for c in doc["cells"]
                if c["draft"] == d["draft"]}
        row: list[Text | str] = [Text(short.get(d["draft"], d["draft"]))]
        for e in doc["engines"]:
            c = mine.get((e["engine"], e["engine_version"], "static"))
            row.append(cell_text(c) if c else "")
        if has_live:
            live = next((c for k, c in mine.items() if k[2] == "live"), None)
            row.append("" if live is None else (f"{live['live']['acceptance_length']:.4f}" if live.get("live")
                                                else cell_text(live)))
        if doc.get("ranking"):
            s = d.get("score")
            row.append(f"{s['acceptance_length']:.4f}" if s else "-")
            row.append(str(d["rank"]) if d.get("rank") else "-")
        t.add_row(*row)
    console.print(t)


def render_footer(console: Console, doc: dict[str, Any]) -> None:
    s = doc["summary"]
    aside = sorted({i for c in doc["cells"] for i in c.get("set_aside") or []})
    console.print(f"{s['cells']} cell{'' if s['cells'] == 1 else 's'}: {s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['error']} error, "
                  f"{s['skipped']} skipped; {doc['timings'].get('from_cache', 0)} from the cache; * = installed engine"
                  + (f"; set aside by the rule selection: {', '.join(aside)}" if aside else ""))
    for d in doc["drafts"]:
        if d["target"]["state"] != "given":
            what = d["target"]["id"] or "unknown"
            console.print(Text(f"{d['draft']}: target {what} ({d['target']['state']}: "
                               f"{'; '.join(d['target']['evidence'])})", style="dim"))
        if d.get("error"):
            console.print(Text.assemble((d["draft"], "magenta"), f": {d['error']}"))
    if doc.get("ranking") and doc["ranking"].get("best"):
        console.print(Text.assemble("best by scored acceptance length: ", (doc["ranking"]["best"], "bold")))
        plot = text_plot(doc)
        if plot is not None:
            console.print(Text(plot), highlight=False)
    # one line per draft (issue 48): the command whose output serves the most of its failing rows, its comment
    # naming those rows and the rows that need another output (kconvert.matrix.fixes); printed unwrapped so a
    # copy stays one command
    for line in next_lines(doc):
        console.print(Text(line), highlight=False, soft_wrap=True)


def next_lines(doc: dict[str, Any]) -> list[str]:
    """`next: COMMAND  # WHY`, one per draft with a fix (`drafts[].fixes[0]`)."""
    out = []
    for d in doc["drafts"]:
        fixes = d.get("fixes") or []
        if fixes:
            out.append(f"next: {fixes[0]['command']}  # {fixes[0]['why']}")
    return out


__all__ = ["cell_text", "next_lines", "render_matrix"]
