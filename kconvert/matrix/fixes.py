"""One fix line per draft (issue 48): the rows of a draft whose fixes write the same checkpoint share one command.

A static cell's fix command is `kconvert fix` for its own engine row (`kconvert.matrix.cells`). The cell also
records `fix.output`, a digest of what that command writes (`output_digest`): the ops of the plan `kconvert fix
--dry-run` makes for the command as printed, without their reasons, the config.json they leave, and the aux-id
record that kconvert.json keeps for a later inspect (`kconvert.formats.aux._recorded_convention`, the only part of
kconvert.json besides the input's producer that the rules read). Two rows with the same digest get the same
weights, the same config.json and the same record from either row's command, so the output of one is what the other
row's fix writes and self-checks: one command serves both. Rows with different digests need different outputs (vLLM
and SGLang before PR 25454 read aux ids in different conventions; SGLang wants the flat layout): each gets its own
command, and the draft's one `next:` line names the rows it does not serve.

`draft_fixes` groups a draft's cells; `kconvert.matrix.build.assemble` puts the groups in `drafts[].fixes` (the first
is the one the `next:` line prints, also `drafts[].fix_command`) and gives each cell its group's command, so the
terminal, the page, the Markdown and the CSV print the same commands.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from kconvert.writer.ops import op_to_dict

# where the fix lines of a draft's other outputs are (the one next line names their rows only)
WHERE = "the --html page's draft card, --json drafts[].fixes"


def output_digest(plan: Any) -> str:
    """`sha256:` over what a fix plan writes that an engine or kconvert's rules read (`kconvert.plan.Plan`)."""
    ops = [{k: v for k, v in op_to_dict(o).items() if k != "reason"} for o in plan.ops]
    record = plan.aux_record or {}
    body = {"ops": ops, "config": plan.config_after,
            "aux_ids": {k: record.get(k) for k in ("written", "physical")} if record else None}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def row_of(cell: dict[str, Any]) -> str:
    return f"{cell['engine']}:{cell['engine_version']}"


def _needs_fix(cell: dict[str, Any]) -> bool:
    # what the terminal printed a line for before issue 48: a failing or warning static cell with a fix command
    return (cell.get("kind", "static") == "static" and cell.get("state") in ("fail", "warn")
            and bool((cell.get("fix") or {}).get("command")))


def _why(members: list[dict[str, Any]], rows: list[str]) -> tuple[list[str], str]:
    """The repaired ids of the group and its comment: `repairs K404, K405 on vllm:0.32, vllm:0.32/v1`, then what
    the cells' own comments (inspect's, `kconvert.results.next_steps`) add after their `repairs ...` part (a
    recommended reading, what is left as is, what stays and makes fix exit 1), each once."""
    repairs = sorted({i for c in members for i in c["fix"].get("repairs") or []})
    extra: list[str] = []
    for c in members:
        why = c["fix"].get("why") or ""
        own = c["fix"].get("repairs") or []
        lead = f"repairs {', '.join(own)}" if own else ""
        if lead and why.startswith(lead):
            why = why[len(lead):].removeprefix("; ")
        if why and why not in extra:
            extra.append(why)
    on = ", ".join(rows)
    if repairs:
        return repairs, "; ".join([f"repairs {', '.join(repairs)} on {on}", *extra])
    return repairs, f"on {on}: {'; '.join(extra)}" if extra else f"on {on}"


def draft_fixes(cells: list[dict[str, Any]], installed: str | None = None) -> list[dict[str, Any]]:
    """A draft's fix commands, one per distinct output: `{"command", "rows", "repairs", "why", "output"}`, the one
    serving the most rows first (then the one serving the installed engine's row, then column order). `cells`: the
    draft's cells in column order. Each group's command is the one of the installed engine's row when the group
    has it, else of its first row. A cell with no digest (the plan could not be made again) is a group of its own."""
    groups: dict[Any, list[dict[str, Any]]] = {}
    for n, c in enumerate(cells):
        if _needs_fix(c):
            # rows whose fixes write the same output share a line only where fix also ends the same way: an error
            # no edit repairs on one row (K103 for a two-layer draft on tokenspeed) makes fix exit 1 there and not
            # on a row that serves two layers, so one comment could not say how the command exits
            stays = tuple(sorted({f.get("id") for f in c.get("findings") or []
                                  if f.get("severity") == "error" and not f.get("fixable")}))
            output = c["fix"].get("output")
            groups.setdefault((output, stays) if output else ("cell", n), []).append(c)
    out = []
    for order, (key, members) in enumerate(groups.items()):
        rows = [row_of(c) for c in members]
        rep = next((c for c in members if row_of(c) == installed), members[0])
        repairs, why = _why(members, rows)
        out.append({"command": rep["fix"]["command"], "rows": rows, "repairs": repairs, "why": why,
                    "output": key[0] if key[0] != "cell" else None, "_order": order})
    out.sort(key=lambda g: (-len(g["rows"]), installed not in g["rows"], g["_order"]))
    for g in out:
        del g["_order"]
    if len(out) > 1:
        others = [g["rows"] for g in out[1:]]
        served = (", ".join(others[0]) if len(others) == 1
                  else " and ".join(f"[{', '.join(rows)}]" for rows in others))
        out[0]["why"] += (f"; another output serves {served} (its fix line: {WHERE})" if len(others) == 1 else
                          f"; {len(others)} other outputs serve {served} (their fix lines: {WHERE})")
    unfixed = [row_of(c) for c in cells
               if c.get("kind", "static") == "static" and c.get("state") == "fail" and not _needs_fix(c)]
    if out and unfixed:
        out[0]["why"] += f"; no fix line for {', '.join(unfixed)}: see the cell"
    return out


__all__ = ["draft_fixes", "output_digest", "row_of"]
