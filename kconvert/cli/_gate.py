"""ruff's habits on the commands that gate (inspect, fix, verify, score, matrix), added by one decorator as
`file_outputs` adds the file options: `--extend-select`, `--exit-zero`, `--statistics`, `--show-settings` (ruff
check's options of those names). A new gating command gets all four with `@gate_options`."""
from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Callable, Optional

import typer

from kconvert.cli._output import current_run, echo_line, emit_json, write

GATE_PANEL = "Gate"  # the help panel these options sit in (kconvert.cli._panels)

OPTIONS: dict[str, Any] = {
    "extend_select": Annotated[Optional[str], typer.Option(
        "--extend-select", rich_help_panel=GATE_PANEL,
        help="Rules that gate the run in addition to the configuration's select (same selectors as --select).")],
    "exit_zero": Annotated[bool, typer.Option(
        "--exit-zero", rich_help_panel=GATE_PANEL,
        help="Exit 0 even when findings or a gate fail (the report still says so); bad input still exits 2, an "
             "engine that could not run 3.")],
    "statistics": Annotated[bool, typer.Option(
        "--statistics", rich_help_panel=GATE_PANEL,
        help="Print one line per rule with how many findings it has (count, id, severity, name, fixable) instead "
             "of the findings.")],
    "show_settings": Annotated[bool, typer.Option(
        "--show-settings", rich_help_panel=GATE_PANEL,
        help="Print the settings this run would use (configuration file, engine, target, fail-on, the rules that "
             "gate and those set aside, with their reasons) and exit; with --json as one JSON object "
             "(schemas/settings.schema.json).")],
}


def merged_select(select: str | None, extend: str, config: str | None, isolated: bool) -> str | None:
    """`--select` (or the configuration's select) plus `--extend-select`; None when every rule already gates (an
    extension of everything is everything, as in ruff)."""
    from kconvert.project import load_config
    from kconvert.rules.selection import resolve

    extra = [s.strip() for s in extend.split(",") if s.strip()]
    for s in extra:
        resolve(s, flag="--extend-select")
    if select is not None:
        base = [s for s in select.split(",") if s.strip()]
    else:
        cfg = load_config(config, isolated=isolated).get("select")
        if cfg is None:
            return None
        base = list(cfg)
    return ",".join(base + [s for s in extra if s not in base])


def show_settings(kwargs: dict[str, Any], as_json: bool) -> None:
    from kconvert.project import project_settings

    ps = project_settings(kwargs.get("config"), bool(kwargs.get("isolated")), select=kwargs.get("select"),
                          ignore=kwargs.get("ignore"), extend_ignore=kwargs.get("extend_ignore"),
                          engine=kwargs.get("engine"), engine_version=kwargs.get("engine_version"),
                          target=kwargs.get("target"), fail_on=kwargs.get("fail_on"))
    doc = ps.to_dict()
    if as_json:
        from kconvert.schemas import validate

        validate(doc, "settings")
        emit_json(doc)
        return
    lines = [f"config file: {doc['config_file'] or '(none)'}", f"engine: {doc['engine']}",
             f"engine-version: {doc['engine_version'] or '(the installed engine row, else the newest)'}",
             f"target: {doc['target'] or '(none)'}", f"fail-on: {doc['fail_on']}",
             "select: " + (", ".join(doc["select"]) if doc["select"] is not None else "every rule"),
             f"rules that gate: {', '.join(doc['selected'])}"]
    lines += [f"ignore: {i['selector']} ({i['source']}): {i['reason']}" for i in doc["ignore"]]
    lines += [f"warning: {w}" for w in doc["warnings"]]
    write("\n".join(lines) + "\n")


def gate_options(command: Callable[..., Any]) -> Callable[..., Any]:
    sig = inspect.signature(command, eval_str=True)
    own = list(sig.parameters.values())
    # before `outputs` (file_outputs adds its own options after every other)
    keep = [p for p in own if p.name != "outputs"]
    tail = [p for p in own if p.name == "outputs"]
    added = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               default=None if name == "extend_select" else False,
                               annotation=ann) for name, ann in OPTIONS.items()]

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        extend, exit_zero = kwargs.pop("extend_select"), kwargs.pop("exit_zero")
        statistics, show = kwargs.pop("statistics"), kwargs.pop("show_settings")
        if extend:
            kwargs["select"] = merged_select(kwargs.get("select"), extend, kwargs.get("config"),
                                             bool(kwargs.get("isolated")))
        as_json = bool(kwargs.get("as_json")) or str(getattr(kwargs.get("output_format"), "value",
                                                             kwargs.get("output_format"))) == "json"
        if show:
            show_settings(kwargs, as_json)
            raise typer.Exit(0)
        if not kwargs.get("isolated"):
            from kconvert.project import load_config

            for w in load_config(kwargs.get("config")).warnings:
                echo_line(f"warning: {w}")  # a kconvert.toml is anyone's (a checked-out repository): escaped
        run_ = current_run()
        if run_ is not None:
            run_.statistics = statistics
        try:
            return command(**kwargs)
        except typer.Exit as e:
            if exit_zero and e.exit_code == 1:  # findings or a failed gate: ruff's --exit-zero
                raise typer.Exit(0) from None
            raise

    run.__signature__ = sig.replace(parameters=keep + added + tail)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in keep + added + tail}
    return run
