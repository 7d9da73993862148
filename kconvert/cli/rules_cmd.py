"""`kconvert rules`: the rule index, like a linter's."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._common import json_opt
from kconvert.cli._output import begin, console, emit_json
from kconvert.errors import UsageError, did_you_mean


@app.command("rules")
def rules_command(
    rule_id: Annotated[Optional[str], typer.Argument(help="A rule id such as K404 to explain one rule.")] = None,
    as_json: json_opt("rules") = False,
) -> None:
    """List every rule (id, name, category, severity, fix availability), or explain one. A rule's severity
    column lists every severity its findings can have.

    One rule's explanation says what it checks, what the engine does with the defect (with the source of that fact), whether fix can repair it (always, sometimes,
    needs-decision: once a flag settles what the files cannot, never) and whether that is safe."""
    # deferred: importing the rules registers every rule (the checkpoint readers, the engine rows): not for --help
    from kconvert.rules import REGISTRY

    begin("rules", "json" if as_json else "full")
    rules = sorted(REGISTRY.values(), key=lambda r: r.id)
    if rule_id:
        by_name = {x.name: x for x in rules}
        r = REGISTRY.get(rule_id.upper()) or by_name.get(rule_id.lower())
        if r is None:
            raise UsageError(f"no rule {rule_id!r}{did_you_mean(rule_id, [x.id for x in rules] + list(by_name))}; "
                             "`kconvert rules` lists them")
        if as_json:
            emit_json(r.doc())
            return
        console.print(f"[bold]{r.id} {r.name}[/]  ({r.category}, {'/'.join(r.severities())}"
                      f"{', needs --target' if r.needs_target else ''})\n")
        console.print(f"[bold]What it checks[/]\n{r.summary}\n")
        console.print(f"[bold]Why it matters[/]\n{r.why}\n")
        console.print(f"[bold]Fix[/] ({r.fix_availability.value})\n{r.fix}")
        return
    if as_json:
        emit_json([r.doc() for r in rules])
        return
    # One line per rule, every field whole at 80 columns (a pipe gets 80): id, name, category, severity and
    # whether fix repairs it; `kconvert rules ID` gives the whole text, as `ruff rule CODE` does.
    name_w = max(len(r.name) for r in rules)
    cat_w = max(len(r.category) for r in rules)
    console.print(f"{'id':<4}  {'name':<{name_w}}  {'category':<{cat_w}}  {'severity':<{SEV_W}} fix", style="bold",
                  highlight=False)
    for r in rules:
        console.print(rule_line(r, name_w, cat_w), highlight=False, markup=False, soft_wrap=True)
    console.print(f"{len(rules)} rules; `kconvert rules ID` explains one", style="dim", highlight=False)


SEV_W = len("error/warning/info")


def rule_line(r, name_w: int = 21, cat_w: int = 14) -> str:
    """One rule: its severities are every one its findings can have (`Rule.severities`, read from the rule's code),
    not only the usual one: K405 was listed as a warning and fires as an error."""
    return f"{r.id:<4}  {r.name:<{name_w}}  {r.category:<{cat_w}}  {'/'.join(r.severities()):<{SEV_W}} " \
           f"{r.fix_availability.value}"
