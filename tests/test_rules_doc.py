"""docs/rules.md is the rule registry's own text (scripts/rules_doc.py renders `kconvert rules --json`), so a rule
added, removed or reworded without regenerating the page fails here; run `python scripts/rules_doc.py --write`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("rules_doc", ROOT / "scripts" / "rules_doc.py")
rules_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules_doc)


def test_docs_rules_md_is_the_registry():
    rules = rules_doc.rules_json()
    page = (ROOT / "docs" / "rules.md").read_text()
    assert page == rules_doc.render(rules), "docs/rules.md drifted from the registry: python scripts/rules_doc.py --write"


def test_every_rule_has_its_section_and_a_reworded_rule_is_caught():
    from kconvert.rules import REGISTRY

    page = (ROOT / "docs" / "rules.md").read_text()
    for r in REGISTRY.values():
        assert f"## {r.id} {r.name}\n" in page and r.why in page
    rules = rules_doc.rules_json()
    rules[0] = {**rules[0], "why": rules[0]["why"] + " (reworded)"}
    assert rules_doc.render(rules) != page
