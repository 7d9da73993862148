"""The layers of pyproject's [tool.importlinter] hold (lint-imports), and every part of kconvert sits in one."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kconvert"


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_lint_imports_keeps_every_contract():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # lint-imports sits beside the interpreter that runs the tests (the test tier installs it)
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in proc.stdout


def test_every_part_of_kconvert_sits_in_a_layer():
    import importlib.util

    named: set[str] = set()
    for contract in _contracts():
        for layer in contract.get("layers", []):
            named |= {m.strip("() ") for m in re.split(r"[|:]", layer)}
    missing = sorted(m for m in named if importlib.util.find_spec(m) is None)
    assert missing == [], "a contract names a module that no longer exists"
    named = {m for m in named if m.count(".") == 1}  # the top-level parts (the others are inside them)
    parts = {f"kconvert.{p.stem if p.suffix == '.py' else p.name}" for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem not in ("__init__", "__main__")) or (p / "__init__.py").is_file()}
    assert parts - named == set(), "a part of kconvert outside every layer escapes the contracts"
    assert named - parts == set(), "a contract names a part that no longer exists"


def test_every_command_body_is_thin():
    # issue #32: a command parses its options, calls one library function and renders what it returns, as
    # huggingface_hub's cli/ does; its body (docstring and option declarations aside) stays under ~40 lines.
    import ast

    bodies = {}
    for path in sorted((PACKAGE / "cli").glob("*_cmd.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "command" for d in node.decorator_list):
                body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(
                    node.body[0].value, ast.Constant) else node.body
                bodies[f"{path.name}:{node.name}"] = node.end_lineno - body[0].lineno + 1
    assert len(bodies) >= 10, bodies  # every command module was read (inspect, fix, verify, score, trace, ...)
    assert {k: n for k, n in bodies.items() if n > 40} == {}
