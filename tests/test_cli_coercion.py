"""kconvert's plain value conversion (kconvert/cli/_coercion.py) gives what typer's own pydantic adapters give, for
every parameter of every command and for values it converts itself as well as values it hands on."""
from __future__ import annotations

import math

import pytest
from typer._click import Context
from typer._click.exceptions import BadParameter

import kconvert.cli
from kconvert.cli import _coercion
from kconvert.cli._common import OutputFormat

VALUES = ["3", "007", "-2", "+4", "0", "1_000", " 5", "1.5", ".5", "3.", "1e3", "inf", "nan", "-0", "١٢", "x",
          "", "a\udcff", "json", "JSON", "Sarif", "full ", "9" * 30, 3, 0, -1, 3.0, 2.5, True, OutputFormat.json,
          ["a", "b"], ("a", "3"), (), ("x", 1)]


def _params():
    kconvert.cli._register()
    root = kconvert.cli._click_command([])
    for name, cmd in sorted(root.commands.items()):
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                yield pytest.param(cmd, p, id=f"{name}:{p.name}")


def _outcome(runtime, value, param, ctx):
    try:
        out = runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as e:
        return ("refused", e.format_message())
    if isinstance(out, float) and math.isnan(out):
        return ("nan", type(out))
    return (out, type(out), [type(x) for x in out] if isinstance(out, (list, tuple)) else None)


@pytest.mark.parametrize(("cmd", "param"), list(_params()))
def test_every_parameter_converts_as_typers_adapter_does(cmd, param):
    ctx = Context(cmd)
    ours = _coercion.build_runtime_param(param.type_descriptor)
    typers = _coercion._typer_build(param.type_descriptor)
    for value in [*VALUES, param.default]:
        if param.multiple or param.nargs == -1:
            value = value if isinstance(value, (list, tuple)) or value is None else (value,)
        assert _outcome(ours, value, param, ctx) == _outcome(typers, value, param, ctx), value


def test_the_plain_path_covers_kconverts_parameters():
    """Every kconvert parameter takes the plain path (a new type would silently bring pydantic back)."""
    kconvert.cli._register()
    root = kconvert.cli._click_command([])
    others = {f"{name}:{p.name}" for name, cmd in root.commands.items() for p in cmd.params
              if hasattr(p, "type_descriptor")
              and not isinstance(_coercion.build_runtime_param(p.type_descriptor), _coercion.PlainRuntimeParam)}
    assert not others


def test_the_cli_runs_the_plain_converter():
    import typer.core
    assert typer.core.build_runtime_param is _coercion.build_runtime_param
