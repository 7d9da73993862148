"""`kconvert inspect`: read a draft's config and headers, detect its producer, judge it against the target and
engine. Reads headers and a few small tensors (d2t, t2d, a handful of embedding rows) only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kconvert.engines.expectations import EngineRules, engine_rules, installed_version
from kconvert.formats import read_draft
from kconvert.formats.model import DraftModel
from kconvert.rules import Context, Finding, Options, run_rules
from kconvert.source.checkpoint import Checkpoint, open_checkpoint
from kconvert.target import TargetModel, load_target


@dataclass
class InspectResult:
    checkpoint: Checkpoint
    draft: DraftModel
    target: TargetModel | None
    engine: EngineRules
    findings: list[Finding]
    options: Options = field(default_factory=Options)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def counts(self) -> dict[str, int]:
        c = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            c[f.severity] += 1
        c["fixable"] = sum(1 for f in self.findings if f.fixable and f.severity != "info")
        return c


def analyse(ckpt: Checkpoint, target: TargetModel | None, engine: EngineRules,
            options: Options | None = None) -> InspectResult:
    draft = read_draft(ckpt)
    opts = options or Options()
    findings = run_rules(Context(draft=draft, target=target, engine=engine, options=opts))
    return InspectResult(ckpt, draft, target, engine, findings, opts)


def inspect(source: str, *, target: str | TargetModel | None = None, engine: str = "vllm",
            engine_version: str | None = None, options: Options | None = None) -> InspectResult:
    ckpt = open_checkpoint(source)
    tgt = load_target(target) if isinstance(target, str) else target
    return analyse(ckpt, tgt, engine_rules(engine, engine_version), options)


def engine_info(rules: EngineRules) -> dict[str, Any]:
    return {"name": rules.engine, "rules_version": rules.version, "installed_version": installed_version(rules.engine),
            "aux_convention": rules.aux_convention}
