"""The fix plan: ordered ops gathered from the rules' findings, the steps the format and the decisions add
(`plan_fix`), what is left unresolved, and the record of which streams the written aux ids name."""
from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from kconvert.engines.expectations import EngineRules
from kconvert.errors import InputError
from kconvert.formats.aux import get_path
from kconvert.formats.model import DraftModel
from kconvert.plan.conversion import conversion_ops
from kconvert.rules.aux_layers import trained_physical_ids
from kconvert.rules.base import Context, Finding
from kconvert.rules.decisions import Decisions
from kconvert.targets import TargetModel
from kconvert.writer.config import apply_config
from kconvert.writer.ops import DeleteConfig, Op, RenameTensor, ReselectLmHead, SetConfig, describe

# A finding that needs a decision nobody gave is left exactly as it is (a setting left alone is no guess), unless
# it is an error: then its repair is what the decision settles, and fix refuses until a flag gives it.


@dataclass
class Plan:
    ops: list[Op] = field(default_factory=list)
    applied_findings: list[Finding] = field(default_factory=list)
    blocking: list[Finding] = field(default_factory=list)  # error-level, the repair needs a decision (flag)
    left_as_is: list[Finding] = field(default_factory=list)  # need a decision no flag gave: settings untouched
    unfixable: list[Finding] = field(default_factory=list)  # error-level, no op can repair
    left: list[Finding] = field(default_factory=list)  # warnings/info not acted upon
    config_before: dict[str, Any] = field(default_factory=dict)
    config_after: dict[str, Any] = field(default_factory=dict)
    # Which residual streams the aux ids written for the engine name (kconvert.json "aux_ids"), when known.
    aux_record: dict[str, Any] | None = None

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
    return apply_config(config, [o for o in ops if isinstance(o, (SetConfig, DeleteConfig))])


def build_fix_plan(findings: list[Finding], draft: DraftModel, target: TargetModel | None, engine: EngineRules,
             decisions: Decisions, *, only: set[str] | None = None, to_format: str | None = None) -> Plan:
    """The whole fix: the findings' ops (those `only` selects), then the format conversion and the engine's
    layout, then what the decisions add (an lm_head re-selected from a full-vocabulary draft), in the order the
    writer applies them; with the record of which streams the written aux ids name."""
    config = draft.checkpoint.config
    plan = build_plan(findings, config, only=only)
    converted = conversion_ops(draft, engine, target, plan.config_after, plan.ops, to_format)
    if converted:
        plan.ops = plan.ops + converted
        plan.config_after = apply_config_ops(config, plan.ops)
    if decisions.lm_head_source:
        plan.ops = order_ops(plan.ops + [ReselectLmHead(
            draft.raw_names.get("lm_head.weight", "lm_head.weight"), decisions.lm_head_source, "lm_head.weight",
            draft.raw_names.get("d2t", "d2t"), "re-select rows full[d2t + arange] from the full-vocabulary head")])
    plan.aux_record = aux_record(plan.config_after, draft, target, engine, decisions)
    return plan


def aux_record(config: dict[str, Any], draft: DraftModel, target: TargetModel | None, engine: EngineRules,
               decisions: Decisions) -> dict[str, Any] | None:
    """The streams the draft was trained on next to the ids written where the engine reads them: what a later
    inspect of the output takes as settled (formats: kconvert.json)."""
    physical = trained_physical_ids(Context(draft, target, engine, decisions))
    if physical is None:
        return None
    for path in engine.read_paths_for(config):
        written = get_path(config, path)
        if isinstance(written, list):
            return {"written": written, "physical": physical, "engine": engine.engine,
                    "engine_rules_version": engine.version, "read_from": ".".join(path)}
    return None


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
        elif f.needs_decision and f.severity == "error":
            plan.blocking.append(f)
        elif f.needs_decision:
            plan.left_as_is.append(f)
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
    news = [o.new for o in ops if isinstance(o, RenameTensor)]
    if len(news) != len(set(news)):
        raise InputError("the fix plan would give two tensors the same name; the checkpoint mixes layouts")
