"""Help in panels, whole at 80 columns (issue #48 item 8): `verify --help` was 178 flat lines. Each command that
draws panels (kconvert.cli._panels.PanelCommand; verify, fix, matrix and score at least) is rendered with
`--help` at COLUMNS=80, as a user's terminal would (a subprocess), and every option, read from click's own
command object, must be there whole: its flags and metavar on one line, at most 80 columns, under a panel other
than the catch-all "Options"."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def commands():
    from kconvert.cli import _built, _register
    from kconvert.cli._panels import PanelCommand

    _register()
    return {n: c for n, c in sorted(_built(None).commands.items()) if isinstance(c, PanelCommand)}


COMMANDS = commands()


def test_the_long_commands_draw_panels():
    assert {"verify", "fix", "matrix", "score"} <= set(COMMANDS)


def sections(text: str) -> dict[str, list[str]]:
    """The help's sections ("Name:" at column 0) and their lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^(\S[^:]*):$", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_at_80_columns_puts_every_option_whole_in_a_panel(name):
    from kconvert.cli._panels import ORDER

    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "kconvert", name, "--help"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    too_long = [ln for ln in r.stdout.splitlines() if len(ln) > 80]
    assert too_long == []
    secs = sections(r.stdout.split("\n\n", 1)[1].split("\n  Examples:", 1)[0])  # the epilog is prose
    assert "Options" not in secs, secs.get("Options")
    panels = [s for s in secs if s not in ("Arguments", "Examples")]
    assert panels and all(p in ORDER for p in panels), panels
    cmd = COMMANDS[name]
    ctx = cmd.make_context(name, [], resilient_parsing=True)
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or param.param_type_name == "argument":
            continue
        flags = record[0]
        # the option's flags and metavar whole on one line (an entry of the panel's list: two spaces in), in one of
        # the panels; -h joins --help from the parent's settings, which a context made here does not have
        where = [p for p in panels if any(ln.startswith("  " + flags) or ln.startswith("  -h, " + flags)
                                          for ln in secs[p])]
        assert len(where) == 1, (name, flags, where)
