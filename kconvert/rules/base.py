"""The rule registry: one rule per defect class, each with a stable id, a typed fix availability and
documentation in a fixed shape (what it checks, what the engine does with the defect and the source of that fact,
what fix does and whether it is safe). `kconvert rules` prints this registry; `kconvert rules ID` one entry. Rule
ids are spelled here only: code elsewhere names a rule by its object (`vocab.d2t_rule.id`)."""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import numpy as np

from kconvert.engines.expectations import EngineRules
from kconvert.errors import KConvertError
from kconvert.formats.model import DraftModel
from kconvert.rules.decisions import Decisions
from kconvert.rules.codes import CODES, REMOVED, STABLE
from kconvert.targets import TargetModel
from kconvert.writer.ops import Op, op_to_dict

CATEGORIES = ("integrity", "security", "architecture", "tensor-names", "shapes", "aux-layers", "vocab-mapping",
              "norms", "embeddings", "lm-head", "attention", "rope", "positions", "dtype", "config-hygiene")
SEVERITIES = ("error", "warning", "info")


class FixAvailability(str, Enum):
    """Whether `kconvert fix` can repair a rule's findings (as ruff's `ruff rule X` says of its rules)."""

    ALWAYS = "always"  # every finding carries the ops that repair it
    SOMETIMES = "sometimes"  # some findings carry ops; the others no file edit can repair (the rule's fix text says which)
    NEEDS_DECISION = "needs-decision"  # some findings wait for a flag that settles what the files cannot (they name it)
    NEVER = "never"  # no finding carries ops or waits for a flag: nothing for fix to do

    def allows(self, finding: Finding) -> bool:
        """A finding as a rule of this availability may emit it."""
        if self is FixAvailability.NEVER:
            return not finding.ops and finding.needs_decision is None and not finding.fixable
        if self is FixAvailability.ALWAYS:
            return finding.fixable and finding.needs_decision is None
        if self is FixAvailability.SOMETIMES:
            return finding.needs_decision is None
        return True


@dataclass
class Evidence:
    where: str  # config key or tensor name
    observed: Any = None
    expected: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "observed": _jsonable(self.observed), "expected": _jsonable(self.expected)}


def options_and_sources(text: str) -> tuple[str, str | None]:
    """An engine row's advice as (the options a user types, the sources it cites, or None): the rows write each
    source in parentheses after what it backs ('--speculative-algorithm DFLASH ... (srt/models/dflash.py)'). A
    finding's message keeps the options, whole in one concise line; its evidence keeps the sources (issue #48)."""
    out, groups, depth, start = [], [], 0, 0
    for i, c in enumerate(text):
        if c == "(" and depth == 0 and i and text[i - 1] == " ":
            out.append(text[start:i - 1])
            start = i + 1
            depth = 1
        elif depth:
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0:
                groups.append(text[start:i])
                start = i + 1
    if depth:  # an unclosed parenthesis: no citation to split off
        return text, None
    out.append(text[start:])
    return "".join(out).strip(), "; ".join(groups) or None


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return list(v)
    # numpy is imported only once a rule decodes a tensor (~40 ms saved on `--help`); before that no value is
    # numpy's, so its absence from sys.modules settles the check
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.integer):
        return int(v)
    if np is not None and isinstance(v, np.floating):
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
class Context:
    draft: DraftModel
    target: TargetModel | None
    engine: EngineRules
    decisions: Decisions = field(default_factory=Decisions)
    _cache: dict[str, Any] = field(default_factory=dict)
    # tensor name -> why its values could not be read (the checks on them were skipped; K005 says so)
    unreadable: dict[str, str] = field(default_factory=dict)
    # `--oracle`: what the engine's own code answered about this draft and target (kconvert/runners/engine_oracle.py
    # ask_about_draft); K107 holds the row's verdict against it. None: not asked.
    oracle: dict[str, Any] | None = None

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
    fix_availability: FixAvailability
    needs_target: bool
    fn: RuleFn
    # Runs once every other rule has run: it reports on what they did (K005: the values they could not read).
    runs_last: bool = False
    # Runs on a checkpoint of another method too (integrity, security, and the rule that names the method): every
    # other rule judges an EAGLE-3 draft, and on a DFlash or MTP checkpoint would only say "broken EAGLE-3".
    any_method: bool = False
    group: str = STABLE  # its lifecycle (kconvert/rules/codes.py): stable, preview or deprecated

    def finding(self, message: str, *, severity: str | None = None, evidence: list[Evidence] | None = None,
                ops: list[Op] | None = None, needs_decision: str | None = None,
                fixable: bool | None = None) -> Finding:
        f = Finding(self.id, self.category, severity or self.severity, message, list(evidence or []),
                    list(ops or []), needs_decision, fixable)
        if not self.fix_availability.allows(f):
            # The registry would tell `kconvert rules` readers something this finding contradicts: a kconvert bug,
            # reported by run_rules as a check that could not run.
            raise RuntimeError(f"{self.id} declares fix availability {self.fix_availability.value!r} but emits a "
                               f"finding that is{'' if f.fixable else ' not'} fixable"
                               + (f" and waits for {f.needs_decision}" if f.needs_decision else ""))
        return f

    def severities(self) -> tuple[str, ...]:
        """Every severity this rule's findings can have, read from its code (`rule_severities`): the decorator's
        severity is only the usual one (K405 was listed as a warning and fired as an error)."""
        return rule_severities(self)

    def doc(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "category": self.category, "severity": self.severity,
                "severities": list(self.severities()),
                "summary": self.summary, "why": self.why, "fix": self.fix,
                "fix_availability": self.fix_availability.value, "needs_target": self.needs_target, "group": self.group}


REGISTRY: dict[str, Rule] = {}


@functools.lru_cache(maxsize=None)
def _finding_calls(module: str) -> dict[str, list[tuple[Any, dict[str, list[Any]]]]]:
    """Every `<name>.finding(...)` call in `module`'s source, by `name`: the call's `severity=` node (None when it
    gives none) and the local assignments of the function the call is in. One parse and one walk per function for
    the whole module, for every rule in it (`kconvert rules` asks for all: a walk per rule cost 0.19 s of its start,
    bench/NOTES.md)."""
    import ast  # deferred: only `kconvert rules` and the report's rule docs ask
    import inspect
    import sys

    tree = ast.parse(inspect.getsource(sys.modules[module]))
    calls: dict[str, list[tuple[Any, dict[str, list[Any]]]]] = {}
    # One traversal; an assignment or a call counts for every function it is inside (a nested function's for the
    # functions around it too, as a walk of each function would have it).
    Frame = tuple[dict[str, list[Any]], list[tuple[str, Any]]]
    frames: list[Frame] = []

    def visit(node: Any, stack: list[Frame]) -> None:
        for n in ast.iter_child_nodes(node):
            inner = stack
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                frame: Frame = ({}, [])
                frames.append(frame)
                inner = [*stack, frame]
            elif isinstance(n, ast.Assign):
                for t in n.targets:
                    pairs = [(t, n.value)] if isinstance(t, ast.Name) else (
                        list(zip(t.elts, n.value.elts)) if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple)
                        else [])
                    for el, v in pairs:
                        if isinstance(el, ast.Name):
                            for assigned, _ in stack:
                                assigned.setdefault(el.id, []).append(v)
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "finding"
                    and isinstance(n.func.value, ast.Name)):
                severity = next((k.value for k in n.keywords if k.arg == "severity"), None)
                for _, found in stack:
                    found.append((n.func.value.id, severity))
            visit(n, inner)

    visit(tree, [])
    for assigned, found in frames:
        for name, severity in found:
            calls.setdefault(name, []).append((severity, assigned))
    return calls


def rule_severities(r: Rule) -> tuple[str, ...]:
    """The severities of every `<rule>.finding(...)` call in the rule's module, in SEVERITIES order: a call without
    `severity=` (or with None) has the rule's usual one; a constant, a conditional of constants, or a local
    variable assigned constants in the calling function give theirs; anything else could be any severity. Read
    from the code itself, so a new `severity="error"` in a rule is listed without anyone editing a table."""
    import ast

    found: set[str] = set()

    def values(node: Any, assigned: dict[str, list[Any]]) -> set[str]:
        if isinstance(node, ast.Constant):
            return {node.value if isinstance(node.value, str) else r.severity}
        if isinstance(node, ast.IfExp):
            return values(node.body, assigned) | values(node.orelse, assigned)
        if isinstance(node, ast.Name) and node.id in assigned:
            return set().union(*(values(v, assigned) for v in assigned[node.id]))
        return set(SEVERITIES)

    for severity, assigned in _finding_calls(r.fn.__module__).get(r.fn.__name__, []):
        found |= {r.severity} if severity is None else values(severity, assigned)
    return tuple(s for s in SEVERITIES if s in (found or {r.severity}))


def rule(id: str, severity: str, *, summary: str, why: str, fix: str,
         fix_availability: FixAvailability, needs_target: bool = False,
         runs_last: bool = False, any_method: bool = False) -> Callable[[RuleFn], Rule]:
    """Registers a rule under an id of the table in kconvert/rules/codes.py, which gives its name, category and
    group; a removed id, or one not in the table, is a kconvert bug raised at import."""
    if id not in CODES:
        raise RuntimeError(f"rule id {id} is not in kconvert/rules/codes.py")
    name, category, group = CODES[id]
    if group == REMOVED:
        raise RuntimeError(f"rule id {id} was removed (kconvert/rules/codes.py): give the rule a new id")
    assert category in CATEGORIES, category
    assert severity in SEVERITIES, severity
    assert isinstance(fix_availability, FixAvailability), fix_availability

    def deco(fn: RuleFn) -> Rule:
        if id in REGISTRY:
            raise RuntimeError(f"duplicate rule id {id}")
        r = Rule(id, name, category, severity, summary.strip(), why.strip(), fix.strip(), fix_availability,
                 needs_target, fn, runs_last, any_method, group)
        REGISTRY[id] = r
        return r

    return deco


def skipped_without_target(ctx: Context) -> list[str]:
    """The ids of the rules that compare with the target, which do not run without one."""
    return [] if ctx.target is not None else sorted(r.id for r in REGISTRY.values() if r.needs_target)


def eagle3_rules_apply(draft: DraftModel, engine: EngineRules) -> bool:
    """Whether the EAGLE-3 rules judge this checkpoint on this engine row: an EAGLE-3 draft, or a P-EAGLE draft on
    a release that loads it with its EAGLE-3 classes (vLLM 0.32 registry.py: PEagleDraftModel and Peagle* map to
    Eagle3LlamaForCausalLM / Eagle3Qwen3ForCausalLM). Other methods' checkpoints get the method rule only."""
    m = draft.method
    return m == "eagle3" or (m == "peagle" and m in (engine.methods or {}))


def run_rules(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    skipped = set(skipped_without_target(ctx))
    eagle3 = eagle3_rules_apply(ctx.draft, ctx.engine)
    for r in sorted(REGISTRY.values(), key=lambda r: (r.runs_last, r.id)):
        if r.id in skipped or not (eagle3 or r.any_method):
            continue
        try:
            out.extend(r.fn(ctx))
        except Exception as e:  # noqa: BLE001
            # A stranger's checkpoint can hold shapes no rule anticipated (rank-0 projections, empty d2t). A
            # check that cannot run is a failed check, reported as such, never a crash of the whole gate.
            out.append(Finding(r.id, r.category, "error",
                               f"{r.name}: the check could not run on this checkpoint ({type(e).__name__}: {e})",
                               [Evidence("checkpoint", "malformed for this check", None)]))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda f: (order[f.severity], f.id))
    return out
