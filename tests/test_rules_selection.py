"""Rule selection (kconvert/rules/selection.py) against what a user is told it does: docs/manual.md "Rule selection
and project configuration" (selectors are rule ids, id prefixes, categories or rule names, as ruff's; `--select`
replaces `select`, `--ignore` replaces `ignore`, `--extend-ignore` adds to it; every ignored rule needs a reason),
the rule table of docs/rules.md (id, name, category of the 40 rules: the expected rule sets are read from that page,
never from the registry), the `rule_selection` of kconvert/schemas/report.schema.json (schemas/ links to it: its
keys, 'command line' as the source), and the usage errors' text a user reads.

Engine-free, in-process, milliseconds each (issue #30: the survivors of
`bench/mutation.py kconvert/rules/selection.py`)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kconvert.errors import UsageError
from kconvert.rules.base import Finding
from kconvert.rules.selection import DEFAULT, Ignored, Selection, from_flags, resolve

ROOT = Path(__file__).resolve().parent.parent
RULES_MD = (ROOT / "docs" / "rules.md").read_text()
# docs/rules.md's table rows: | [K404](#...) | aux-ids-convention | aux-layers | error | needs-decision |
TABLE = [(m[1], m[2], m[3]) for m in re.finditer(r"^\| \[(K\d{3})\]\([^)]*\) \| ([a-z0-9-]+) \| ([a-z-]+) \|",
                                                    RULES_MD, re.M)]
ALL_IDS = frozenset(i for i, _, _ in TABLE)
SCHEMA = json.loads((ROOT / "kconvert" / "schemas" / "report.schema.json").read_text())["properties"][
    "rule_selection"]


def _finding(rid: str, severity: str = "warning", message: str = "m") -> Finding:
    return Finding(rid, "aux-layers", severity, message)


def test_the_documented_table_has_every_rule():
    # docs/rules.md: "N rules." (the page the selectors below are checked against), N the registry's count
    from kconvert.rules import REGISTRY

    n = len(REGISTRY)
    assert f"{n} rules." in RULES_MD and len(TABLE) == n and len(ALL_IDS) == n


# --- resolve: ids, prefixes, categories, names ------------------------------------------------------------------

def test_a_rule_id_names_that_rule_in_any_case_with_blanks_around():
    assert resolve("K404") == {"K404"}
    assert resolve(" k404 ") == {"K404"}


@pytest.mark.parametrize("prefix", ["K4", "k4", "K9", "K0", "K40", "k90"])
def test_an_id_prefix_names_every_documented_id_that_starts_with_it(prefix):
    want = {i for i in ALL_IDS if i.startswith(prefix.upper())}
    assert want  # the documented table has such ids (K4: K401..K406, K9: K901, K902, K911, K912)
    assert resolve(prefix) == want


def test_the_bare_prefix_k_names_every_rule():
    assert resolve("K") == ALL_IDS
    assert resolve("k") == ALL_IDS


def test_a_category_names_every_rule_of_that_category_in_the_table():
    assert resolve("aux-layers") == {"K401", "K402", "K403", "K404", "K405", "K406"}
    for cat in {c for _, _, c in TABLE}:
        assert resolve(cat) == {i for i, _, c in TABLE if c == cat}, cat
        assert resolve(cat.upper()) == {i for i, _, c in TABLE if c == cat}, cat


def test_a_rule_name_names_that_rule():
    for rid, name, _ in TABLE:
        assert resolve(name) == {rid}
    assert resolve("AUX-IDS-CONVENTION") == {"K404"}


def test_an_unknown_selector_is_a_usage_error_naming_the_flag_and_the_nearest_name():
    with pytest.raises(UsageError) as e:
        resolve("aux-ids-conventon")
    assert e.value.message == ("--select 'aux-ids-conventon': no rule id, id prefix, category or rule name "
                               "(did you mean 'aux-ids-convention'?)")
    assert e.value.hint == "`kconvert rules` lists the ids, categories and names"
    with pytest.raises(UsageError) as e:
        resolve("aux-layer", flag="--ignore")
    assert e.value.message == ("--ignore 'aux-layer': no rule id, id prefix, category or rule name "
                               "(did you mean 'aux-layers'?)")


def test_the_nearest_name_is_searched_among_ids_too():
    # 'K4O4' (a letter O) is no id prefix; the nearest of the documented names is the id K404
    with pytest.raises(UsageError) as e:
        resolve("K4O4")
    assert e.value.message.endswith("(did you mean 'K404'?)")


def test_an_id_prefix_that_names_no_rule_is_a_usage_error():
    # no documented id starts with K99 or K3999 (docs/rules.md)
    assert not any(i.startswith("K99") for i in ALL_IDS)
    for s in ("K99", "K999", "K4041", "K12345"):
        with pytest.raises(UsageError, match="no rule id, id prefix, category or rule name"):
            resolve(s)


# --- Selection ------------------------------------------------------------------------------------------------

def test_every_rule_is_in_force_by_default():
    assert DEFAULT.selected == ALL_IDS and DEFAULT.is_default
    assert Selection().ignored_by("K404") is None


def test_select_is_the_union_of_its_selectors():
    s = Selection(select=("K4", "rope", "k001"))
    assert s.selected == {"K401", "K402", "K403", "K404", "K405", "K406", "K902", "K001"}
    assert not s.is_default


def test_an_unknown_selector_is_refused_when_the_selection_is_made():
    with pytest.raises(UsageError, match=r"^--select 'nope': "):
        Selection(select=("K4", "nope"))
    with pytest.raises(UsageError, match=r"^--ignore 'nope': "):
        Selection(ignore=(Ignored("nope", "why", "command line"),))


@pytest.mark.parametrize("reason", ["", "   "])
def test_every_ignored_rule_needs_a_reason(reason):
    # docs/manual.md: "Every ignored rule should state its reason"; a project file's plain list gets "no reason
    # given" from kconvert.project (ruff's habit, issue #48), so an ignore reaching the selection always has one
    assert "Every ignored rule should state its reason" in (ROOT / "docs" / "manual.md").read_text()
    with pytest.raises(UsageError) as e:
        Selection(ignore=(Ignored("K902", reason, "kconvert.toml"),))
    assert e.value.message == "ignore 'K902': give the reason it is ignored"


def test_a_rule_outside_select_is_set_aside_as_not_selected_citing_the_config_file():
    s = Selection(select=("K4",), config_file="pyproject.toml")
    assert s.ignored_by("K902") == Ignored("(not selected)", "not in select", "pyproject.toml")
    assert s.ignored_by("K404") is None
    assert Selection(select=("K4",)).ignored_by("K902") == Ignored("(not selected)", "not in select", "command line")


def test_the_first_ignore_that_names_a_rule_is_the_one_cited():
    a = Ignored("aux-layers", "first", "kconvert.toml")
    b = Ignored("K404", "second", "command line")
    s = Selection(ignore=(a, b))
    assert s.ignored_by("K404") is a and s.ignored_by("K401") is a and s.ignored_by("K902") is None
    assert Selection(ignore=(b, a)).ignored_by("K404") is b
    assert not s.is_default


def test_split_keeps_the_gating_findings_in_order_and_sets_the_others_aside_with_why():
    ig = Ignored("K902", "rope dropped on purpose", "kconvert.toml")
    s = Selection(ignore=(ig,))
    fs = [_finding("K404"), _finding("K902"), _finding("K401"), _finding("K902", "info")]
    kept, aside = s.split(fs)
    assert kept == [fs[0], fs[2]]
    assert aside == [(fs[1], ig), (fs[3], ig)]


def test_a_config_file_alone_makes_the_selection_not_the_default():
    assert not Selection(config_file="kconvert.toml").is_default


def test_to_dict_is_the_reports_rule_selection_with_findings_counted_per_ignore():
    a = Ignored("K9", "rope and positions reviewed", "pyproject.toml")
    b = Ignored("aux-ids-location", "mirrored by hand", "command line")
    s = Selection(select=("K4", "K9"), ignore=(a, b), config_file="pyproject.toml")
    fs = [_finding("K902", "warning", "rope"), _finding("K405", "info", "loc"), _finding("K901", "info", "pos"),
          _finding("K404", "error", "conv")]
    kept, aside = s.split(fs)
    assert kept == [fs[3]]
    d = s.to_dict(aside)
    assert set(d) == set(SCHEMA["required"]) == set(SCHEMA["properties"])
    assert d["config_file"] == "pyproject.toml" and d["select"] == ["K4", "K9"]
    assert d["ignored"] == [
        {"selector": "K9", "rules": ["K901", "K902", "K911", "K912"], "reason": "rope and positions reviewed",
         "source": "pyproject.toml", "findings": 2},
        {"selector": "aux-ids-location", "rules": ["K405"], "reason": "mirrored by hand", "source": "command line",
         "findings": 1}]
    assert d["set_aside"] == [
        {"id": "K902", "severity": "warning", "message": "rope", "selector": "K9",
         "reason": "rope and positions reviewed"},
        {"id": "K405", "severity": "info", "message": "loc", "selector": "aux-ids-location",
         "reason": "mirrored by hand"},
        {"id": "K901", "severity": "info", "message": "pos", "selector": "K9", "reason": "rope and positions reviewed"}]
    # the schema: select null means every rule
    assert Selection().to_dict([])["select"] is None and Selection().to_dict([])["ignored"] == []


# --- from_flags: the command line over the project configuration ----------------------------------------------

def test_no_flags_keep_the_configuration_as_it_is():
    base = Selection(select=("K4",), ignore=(Ignored("K405", "why", "kconvert.toml"),), config_file="kconvert.toml")
    s = from_flags(None, None, None, config=base)
    assert s == base
    assert from_flags(None, None, None) == DEFAULT


def test_select_replaces_the_files_select_and_comma_lists_drop_blanks_and_empty_items():
    base = Selection(select=("K9",), config_file="kconvert.toml")
    s = from_flags(" K4 , ,aux-ids-convention,", None, None, config=base)
    assert s.select == ("K4", "aux-ids-convention") and s.config_file == "kconvert.toml"


def test_ignore_replaces_the_files_ignore_and_extend_ignore_adds_to_it():
    # docs/manual.md: "`--select` replaces `select`, `--ignore` replaces `ignore`, `--extend-ignore` adds to it"
    assert "`--ignore` replaces `ignore`,\n`--extend-ignore` adds to it" in (ROOT / "docs" / "manual.md").read_text()
    filed = Ignored("K902", "rope reviewed", "kconvert.toml")
    base = Selection(ignore=(filed,), config_file="kconvert.toml")
    s = from_flags(None, "K405, K406", None, config=base)
    assert s.ignore == (Ignored("K405", "command line (--ignore)", "command line"),
                        Ignored("K406", "command line (--ignore)", "command line"))
    s = from_flags(None, None, "K405,,", config=base)
    assert s.ignore == (filed, Ignored("K405", "command line (--extend-ignore)", "command line"))
    s = from_flags(None, "K401", "K405", config=base)
    assert s.ignore == (Ignored("K401", "command line (--ignore)", "command line"),
                        Ignored("K405", "command line (--extend-ignore)", "command line"))
    # the source a report shows for them is the schema's 'command line'
    assert "'command line'" in SCHEMA["properties"]["ignored"]["items"]["properties"]["source"]["description"]
