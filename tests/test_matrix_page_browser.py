"""The matrix page (`kconvert matrix --html`, kconvert/report/matrix_page.py) in a real headless browser: Debian's
Chromium driven by Playwright (issue 22 item 5). It loads from disk with every other request blocked and none
attempted, the grid shows every cell of the document, sorting by a column head reorders the rows, each filter
hides exactly the rows it should, and a draft named `<script>` does not run.

Playwright rather than Selenium: its request routing sees and blocks every request the page makes (Selenium
would need a proxy or CDP for that), and the wheel brings its own driver, so only the distribution's
`chromium` is needed (Selenium also needs `chromium-driver`). It is launched with the system binary
(`executable_path`), never `playwright install`.

Skipped with the reason when Chromium or Playwright is missing, except under CI=true, where that fails instead:
CI cannot pass by skipping it (scripts/test.sh installs Chromium as root). The expected rows and orders are
computed here from the document, by the rules the page states (schemas' state order, "no cell" last).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kconvert.report.matrix_page import render_html
from tests.matrix_docs import ENGINES, LONG_PRODUCER, SCRIPT_NAME, UNBROKEN, fleet_doc, many_doc, run_doc

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("KCONVERT_CHROMIUM", "/usr/bin/chromium")
# A copy of the screenshot for a person to look at, only when asked (KCONVERT_SCREENSHOT=path): a test run leaves
# nothing in the temp folder.
SCREENSHOT = os.environ.get("KCONVERT_SCREENSHOT")
STATE_ORDER = ["pass", "warn", "fail", "error", "skipped"]  # the schema's enum order; a draft with no cell sorts last


def _missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI=true, so the browser test fails instead of skipping")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium; scripts/test.sh does it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (it is in the `test` extra: pip install 'kconvert-eagle3[test]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


class Opened:
    def __init__(self, browser, doc, tmp_path: Path, name: str = "matrix.html"):
        self.doc = doc
        self.path = tmp_path / name
        self.path.write_text(render_html(doc), encoding="utf-8")
        self.ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
        self.routed: list[str] = []  # every request the page attempted, as the router saw it
        self.seen: list[str] = []  # and as the page's request event saw it
        self.errors: list[str] = []
        self.dialogs: list[str] = []

        def route(r):
            self.routed.append(r.request.url)
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                r.abort()

        self.ctx.route("**/*", route)
        self.page = self.ctx.new_page()
        self.page.on("request", lambda req: self.seen.append(req.url))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(self.path.as_uri(), wait_until="load")

    def visible_names(self) -> list[str]:
        return self.page.eval_on_selector_all(
            "#grid tbody tr[data-i]", "rs => rs.filter(r => r.checkVisibility()).map(r => r.dataset.name)")

    def click_head(self, label: str):
        self.page.locator("#grid thead th button", has_text=label).first.click()

    def close(self):
        self.ctx.close()


@pytest.fixture
def opened(browser, tmp_path):
    pages: list[Opened] = []

    def open_(doc, name="matrix.html"):
        pages.append(Opened(browser, doc, tmp_path, name))
        return pages[-1]

    yield open_
    for p in pages:
        p.close()


def _label(cell) -> str:
    row = next(e["row"] for e in ENGINES if (e["engine"], e["engine_version"]) == (cell["engine"],
                                                                                  cell["engine_version"]))
    return row if cell.get("kind", "static") == "static" else f"{row} (live)"


def test_page_loads_offline_and_no_draft_name_runs(opened, tmp_path):
    p = opened(fleet_doc())
    non_file = [u for u in p.routed + p.seen if not u.startswith("file:")]
    assert non_file == [], f"the page tried to fetch {non_file}"
    assert set(p.routed) == {p.path.as_uri()}  # the page itself, nothing else (no image, font, script, style)
    assert p.errors == [] and p.dialogs == []  # its own script ran under its CSP; nothing else tried to
    assert p.page.evaluate("typeof window.__pwned") == "undefined"
    assert p.page.evaluate("document.scripts.length") == 1
    # the hostile name is in the grid as text
    row = p.page.locator("#grid tbody tr[data-i]", has=p.page.locator("th", has_text="window.__pwned=1"))
    assert row.locator("th a").inner_text() == SCRIPT_NAME
    # a cell opens on click: its findings with the rule's text
    doc = p.doc
    aq = p.page.locator("#grid tbody tr[data-i='0'] td[data-col='1']")
    summary = doc["rules"]["K404"]["summary"]
    assert not aq.get_by_text(summary, exact=False).is_visible()
    aq.locator("summary").click()
    assert aq.get_by_text(summary, exact=False).is_visible()
    shot = tmp_path / "matrix-page.png"
    p.page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    if SCREENSHOT:
        shutil.copyfile(shot, SCREENSHOT)


def test_grid_shows_every_cell_of_the_document(opened):
    p = opened(fleet_doc())
    heads = p.page.eval_on_selector_all("#grid thead th[data-col]",
                                        "hs => hs.map(h => [h.dataset.col, h.querySelector('button').textContent])")
    label = dict(heads)
    shown = p.page.eval_on_selector_all(
        "#grid tbody tr[data-i] [data-cell-state]",
        "cs => cs.map(c => [c.closest('tr').dataset.name, c.closest('td').dataset.col, c.dataset.cellState,"
        " c.querySelector('summary, span') && c.checkVisibility()])")
    assert all(vis for *_, vis in shown)
    got = sorted((name, label[col], state) for name, col, state, _ in shown)
    want = sorted((c["draft"], _label(c), c["state"]) for c in p.doc["cells"])
    assert got == want
    # every draft has a row, the draft without a target included
    assert p.visible_names() == [d["draft"] for d in p.doc["drafts"]]


def test_sorting_by_a_column_head_reorders_the_rows(opened):
    p = opened(fleet_doc())
    names = [d["draft"] for d in p.doc["drafts"]]
    p.click_head("Draft")
    assert p.visible_names() == sorted(names)
    p.click_head("Draft")
    assert p.visible_names() == sorted(names, reverse=True)
    # an engine column: by state in the schema's order, then the document's order
    col = ENGINES[1]
    state = {c["draft"]: c["state"] for c in p.doc["cells"]
             if (c["engine"], c["engine_version"], c.get("kind")) == (col["engine"], col["engine_version"], "static")}
    p.click_head(col["row"])
    want = sorted(names, key=lambda n: (STATE_ORDER.index(state[n]) if n in state else 5, names.index(n)))
    assert p.visible_names() == want
    # a text column with an empty value (the unknown target): by code point, ties in document order, the
    # draft without a target last both ways
    drafts = p.doc["drafts"]
    known = [d for d in drafts if d["target"]["id"]]
    unknown = [d["draft"] for d in drafts if not d["target"]["id"]]
    for reverse in (False, True):
        p.click_head("Target")
        by_target = sorted(known, key=lambda d: d["target"]["id"], reverse=reverse)  # sorted() is stable
        assert p.visible_names() == [d["draft"] for d in by_target] + unknown
    # the live column: drafts without a live cell stay last both ways
    p.click_head("vllm:0.32 (live)")
    first = p.visible_names()
    p.click_head("vllm:0.32 (live)")
    second = p.visible_names()
    live = [c["draft"] for c in p.doc["cells"] if c.get("kind") == "live"]
    assert set(first[:len(live)]) == set(second[:len(live)]) == set(live)
    assert first[:len(live)] == second[:len(live)][::-1]


def test_sorting_by_step_and_score(opened):
    p = opened(run_doc())
    drafts = p.doc["drafts"]
    p.click_head("Score")
    assert p.visible_names() == [d["draft"] for d in sorted(drafts, key=lambda d: d["score"]["acceptance_length"])]
    p.click_head("Score")
    assert p.visible_names() == [d["draft"] for d in sorted(drafts, key=lambda d: -d["score"]["acceptance_length"])]
    p.click_head("Step")
    stepped = sorted((d for d in drafts if d["step"] is not None), key=lambda d: d["step"])
    assert p.visible_names() == [d["draft"] for d in stepped] + [d["draft"] for d in drafts if d["step"] is None]
    p.click_head("Rank")
    ranked = sorted((d for d in drafts if d["rank"] is not None), key=lambda d: d["rank"])
    assert p.visible_names() == [d["draft"] for d in ranked] + [d["draft"] for d in drafts if d["rank"] is None]
    # the plot is drawn: one point per checkpoint with a step
    assert p.page.locator("svg.plot circle").count() == len(stepped)
    assert p.page.locator("svg.plot").is_visible()


def test_each_filter_hides_exactly_the_rows_it_should(opened):
    p = opened(fleet_doc())
    drafts, cells = p.doc["drafts"], p.doc["cells"]
    page = p.page

    def names(pred):
        return [d["draft"] for d in drafts if pred(d)]

    def cells_of(d, label=None):
        return [c for c in cells if c["draft"] == d["draft"] and (label is None or _label(c) == label)]

    page.select_option("#f-target", label="moonshotai/Kimi-K2.6")
    assert p.visible_names() == names(lambda d: d["target"]["id"] == "moonshotai/Kimi-K2.6")
    page.select_option("#f-target", label="(unknown)")
    assert p.visible_names() == names(lambda d: d["target"]["id"] is None) == ["runs/mystery-draft"]
    page.select_option("#f-target", value="")

    page.select_option("#f-producer", label="specforge")
    assert p.visible_names() == names(lambda d: d["producer"] == "specforge")
    page.select_option("#f-producer", value="")

    page.select_option("#f-state", label="✗ fail")
    assert p.visible_names() == names(lambda d: any(c["state"] == "fail" for c in cells_of(d)))

    # engine row: the other columns are hidden, and a row with no cell in that column too
    page.select_option("#f-state", value="")
    page.select_option("#f-engine", label="vllm:0.32 (live)")
    assert p.visible_names() == names(lambda d: bool(cells_of(d, "vllm:0.32 (live)")))
    visible_heads = page.eval_on_selector_all("#grid thead th[data-col]",
                                              "hs => hs.filter(h => h.checkVisibility()).map(h => h.textContent)")
    assert len(visible_heads) == 1 and visible_heads[0].startswith("vllm:0.32 (live)")

    # engine row and state together: the state in that column
    page.select_option("#f-engine", label="vllm:0.11")
    page.select_option("#f-state", label="⊘ error")
    assert p.visible_names() == names(lambda d: any(c["state"] == "error" for c in cells_of(d, "vllm:0.11")))

    page.click("#filters button[type=reset]")
    # a function, not an expression string: Playwright evals a polled string, and the page's CSP forbids eval
    page.wait_for_function("() => document.getElementById('f-count').textContent.startsWith('9 of')")
    assert p.visible_names() == names(lambda d: True)

    page.fill("#f-q", "KIMI")
    assert p.visible_names() == names(lambda d: "kimi" in d["draft"].lower())
    assert page.inner_text("#f-count") == f"{len(p.visible_names())} of {len(drafts)} drafts shown"


def _copy(p, button) -> str:
    """Click a copy button; what the clipboard then holds."""
    button.click()
    button.locator("xpath=.").evaluate("b => new Promise(r => { const t = setInterval(() => {"
                                       " if (b.textContent !== 'Copy') { clearInterval(t); r(); } }, 10); })")
    assert button.inner_text() == "Copied"
    return p.page.evaluate("navigator.clipboard.readText()")


def test_the_fix_command_copies(opened):
    p = opened(fleet_doc())
    p.ctx.grant_permissions(["clipboard-read", "clipboard-write"])
    aq = p.doc["drafts"][0]
    fix = p.page.locator("#draft-0 .fixes button.copy")
    assert fix.count() == 1
    assert _copy(p, fix) == aq["fix_command"]


# ------------------------------------------------------------------------------------------ wide and narrow (#31)

EXTRA_ROWS = [("vllm", "0.33"), ("vllm", "0.33/v1"), ("vllm", "0.32/v1"), ("sglang", "0.5.23"),
              ("sglang", "pre-25454")]


def _wide_doc() -> dict:
    """fleet_doc with eight engine columns (five more rows, a pass cell on each for every draft): wider than a
    1400 px window, as `matrix --engines all` is."""
    doc = fleet_doc()
    for eng, ver in EXTRA_ROWS:
        doc["engines"].append({"row": f"{eng}:{ver}", "engine": eng, "engine_version": ver, "installed": False})
        for d in doc["drafts"]:
            doc["cells"].append({"draft": d["draft"], "revision": d["revision"], "target": d["target"]["id"],
                                 "engine": eng, "engine_version": ver, "kind": "static", "state": "pass",
                                 "finding_ids": [], "findings": [], "fix": None, "message": None, "exit_code": 0,
                                 "cached": False, "seconds": 0.01})
    doc["summary"]["cells"] = len(doc["cells"])
    doc["summary"]["pass"] = sum(c["state"] == "pass" for c in doc["cells"])
    return doc


def _rect(p, selector: str) -> dict:
    return p.page.eval_on_selector(selector, "el => { const r = el.getBoundingClientRect();"
                                             " return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; }")


@pytest.mark.parametrize("width", [1400, 800])
def test_every_engine_column_is_reachable_with_the_draft_column_and_header_kept(opened, width):
    doc = _wide_doc()
    p = opened(doc)
    p.page.set_viewport_size({"width": width, "height": 900})
    heads = p.page.eval_on_selector_all("#grid thead th[data-col]", "hs => hs.length")
    assert heads == len(doc["engines"]) + 1  # + the live column of the installed row
    last = f"#grid thead th[data-col='{heads - 1}']"
    # the grid is wider than the window: the last column starts off-screen ...
    assert _rect(p, last)["right"] > width
    # ... and scrolling the grid's own box brings it fully into the window
    p.page.eval_on_selector(".wrap", "w => { w.scrollLeft = w.scrollWidth; }")
    r = _rect(p, last)
    assert r["left"] >= 0 and r["right"] <= width, r
    # the draft names stay in view beside it (sticky first column), not scrolled away with the grid
    wrap = _rect(p, ".wrap")
    name = _rect(p, "#grid tbody tr[data-i='0'] th[scope=row]")
    assert abs(name["left"] - wrap["left"]) < 2 and name["right"] < r["left"] + 1, (name, wrap)
    # scrolling down within the grid keeps the column heads at its top (sticky header)
    p.page.eval_on_selector(".wrap", "w => { w.style.maxHeight = '200px'; w.scrollTop = w.scrollHeight; }")
    head = _rect(p, "#grid thead th[data-sort='name']")
    assert abs(head["top"] - _rect(p, ".wrap")["top"]) < 2


def test_a_column_of_one_repeated_value_is_said_once_above_the_table(opened):
    doc = run_doc()  # one training run: one target and one producer on every row
    targets = {d["target"]["id"] for d in doc["drafts"]}
    producers = {d["producer"] for d in doc["drafts"]}
    assert len(targets) == 1 and len(producers) == 1 and len(doc["drafts"]) > 1
    p = opened(doc)
    labels = p.page.eval_on_selector_all("#grid thead th button", "bs => bs.map(b => b.textContent)")
    assert "Target" not in labels and "Producer" not in labels and "Step" in labels
    said = p.page.locator("#matrix p.constant").inner_text()
    assert targets.pop() in said and producers.pop() in said
    # a fleet with several targets keeps its Target column
    q = opened(fleet_doc(), name="fleet.html")
    assert "Target" in q.page.eval_on_selector_all("#grid thead th button", "bs => bs.map(b => b.textContent)")


# ------------------------------------------------------------------------------ readable at 1400 and 800 px (#48)

# Every text node with a digit is a figure carrying its unit (`.fig`), or part of a name, an identifier, a
# sentence of a message or rule, a command, a hash or the plot (whose axes are labelled).
UNMARKED_DIGITS = """() => {
  const skip = "script,style,svg,code,pre,select,.fig,.name,.id,.prose,.hash";
  const bad = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = w.nextNode(); n; n = w.nextNode()) {
    if (/[0-9]/.test(n.data) && !n.parentElement.closest(skip)) { bad.push(n.data.trim().slice(0, 80)); }
  }
  const unitless = [...document.querySelectorAll(".fig")]
    .filter(f => !f.dataset.unit || !f.textContent.includes(f.dataset.unit)).map(f => f.outerHTML);
  return {bad, unitless};
}"""

# A name's part is one line box, never broken inside (CSS that allows that is refused too), and it is either
# shown whole or cut with an ellipsis while the name's title holds the whole name.
NAME_PARTS = """() => [...document.querySelectorAll(".name")].filter(n => n.checkVisibility()).map(n => {
  const segs = [...n.querySelectorAll(".seg")];
  const css = getComputedStyle(segs[0]);
  return {title: n.title, text: segs.map(s => s.textContent).join(""),
          lines: segs.map(s => s.getClientRects().length), wrap: css.overflowWrap, brk: css.wordBreak,
          cut: segs.filter(s => s.scrollWidth > s.clientWidth + 1)
                   .map(s => getComputedStyle(s).textOverflow + ":" + s.textContent)};
})"""

# Whatever the markup: the elements that hold the text of the grid's draft names and producers allow no break
# inside a word (CSS overflow-wrap anywhere / break-word, word-break break-all would let one happen).
BREAKABLE_NAME_TEXT = """() => {
  const out = [];
  for (const th of document.querySelectorAll("#grid tbody th[scope=row], #grid tbody td:not(.cell)")) {
    const w = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let n = w.nextNode(); n; n = w.nextNode()) {
      const css = getComputedStyle(n.parentElement);
      if (n.data.trim() && (["anywhere", "break-word"].includes(css.overflowWrap) ||
                            ["break-all", "break-word"].includes(css.wordBreak))) { out.push(n.data); }
    }
  }
  return out;
}"""

# The words of every printed command: one line box each (a line breaker would break `-o` after its hyphen).
COMMAND_WORDS = """() => [...document.querySelectorAll("pre code .nw")].filter(w => w.checkVisibility())
  .filter(w => w.getClientRects().length !== 1).map(w => w.textContent)"""


def _labels_of_every_row(doc) -> list[str]:
    from kconvert.engines.expectations import ALL_ROWS

    rows = [f"{r.engine}:{r.version}" for r in ALL_ROWS]
    live = [f"{e['row']} (live)" for e in doc["engines"]
            if any(c.get("kind") == "live" and (c["engine"], c["engine_version"]) == (e["engine"], e["engine_version"])
                   for c in doc["cells"])]
    return rows + live


@pytest.mark.parametrize("width", [1400, 800])
def test_many_drafts_over_every_engine_row_read_at_this_width(opened, width):
    """18 drafts with long paths, Hub ids, a part too long for any column, a long producer name and sha256
    revisions, over every engine row kconvert has (read from its rows, so new releases are in): no page-wide
    horizontal scroll; the grid scrolls in its own box with the draft column sticky and every engine column
    reachable; names break only between their parts; revisions shortened with a copy button; units on every
    figure; one set of state chips."""
    doc = many_doc()
    p = opened(doc)
    page = p.page
    page.set_viewport_size({"width": width, "height": 900})
    p.ctx.grant_permissions(["clipboard-read", "clipboard-write"])

    def page_width() -> dict:
        return page.evaluate("() => ({scroll: document.documentElement.scrollWidth, view: window.innerWidth})")

    w = page_width()
    print(f"{width}x900: document scrollWidth {w['scroll']}, viewport {w['view']}")
    assert w["scroll"] <= w["view"], w

    # every engine row kconvert knows is a column, and the live column of the document
    labels = page.eval_on_selector_all("#grid thead th[data-col] button", "bs => bs.map(b => b.textContent)")
    assert labels == _labels_of_every_row(doc)
    # the grid is wider than its box and scrolls there, not on the page
    box = page.eval_on_selector(".wrap", "w => ({sw: w.scrollWidth, cw: w.clientWidth, ox: getComputedStyle(w).overflowX})")
    assert box["ox"] == "auto" and box["sw"] > box["cw"], box
    wrap = _rect(p, ".wrap")
    assert wrap["right"] <= width
    for i in range(len(labels)):
        head = f"#grid thead th[data-col='{i}']"
        page.eval_on_selector(head, "h => h.scrollIntoView({block: 'nearest', inline: 'nearest'})")
        r = _rect(p, head)
        assert wrap["left"] - 1 <= r["left"] and r["right"] <= wrap["right"] + 1, (labels[i], r, wrap)
        # the draft column stays at the box's left edge, beside the column scrolled to
        name = _rect(p, "#grid tbody tr[data-i='0'] th[scope=row]")
        assert abs(name["left"] - wrap["left"]) < 2 and name["right"] <= r["left"] + 1, (labels[i], name, r)
        assert page_width()["scroll"] <= width
    page.eval_on_selector(".wrap", "w => { w.scrollLeft = 0; }")

    # names break between their parts only; a part wider than its column ends in an ellipsis, the name whole in
    # its title
    assert page.evaluate(BREAKABLE_NAME_TEXT) == []
    names = page.evaluate(NAME_PARTS)
    shown = {n["title"] for n in names}
    assert {d["draft"] for d in doc["drafts"]} <= shown and LONG_PRODUCER in shown
    for n in names:
        assert n["text"] == n["title"], n
        assert set(n["lines"]) == {1}, n
        assert n["wrap"] not in ("anywhere", "break-word") and n["brk"] not in ("break-all", "break-word"), n
        assert all(c.startswith("ellipsis:") for c in n["cut"]), n
    cut = [c for n in names for c in n["cut"]]
    assert any(UNBROKEN in c for c in cut), cut  # the part no column can hold is cut, not broken
    assert page.evaluate(COMMAND_WORDS) == []

    # a revision is shortened inside its card, the whole in its title and on the clipboard
    local = next(n for n, d in enumerate(doc["drafts"]) if d["revision"].startswith("sha256:"))
    rev = doc["drafts"][local]["revision"]
    card = f"#draft-{local}"
    page.locator(card).scroll_into_view_if_needed()
    h = page.eval_on_selector(f"{card} .hash", "c => ({title: c.title, text: c.textContent, sw: c.scrollWidth, "
                                               "cw: c.clientWidth, r: c.getBoundingClientRect().right,"
                                               " card: c.closest('.draft').getBoundingClientRect().right})")
    assert h["title"] == h["text"] == rev and h["sw"] > h["cw"] and h["r"] <= h["card"], h
    assert _copy(p, page.locator(f"{card} .hash + button.copy")) == rev
    # the draft's fix commands: one per output, each with its rows, the first the one `next:` prints
    fixes = page.locator(f"{card} .fixes > li")
    assert fixes.count() == len(doc["drafts"][local]["fixes"])
    for i, f in enumerate(doc["drafts"][local]["fixes"]):
        item = fixes.nth(i)
        assert item.locator("code").inner_text() == f["command"]
        assert all(r in item.locator("p").inner_text() for r in f["rows"])
    assert _copy(p, fixes.nth(0).locator("button.copy")) == doc["drafts"][local]["fix_command"]

    # units: every figure says what it counts; the cache count is cells, the timings seconds
    marks = page.evaluate(UNMARKED_DIGITS)
    assert marks == {"bad": [], "unitless": []}, marks
    footer = page.inner_text("footer")
    t = doc["timings"]
    assert f"{t['from_cache']} cells from the cache" in footer and f"{t['computed']} cells computed" in footer
    assert f"{t['cells_s']:.2f} s" in footer and "from_cache" not in footer
    # one set of state chips, with the count of cells in each state
    assert page.locator("ul.badges").count() == 1
    chips = page.eval_on_selector_all("ul.badges .st", "cs => cs.map(c => c.textContent)")
    assert chips == [f"{SYM[s]} {s}: {doc['summary'][s]} cells" for s in STATE_ORDER]
    assert page_width()["scroll"] <= width
    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT.replace(".png", f"-{width}.png"))


SYM = {"pass": "✓", "warn": "!", "fail": "✗", "error": "⊘", "skipped": "–"}
