"""Which rules gate a run (ruff's `select` / `ignore`): selectors name a rule id (`K404`), an id prefix (`K4`, `K`),
a category (`aux-layers`) or a rule name (`aux-ids-convention`). An ignored rule still runs; its findings are
set aside, counted and listed in the report with the reason the project gave, so a gate's leniency can be
reviewed. They neither fail the gate nor get fixed."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from kconvert.errors import UsageError, did_you_mean
from kconvert.rules.base import CATEGORIES, REGISTRY, Finding

ID_PREFIX = re.compile(r"^K\d{0,3}$", re.IGNORECASE)


def resolve(selector: str, *, flag: str = "--select") -> frozenset[str]:
    """The rule ids a selector names; an unknown selector is a usage error with the nearest name."""
    s = selector.strip()
    if ID_PREFIX.match(s):
        ids = frozenset(r for r in REGISTRY if r.startswith(s.upper()))
        if ids:
            return ids
    if s.lower() in CATEGORIES:
        return frozenset(r.id for r in REGISTRY.values() if r.category == s.lower())
    by_name = {r.name: r.id for r in REGISTRY.values()}
    if s.lower() in by_name:
        return frozenset({by_name[s.lower()]})
    names = sorted(REGISTRY) + list(CATEGORIES) + sorted(by_name)
    raise UsageError(f"{flag} {selector!r}: no rule id, id prefix, category or rule name{did_you_mean(s, names)}",
                     hint="`kconvert rules` lists the ids, categories and names")


@dataclass(frozen=True)
class Ignored:
    selector: str
    reason: str
    source: str  # the config file, or "command line"


@dataclass(frozen=True)
class Selection:
    """The rules in force. `select` None: every rule; `ignore` in the order given (the first that names a rule
    is the one the report cites)."""

    select: tuple[str, ...] | None = None
    ignore: tuple[Ignored, ...] = ()
    config_file: str | None = None

    def __post_init__(self) -> None:
        for s in self.select or ():
            resolve(s, flag="--select")
        for i in self.ignore:
            resolve(i.selector, flag="--ignore")
            if not i.reason.strip():
                raise UsageError(f"ignore {i.selector!r}: give the reason it is ignored")

    @property
    def selected(self) -> frozenset[str]:
        if self.select is None:
            return frozenset(REGISTRY)
        return frozenset().union(*(resolve(s) for s in self.select))

    def ignored_by(self, rule_id: str) -> Ignored | None:
        if rule_id not in self.selected:
            return Ignored("(not selected)", "not in select", self.config_file or "command line")
        return next((i for i in self.ignore if rule_id in resolve(i.selector, flag="--ignore")), None)

    def split(self, findings: Iterable[Finding]) -> tuple[list[Finding], list[tuple[Finding, Ignored]]]:
        kept: list[Finding] = []
        set_aside: list[tuple[Finding, Ignored]] = []
        for f in findings:
            why = self.ignored_by(f.id)
            if why is None:
                kept.append(f)
            else:
                set_aside.append((f, why))
        return kept, set_aside

    @property
    def is_default(self) -> bool:
        return self.select is None and not self.ignore and self.config_file is None

    def to_dict(self, set_aside: list[tuple[Finding, Ignored]]) -> dict[str, Any]:
        """The report's `rule_selection`: what was in force, from where, and every finding set aside."""
        return {
            "config_file": self.config_file,
            "select": list(self.select) if self.select is not None else None,
            "ignored": [{"selector": i.selector, "rules": sorted(resolve(i.selector, flag="--ignore")),
                         "reason": i.reason, "source": i.source,
                         "findings": sum(1 for _, w in set_aside if w == i)} for i in self.ignore],
            "set_aside": [{"id": f.id, "severity": f.severity, "message": f.message, "selector": w.selector,
                           "reason": w.reason} for f, w in set_aside],
        }


DEFAULT = Selection()


def from_flags(select: str | None, ignore: str | None, extend_ignore: str | None, *,
               config: Selection | None = None) -> Selection:
    """The command line over a project configuration: `--select` replaces its `select`, `--ignore` its `ignore`
    (reason: "command line"), `--extend-ignore` adds to it."""
    base = config or DEFAULT

    def split(v: str) -> list[str]:
        return [s for s in (x.strip() for x in v.split(",")) if s]

    sel = tuple(split(select)) if select is not None else base.select
    ign: tuple[Ignored, ...] = base.ignore
    if ignore is not None:
        ign = tuple(Ignored(s, "command line (--ignore)", "command line") for s in split(ignore))
    if extend_ignore is not None:
        ign = ign + tuple(Ignored(s, "command line (--extend-ignore)", "command line") for s in split(extend_ignore))
    return Selection(select=sel, ignore=ign, config_file=base.config_file)


__all__ = ["DEFAULT", "Ignored", "Selection", "from_flags", "resolve"]
