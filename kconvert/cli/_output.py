"""All output goes through here: human (rich) or machine (JSON). Commands never print directly."""
from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


# Every character str.splitlines() breaks a line at. Names from a checkpoint may carry them (a tensor named
# "\x85"): printed as escapes, an error stays the one line a CI log or a wrapping script reads.
_LINE_BREAKS = str.maketrans({c: c.encode("unicode_escape").decode("ascii")
                              for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def error_line(message: str, hint: str | None = None) -> None:
    # Messages quote names from the checkpoint (`[tensor]`, `[/oops]`): never let rich read them as markup.
    err_console.print(f"[bold red]error:[/] {escape(message.translate(_LINE_BREAKS))}", highlight=False,
                      soft_wrap=True)
    if hint:
        err_console.print(f"[dim]hint: {escape(hint.translate(_LINE_BREAKS))}[/]", highlight=False, soft_wrap=True)
