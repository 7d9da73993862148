"""The fix plan: ordered ops gathered from the rules' findings, plus what is left unresolved."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from kconvert.rules.base import Finding
from kconvert.writer.ops import DeleteConfig, Op, RenameTensor, SetConfig, describe

# Findings whose decision changes what the draft means: fix stops until a flag settles them.
BLOCKING_CATEGORIES = ("aux-layers", "vocab-mapping")


@dataclass
class Plan:
    ops: list[Op] = field(default_factory=list)
    applied_findings: list[Finding] = field(default_factory=list)
    blocking: list[Finding] = field(default_factory=list)  # need a decision (flag)
    unfixable: list[Finding] = field(default_factory=list)  # error-level, no op can repair
    left: list[Finding] = field(default_factory=list)  # warnings/info not acted upon
    config_before: dict[str, Any] = field(default_factory=dict)
    config_after: dict[str, Any] = field(default_factory=dict)

    @property
    def config_ops(self) -> list[Op]:
        return [o for o in self.ops if isinstance(o, (SetConfig, DeleteConfig))]

    @property
    def tensor_ops(self) -> list[Op]:
        return [o for o in self.ops if not isinstance(o, (SetConfig, DeleteConfig))]

    def config_diff(self) -> str:
        a = json.dumps(self.config_before, indent=2).splitlines(keepends=True)
        b = json.dumps(self.config_after, indent=2).splitlines(keepends=True)
        return "".join(difflib.unified_diff(a, b, "config.json (input)", "config.json (output)"))

    def describe(self) -> list[str]:
        return [describe(o) for o in self.ops]


def apply_config_ops(config: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    from kconvert.writer.config import apply_config

    return apply_config(config, [o for o in ops if isinstance(o, (SetConfig, DeleteConfig))])


def diff_ops(old: dict[str, Any], new: dict[str, Any], reason: str) -> list[Op]:
    """Top-level SetConfig/DeleteConfig ops turning `old` into `new` (for whole-config conversions)."""
    ops: list[Op] = [DeleteConfig((k,), reason) for k in old if k not in new]
    ops += [SetConfig((k,), v, reason) for k, v in new.items() if old.get(k, object()) != v]
    return ops


def _dedupe(ops: list[Op]) -> list[Op]:
    seen: set[str] = set()
    out: list[Op] = []
    for o in ops:
        key = json.dumps(o.__dict__, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append(o)
    return out


def build_plan(findings: list[Finding], config: dict[str, Any], *, only: set[str] | None = None) -> Plan:
    plan = Plan(config_before=config)
    ops: list[Op] = []
    for f in findings:
        if only and f.id not in only:
            if f.severity == "error":
                plan.left.append(f)
            continue
        if f.ops:
            ops.extend(f.ops)
            plan.applied_findings.append(f)
        elif f.needs_decision and (f.category in BLOCKING_CATEGORIES or f.severity == "error"):
            plan.blocking.append(f)
        elif f.severity == "error":
            plan.unfixable.append(f)
        elif f.severity == "warning":
            plan.left.append(f)
    plan.ops = order_ops(_dedupe(ops))
    plan.config_after = apply_config_ops(config, plan.ops)
    _check_rename_collisions(plan.ops)
    return plan


# Fields of tensor ops that name an existing tensor of the input.
_TENSOR_NAME_FIELDS = ("name", "d2t_name")


def order_ops(ops: list[Op]) -> list[Op]:
    """Config ops first, then renames, then rewrites, casts and drops. Rules name tensors by their input names;
    the writer applies ops in order, so a rewrite of a tensor that a rename moved (K201 strips `model.` from
    `model.d2t`, K502 rewrites `model.d2t`) is pointed at the renamed tensor here."""
    import dataclasses

    order = {"set-config": 0, "delete-config": 0, "rename-tensor": 1}
    ops = sorted(ops, key=lambda o: order.get(o.kind, 2))
    renames = {o.old: o.new for o in ops if isinstance(o, RenameTensor)}

    def final(name: str) -> str:  # renames apply in order: a -> b then b -> c leaves c
        for _ in range(len(renames) + 1):
            if name not in renames:
                break
            name = renames[name]
        return name

    out: list[Op] = []
    for o in ops:
        if order.get(o.kind, 2) == 2 and dataclasses.is_dataclass(o):
            changes = {f: final(v) for f in _TENSOR_NAME_FIELDS
                       if isinstance(v := getattr(o, f, None), str) and v in renames}
            if changes:
                o = dataclasses.replace(o, **changes)
        out.append(o)
    return out


def _check_rename_collisions(ops: list[Op]) -> None:
    from kconvert.errors import InputError

    news = [o.new for o in ops if isinstance(o, RenameTensor)]
    if len(news) != len(set(news)):
        raise InputError("the fix plan would give two tensors the same name; the checkpoint mixes layouts")
