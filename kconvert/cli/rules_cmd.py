"""`kconvert rules`: the rule index, like a linter's."""
from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from kconvert.cli import app
from kconvert.cli._common import json_opt
from kconvert.cli._output import begin, console, emit_json
from kconvert.errors import UsageError


@app.command("rules")
def rules_command(
    rule_id: Annotated[Optional[str], typer.Argument(help="A rule id such as K404 to explain one rule.")] = None,
    as_json: json_opt("rules") = False,
) -> None:
    """List every rule (id, category, severity, fix availability, summary), or explain one: what it checks, what
    the engine does with the defect (with the source of that fact), whether fix can repair it (always, sometimes,
    needs-decision: once a flag settles what the files cannot, never) and whether that is safe."""
    from kconvert.rules import REGISTRY

    begin("rules", "json" if as_json else "full")
    rules = sorted(REGISTRY.values(), key=lambda r: r.id)
    if rule_id:
        r = REGISTRY.get(rule_id.upper())
        if r is None:
            raise UsageError(f"no rule {rule_id!r}; `kconvert rules` lists them")
        if as_json:
            emit_json(r.doc())
            return
        console.print(f"[bold]{r.id} {r.name}[/]  ({r.category}, {r.severity}"
                      f"{', needs --target' if r.needs_target else ''})\n")
        console.print(f"[bold]What it checks[/]\n{r.summary}\n")
        console.print(f"[bold]Why it matters[/]\n{r.why}\n")
        console.print(f"[bold]Fix[/] ({r.fix_availability.value})\n{r.fix}")
        return
    if as_json:
        emit_json([r.doc() for r in rules])
        return
    tab = Table(title=f"{len(rules)} rules")
    for col in ("id", "name", "category", "severity", "fix", "summary"):
        tab.add_column(col)
    for r in rules:
        tab.add_row(r.id, r.name, r.category, r.severity, r.fix_availability.value, r.summary)
    console.print(tab)
