"""The rule registry: one rule per defect class, each with a stable id and documentation in a fixed shape
(what it checks, what the engine does with the defect and the source of that fact, fix safety).
`kconvert rules` prints this registry; `kconvert rules ID` one entry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from kconvert.engines.expectations import EngineRules
from kconvert.errors import KConvertError
from kconvert.formats.model import DraftModel
from kconvert.writer.ops import Op
from kconvert.target import TargetModel

CATEGORIES = ("integrity", "security", "architecture", "tensor-names", "shapes", "aux-layers", "vocab-mapping",
              "norms", "embeddings", "lm-head", "attention", "rope", "positions", "dtype", "config-hygiene")
SEVERITIES = ("error", "warning", "info")


@dataclass
class Evidence:
    where: str  # config key or tensor name
    observed: Any = None
    expected: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "observed": _jsonable(self.observed), "expected": _jsonable(self.expected)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


@dataclass
class Finding:
    id: str
    category: str
    severity: str
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    # A decision the files cannot settle: the flag that settles it (fix stops until it is given).
    needs_decision: str | None = None
    fixable_override: bool | None = None

    @property
    def fixable(self) -> bool:
        if self.fixable_override is not None:
            return self.fixable_override
        return bool(self.ops) or self.needs_decision is not None

    def to_dict(self) -> dict[str, Any]:
        from kconvert.writer.ops import op_to_dict

        rule = REGISTRY.get(self.id)
        return {
            "id": self.id,
            "name": rule.name if rule else self.id,
            "category": self.category,
            "severity": self.severity,
            "message": self.message,
            "evidence": [e.to_dict() for e in self.evidence],
            "fixable": self.fixable,
            "needs_decision": self.needs_decision,
            "fix_ops": [op_to_dict(o) for o in self.ops],
        }


@dataclass
class Options:
    """User decisions that the files cannot settle (fix flags; also honoured by inspect)."""

    aux_ids: list[int] | None = None  # physical ids wanted, in vLLM's input-of-layer convention
    aux_ids_default: bool = False  # accept the engine's default layers
    aux_convention: str | None = None  # convention the written ids follow: input|output
    d2t_kind: str | None = None  # offsets|absolute
    lm_head_source: str | None = None
    cast_dtype: str | None = None  # BF16|F16|F32
    rope_from_target: bool = False  # copy the target's rope scaling into a draft that has none
    tp: int | None = None  # tensor-parallel size the target will run at (K304 checks the split)
    draft_tp: int | None = None  # draft_tensor_parallel_size (None: the target's TP)


@dataclass
class Context:
    draft: DraftModel
    target: TargetModel | None
    engine: EngineRules
    options: Options = field(default_factory=Options)
    _cache: dict[str, Any] = field(default_factory=dict)
    # tensor name -> why its values could not be read (the checks on them were skipped; K005 says so)
    unreadable: dict[str, str] = field(default_factory=dict)

    def key_path(self, key: str) -> tuple[str, ...]:
        """Where a layer-config key lives: nested under transformer_layer_config in the speculators format."""
        if self.draft.is_speculators and key not in SPECULATORS_TOP_LEVEL:
            return ("transformer_layer_config", key)
        return (key,)

    def array(self, canonical: str) -> np.ndarray | None:
        """A small tensor's values (d2t, t2d, norms), or None when it is absent or not readable here."""
        if canonical in self._cache:
            return self._cache[canonical]
        info = self.draft.tensors.get(canonical)
        val = None
        if info is not None:
            try:
                val = self.draft.checkpoint.read_array(info.name)
            except KConvertError as e:
                self.unreadable.setdefault(info.name, e.message)
                val = None
        self._cache[canonical] = val
        return val


# Keys the speculators format keeps at top level; the rest of the layer config is nested.
SPECULATORS_TOP_LEVEL = frozenset({
    "architectures", "speculators_model_type", "speculators_config", "speculators_version", "draft_vocab_size",
    "target_hidden_size", "norm_before_residual", "eagle_aux_hidden_state_layer_ids", "auto_map",
    "trust_remote_code", "torch_dtype", "dtype", "norm_before_fc", "fc_norm", "norm_output",
})

RuleFn = Callable[[Context], Iterator[Finding]]


@dataclass
class Rule:
    id: str
    name: str
    category: str
    severity: str  # the usual severity; a finding may say otherwise
    summary: str
    why: str  # what the engine does with the defect, with its source
    fix: str  # what fix does, and whether it is always safe
    needs_target: bool
    fn: RuleFn

    def finding(self, message: str, *, severity: str | None = None, evidence: list[Evidence] | None = None,
                ops: list[Op] | None = None, needs_decision: str | None = None,
                fixable: bool | None = None) -> Finding:
        return Finding(self.id, self.category, severity or self.severity, message, list(evidence or []),
                       list(ops or []), needs_decision, fixable)

    def doc(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "category": self.category, "severity": self.severity,
                "summary": self.summary, "why": self.why, "fix": self.fix, "needs_target": self.needs_target}


REGISTRY: dict[str, Rule] = {}


def rule(id: str, name: str, category: str, severity: str, *, summary: str, why: str, fix: str,
         needs_target: bool = False) -> Callable[[RuleFn], Rule]:
    assert category in CATEGORIES, category
    assert severity in SEVERITIES, severity

    def deco(fn: RuleFn) -> Rule:
        if id in REGISTRY:
            raise RuntimeError(f"duplicate rule id {id}")
        r = Rule(id, name, category, severity, summary.strip(), why.strip(), fix.strip(), needs_target, fn)
        REGISTRY[id] = r
        return r

    return deco


def run_rules(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    skipped: list[str] = []
    for r in sorted(REGISTRY.values(), key=lambda r: r.id):
        if r.needs_target and ctx.target is None:
            skipped.append(r.id)
            continue
        try:
            out.extend(r.fn(ctx))
        except Exception as e:  # noqa: BLE001
            # A stranger's checkpoint can hold shapes no rule anticipated (rank-0 projections, empty d2t). A
            # check that cannot run is a failed check, reported as such, never a crash of the whole gate.
            out.append(Finding(r.id, r.category, "error",
                               f"{r.name}: the check could not run on this checkpoint ({type(e).__name__}: {e})",
                               [Evidence("checkpoint", "malformed for this check", None)]))
    if ctx.unreadable:
        names = sorted(ctx.unreadable)
        out.append(Finding("K005", "integrity", "warning",
                           f"the values of {', '.join(names[:5])} could not be read, so the checks on them were "
                           f"skipped: {ctx.unreadable[names[0]]}",
                           [Evidence(n, "unreadable", "readable") for n in names[:10]]))
    if skipped:
        out.append(Finding("K000", "config-hygiene", "info",
                           f"no --target given: {len(skipped)} checks that compare with the target were skipped "
                           f"({', '.join(skipped)})", [Evidence("--target", None, "a profile, folder or Hub id")]))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda f: (order[f.severity], f.id))
    return out
