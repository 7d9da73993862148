"""Read a vLLM release's own Python files statically (`ast`, nothing imported): the fields of its config dataclasses,
`LLM.__init__`'s parameters, its Literal value sets, and where each EngineArgs default comes from. Used by
tests/test_arg_policy.py and tests/test_method_detection.py on every release of tests/vllm_oracle/releases.py."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Any

from tests.vllm_oracle.releases import package_root


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _class(path: Path, name: str) -> ast.ClassDef:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"{path}: no class {name}")


def dataclass_fields(version: str, relpath: str, cls: str) -> dict[str, ast.expr | None]:
    """The annotated fields of `cls` (a dataclass or pydantic config) in `relpath`, with their default
    expressions; ClassVar entries are left out (not fields)."""
    out: dict[str, ast.expr | None] = {}
    for st in _class(package_root(version) / relpath, cls).body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            if ast.unparse(st.annotation).startswith("ClassVar"):
                continue
            out[st.target.id] = st.value
    return out


def init_params(version: str, relpath: str, cls: str) -> list[str]:
    for st in _class(package_root(version) / relpath, cls).body:
        if isinstance(st, ast.FunctionDef) and st.name == "__init__":
            return [a.arg for a in st.args.args[1:] + st.args.kwonlyargs]
    raise LookupError(f"{cls}.__init__")


def literal_values(version: str, relpath: str, name: str) -> tuple[Any, ...]:
    """The values of a module-level `Name = Literal[...]`."""
    for node in _tree(package_root(version) / relpath).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            sub = node.value
            assert isinstance(sub, ast.Subscript) and ast.unparse(sub.value) == "Literal", ast.unparse(sub)
            elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
            return tuple(ast.literal_eval(e) for e in elts)
    raise LookupError(name)


def literal_default(expr: ast.expr | None) -> Any:
    """A field default that is a literal (`"greedy"`, `Field(default="x", ...)`), else LookupError."""
    if isinstance(expr, ast.Call) and ast.unparse(expr.func) in ("Field", "field"):
        for kw in expr.keywords:
            if kw.arg == "default":
                return ast.literal_eval(kw.value)
        raise LookupError(ast.unparse(expr))
    if expr is None:
        raise LookupError("no default")
    return ast.literal_eval(expr)


@lru_cache(maxsize=None)
def vllm_config_attrs(version: str) -> dict[str, str]:
    """Config class name -> its VllmConfig attribute (config/vllm.py), e.g. ModelConfig -> model_config."""
    out = {"VllmConfig": ""}
    for st in _class(package_root(version) / "config/vllm.py", "VllmConfig").body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            ann = ast.unparse(st.annotation).split("|")[0].strip()
            out.setdefault(ann, st.target.id)
    return out


def engine_args_source(version: str, key: str) -> str | None:
    """Where EngineArgs takes `key`'s default from, as a VllmConfig path (`model_config.dtype` for
    `dtype: ModelDType = ModelConfig.dtype`; `attention_config` for get_field(VllmConfig, "attention_config")),
    or None when the default is not another config's field."""
    expr = dataclass_fields(version, "engine/arg_utils.py", "EngineArgs").get(key)
    cls = attr = None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        cls, attr = expr.value.id, expr.attr
    elif isinstance(expr, ast.Call) and ast.unparse(expr.func) == "get_field" and len(expr.args) == 2:
        cls, attr = ast.unparse(expr.args[0]), ast.literal_eval(expr.args[1])
    if cls is None or not cls.endswith("Config"):
        return None
    head = vllm_config_attrs(version).get(cls)
    if head is None:
        return None
    return f"{head}.{attr}" if head else attr
