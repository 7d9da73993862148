"""The rule-id table (kconvert/rules/codes.py), the registry and the rule modules agree, as ruff's codes.rs and its
rule implementations do: every id in the table but a removed one has exactly one registered rule with the table's
name and category, every registered rule has a row, and a rule lives in the module named after its category.
The expected names are docs/rules.md's index table (generated from `kconvert rules --json`, see
tests/test_rules_doc.py) and the category list of schemas/report.schema.json."""
from __future__ import annotations

import json
import re
from pathlib import Path

from kconvert.rules import REGISTRY
from kconvert.rules.codes import CODES, GROUPS, REMOVED

ROOT = Path(__file__).resolve().parents[1]
RULES_MD = (ROOT / "docs" / "rules.md").read_text()
REPORT_SCHEMA = json.loads((ROOT / "kconvert" / "schemas" / "report.schema.json").read_text())


def test_every_live_id_of_the_table_is_one_registered_rule_and_back():
    live = {k for k, c in CODES.items() if c.group != REMOVED}
    assert live == set(REGISTRY)
    for rid, r in REGISTRY.items():
        assert (r.name, r.category, r.group) == tuple(CODES[rid]), rid


def test_the_table_names_what_docs_rules_md_lists():
    index = dict(re.findall(r"^\| \[(K\d{3})\]\(#[^)]*\) \| ([a-z0-9-]+) \|", RULES_MD, re.M))
    assert index == {k: c.name for k, c in CODES.items() if c.group != REMOVED}
    assert len(set(index.values())) == len(index)  # a name selects one rule (--select takes names)


def test_groups_and_categories_are_the_documented_ones():
    cats = [c for c in REPORT_SCHEMA["$defs"]["finding"]["properties"]["category"]["enum"] if c != "live"]
    assert GROUPS == ("stable", "preview", "deprecated", "removed")
    for rid, c in CODES.items():
        assert re.fullmatch(r"K\d{3}", rid) and c.group in GROUPS and c.category in cats, rid


def test_a_rule_lives_in_the_module_of_its_category():
    for rid, r in REGISTRY.items():
        assert r.fn.__module__ == "kconvert.rules." + r.category.replace("-", "_"), rid
