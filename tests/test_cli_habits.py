"""ruff's habits (issue 18, item 7): -h, shell completion, "did you mean", help at 80 columns with every option
name whole. The oracle for the option names is click's own command objects (typer.main.get_command), not the
help text under test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80", **(env or {}))
    e.pop("KCONVERT_OUTPUT_FORMAT", None)
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=e,
                          cwd=cwd or ROOT, timeout=120)


def commands() -> dict:
    import typer

    from kconvert.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    return dict(group.commands)


COMMANDS = sorted(commands())


@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_fits_80_columns_with_every_option_name_whole(name):
    cmd = commands()[name]
    r = cli(name, "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    words = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
    for param in cmd.params:
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("-"):
                assert opt in words, f"{name} --help at 80 columns does not show {opt} whole"
    assert "…" not in r.stdout


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_dash_h_is_help_on_every_command(name):
    args = [name] if name else []
    short, long = cli(*args, "-h"), cli(*args, "--help")
    assert short.returncode == long.returncode == 0
    assert short.stdout == long.stdout and "Usage: kconvert" in short.stdout


def test_shell_completion_script_and_completions():
    r = cli("--show-completion", "bash")
    assert r.returncode == 0 and "_KCONVERT_COMPLETE" in r.stdout
    r = cli(env={"_KCONVERT_COMPLETE": "complete_bash", "COMP_WORDS": "kconvert ins", "COMP_CWORD": "1"})
    assert r.stdout.split() == ["inspect"]
    r = cli(env={"_KCONVERT_COMPLETE": "complete_bash", "COMP_WORDS": "kconvert inspect --fail", "COMP_CWORD": "2"})
    assert "--fail-on" in r.stdout.split()


@pytest.mark.parametrize("args,suggestion", [
    (["--target", "kimi-k25"], "kimi-k2.5"),
    (["--target", "qwen3-8B"], "qwen3-8b"),
    (["--engine", "vlm"], "vllm"),
    (["--engine", "sglang", "--engine-version", "post-2545"], "post-25454"),
    (["--engine-version", "0.3.3"], "0.33"),
])
def test_a_misspelt_profile_or_engine_row_gets_did_you_mean(tmp_path, args, suggestion):
    from tests.factories import make_draft

    draft = make_draft(tmp_path / "d", "torchspec")
    r = cli("inspect", str(draft), *args)
    assert r.returncode == 2
    assert f"did you mean {suggestion!r}?" in r.stderr, r.stderr
