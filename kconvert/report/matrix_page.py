"""A matrix document (schemas/matrix.schema.json) as one self-contained HTML page (`kconvert matrix --html`).

Pure: the document in, one HTML string out, the same bytes for the same document. Everything is inline (CSS, a
small vanilla script, the SVG plot drawn by matrix_plot.py); nothing is fetched to view it, and its
Content-Security-Policy forbids any fetch and runs only the page's own script (by its sha256), so even markup
that got past the escaping could neither load nor execute anything. Every string of the document is escaped
(draft names and messages come from the Hub or a file system and are untrusted).

The page: a summary, a legend, filters (target, producer, engine row, state, draft name), the grid (drafts x
engine rows, each cell a colour, a symbol and a word, sortable by any column head, its findings with the
`kconvert rules` text in a details block), the score plot, one section per draft (target evidence, scores, the
fix command with a copy button) and the rules the cells cite. Without JavaScript everything but sorting,
filtering and copying still reads.
"""
from __future__ import annotations

import base64
import hashlib
import html
import re
from typing import Any

from kconvert.report.figures import number, percent
from kconvert.report.matrix_plot import plot_points, svg_plot
from kconvert.report.matrix_table import STATES, SYMBOL, Grid, Row, acceptance_length, grid, score_text, state_of

STATE_ORDER = {s: i for i, s in enumerate(STATES)}


def e(v: Any) -> str:
    """Text for HTML (element content and quoted attributes alike); lone surrogates (valid in a JSON string,
    not in UTF-8) become U+FFFD so the page can be written."""
    s = str(v).encode("utf-8", "replace").decode("utf-8")
    return html.escape(s, quote=True)


# Okabe & Ito's palette (distinguishable with the common colour-vision deficiencies), as a strong border and a
# light fill under dark text; the symbol and the word carry the state on their own as well.
CSS = """
:root{--pass:#009E73;--warn:#E69F00;--fail:#D55E00;--error:#CC79A7;--skipped:#999;--none:#ccc}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1.2em;color:#1a1a1a;
line-height:1.4;overflow-wrap:break-word}
h1{margin:0 0 .2em;font-size:1.5em}h2{font-size:1.2em;margin:1.4em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:.2em 0}
code,pre{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em}
pre{background:#f4f4f4;padding:.4em .6em;white-space:pre-wrap;margin:.3em 0;max-width:100%;overflow-x:auto;
overflow-wrap:normal}
.meta{color:#555;margin:.2em 0}
.badges{list-style:none;padding:0;margin:.4em 0;display:flex;flex-wrap:wrap;gap:.4em}
.st{display:inline-block;padding:.05em .45em;border-left:.35em solid var(--c);border-radius:2px;white-space:nowrap}
.s-pass{--c:var(--pass);background:#d9f2e8}.s-warn{--c:var(--warn);background:#fcefcc}
.s-fail{--c:var(--fail);background:#f9d9c9}.s-error{--c:var(--error);background:#f2dcea}
.s-skipped{--c:var(--skipped);background:#eee}.s-none{--c:var(--none);background:#fff;color:#777}
.sym{font-weight:bold;display:inline-block;min-width:1em;text-align:center}
.fig{white-space:nowrap}
.name,.id{overflow-wrap:normal;word-break:normal}
.name .seg{display:inline-block;max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
vertical-align:bottom}
.cap{max-width:17em}.cap-s{max-width:11em}
.hash{display:inline-block;max-width:19ch;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
vertical-align:bottom}
#filters{display:flex;flex-wrap:wrap;gap:.6em 1em;align-items:end;margin:.6em 0}
#filters label{display:flex;flex-direction:column;font-size:.85em;color:#333}
#filters select,#filters input{font:inherit;font-size:.95em;padding:.15em;max-width:16em}
.wrap{overflow:auto;max-height:85vh;max-width:100%;border:1px solid #ddd;overscroll-behavior-x:contain}
.grid tbody th[scope=row]{position:sticky;left:0;z-index:1;background:#fff}
.grid thead th:first-child{left:0;z-index:3}
.constant{margin:.3em 0}
table.grid{border-collapse:collapse;font-size:.9em}
.grid th,.grid td{border:1px solid #ddd;padding:.25em .4em;vertical-align:top;text-align:left;overflow-wrap:normal}
.grid .prose{overflow-wrap:break-word}
.nw{white-space:nowrap}
.grid thead th{background:#f4f4f4;position:sticky;top:0;z-index:2}
.grid thead th button{font:inherit;font-weight:bold;background:none;border:0;padding:0;cursor:pointer;
text-align:left}
.grid thead th[aria-sort=ascending] button::after{content:" \\25B2"}
.grid thead th[aria-sort=descending] button::after{content:" \\25BC"}
.grid td.cell{padding:0}.grid td.cell>div{padding:.25em .4em;border-left:.35em solid var(--c);min-width:7.2em}
.grid td.cell details[open]{min-width:22em;max-width:32em}
.grid td.cell>div+div{border-top:1px dashed #bbb}
details>summary{cursor:pointer}
.grid td.cell summary{list-style:none}.grid td.cell summary::-webkit-details-marker{display:none}
.grid td.cell summary:hover,.grid td.cell details[open]>summary{text-decoration:underline dotted}
.findings{margin:.3em 0;padding-left:1.1em;max-width:42em;white-space:normal}
.rule{color:#444;font-size:.9em}
.sev-error{color:#a33}.sev-warning{color:#8a5a00}.sev-info{color:#246}
.muted{color:#777}
.draft{border:1px solid #ddd;padding:.5em .8em;margin:.6em 0;max-width:60em}
.draft dl,#rules dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.15em 1em;margin:.3em 0}
.draft dt,#rules dt{font-weight:bold}.draft dd,#rules dd{margin:0;min-width:0}
#rules dl{grid-template-columns:minmax(0,1fr)}
.fixes{list-style:none;padding:0;margin:0}.fixes>li+li{margin-top:.5em}
.copy{font:inherit;font-size:.85em}
[hidden]{display:none!important}
svg.plot{max-width:100%;height:auto;background:#fff}
@media (max-width:900px){body{margin:.6em}.cap{max-width:12em}.cap-s{max-width:9em}}
"""

# The page's only script: filters and sorting over the rendered rows (their data-* attributes), and the copy
# buttons. It reads and writes text and attributes only (never innerHTML), so no document string becomes markup.
JS = """(function(){"use strict";
function $(id){return document.getElementById(id);}
var grid=$("grid");
document.querySelectorAll("button[data-copy]").forEach(function(b){b.addEventListener("click",function(){
var src=$(b.getAttribute("data-copy"));
function done(){b.textContent="Copied";setTimeout(function(){b.textContent="Copy";},1500);}
function select(){var r=document.createRange();r.selectNodeContents(src);var s=window.getSelection();
s.removeAllRanges();s.addRange(r);try{if(document.execCommand("copy")){done();return;}}catch(x){}
b.textContent="Selected: press Ctrl+C";}
if(navigator.clipboard&&window.isSecureContext){navigator.clipboard.writeText(src.textContent).then(done,select);}
else{select();}});});
if(!grid){return;}
var tbody=grid.tBodies[0],rows=Array.prototype.slice.call(tbody.rows);
var f={t:$("f-target"),p:$("f-producer"),e:$("f-engine"),s:$("f-state"),q:$("f-q")};
function has(list,v){return (" "+list+" ").indexOf(" "+v+" ")>=0;}
function apply(){
var t=f.t.value,p=f.p.value,en=f.e.value,s=f.s.value,q=f.q.value.trim().toLowerCase(),shown=0;
grid.querySelectorAll("[data-col]").forEach(function(c){c.hidden=(en!==""&&c.getAttribute("data-col")!==en);});
rows.forEach(function(r){
var ok=(t===""||r.getAttribute("data-target")===t)&&(p===""||r.getAttribute("data-producer")===p)&&
(q===""||r.getAttribute("data-name").toLowerCase().indexOf(q)>=0);
if(ok&&(en!==""||s!=="")){ok=Array.prototype.some.call(r.querySelectorAll("td[data-col]"),function(c){
var st=c.getAttribute("data-state");
return (en===""||c.getAttribute("data-col")===en)&&st!=="none"&&(s===""||has(st,s));});}
r.hidden=!ok;if(ok){shown++;}});
$("f-count").textContent=shown+" of "+rows.length+" drafts shown";}
["t","p","e","s"].forEach(function(k){f[k].addEventListener("change",apply);});
f.q.addEventListener("input",apply);
$("filters").addEventListener("submit",function(ev){ev.preventDefault();});
$("filters").addEventListener("reset",function(){setTimeout(apply,0);});
grid.querySelectorAll("thead th[data-sort]").forEach(function(th){
th.querySelector("button").addEventListener("click",function(){
var k="data-s-"+th.getAttribute("data-sort"),num=th.getAttribute("data-type")==="num";
var d=th.getAttribute("aria-sort")==="ascending"?-1:1;
grid.querySelectorAll("thead th[aria-sort]").forEach(function(h){h.removeAttribute("aria-sort");});
th.setAttribute("aria-sort",d===1?"ascending":"descending");
rows.sort(function(a,b){var x=a.getAttribute(k),y=b.getAttribute(k),c;
if(x===""||y===""){if(x!==y){return x===""?1:-1;}c=0;}
else if(num){c=parseFloat(x)-parseFloat(y);}else{c=x<y?-1:(x>y?1:0);}
return c*d||(+a.getAttribute("data-i"))-(+b.getAttribute("data-i"));});
rows.forEach(function(r){tbody.appendChild(r);});});});
apply();})();"""


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
            "img-src 'none'; base-uri 'none'; form-action 'none'")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Where a name may break (issue 48): after a path separator, a hyphen or an underscore, never inside a word. A part
# still wider than its column is cut with an ellipsis (CSS), the whole name in the title.
_BREAK_AFTER = re.compile(r"(?<=[/\\_\-])")
_WORD_BREAK = re.compile(r"(?<=[/\\_])|(?<=[A-Za-z0-9]-)")


def name_html(text: Any) -> str:
    """A draft path, Hub id, producer, target or trace: parts that never break inside, the whole text as title."""
    parts = [p for p in _BREAK_AFTER.split(str(text)) if p] or [""]
    segs = "".join(f'<span class="seg">{e(p)}</span>' for p in parts)
    return f'<span class="name" title="{e(text)}">{segs}</span>'


def ident(text: Any) -> str:
    """An identifier (engine row, rule id, version): its digits are part of a name, not a figure."""
    return f'<span class="id">{e(text)}</span>'


def row_html(label: str) -> str:
    """An engine row's label (`sglang:post-25454 (live)`): it may break after the engine's colon."""
    engine, sep, rest = label.partition(":")
    return f'<span class="id nw">{e(engine + sep)}</span><wbr><span class="id nw">{e(rest)}</span>' if sep \
        else ident(label)


def fig(text: str, unit: str) -> str:
    """A figure with its unit in its own text (`12 cells`, `0.52 s`, `AL 2.380`, `exit code 1`)."""
    assert unit in text, (text, unit)
    return f'<span class="fig" data-unit="{e(unit)}">{e(text)}</span>'


def prose(text: Any, tag: str = "span") -> str:
    """A message, evidence or rule text: sentences whose numbers are their own (a PR, a layer id)."""
    return f'<{tag} class="prose">{e(text)}</{tag}>'


def al_fig(v: Any) -> str:
    return fig(f"AL {number(v)}", "AL")


def _state_badge(state: str, extra: str = "") -> str:
    return (f'<span class="st s-{state}"><span class="sym" aria-hidden="true">{SYMBOL[state]}</span> '
            f'{state}{extra}</span>')


def _target_key(row: Row) -> str:
    return f"t:{row.target_id}" if row.target_id else "u"


def _producer_key(row: Row) -> str:
    p = row.draft.get("producer")
    return f"p:{p}" if p else "u"


def _acceptance_dl(acc: dict[str, Any]) -> str:
    al = acceptance_length(acc)
    items = [("AL", "n/a" if al is None else fig(f"{number(al)} tokens per step", "tokens per step")),
             ("acceptance rate", fig(percent(acc.get("acceptance_rate")), "%") if _is_num(acc.get("acceptance_rate"))
              else "n/a"),
             ("per position", fig(" / ".join(percent(x) for x in acc.get("per_position") or []), "%")
              if acc.get("per_position") else "n/a")]
    if _is_int(acc.get("num_speculative_tokens")):
        items.append(("speculative tokens", fig(f"{acc['num_speculative_tokens']} per step", "per step")))
    if _is_int(acc.get("positions")):
        items.append(("positions", fig(f"{acc['positions']} positions", "positions")))
    if acc.get("trace") is not None:
        items.append(("trace", name_html(acc["trace"])))
    if acc.get("verdict") is not None:
        items.append(("verdict", prose(acc["verdict"])))
    return "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in items)


# The keys `kconvert matrix` writes in `timings` (kconvert.matrix.build.run_matrix); any other number there is wall
# seconds, as the schema says.
TIMING_LABELS = {"gather_s": "gathering the drafts", "cells_s": "computing the cells", "total_s": "in all"}
TIMING_COUNTS = {"computed": "computed", "from_cache": "from the cache"}


def timings_html(timings: dict[str, Any]) -> str:
    """`Timings: gathering the drafts 0.52 s, ...; 120 cells computed, 12 cells from the cache; executor local`:
    seconds as seconds, cell counts as counts (issue 48: "from_cache 12.00" read as seconds)."""
    secs, counts, other = [], [], []
    for k, v in timings.items():
        if k in TIMING_COUNTS and _is_num(v):
            counts.append(fig(f"{v:g} cells {TIMING_COUNTS[k]}", "cells"))
        elif _is_num(v):
            secs.append(f"{e(TIMING_LABELS.get(k, k))} {fig(f'{v:.2f} s', 's')}")
        else:
            other.append(f"{e(k)} {prose(v)}")
    parts = [", ".join(x) for x in (secs, counts, other) if x]
    return '<p class="meta">Timings: ' + "; ".join(parts) + "</p>" if parts else ""


def _fixes(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The draft's fix commands (`drafts[].fixes`, kconvert.matrix.fixes), or its one `fix_command` in a document
    written before them."""
    fixes = [f for f in d.get("fixes") or [] if isinstance(f, dict) and f.get("command")]
    if not fixes and d.get("fix_command"):
        fixes = [{"command": d["fix_command"], "rows": [], "why": ""}]
    return fixes


class _Page:
    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.g: Grid = grid(doc)
        self.rules: dict[str, Any] = {str(k): v for k, v in (doc.get("rules") or {}).items() if isinstance(v, dict)}
        self.rule_anchor = {rid: f"rule-{i}" for i, rid in enumerate(sorted(self.rules))}
        self.copy_n = 0

    def copy_id(self) -> str:
        self.copy_n += 1
        return f"copy-{self.copy_n}"

    def copyable(self, text: str) -> str:
        """A command in a box, breaking at its spaces and after path separators, and its copy button."""
        cid = self.copy_id()
        # a word breaks only after a separator inside it (`/`, `_`, a hyphen after a letter or digit), an option
        # never (a line breaker would break "-o" after its hyphen): the text copied is the command's
        # own, <wbr> adds no character
        body = " ".join("<wbr>".join(f'<span class="nw">{e(p)}</span>'
                                     for p in ([word] if word.startswith("-") else _WORD_BREAK.split(word)) if p)
                        for word in str(text).split(" "))
        return (f'<pre><code id="{cid}">{body}</code></pre>'
                f'<button type="button" class="copy" data-copy="{cid}">Copy</button>')

    def hash_html(self, text: str) -> str:
        """A revision (a 40-hex commit, a sha256 digest) shown shortened, the whole in its title and its copy."""
        cid = self.copy_id()
        return (f'<code class="hash" id="{cid}" title="{e(text)}">{e(text)}</code> '
                f'<button type="button" class="copy" data-copy="{cid}">Copy</button>')

    def rule_text(self, rid: str) -> str:
        r = self.rules.get(rid)
        if r is None:
            return '<div class="rule muted">(no rule text in the document)</div>'
        head = " · ".join(e(x) for x in (r.get("name"), r.get("category"), r.get("severity")) if x)
        return (f'<div class="rule prose">{head}: {e(r.get("summary", ""))} '
                f'<a href="#{self.rule_anchor[rid]}">rule {e(rid)}</a></div>')

    def findings(self, cell: dict[str, Any]) -> str:
        fs = [f for f in cell.get("findings") or [] if isinstance(f, dict)]
        seen = {str(f.get("id")) for f in fs}
        items = []
        for f in fs:
            sev = f.get("severity") if f.get("severity") in ("error", "warning", "info") else "info"
            fix = ' <span class="muted">(fixable)</span>' if f.get("fixable") else ""
            items.append(f'<li><b class="sev-{sev} id">{e(f.get("id", ""))}</b> {e(sev)}: '
                         f'{prose(f.get("message", ""))}{fix}{self.rule_text(str(f.get("id")))}</li>')
        for rid in cell.get("finding_ids") or []:
            if str(rid) not in seen:
                items.append(f'<li><b class="id">{e(rid)}</b>{self.rule_text(str(rid))}</li>')
        return f'<ul class="findings">{"".join(items)}</ul>' if items else ""

    def cell_body(self, cell: dict[str, Any]) -> str:
        parts = []
        if cell.get("message"):
            parts.append(prose(cell["message"], "p"))
        parts.append(self.findings(cell))
        fix = cell.get("fix") if isinstance(cell.get("fix"), dict) else None
        if fix:
            if fix.get("available"):
                how = "certain" if fix.get("certain", True) else "needs a decision"
                parts.append(f"<p>fix: available, {how}</p>")
            else:
                parts.append("<p>fix: not available</p>")
            decisions = [d for d in fix.get("decisions") or []]
            if decisions:
                parts.append("<ul>" + "".join(f"<li>{prose(d)}</li>" for d in decisions) + "</ul>")
            if fix.get("command"):
                if fix.get("why"):
                    parts.append(prose(f"on this row: {fix['why']}", "p"))
                parts.append(self.copyable(str(fix["command"])))
        for key, label in (("score", "score (offline)"), ("live", "live")):
            acc = cell.get(key)
            if isinstance(acc, dict):
                parts.append(f"<p>{label}:</p><dl>{_acceptance_dl(acc)}</dl>")
        facts = []
        if _is_int(cell.get("exit_code")):
            facts.append(fig(f"exit code {cell['exit_code']}", "exit code"))
        if cell.get("cached") is not None:
            facts.append("cached" if cell.get("cached") else "computed")
        if _is_num(cell.get("seconds")):
            facts.append(fig(f"{cell['seconds']:.2f} s", "s"))
        if facts:
            parts.append(f'<p class="muted">{", ".join(facts)}</p>')
        return "".join(parts)

    def cell(self, cell: dict[str, Any]) -> str:
        s = state_of(cell)
        ids = " ".join(str(i) for i in cell.get("finding_ids") or [])
        extra = f' <span class="ids id">{e(ids)}</span>' if ids else ""
        for key in ("live", "score"):
            al = acceptance_length(cell.get(key))
            if al is not None:
                extra += f" {al_fig(al)}"
        summary = f'<span class="nw"><span class="sym" aria-hidden="true">{SYMBOL[s]}</span> {s}</span>{extra}'
        body = self.cell_body(cell)
        inner = f"<details><summary>{summary}</summary>{body}</details>" if body else summary
        return f'<div class="s-{s}" data-cell-state="{s}">{inner}</div>'

    def constant_columns(self) -> dict[str, str]:
        """The descriptive columns whose value is the same on every row (of two or more): shown once above the
        table instead of repeated on every row (a matrix of one target's checkpoints has one Target value)."""
        rows = self.g.rows
        if len(rows) < 2:
            return {}
        values = {
            "target": [r.target_id for r in rows],
            "producer": [r.draft.get("producer") for r in rows],
            "step": [r.draft.get("step") if _is_int(r.draft.get("step")) else None for r in rows],
        }
        return {k: ("" if v[0] is None else str(v[0])) for k, v in values.items()
                if len({repr(x) for x in v}) == 1 and (v[0] is not None or k == "step")}

    def constant_html(self) -> str:
        const = self.constant_columns()
        label = {"target": "Target", "producer": "Producer", "step": "Step"}
        items = [f"{label[k]}: " + (fig(f"step {v}", "step") if k == "step" else f"<code>{name_html(v)}</code>")
                 for k, v in const.items() if v]
        return (f'<p class="constant meta">The same for every draft: {" · ".join(items)}</p>' if items else "")

    def grid_html(self) -> str:
        g = self.g
        const = self.constant_columns()
        heads = ['<th scope="col" data-sort="name"><button type="button">Draft</button></th>']
        heads += [f'<th scope="col" data-sort="{k}"{t}><button type="button">{lab}</button></th>'
                  for k, lab, t in (("target", "Target", ""), ("producer", "Producer", ""),
                                    ("step", "Step", ' data-type="num"')) if k not in const]
        if g.has_score:
            heads.append('<th scope="col" data-sort="score" data-type="num"><button type="button">Score</button></th>')
        if g.has_rank:
            heads.append('<th scope="col" data-sort="rank" data-type="num"><button type="button">Rank</button></th>')
        for i, c in enumerate(g.columns):
            inst = ' <span class="muted">(installed)</span>' if c.installed else ""
            heads.append(f'<th scope="col" data-col="{i}" data-sort="c{i}" data-type="num">'
                         f'<button type="button" aria-label="{e(c.label)}">{row_html(c.label)}</button>{inst}</th>')
        body = []
        for n, r in enumerate(g.rows):
            step = r.draft.get("step") if _is_int(r.draft.get("step")) else None
            al = acceptance_length(r.draft.get("score"))
            rank = r.draft.get("rank") if _is_int(r.draft.get("rank")) else None
            attrs = {"data-i": n, "data-name": r.name, "data-target": _target_key(r),
                     "data-producer": _producer_key(r), "data-s-name": r.name,
                     "data-s-target": r.target_id or "", "data-s-producer": r.draft.get("producer") or "",
                     "data-s-step": "" if step is None else step, "data-s-score": "" if al is None else repr(al),
                     "data-s-rank": "" if rank is None else rank}
            tds = []
            for i in range(len(g.columns)):
                cells = r.cells.get(i, [])
                # a draft with no cell in the column sorts last either way, as an empty number does
                attrs[f"data-s-c{i}"] = max((STATE_ORDER[state_of(c)] for c in cells), default="")
                if cells:
                    states = " ".join(sorted({state_of(c) for c in cells}, key=STATE_ORDER.get))
                    # the td takes the worst state's fill so the colour covers the whole grid cell
                    worst = max((state_of(c) for c in cells), key=STATE_ORDER.get)
                    tds.append(f'<td class="cell s-{worst}" data-col="{i}" data-state="{states}">'
                               + "".join(self.cell(c) for c in cells) + "</td>")
                else:
                    tds.append(f'<td class="cell s-none" data-col="{i}" data-state="none"><div class="s-none">'
                               'no cell</div></td>')
            method = r.draft.get("method")
            badge = f' <span class="muted">({ident(method)})</span>' if method and method != "eagle3" else ""
            err = ' <span class="muted">(draft error)</span>' if r.draft.get("error") else ""
            tgt = (f'<div class="cap">{name_html(r.target_id)} <span class="muted">({e(r.target_state)})</span></div>'
                   if r.target_id else
                   '<span class="st s-none"><span class="sym" aria-hidden="true">?</span> unknown</span>')
            producer = r.draft.get("producer")
            row = [f'<th scope="row"><div class="cap"><a href="#draft-{n}">{name_html(r.name)}</a>{badge}{err}'
                   "</div></th>"]
            row += [td for k, td in (("target", f'<td class="tgt">{tgt}</td>'),
                                     ("producer", f'<td><div class="cap-s">{name_html(producer)}</div></td>'
                                      if producer else "<td>—</td>"),
                                     ("step", f"<td>{'' if step is None else fig(f'step {step}', 'step')}</td>"))
                    if k not in const]
            if g.has_score:
                row.append(f"<td>{fig(score_text(r.draft), 'AL') if score_text(r.draft) else '—'}</td>")
            if g.has_rank:
                row.append(f"<td>{'—' if rank is None else fig(f'rank {rank}', 'rank')}</td>")
            attr = " ".join(f'{k}="{e(v)}"' for k, v in attrs.items())
            body.append(f"<tr {attr}>{''.join(row)}{''.join(tds)}</tr>")
        if not g.rows:
            body.append(f'<tr class="empty"><td colspan="{len(heads)}">No drafts in this matrix.</td></tr>')
        return (f'<div class="wrap"><table id="grid" class="grid"><thead><tr>{"".join(heads)}</tr></thead>'
                f'<tbody>{"".join(body)}</tbody></table></div>')

    def filters_html(self) -> str:
        g = self.g
        targets = sorted({r.target_id for r in g.rows if r.target_id})
        producers = sorted({str(r.draft.get("producer")) for r in g.rows if r.draft.get("producer")})

        def select(fid: str, label: str, options: list[tuple[str, str]]) -> str:
            opts = "".join(f'<option value="{e(v)}">{e(t)}</option>' for v, t in options)
            return f'<label for="{fid}">{label}<select id="{fid}"><option value="">all</option>{opts}</select></label>'

        t_opts = [(f"t:{t}", t) for t in targets]
        if any(not r.target_id for r in g.rows):
            t_opts.append(("u", "(unknown)"))
        p_opts = [(f"p:{p}", p) for p in producers]
        if any(not r.draft.get("producer") for r in g.rows):
            p_opts.append(("u", "(unknown)"))
        return ('<form id="filters" role="search">'
                + select("f-target", "Target", t_opts) + select("f-producer", "Producer", p_opts)
                + select("f-engine", "Engine row", [(str(i), c.label) for i, c in enumerate(g.columns)])
                + select("f-state", "State", [(s, f"{SYMBOL[s]} {s}") for s in STATES])
                + '<label for="f-q">Draft name contains<input id="f-q" type="search" autocomplete="off"></label>'
                + '<button type="reset">Reset</button><output id="f-count" class="fig" data-unit="drafts" '
                + f'aria-live="polite">{len(g.rows)} of {len(g.rows)} drafts shown</output></form>'
                + "<noscript><p>Sorting, filtering and copying need JavaScript; everything else reads without it."
                "</p></noscript>")

    def plot_html(self) -> str:
        svg = svg_plot(self.doc)
        if svg is None:
            return ""
        rows = "".join("<tr><td>" + fig(f"step {p['step']}", "step") + f"</td><td>{al_fig(p['al'])}</td><td>"
                       + ("—" if p["rank"] is None else fig(f"rank {p['rank']}", "rank"))
                       + f"</td><td>{name_html(p['draft'])}</td></tr>"
                       for p in plot_points(self.doc))
        trace = (self.doc.get("ranking") or {}).get("trace")
        note = f"<p class=\"meta\">Scored against the trace {name_html(trace)}. Hollow points are not ranked.</p>" \
            if trace else '<p class="meta">Hollow points are not ranked.</p>'
        return (f'<section id="plot"><h2>Score per training step</h2>{note}{svg}'
                '<details><summary>The plotted figures</summary><table class="grid"><thead><tr><th>Step</th>'
                f"<th>AL</th><th>Rank</th><th>Draft</th></tr></thead><tbody>{rows}</tbody></table></details>"
                "</section>")

    def fixes_html(self, d: dict[str, Any]) -> str:
        """Every fix command of the draft, one per output, each with the rows it serves; the first is the one the
        terminal's `next:` line prints."""
        fixes = _fixes(d)
        if not fixes:
            return '<span class="muted">none</span>'
        items = []
        for i, f in enumerate(fixes):
            head = "next" if i == 0 else "another output"
            # the comment names the rows the command serves (kconvert.matrix.fixes); an older document's has none
            rows = ", ".join(ident(r) for r in f.get("rows") or [])
            said = prose(f["why"]) if f.get("why") else (f"for {rows}" if rows else "")
            items.append(f'<li><p class="meta">{head}{": " if said else ""}{said}</p>'
                         f'{self.copyable(str(f["command"]))}</li>')
        return f'<ul class="fixes">{"".join(items)}</ul>'

    def draft_html(self, n: int, r: Row) -> str:
        d = r.draft
        items: list[tuple[str, str]] = []
        if d.get("revision") is not None:
            items.append(("revision", self.hash_html(str(d["revision"]))))
        if d.get("source") is not None:
            items.append(("source", e(d["source"])))
        if d.get("producer") is not None:
            items.append(("producer", name_html(d["producer"])))
        if d.get("method") is not None:
            items.append(("method", ident(d["method"])))
        t = d.get("target") if isinstance(d.get("target"), dict) else {}
        ev = [x for x in t.get("evidence") or []]
        ev_html = ("<ul>" + "".join(f"<li>{prose(x)}</li>" for x in ev) + "</ul>") if ev else \
            '<span class="muted">no evidence recorded</span>'
        tname = name_html(r.target_id) if r.target_id else "unknown"
        items.append(("target", f"{tname} ({e(r.target_state)}){ev_html}"))
        if _is_int(d.get("step")):
            items.append(("step", fig(f"step {d['step']}", "step")))
        if isinstance(d.get("score"), dict):
            items.append(("score", f"<dl>{_acceptance_dl(d['score'])}</dl>"))
        if _is_int(d.get("rank")):
            items.append(("rank", fig(f"rank {d['rank']}", "rank")))
        if d.get("error"):
            items.append(("error", prose(d["error"])))
        cells = []
        for i, col in enumerate(self.g.columns):
            for c in r.cells.get(i, []):
                ids = " ".join(str(x) for x in c.get("finding_ids") or [])
                cells.append(f"<li>{ident(col.label)}: {_state_badge(state_of(c))} {ident(ids) if ids else ''}"
                             + (f" <span class=\"muted\">{prose(c['message'])}</span>" if c.get("message") else "")
                             + "</li>")
        if cells:
            items.append(("cells", "<ul>" + "".join(cells) + "</ul>"))
        items.append(("fix", self.fixes_html(d)))
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
        return f'<article class="draft" id="draft-{n}"><h3>{name_html(r.name)}</h3><dl>{dl}</dl></article>'

    def rules_html(self) -> str:
        if not self.rules:
            return ""
        out = []
        for rid in sorted(self.rules):
            r = self.rules[rid]
            head = " · ".join(e(x) for x in (r.get("category"), r.get("severity")) if x)
            body = prose(r.get("summary", ""), "p")
            if r.get("why"):
                body += f"<p><b>Why:</b> {prose(r['why'])}</p>"
            if r.get("fix"):
                body += f"<p><b>Fix:</b> {prose(r['fix'])}</p>"
            out.append(f'<dt id="{self.rule_anchor[rid]}">{ident(rid)} {prose(r.get("name", ""))} '
                       f'<span class="muted">{head}</span></dt><dd>{body}</dd>')
        return ('<section id="rules"><h2>Rules</h2><p class="meta">The <code>kconvert rules</code> text of every '
                f"finding the cells cite.</p><dl>{''.join(out)}</dl></section>")

    def page(self) -> str:
        doc, g = self.doc, self.g
        tool = doc.get("tool") or {}
        s = doc.get("summary") or {}
        title = f"kconvert matrix: {len(g.rows)} drafts × {len(g.columns)} engine columns"
        # the one set of state chips: each state's colour, symbol and word with its count (the legend is these)
        badges = "".join(f"<li>{_state_badge(k, ': ' + fig(f'{s.get(k, 0)} cells', 'cells'))}</li>" for k in STATES)
        ranking = doc.get("ranking") or {}
        rank_line = ""
        if ranking.get("best") or ranking.get("trace"):
            trace = name_html(ranking["trace"]) if ranking.get("trace") else "a trace"
            best = f'<code>{name_html(ranking["best"])}</code>' if ranking.get("best") else "none"
            rank_line = f'<p class="meta">Ranked by scored AL against {trace}; best: {best}</p>'
        timings = doc.get("timings") or {}
        t_line = timings_html(timings) if isinstance(timings, dict) else ""
        drafts = "".join(self.draft_html(n, r) for n, r in enumerate(g.rows))
        head = (f'<meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{e(_csp(JS))}">'
                '<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{e(title)}</title><style>{CSS}</style>")
        counts = " · ".join([fig(f"{len(g.rows)} drafts", "drafts") + " × "
                             + fig(f"{len(g.columns)} engine columns", "engine columns"),
                             fig(f"{s.get('cells', 0)} cells", "cells"),
                             fig(f"exit code {doc.get('exit_code', '?')}", "exit code")])
        body = (f"<header><h1>kconvert matrix</h1><p class=\"meta\">kconvert {ident(tool.get('version', '?'))} · "
                f'{counts}</p><ul class="badges" aria-label="cells per state">{badges}</ul>'
                '<p class="meta">Each cell is a draft on an engine row: the rules (static) or verify on the installed '
                "engine (live). Each state has a colour, a symbol and a word. AL is the mean acceptance length: "
                "tokens accepted per draft step, the bonus token included. Click a cell to open its findings; click "
                f"a column head to sort.</p>{rank_line}</header>"
                f'<section id="matrix"><h2>Matrix</h2>{self.filters_html()}{self.constant_html()}{self.grid_html()}'
                "</section>"
                f'{self.plot_html()}<section id="drafts"><h2>Drafts</h2>'
                f'{drafts or "<p>No drafts.</p>"}</section>{self.rules_html()}<footer>{t_line}</footer>')
        return (f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>{body}'
                f"<script>{JS}</script></body></html>\n")


def render_html(doc: dict[str, Any]) -> str:
    """The matrix document as one self-contained HTML page."""
    return _Page(doc).page()
