"""The CLI's command tree as the tests enumerate it: every leaf command, group commands' subcommands included
(`engines list`, `engines learn`, `engines diff`), with its path of names and its click command."""
from __future__ import annotations

from typing import Any, Iterator


def leaves(cmd: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[list[str], Any]]:
    """(names, command) for every leaf below `cmd` (default: the whole `kconvert` tree), in name order."""
    if cmd is None:
        from kconvert.cli import _built, _register

        _register()
        cmd = _built(None)
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in sorted(subs.items()):
            yield from leaves(sub, (*path, name))
    else:
        yield list(path), cmd
