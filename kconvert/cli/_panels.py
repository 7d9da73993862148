"""Help in panels (issue #48 item 8): a long command's options grouped as vLLM groups its help and typer's
`rich_help_panel` names them, drawn by click's plain formatter (kconvert.cli._app: rich's panels cut long option
names at 80 columns; click's write_dl wraps and never cuts).

An option's panel is its own `rich_help_panel` (typer's attribute: `kconvert.cli._gate` sets it), else the one
PANELS gives its first flag, in one table here rather than on each of the shared option types. An option in
neither is drawn under "Options", which tests/test_help_panels.py refuses: a new option needs a panel."""
from __future__ import annotations

from typing import Any

from typer.core import TyperCommand

ORDER = ("Draft and target", "Engine", "Prompts and measurement", "Trace", "Decisions", "Gate", "Drafts",
         "Where cells run", "Output")

_BY_PANEL: dict[str, tuple[str, ...]] = {
    "Draft and target": ("--target", "--trust-remote-code", "--server"),
    "Engine": ("--engine", "--engine-version", "--tp", "--draft-tp", "--num-speculative-tokens", "--speculative-config",
               "--engine-arg", "--timeout", "--engines", "--dtype", "--device", "--threads", "--mode", "--oracle"),
    "Prompts and measurement": ("--prompts", "--max-prompts", "--max-tokens", "--lossless", "--diagnose",
                                "--skip-static", "--dry-run", "--live", "--try", "--search-aux", "--max-sequences"),
    "Trace": ("--trace", "--best"),
    "Decisions": ("--aux-ids", "--aux-convention", "--d2t", "--lm-head-from", "--cast", "--rope-from-target",
                  "--to-format", "--decided-by", "--only", "--partial", "--from-pickle"),
    "Gate": ("--fail-on", "--select", "--ignore", "--extend-ignore", "--config", "--isolated",
             "--min-acceptance-length", "--min-acceptance-rate", "--min-per-position", "--expected-accept-length",
             "--expected-convention", "--tolerance", "--reference", "--policy", "--max-degenerate-share"),
    "Drafts": ("--from", "--hub-search", "--hub-author", "--hub-limit"),
    "Where cells run": ("--executor", "--workers", "--ray-address", "--ray-runtime-env", "--cache", "--refresh"),
    "Output": ("--output", "--force", "--fsync", "--hash", "--output-format", "--json", "--report", "--junit", "--markdown",
               "--sarif", "--html", "--csv", "--help"),
}
PANELS: dict[str, str] = {flag: panel for panel, flags in _BY_PANEL.items() for flag in flags}
UNPANELLED = "Options"


def panel_of(param: Any) -> str:
    own = getattr(param, "rich_help_panel", None)
    if own:
        return own
    return next((PANELS[o] for o in getattr(param, "opts", []) if o in PANELS), UNPANELLED)


class PanelCommand(TyperCommand):
    """A command whose --help lists its arguments, then its options panel by panel (ORDER, then any other)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            rv = param.get_help_record(ctx)
            if rv is None:
                continue
            if param.param_type_name == "argument":
                args.append(rv)
            else:
                panels.setdefault(panel_of(param), []).append(rv)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for name in sorted(panels, key=lambda p: (ORDER.index(p) if p in ORDER else len(ORDER), p)):
            with formatter.section(name):
                formatter.write_dl(panels[name])
