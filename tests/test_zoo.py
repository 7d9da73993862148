"""Published drafts (tests/zoo). Each expect.json has two sections:

- `record`: what the public record says (copied from the case's RECORD.md, which cites the sources): per engine row
  the outcome (works / fails / collapses / degraded / open), and, where the record states them, facts of the
  published files (the aux ids). A test FAILS when kconvert disagrees with a record field: the verdict must fit the
  outcome, the replica must carry the published ids and inspect must read them.
- `pinned`: kconvert's own output when last pinned (verdict, finding ids, `fix --dry-run` outcome). Kept only so a
  change shows; its test fails on change and says it is a pin, not a record. Re-pin after an intended change with
  `python -m tests.zoo.repin` and let the diff be reviewed.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kconvert.engines.expectations import ALL_ROWS
from kconvert.commands.fix import fix
from kconvert.commands.inspect import inspect
from kconvert.errors import KConvertError
from tests.zoo import repin

ZOO = Path(__file__).resolve().parent / "zoo"
CASES = repin.cases()
ROWS = {r.key: r for r in ALL_ROWS}
OUTCOMES = {"works", "fails", "collapses", "degraded", "open"}
REPIN = "a pinned value (kconvert's earlier output, not a record) changed: if intended, run `python -m tests.zoo.repin`"


def expect(case: str) -> dict:
    return repin.load(case)


def record_md_rows(case: str) -> dict[str, str]:
    """RECORD.md's table: engine row -> its "public record" cell."""
    out = {}
    for line in (ZOO / case / "RECORD.md").read_text().splitlines():
        m = re.match(r"^\| (vllm [0-9.]+(?:/v1)?|sglang [a-z0-9.-]+|tokenspeed [0-9.]+) \| (.*?) \|", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


RECORDED = [(c, r) for c in CASES for r, v in expect(c)["record"]["rows"].items() if v["outcome"] != "open"]
PINNED = [(c, r) for c in CASES for r in expect(c)["pinned"]["rows"]]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("zoo")
    return {case: repin.build(case, root) for case in CASES}


_seen: dict = {}


def observed(built, case: str, row: str) -> dict:
    """inspect's verdict on one row, run once for every test that asks."""
    if ("inspect", case, row) not in _seen:
        folder, target = built[case]
        _seen[("inspect", case, row)] = repin.observe_inspect(folder, target, ROWS[row])
    return _seen[("inspect", case, row)]


def fixed(built, case: str, row: str):
    """`fix --dry-run` on one row (a FixResult or the error it refused with), run once for every test that asks."""
    if ("fix", case, row) not in _seen:
        folder, target = built[case]
        _seen[("fix", case, row)] = repin.run_fix(folder, target, ROWS[row],
                                                  from_pickle=bool(expect(case)["pinned"].get("from_pickle")))
    return _seen[("fix", case, row)]


def test_every_case_is_complete_and_its_record_is_its_record_md():
    assert len(CASES) >= 15
    for case in CASES:
        e = expect(case)
        assert set(e) == {"draft", "target", "record", "pinned"}, case
        assert set(e["record"]["rows"]) == set(ROWS) == set(e["pinned"]["rows"]), case
        assert (ZOO / case / "build.py").is_file(), case
        md = record_md_rows(case)
        assert set(md) == set(ROWS), f"{case}/RECORD.md has no table row for {set(ROWS) - set(md)}"
        for key, rec in e["record"]["rows"].items():
            assert rec["outcome"] in OUTCOMES and rec["source"], (case, key)
            # the record field is RECORD.md's cell, and its outcome is the cell's first word
            assert rec["record_md"] == md[key], (case, key)
            assert re.match(r"[a-z]+", md[key]).group(0) == rec["outcome"], (case, key, md[key])


def test_the_record_covers_the_rows_it_says_it_does():
    # 49 of the 136 rows carry a public record today, 10 of them Model Runner V1 rows (vllm 0.32/v1, 0.33/v1:
    # where the record's outcome holds for V1, or V1's own reading, tests/data/vllm_oracle.json, carries it); an
    # open row is never counted as checked
    assert len(RECORDED) >= 49
    assert sum(1 for _, row in RECORDED if row.endswith("/v1")) >= 10


@pytest.mark.parametrize("case, row", RECORDED, ids=[f"{c}-{r}" for c, r in RECORDED])
def test_kconvert_agrees_with_the_public_record(built, case, row):
    e = expect(case)
    outcome = e["record"]["rows"][row]["outcome"]
    got = observed(built, case, row)
    why = f"{case} on {row}: the record says {outcome} ({e['record']['rows'][row]['source']}); kconvert says {got}"
    if outcome == "works":
        assert got["verdict"] in ("pass", "warn"), "kconvert would refuse a draft the record shows working: " + why
    elif outcome in ("fails", "collapses"):
        limit = e["pinned"].get("static_limit")
        if limit:
            # A defect static checks cannot see (which layers a draft was trained on): a warning that names it
            # and sends the user to verify, never a clean pass.
            assert got["verdict"] == "warn" and limit in got["warnings"], why
        else:
            assert got["verdict"] == "fail", "kconvert would pass a draft the record shows failing: " + why
    elif outcome == "degraded":
        assert got["verdict"] in ("warn", "fail"), why


REPLICAS = [c for c in CASES if "replica" in expect(c)["record"]]


@pytest.mark.parametrize("case", REPLICAS)
def test_the_replica_carries_the_published_aux_ids_and_inspect_reads_them(built, case):
    rec = expect(case)["record"]["replica"]["aux_ids"]
    text = (ZOO / case / "RECORD.md").read_text()
    assert rec["record_md"] in text and str(rec["value"]) in rec["record_md"], case
    folder, target = built[case]
    cfg = json.loads((folder / "config.json").read_text())  # the file itself, not kconvert's reading
    ids = cfg.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_config", {}).get(
        "eagle_aux_hidden_state_layer_ids")
    assert ids == rec["value"], f"{case}: the replica writes {ids}, RECORD.md says {rec['value']}"
    assert inspect(str(folder), target=target).draft.aux.ids == rec["value"]


@pytest.mark.parametrize("case, row", PINNED, ids=[f"{c}-{r}" for c, r in PINNED])
def test_inspect_gives_the_pinned_verdict(built, case, row):
    want = expect(case)["pinned"]["rows"][row]
    got = observed(built, case, row)
    assert got == {k: want[k] for k in ("verdict", "errors", "warnings")}, REPIN


@pytest.mark.parametrize("case, row", PINNED, ids=[f"{c}-{r}" for c, r in PINNED])
def test_fix_dry_run_gives_the_pinned_outcome(built, case, row):
    assert repin.fix_outcome(fixed(built, case, row)) == expect(case)["pinned"]["rows"][row]["fix"], REPIN


@pytest.mark.parametrize("case, row", PINNED, ids=[f"{c}-{r}" for c, r in PINNED])
def test_fix_leaves_only_what_needs_a_decision_and_fails_only_on_what_remains(built, case, row):
    # A setting that needs a decision nobody gave is left exactly as it is, named with the flag that decides it,
    # and the repairs that need no decision are still applied (never refused wholesale, never guessed): fix
    # exits 1 only where an error no file edit repairs remains.
    res = fixed(built, case, row)
    if isinstance(res, KConvertError) or res.refused:
        return  # refused: the pinned outcome above says so, with the flag or the findings (K105: another method)
    for f in res.plan.left_as_is:
        assert f.needs_decision and f.severity != "error", (f.id, f.severity)
    assert res.exit_code == (1 if res.plan.unfixable else 0)


@pytest.mark.parametrize("case", [c for c in CASES if "decided" in expect(c)["pinned"]])
def test_a_decision_lets_fix_proceed(built, case):
    folder, target = built[case]
    d = expect(case)["pinned"]["decided"]
    for row, want in d["rows"].items():
        assert repin.observe_fix(folder, target, ROWS[row], decisions=d["options"]) == want, (row, REPIN)


def test_the_readme_table_of_published_drafts_is_what_kconvert_matrix_says_over_the_zoo(built):
    # The table is `kconvert matrix` over the built replicas (tests/zoo/readme_table.py): a README row that
    # disagrees with the matrix fails here, named.
    from tests.zoo import readme_table

    want, have = readme_table.rows_of(readme_table.render(built)), readme_table.rows_of(readme_table.current())
    regen = "run `python -m tests.zoo.readme_table --write`"
    assert set(have) == set(want), f"docs/manual.md's published-drafts table lists other drafts than the zoo: {regen}"
    for case in want:
        assert have[case] == want[case], f"docs/manual.md's row of {case} is not what kconvert matrix says: {regen}\n" \
                                         f"README:  {have[case]}\nmatrix:  {want[case]}"
    assert readme_table.current() == readme_table.render(built), regen


def test_kconvert_matrix_over_the_zoo_agrees_cell_for_cell_with_inspect(built):
    # Done-when of issue 22: each cell (draft x engine row) has inspect's verdict and finding ids, every row.
    from tests.zoo import readme_table

    rows = readme_table.matrix_rows(built)
    assert set(rows) == set(CASES)
    for case in CASES:
        assert set(rows[case]) == set(ROWS), case
        for row in ROWS:
            assert rows[case][row] == observed(built, case, row), (case, row)


def test_the_tiny_examples_aux_id_variant_is_still_settled_and_fixed_to_2_5_7(tmp_path):
    """examples/tiny/broken/aux-ids-sglang-convention's shape (TorchSpec MLA, midlayer.*, ids [1, 4, 6] in
    eagle_config only, an 8-layer target): the first id and the producer agree, so K404 is an error on vLLM and
    fix writes [2, 5, 7]. Built here, not read from examples/ (the example is being rebuilt)."""
    from tests.factories import make_draft, make_target

    def ids(c):
        c.pop("eagle_aux_hidden_state_layer_ids")
        c["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [1, 4, 6], "use_aux_hidden_state": True}

    folder = make_draft(tmp_path / "d", "torchspec", family="mla", config=ids)
    target = str(make_target(tmp_path / "t"))
    # Model Runner V1 feeds eagle_config's ids as written (K404); V2 reads none of them and feeds its defaults
    # [2, 4, 5], not the trained [2, 5, 7] (K405): both rows named, since the default row follows the machine
    res = inspect(str(folder), target=target, engine_version="0.32/v1")
    k404 = [f for f in res.findings if f.id == "K404"]
    assert [f.severity for f in k404] == ["error"] and k404[0].evidence[0].expected == [2, 5, 7]
    res = inspect(str(folder), target=target, engine_version="0.33")
    assert [(f.id, f.severity) for f in res.findings if f.id in ("K404", "K405")] == [("K405", "error")]
    plan = fix(str(folder), None, target=target, engine_version="0.32/v1", dry_run=True)
    values = {tuple(o.path): o.value for o in plan.ops if getattr(o, "path", None)}
    assert values[("eagle_aux_hidden_state_layer_ids",)] == [2, 5, 7]
    assert values[("eagle_config", "eagle_aux_hidden_state_layer_ids")] == [2, 5, 7]
