"""The promise of docs/design.md about the library: every command is a function returning a typed result whose
`.to_dict()` is what the command's `--json` prints. The functions are read from that paragraph of docs/design.md (so a
command added there is checked too), their result types from their own return annotations."""
from __future__ import annotations

import importlib
import re
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _documented_functions() -> list[str]:
    text = (ROOT / "docs" / "design.md").read_text()
    para = text[text.index("Every command is a library function"):]
    para = para[:para.index(".to_dict()")]
    return re.findall(r"`(kconvert(?:\.\w+)+)\(\.\.\.\)`", para)


def test_design_md_names_the_commands_functions():
    names = _documented_functions()
    assert {"kconvert.inspect", "kconvert.fix", "kconvert.verify", "kconvert.push"} <= set(names), names


@pytest.mark.parametrize("name", _documented_functions())
def test_each_documented_function_returns_a_result_with_to_dict(name):
    module, _, attr = name.rpartition(".")
    fn = getattr(importlib.import_module(module), attr)
    result = typing.get_type_hints(fn)["return"]
    assert callable(getattr(result, "to_dict", None)), f"{name} returns {result.__name__}, which has no to_dict()"
