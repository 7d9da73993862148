"""Command-line values converted without pydantic where the conversion is plain (issue #32, start-up).

typer 0.29 converts every parameter value it is given (a typed string, or a default such as `-k`'s 3) through a
pydantic `TypeAdapter`, built on first use: the first command that receives a value imports pydantic and builds
adapters, ~70-100 ms of a `kconvert inspect` that itself takes ~50 ms. kconvert's parameters are str, int, float,
bool, the `OutputFormat` choice and lists of str, whose conversions are plain Python. `install()` puts a converter
in front of typer's: it returns what typer's adapter returns for the values it is sure of (an ASCII integer, a
decimal number, any str, a member or name of the choice, within the parameter's min and max) and hands anything
else to typer's own adapter, so every refusal keeps typer's exact message. tests/test_cli_coercion.py checks the
two agree, value by value.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, get_args, get_origin

from typer import _coercion, core
from typer._click.exceptions import BadParameter  # typer 0.29 bundles click: its exception, as its adapter raises
from typer._param_types import coerce_cli_choice

_NOT_PLAIN = object()  # the value is not one this module converts: typer's adapter does
_INT = re.compile(r"[+-]?[0-9]{1,18}", re.ASCII)
_FLOAT = re.compile(r"[+-]?[0-9]{1,15}(\.[0-9]{0,15})?", re.ASCII)
_typer_build = _coercion.build_runtime_param


def _leaf(annotation: Any, info: Any, value: Any, ctx: Any) -> Any:
    if annotation is str:
        return value if type(value) is str else _NOT_PLAIN
    if annotation is bool:
        return value if type(value) is bool else _NOT_PLAIN
    if annotation is int:
        if type(value) is int:
            number = value
        elif type(value) is str and _INT.fullmatch(value):
            number = int(value)
        else:
            return _NOT_PLAIN
    elif annotation is float:
        if type(value) is float:
            number = value
        elif type(value) is str and _FLOAT.fullmatch(value):
            number = float(value)
        else:
            return _NOT_PLAIN
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        try:
            return coerce_cli_choice(value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
        except ValueError:
            return _NOT_PLAIN
    else:
        return _NOT_PLAIN
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return _NOT_PLAIN  # typer's adapter words the refusal
    return number


def _plain(annotation: Any, info: Any, value: Any, ctx: Any) -> Any:
    if get_origin(annotation) is list:
        (item_type,) = get_args(annotation)
        if not isinstance(value, (list, tuple)):
            return _NOT_PLAIN
        items = [_leaf(item_type, info, item, ctx) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    return _leaf(annotation, info, value, ctx)


@dataclass(frozen=True)
class PlainRuntimeParam(_coercion.RuntimeParam):
    """typer's runtime parameter for a plain annotation: converts here, else through typer's adapter."""

    descriptor: Any = None
    _typer: list = field(default_factory=list)  # typer's own runtime parameter, built on first need

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        done = _plain(self.annotation, self.parameter_info, value, ctx)
        if done is _NOT_PLAIN:
            if not self._typer:
                self._typer.append(_typer_build(self.descriptor))
            done = self._typer[0]._coerce_value(value, param=param, ctx=ctx)
        _refuse_non_finite(done, param, ctx)
        return done


def _refuse_non_finite(value: Any, param: Any, ctx: Any) -> None:
    """No option of kconvert takes NaN or an infinity (a count, seconds, a rate, a length: issue #45), though
    typer's adapter reads `nan` and `inf` as floats and an infinity passes a `min` alone: refused here, for every
    float option at once, as typer words a refused value."""
    for v in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(v, float) and not math.isfinite(v):
            raise BadParameter(f"{v} is not a finite number", ctx=ctx, param=param)


def _handles(descriptor: Any) -> bool:
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None or info.clamp:
        return False
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    return annotation in (str, bool, int, float) or (isinstance(annotation, type) and issubclass(annotation, Enum))


def build_runtime_param(descriptor: Any) -> Any:
    if not _handles(descriptor):
        return _typer_build(descriptor)
    return PlainRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                             descriptor=descriptor)


def install() -> None:
    """typer's parameters look `build_runtime_param` up in `typer.core` when they first convert a value."""
    core.build_runtime_param = build_runtime_param
