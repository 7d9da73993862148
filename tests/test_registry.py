"""The rule registry: every rule states whether fix can repair it (always, sometimes, needs-decision, never), the
findings it emits agree with that, K000 and K005 are rules like the others, and rule ids are spelled in the registry
only."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from kconvert.engines.expectations import ALL_ROWS, engine_rules
from kconvert.commands.inspect import inspect
from kconvert.rules import REGISTRY, Context, FixAvailability, run_rules
from kconvert.rules.base import Rule
from tests.factories import make_draft, make_target

ZOO = Path(__file__).resolve().parent / "zoo"
PACKAGE = Path(__file__).resolve().parent.parent / "kconvert"


def test_every_rule_states_its_fix_availability_and_its_doc_shows_it():
    for r in REGISTRY.values():
        assert isinstance(r.fix_availability, FixAvailability), r.id
        assert r.doc()["fix_availability"] == r.fix_availability.value
    used = {r.fix_availability for r in REGISTRY.values()}
    assert used == set(FixAvailability), "every availability names at least one rule"


@pytest.fixture(scope="module")
def zoo_findings(tmp_path_factory) -> list:
    """Every finding inspect gives on the published-draft replicas, on every engine row."""
    root = tmp_path_factory.mktemp("zoo")
    found = []
    for case in sorted(p.name for p in ZOO.iterdir() if (p / "expect.json").is_file()):
        mod = importlib.import_module(f"tests.zoo.{case}.build")
        folder = mod.build(root / case)
        for row in ALL_ROWS:
            res = inspect(str(folder), target=mod.TARGET, engine=row.engine, engine_version=row.version)
            found += [(case, row.key, f) for f in res.findings]
    return found


def test_the_findings_of_the_published_drafts_agree_with_their_rules_availability(zoo_findings):
    assert zoo_findings
    for case, row, f in zoo_findings:
        assert "could not run" not in f.message, (case, row, f.id, f.message)
        assert REGISTRY[f.id].fix_availability.allows(f), (case, row, f.id, f.message)
    fixable = {f.id for _, _, f in zoo_findings if f.ops}
    assert fixable and all(REGISTRY[i].fix_availability is not FixAvailability.NEVER for i in fixable)


def test_a_finding_that_contradicts_its_rules_availability_is_a_kconvert_bug():
    def fn(ctx):
        yield never.finding("something", fixable=True)

    never = Rule("K999", "test-only", "integrity", "error", "s", "w", "f", FixAvailability.NEVER, False, fn)
    with pytest.raises(RuntimeError, match="K999 declares fix availability 'never'"):
        list(fn(None))
    always = Rule("K998", "test-only", "integrity", "error", "s", "w", "f", FixAvailability.ALWAYS, False, fn)
    with pytest.raises(RuntimeError, match="'always'"):
        always.finding("no op")
    assert always.finding("dropped by the writer", fixable=True).fixable


def test_k000_is_the_rule_that_names_the_checks_a_missing_target_skips(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    res = inspect(str(d))
    (k000,) = [f for f in res.findings if f.id == "K000"]
    skipped = sorted(r.id for r in REGISTRY.values() if r.needs_target)
    assert skipped and all(i in k000.message for i in skipped)
    assert not [f for f in res.findings if f.id in skipped]
    with_target = inspect(str(d), target=str(make_target(tmp_path / "t")))
    assert "K000" not in {f.id for f in with_target.findings}
    # it is emitted by the registered rule itself, not built by the runner
    ctx = Context(draft=res.draft, target=None, engine=engine_rules("vllm"))
    assert [f.message for f in REGISTRY["K000"].fn(ctx)] == [k000.message]


def test_k005_runs_after_every_other_rule_and_reports_what_they_could_not_read(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    res = inspect(str(d), target=str(make_target(tmp_path / "t")))
    ctx = Context(draft=res.draft, target=res.target, engine=res.engine)
    assert list(REGISTRY["K005"].fn(ctx)) == []
    ctx.unreadable["d2t"] = "not in the cache"
    (f,) = REGISTRY["K005"].fn(ctx)
    assert f.id == "K005" and f.severity == "warning" and "not in the cache" in f.message
    order = sorted(REGISTRY.values(), key=lambda r: (r.runs_last, r.id))
    assert order[-1].id == "K005" and REGISTRY["K005"].runs_last
    # a rule that could not read a value says so in the run that follows: K005 comes from the same run
    fresh = Context(draft=res.draft, target=res.target, engine=res.engine)
    fresh.unreadable["t2d"] = "cannot read"
    assert [x.id for x in run_rules(fresh) if x.id == "K005"] == ["K005"]


def _rule_id_literals(path: Path) -> list[tuple[int, str]]:
    """String constants that are a rule id, other than the id a `@rule(...)` declaration gives."""
    tree = ast.parse(path.read_text(), str(path))
    declared = {id(n.args[0]) for n in ast.walk(tree)
                if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "rule" and n.args}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and len(n.value) == 4
            and n.value[0] == "K" and n.value[1:].isdigit() and id(n) not in declared]


def test_rule_ids_are_spelled_in_the_registry_only():
    # the id table (kconvert/rules/codes.py) and each rule's own decorator are the two places an id is written
    found = {str(p.relative_to(PACKAGE)): lits for p in sorted(PACKAGE.rglob("*.py"))
             if p != PACKAGE / "rules" / "codes.py" and (lits := _rule_id_literals(p))}
    assert found == {}
