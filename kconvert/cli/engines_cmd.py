"""`kconvert engines list | learn | diff`: the engine rows and their sources, a release learned from its own code,
and what changed between two releases (kconvert.commands.engines)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from kconvert.cli._app import app
from kconvert.cli._common import json_opt
from kconvert.cli._help import help_examples
from kconvert.cli._output import begin, console, emit_json, err_console

EXAMPLES = """
Examples:

  kconvert engines list

  kconvert engines list "vllm 0.34"

  kconvert engines learn vllm==0.34.0

  kconvert engines diff vllm==0.33.0 vllm==0.34.0
"""

engines_app = typer.Typer(
    name="engines", no_args_is_help=True, rich_markup_mode=None,
    help="The engine rows kconvert judges drafts by, where each fact came from, and new releases learned from "
         "their own code.\n\nA row's facts come from the release's learned file (its config, loader and runner "
         "functions run over kconvert's probe set) or from a hand reading, each with its source.")
app.add_typer(engines_app, name="engines", epilog=help_examples(EXAMPLES))


@engines_app.command("list", epilog=help_examples(EXAMPLES))
def list_command(
    row: Annotated[Optional[str], typer.Argument(
        help="One row, e.g. 'vllm 0.34', '0.33/v1' or 'sglang 0.5.23': every fact with its source.")] = None,
    as_json: json_opt("engines") = False,
) -> None:
    """List the engine rows, where each fact came from, the engines installed here and the learned releases."""
    from kconvert.commands.engines import engines_list

    begin("engines", "json" if as_json else "full")
    res = engines_list(row)
    if as_json:
        emit_json(res.to_dict())
        return
    doc = res.to_dict()
    for r in doc["rows"]:
        learned = sorted(k for k, v in r["facts"].items() if v["learned"])
        hand = sorted(k for k, v in r["facts"].items() if not v["learned"])
        head = f"{r['row']}" + (f" (Model Runner {r['runner'].upper()})" if r["runner"] else "")
        console.print(head, style="bold", highlight=False, markup=False)
        if row:
            for name, v in sorted(r["facts"].items(), key=lambda kv: (not kv[1]["learned"], kv[0])):
                how = f"learned ({v['file']}): " if v["learned"] else "read by hand: "
                console.print(f"  {name}: {how}{v['source']}", highlight=False, markup=False, soft_wrap=True)
            for name in r["not_sourced"]:
                console.print(f"  {name}: read by hand (the row's source: kconvert/engines/expectations.py)",
                              highlight=False, markup=False, soft_wrap=True)
            continue
        if learned:
            console.print(f"  learned from {r['learned_from']}: {', '.join(learned)}", highlight=False,
                          markup=False, soft_wrap=True)
        if hand or r["not_sourced"]:
            console.print(f"  read by hand: {', '.join(hand + r['not_sourced'])}", highlight=False, markup=False,
                          soft_wrap=True)
    inst = ", ".join(f"{i['engine']} {i['version']}" + (f" (row {i['row']})" if i["row"] else " (no row: kconvert "
                     "engines learn it, or judge with --oracle)") if i["version"] else f"{i['engine']}: not installed"
                     for i in doc["installed"])
    console.print(f"installed here ({doc['platform']}): {inst}", highlight=False, markup=False, soft_wrap=True)
    lr = doc["learned"]
    console.print(f"learned releases: shipped {', '.join(lr['committed']) or 'none'}; in {lr['cache']}: "
                  f"{', '.join(lr['cached']) or 'none'}", highlight=False, markup=False, soft_wrap=True)
    if not row:
        console.print("`kconvert engines list ROW` gives each fact's source", style="dim", highlight=False)


@engines_app.command("learn", epilog=help_examples(EXAMPLES))
def learn_command(
    release: Annotated[str, typer.Argument(help="The release, ENGINE==X.Y.Z (e.g. vllm==0.34.0).",
                                           show_default=False)],
    out: Annotated[Optional[str], typer.Option(
        "--out", help="Folder to write the learned file into. Default: the cache's learned/ folder "
                      "(KCONVERT_ENGINES_CACHE, else ~/.cache/kconvert/engines).")] = None,
    as_json: json_opt("engines") = False,
) -> None:
    """Learn a release from its own code.

    Fetches its Python files (pip download --no-deps, no compiled module) into kconvert's cache, runs its config,
    loader and runner functions over kconvert's probe set in a child interpreter, and writes each fact it answers
    with the file:function that answered.

    Needs torch and transformers (the learn extra); exit 3 when they are missing. Facts that need an engine run
    (which stream an id names, acceptance) are not learned: the output says which."""
    from kconvert.commands.engines import engines_learn

    begin("engines", "json" if as_json else "full", source=release)
    res = engines_learn(release, out=out, say=None if as_json else lambda m: err_console.print(
        m, style="dim", highlight=False, markup=False))
    if as_json:
        emit_json(res.to_dict())
        return
    doc = res.to_dict()
    console.print(f"learned {doc['engine']} {doc['release']} from {doc['learned_from']} in {doc['seconds']} s: "
                  f"{len(doc['facts'])} facts", highlight=False, markup=False, soft_wrap=True)
    for name, f in doc["facts"].items():
        console.print(f"  {name}: {f['value']!r}  ({'; '.join(f['from'])})", highlight=False, markup=False,
                      soft_wrap=True)
    for note in doc["patched"]:
        console.print(f"patched: {note}", highlight=False, markup=False, soft_wrap=True)
    console.print("not learned (no code answers them without an engine run):", highlight=False, markup=False)
    for what in doc["not_learned"]:
        console.print(f"  {what}", highlight=False, markup=False, soft_wrap=True)
    if doc["committed_same"] is not None:
        console.print("the learned file kconvert ships for this release " + (
            "agrees" if doc["committed_same"] else "DIFFERS: review the difference"), highlight=False, markup=False)
    console.print(f"written: {doc['written']}", highlight=False, markup=False, soft_wrap=True)


@engines_app.command("diff", epilog=help_examples(EXAMPLES))
def diff_command(
    a: Annotated[str, typer.Argument(help="The older release: vllm==0.33.0, 'vllm 0.33' or 0.33.", show_default=False)],
    b: Annotated[str, typer.Argument(help="The newer release, the same way.", show_default=False)],
    as_json: json_opt("engines") = False,
) -> None:
    """What changed between two learned releases for EAGLE-3 drafts.

    Which key each runner reads the aux ids from, which runner exists, what is refused, what context is served,
    and where the code that answers moved."""
    from kconvert.commands.engines import engines_diff

    begin("engines", "json" if as_json else "full")
    res = engines_diff(a, b)
    if as_json:
        emit_json(res.to_dict())
        return
    behaviour = [c for c in res.changes if c.kind == "behaviour"]
    code = [c for c in res.changes if c.kind == "code"]
    console.print(f"{res.a} -> {res.b}: {len(behaviour)} changes for EAGLE-3 drafts", style="bold",
                  highlight=False, markup=False)
    for c in behaviour:
        console.print(f"- {c.says}", highlight=False, markup=False, soft_wrap=True)
    if code:
        console.print("where the code that answers moved:", highlight=False, markup=False)
        for c in code:
            console.print(f"  {c.says}", highlight=False, markup=False, soft_wrap=True)
