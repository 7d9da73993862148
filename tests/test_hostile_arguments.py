"""Every command, every option that takes a value, and every positional, given a hostile string (issue #45 classes 4
and 6): the exit is one kconvert names (0, 1, 2 or 3, never 70) and no control character reaches stdout or stderr raw.

Enumerated from the CLI's own command tree (group commands' subcommands included) and each command's parameters,
so that a command or option added later is covered without editing this test. Seen failing before its fix:
`verify --server` with a control character in the URL exited 70 (httpx's `InvalidURL`), now `kconvert.guard.urls`.

The value is used as given: a path option gets it as a relative path (the test runs in a temporary folder, so a
command that may create a new path, e.g. matrix's --cache, creates it there), a Hub option as an id, a URL option as
a URL. Other required positionals get a path that does not exist. The Hub is offline (HF_HUB_OFFLINE=1): nothing
here reaches the network.
"""
from __future__ import annotations

import contextlib
import io
import signal

import pytest

from kconvert.cli import _built, _output, _register, main
from tests.cli_tree import leaves

# ESC + OSC 0 (retitles a terminal) + BEL, a C1 CSI, a Unicode line separator
HOSTILE = "ev\x1b]0;pwn\x07il\x9bx\u2028y"
EXITS = {0, 1, 2, 3}


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029"]


def _cases():
    _register()
    out = []
    for path, cmd in leaves(_built(None)):
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        filler = ["/nonexistent/kconvert-test" for a in args if a.required]
        if args:
            out.append(pytest.param([*path, HOSTILE, *filler[1:]], id=f"{' '.join(path)} {args[0].name.upper()}"))
        for p in cmd.params:
            if p.param_type_name != "option" or getattr(p, "is_flag", False) or getattr(p, "count", False):
                continue
            flag = next((o for o in p.opts if o.startswith("--")), p.opts[0])
            out.append(pytest.param([*path, *filler, flag, HOSTILE], id=f"{' '.join(path)} {flag}"))
    return out


CASES = _cases()


def test_the_enumeration_reaches_every_command_and_many_options():
    commands = {c.id.split(" -")[0] for c in CASES}
    assert {"inspect", "fix", "verify", "score", "push", "matrix", "trace"} <= {c.split()[0] for c in commands}
    assert len(CASES) >= 100, len(CASES)


def _timeout(*_):
    raise TimeoutError("the command did not end within 20 s")


@pytest.mark.parametrize("argv", CASES)
def test_a_hostile_value_anywhere_exits_as_named_and_is_echoed_escaped(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(20)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _output.console.file, _output.err_console.file = out, err
            try:
                rc = main(argv)
            except SystemExit as e:  # pragma: no cover - main returns its exit code
                rc = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        _output.console.file = _output.err_console.file = None
    text = out.getvalue() + err.getvalue()
    assert rc in EXITS, f"exit {rc}: {err.getvalue()[-600:]}"
    assert not _raw_controls(text), f"raw controls {sorted(set(_raw_controls(text)))!r} in:\n{text[-600:]}"
