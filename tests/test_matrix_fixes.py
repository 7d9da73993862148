"""kconvert/matrix/fixes.py: a draft's cells grouped into one fix command per distinct output (issue 48), over
generated drafts (hypothesis): any rows, states, digests, repaired ids and an installed row. The expected groups
are derived here from the cells' digests, not from the grouping code."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kconvert.matrix.fixes import draft_fixes

ROWS = [r.key.replace(" ", ":") for r in __import__("kconvert.engines.expectations", fromlist=["ALL_ROWS"]).ALL_ROWS]


@st.composite
def drafts(draw):
    rows = draw(st.lists(st.sampled_from(ROWS), min_size=1, unique=True))
    cells = []
    for row in rows:
        engine, version = row.split(":", 1)
        state = draw(st.sampled_from(["pass", "warn", "fail", "error", "skipped"]))
        cell = {"engine": engine, "engine_version": version, "kind": "static", "state": state, "fix": None}
        if state in ("warn", "fail") and draw(st.booleans()):
            repairs = sorted(draw(st.sets(st.sampled_from(["K201", "K404", "K405", "K502"]), max_size=2)))
            tail = draw(st.sampled_from(["", "K603 stays: no file edit repairs it, so fix exits 1"]))
            why = "; ".join(x for x in (f"repairs {', '.join(repairs)}" if repairs else "", tail) if x)
            cell["fix"] = {"command": f"kconvert fix d -o out-{engine}-{version} --engine-version {version}",
                           "repairs": repairs, "why": why or None,
                           "output": draw(st.sampled_from(["sha256:a", "sha256:b", "sha256:c", None]))}
            # the error no edit repairs, which makes fix exit 1 on this row (inspect's findings of the cell)
            cell["findings"] = [{"id": "K603", "severity": "error", "fixable": False}] if tail else []
        cells.append(cell)
    installed = draw(st.sampled_from([None, *ROWS]))
    return cells, installed


def row(c):
    return f"{c['engine']}:{c['engine_version']}"


@settings(max_examples=150, deadline=None)
@given(drafts())
def test_each_output_gets_one_command_serving_its_rows_the_largest_first(case):
    cells, installed = case
    groups = draft_fixes(cells, installed)
    fixable = [c for c in cells if c["fix"]]
    # the partition the digests make, split where fix ends differently (an error no edit repairs on some rows of
    # the same output: K103 on tokenspeed beside SGLang): one group per digest and ending, a cell without one alone
    want = {}
    for c in fixable:
        exits_1 = "fix exits 1" in (c["fix"]["why"] or "")
        want.setdefault((c["fix"]["output"], exits_1) if c["fix"]["output"] else row(c), []).append(row(c))
    assert sorted(sorted(g["rows"]) for g in groups) == sorted(sorted(v) for v in want.values())
    sizes = [len(g["rows"]) for g in groups]
    assert sizes == sorted(sizes, reverse=True)
    for g in groups:
        members = [c for c in fixable if row(c) in g["rows"]]
        rep = next((c for c in members if row(c) == installed), members[0])
        assert g["command"] == rep["fix"]["command"]
        ids = sorted({i for c in members for i in c["fix"]["repairs"]})
        assert g["repairs"] == ids
        on = f"on {', '.join(g['rows'])}"
        assert g["why"].startswith(f"repairs {', '.join(ids)} {on}" if ids else on), g["why"]
        assert ("fix exits 1" in g["why"]) == any("fix exits 1" in (c["fix"]["why"] or "") for c in members)
        # one comment, one ending: every row a line serves ends the way its comment says
        assert len({"fix exits 1" in (c["fix"]["why"] or "") for c in members}) == 1, g
    if groups:
        first = groups[0]["why"]
        for g in groups[1:]:
            assert ", ".join(g["rows"]) in first.split("serve", 1)[1]
        assert ("other output" in first or "another output" in first) == (len(groups) > 1)
        unfixed = [row(c) for c in cells if c["state"] == "fail" and not c["fix"]]
        assert all(r in first.split("no fix line for", 1)[1] for r in unfixed)
