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


def error_line(message: str, hint: str | None = None) -> None:
    # Messages quote names from the checkpoint (`[tensor]`, `[/oops]`): never let rich read them as markup.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if hint:
        err_console.print(f"[dim]hint: {escape(hint)}[/]", highlight=False, soft_wrap=True)
