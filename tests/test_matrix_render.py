"""The matrix document's renderers (kconvert/report/matrix_*.py) on hand-built documents (tests/matrix_docs.py,
each valid against schemas/matrix.schema.json): the Markdown and CSV tables read back with a Markdown-table
split and the stdlib csv reader, the SVG plot parsed as XML, the HTML page parsed with html.parser. The browser
half (sorting, filters, offline load) is tests/test_matrix_page_browser.py."""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from kconvert.report.matrix_page import render_html
from kconvert.report.matrix_plot import svg_plot, text_plot
from kconvert.report.matrix_table import render_csv, render_markdown
from tests.matrix_docs import (ENGINES, FORMULA_NAME, HOSTILE_MESSAGE, IMG_PRODUCER, PIPE_NAME, RUN, SCRIPT_NAME,
                               empty_doc, fleet_doc, run_doc, validate)

SVG = "{http://www.w3.org/2000/svg}"


def test_the_test_documents_are_valid_matrix_documents():
    for doc in (empty_doc(), fleet_doc(), run_doc()):
        validate(doc)
    assert not empty_doc()["drafts"] and not empty_doc()["cells"]
    fleet = fleet_doc()
    assert {c["state"] for c in fleet["cells"]} == {"pass", "warn", "fail", "error", "skipped"}
    assert any(d["target"]["state"] == "unknown" and d["target"]["id"] is None for d in fleet["drafts"])


# --- Markdown -------------------------------------------------------------------------------------------------

def _md_rows(text: str) -> list[list[str]]:
    """The table's rows split on the pipes Markdown reads as separators (an escaped `\\|` is not one)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def test_markdown_has_one_row_per_draft_and_one_column_per_engine_row():
    doc = fleet_doc()
    rows = _md_rows(render_markdown(doc))
    head, body = rows[0], rows[2:]
    assert head[:2] == ["Draft", "Target"]
    assert head[2:5] == [e["row"] for e in ENGINES]
    assert head[5] == "vllm:0.32 (live)"  # the live cells get their own column
    assert len(body) == len(doc["drafts"])
    assert all(len(r) == len(head) for r in rows), "an unescaped | split a row"
    # cell = state + finding ids, read from the document's own cells
    by_draft = {r[0]: r for r in body}
    aq = by_draft["example-org/kimi-draft-specforge"]
    assert aq[3] == "✗ fail K404" and aq[4] == "! warn K405" and aq[2] == "✓ pass"
    assert by_draft["runs/mystery-draft"][1] == "unknown"


def test_markdown_escapes_pipes_and_markup_in_draft_names():
    text = render_markdown(fleet_doc())
    assert "<script" not in text and "<img" not in text
    names = [r[0] for r in _md_rows(text)[2:]]
    assert "org/pipe\\|name\\|=1+2" in names
    assert "&lt;script&gt;window.\\_\\_pwned=1&lt;/script&gt;" in names


def test_markdown_score_and_rank_columns_appear_only_with_scores():
    assert "Score" not in _md_rows(render_markdown(fleet_doc()))[0]
    rows = _md_rows(render_markdown(run_doc()))
    head = rows[0]
    assert head[-2:] == ["Score (AL)", "Rank"]
    by_draft = {r[0].replace("\\_", "_"): r for r in rows[2:]}
    for name, _step, al, state, _ids in RUN:
        assert by_draft[name][-2].startswith(f"AL {al:.3f}")
    assert by_draft["runs/exp1/epoch_3"][-1] == "—"  # failed statically: not ranked
    assert by_draft["runs/exp1/epoch_4"][-1] == "1"


def test_markdown_of_no_drafts_is_still_a_table():
    rows = _md_rows(render_markdown(empty_doc()))
    assert rows[0][2:] == [e["row"] for e in ENGINES]
    assert len(rows) == 3 and rows[2][0] == "no drafts"


# --- CSV ------------------------------------------------------------------------------------------------------

def test_csv_has_one_row_per_cell_that_reads_back():
    doc = fleet_doc()
    rows = list(csv.DictReader(io.StringIO(render_csv(doc))))
    assert len(rows) == len(doc["cells"])
    got = sorted((r["draft"], r["engine"], r["engine_version"], r["kind"], r["state"], r["finding_ids"]) for r in rows)
    want = sorted((c["draft"] if not c["draft"].startswith("=") else "'" + c["draft"], c["engine"],
                   c["engine_version"], c["kind"], c["state"], " ".join(c["finding_ids"])) for c in doc["cells"])
    assert got == want
    hostile = [r for r in rows if r["draft"] == SCRIPT_NAME]
    assert len(hostile) == 3 and {r["message"] for r in hostile if r["message"]} == {HOSTILE_MESSAGE}
    assert any(r["draft"] == PIPE_NAME for r in rows)  # the csv module quotes what needs quoting


def test_csv_defuses_formulas_in_document_strings():
    rows = list(csv.DictReader(io.StringIO(render_csv(fleet_doc()))))
    assert not any(v.startswith(("=", "+", "@")) for r in rows for v in r.values())
    assert sum(r["draft"] == "'" + FORMULA_NAME for r in rows) == 3


def test_csv_of_no_drafts_is_the_header_only():
    assert list(csv.reader(io.StringIO(render_csv(empty_doc()))))[0][:3] == ["draft", "revision", "target"]
    assert len(list(csv.reader(io.StringIO(render_csv(empty_doc()))))) == 1


# --- plots ----------------------------------------------------------------------------------------------------

def test_plots_are_none_without_step_and_score():
    for doc in (empty_doc(), fleet_doc()):
        assert svg_plot(doc) is None and text_plot(doc) is None
    doc = run_doc()
    for d in doc["drafts"]:
        d["score"] = None
    assert svg_plot(doc) is None and text_plot(doc) is None


def test_svg_plot_draws_one_point_per_stepped_checkpoint_in_step_order():
    root = ET.fromstring(svg_plot(run_doc()))
    pts = root.findall(f"{SVG}circle")
    stepped = [r for r in RUN if r[1] is not None]  # the export without a step is not plotted
    assert len(pts) == len(stepped)
    xs = [float(p.get("cx")) for p in pts]
    ys = [float(p.get("cy")) for p in pts]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)
    # SVG's y grows downward: a higher AL is a smaller cy; the order of the ALs is the order of -cy
    als = [r[2] for r in stepped]
    assert sorted(range(len(als)), key=lambda i: als[i]) == sorted(range(len(ys)), key=lambda i: -ys[i])
    # straight line between points: cy is affine in AL; check the derivation on the two extremes and one inside
    lo, hi = 1.0, max(als)
    y_lo, y_hi = ys[als.index(min(als))], ys[als.index(hi)]
    slope = (y_hi - y_lo) / (hi - min(als))
    for al, y in zip(als, ys):
        assert y == pytest.approx(y_lo + slope * (al - min(als)), abs=0.15)
    assert lo <= min(als)
    titles = [p.find(f"{SVG}title").text for p in pts]
    fail = titles[[r[3] for r in stepped].index("fail")]
    assert fail.endswith("not ranked")
    assert pts[[r[3] for r in stepped].index("fail")].get("fill") == "#fff"  # hollow: a static fail is unranked
    assert any(t.text == "best" for t in root.iter(f"{SVG}text"))


def test_svg_plot_escapes_checkpoint_names():
    doc = run_doc()
    doc["drafts"][0]["draft"] = SCRIPT_NAME
    svg = svg_plot(doc)
    root = ET.fromstring(svg)  # well-formed XML with the hostile name inside
    assert not root.findall(f".//{SVG}script") and "<script" not in svg
    assert any(SCRIPT_NAME in (t.text or "") for t in root.iter(f"{SVG}title"))


def test_text_plot_prints_step_bar_and_al_per_checkpoint():
    text = text_plot(run_doc())
    lines = text.splitlines()
    stepped = [r for r in RUN if r[1] is not None]
    assert len(lines) == 1 + len(stepped)
    # bars from AL 1.0 (nothing accepted but the bonus token) to the largest AL, 30 cells of 8 eighths each
    hi = max(r[2] for r in stepped)
    for (name, step, al, state, _ids), line in zip(stepped, lines[1:]):
        assert line.startswith(f"step {step} ") and f"{al:.3f}" in line and line.endswith(name)
        eighths = round((al - 1.0) / (hi - 1.0) * 240)
        bar = line.split(" ", 2)[2][:30]
        assert bar.count("█") == eighths // 8
        assert ("unranked" in line) == (state == "fail")
    assert "#1 best" in lines[1 + [r[0] for r in stepped].index("runs/exp1/epoch_4")]


def test_text_plot_shows_control_characters_instead_of_sending_them():
    doc = run_doc()
    doc["drafts"][0]["draft"] = "runs/\x1b[2Jepoch_1"
    text = text_plot(doc)
    assert "\x1b" not in text and "\\x1b[2Jepoch_1" in text


# --- HTML (parsed; the browser test drives it) ----------------------------------------------------------------

class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _parse(doc) -> _Tags:
    p = _Tags()
    p.feed(render_html(doc))
    return p


def test_html_has_one_grid_cell_per_document_cell_and_one_row_per_draft():
    for doc in (fleet_doc(), run_doc(), empty_doc()):
        p = _parse(doc)
        cells = [a for t, a in p.tags if "data-cell-state" in a]
        assert sorted(a["data-cell-state"] for a in cells) == sorted(c["state"] for c in doc["cells"])
        rows = [a for t, a in p.tags if t == "tr" and "data-i" in a]
        assert [a["data-name"] for a in rows] == [d["draft"] for d in doc["drafts"]]


def test_html_is_self_contained_and_runs_only_its_own_script():
    html = render_html(fleet_doc())
    p = _parse(fleet_doc())
    assert len(p.scripts) == 1  # the hostile names added none
    for tag, attrs in p.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)  # no event handler attribute got in
        for k in ("src", "href"):
            v = attrs.get(k)
            assert v is None or v.startswith("#"), (tag, attrs)  # in-page links only, nothing to fetch
    assert "<link" not in html and "@import" not in html and "url(" not in html
    csp = next(a["content"] for t, a in p.tags if a.get("http-equiv") == "Content-Security-Policy")
    digest = base64.b64encode(hashlib.sha256(p.scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp


def test_html_shows_hostile_strings_as_text():
    p = _parse(fleet_doc())
    text = "".join(p.text)
    for s in (SCRIPT_NAME, IMG_PRODUCER, HOSTILE_MESSAGE):
        assert s in text
    assert not any(t == "img" for t, _ in p.tags)


def test_html_carries_rules_text_fix_commands_and_target_evidence():
    doc = fleet_doc()
    text = "".join(_parse(doc).text)
    for rid, rule in doc["rules"].items():
        assert rule["summary"] in text and rule["why"] in text
    for d in doc["drafts"]:
        if d["fix_command"]:
            assert d["fix_command"] in text
        for ev in d["target"]["evidence"]:
            assert ev in text
    assert "engine exited: out of memory" in text  # a live cell's error message
    assert "AL 2.380" in text  # the live figure


def test_html_is_the_same_for_the_same_document():
    assert render_html(fleet_doc()) == render_html(fleet_doc())


def test_html_writes_as_utf8_whatever_the_strings():
    doc = fleet_doc()
    doc["drafts"][0]["draft"] = "lone \ud800 surrogate"
    render_html(doc).encode("utf-8")


def test_terminal_view_of_a_ranking_without_steps_has_no_plot_line():
    """The terminal view (kconvert/report/matrix_terminal.py) names the best draft; with no training steps there
    is no plot, and no stray line stands in for it."""
    from rich.console import Console

    from kconvert.report.matrix_terminal import render_matrix

    doc = run_doc()
    for d in doc["drafts"]:
        d["step"] = None
    validate(doc)
    assert text_plot(doc) is None
    con = Console(record=True, width=120, file=io.StringIO())
    render_matrix(con, doc)
    lines = con.export_text().splitlines()
    assert f"best by scored acceptance length: {doc['ranking']['best']}" in lines
    assert "None" not in lines and not any(line.startswith("AL per training step") for line in lines)


# --- one fix line per draft, the same in every rendering (issue 48) ---------------------------------------------

def test_every_rendering_gives_each_draft_one_next_line_and_each_cell_its_rows_command():
    from rich.console import Console

    from kconvert.report.matrix_terminal import render_matrix
    from tests.matrix_docs import many_doc

    doc = many_doc()
    want = [(d["fixes"][0]["command"], d["fixes"][0]["why"]) for d in doc["drafts"] if d["fixes"]]
    assert len(want) == len(doc["drafts"]) and any(len(d["fixes"]) > 1 for d in doc["drafts"])
    con = Console(record=True, width=100, file=io.StringIO())
    render_matrix(con, doc)
    terminal = [ln[len("next: "):].split("  # ", 1) for ln in con.export_text().splitlines() if ln.startswith("next: ")]
    assert [tuple(x) for x in terminal] == want
    md = render_markdown(doc).split("Next, one fix line per draft:", 1)[1]
    md_lines = [ln for ln in md.splitlines() if ln.startswith("- ")]
    assert [ln.split("` ", 1)[1].split(" `", 1)[0].strip() for ln in md_lines] == [c for c, _ in want]
    # the CSV's and the page's commands: each cell's, the command of its draft's fix serving its row
    command_of = {(d["draft"], row): f["command"] for d in doc["drafts"] for f in d["fixes"] for row in f["rows"]}
    for r in csv.DictReader(io.StringIO(render_csv(doc))):
        if r["state"] == "fail":
            assert r["fix_command"] == command_of[(r["draft"], r["engine_row"])]
    text = "".join(_parse(doc).text)
    for d in doc["drafts"]:
        for f in d["fixes"]:
            assert f["command"] in text and f["why"] in text


def test_markdown_code_spans_keep_a_command_whole_whatever_backticks_it_holds():
    from kconvert.report.matrix_table import md_code

    for s in ("kconvert fix a", "kconvert fix 'a`b'", "x ``` y", "`"):
        span = md_code(s)
        fence = span.split(" ", 1)[0]
        assert set(fence) == {"`"} and fence not in s and span == f"{fence} {s} {fence}"
