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
from typing import Any

from kconvert.report.figures import number, percent, series
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
line-height:1.4}
h1{margin:0 0 .2em;font-size:1.5em}h2{font-size:1.2em;margin:1.4em 0 .5em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:.2em 0}
code,pre{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em}
pre{background:#f4f4f4;padding:.4em .6em;white-space:pre-wrap;word-break:break-all;margin:.3em 0}
.meta{color:#555;margin:.2em 0}
.badges{list-style:none;padding:0;margin:.4em 0;display:flex;flex-wrap:wrap;gap:.4em}
.st{display:inline-block;padding:.05em .45em;border-left:.35em solid var(--c);border-radius:2px;white-space:nowrap}
.s-pass{--c:var(--pass);background:#d9f2e8}.s-warn{--c:var(--warn);background:#fcefcc}
.s-fail{--c:var(--fail);background:#f9d9c9}.s-error{--c:var(--error);background:#f2dcea}
.s-skipped{--c:var(--skipped);background:#eee}.s-none{--c:var(--none);background:#fff;color:#777}
.sym{font-weight:bold;display:inline-block;min-width:1em;text-align:center}
#filters{display:flex;flex-wrap:wrap;gap:.6em 1em;align-items:end;margin:.6em 0}
#filters label{display:flex;flex-direction:column;font-size:.85em;color:#333}
#filters select,#filters input{font:inherit;font-size:.95em;padding:.15em;max-width:16em}
.wrap{overflow:auto;max-height:85vh;max-width:100%}
.grid tbody th[scope=row]{position:sticky;left:0;z-index:1;background:#fff}
.grid thead th:first-child{left:0;z-index:3}
.constant{margin:.3em 0}
table.grid{border-collapse:collapse;min-width:40%}
.grid th,.grid td{border:1px solid #ddd;padding:.25em .4em;vertical-align:top;text-align:left;
overflow-wrap:anywhere}
.nw{white-space:nowrap}
.grid thead th{background:#f4f4f4;position:sticky;top:0;z-index:2;white-space:nowrap}
.grid tbody th{min-width:14em}.grid td.tgt{min-width:11em}
.grid thead th button{font:inherit;font-weight:bold;background:none;border:0;padding:0;cursor:pointer;
text-align:left}
.grid thead th[aria-sort=ascending] button::after{content:" \\25B2"}
.grid thead th[aria-sort=descending] button::after{content:" \\25BC"}
.grid td.cell{padding:0}.grid td.cell>div{padding:.25em .4em;border-left:.35em solid var(--c);min-width:8em}
.grid td.cell details[open]{min-width:24em}
.grid td.cell>div+div{border-top:1px dashed #bbb}
details>summary{cursor:pointer}
.findings{margin:.3em 0;padding-left:1.1em;max-width:42em;white-space:normal}
.rule{color:#444;font-size:.9em}
.sev-error{color:#a33}.sev-warning{color:#8a5a00}.sev-info{color:#246}
.muted{color:#777}
.draft{border:1px solid #ddd;padding:.5em .8em;margin:.6em 0;max-width:60em}
.draft dl,#rules dl{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;margin:.3em 0}
.draft dt,#rules dt{font-weight:bold}.draft dd,#rules dd{margin:0}
#rules dl{grid-template-columns:1fr}
.copy{font:inherit;font-size:.85em}
[hidden]{display:none!important}
svg.plot{max-width:100%;height:auto;background:#fff}
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


def _state_badge(state: str, extra: str = "") -> str:
    return (f'<span class="st s-{state}"><span class="sym" aria-hidden="true">{SYMBOL[state]}</span> '
            f'{state}{extra}</span>')


def _target_key(row: Row) -> str:
    return f"t:{row.target_id}" if row.target_id else "u"


def _producer_key(row: Row) -> str:
    p = row.draft.get("producer")
    return f"p:{p}" if p else "u"


def _acceptance_dl(acc: dict[str, Any]) -> str:
    items = [("AL", number(acceptance_length(acc))), ("acceptance rate", percent(acc.get("acceptance_rate"))),
             ("per position", series(acc.get("per_position")))]
    for key, label in (("num_speculative_tokens", "speculative tokens"), ("positions", "positions"),
                       ("trace", "trace"), ("verdict", "verdict")):
        if acc.get(key) is not None:
            items.append((label, str(acc[key])))
    return "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in items)


class _Page:
    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.g: Grid = grid(doc)
        self.rules: dict[str, Any] = {str(k): v for k, v in (doc.get("rules") or {}).items() if isinstance(v, dict)}
        self.rule_anchor = {rid: f"rule-{i}" for i, rid in enumerate(sorted(self.rules))}
        self.copy_n = 0

    def copyable(self, text: str) -> str:
        self.copy_n += 1
        cid = f"copy-{self.copy_n}"
        return (f'<pre><code id="{cid}">{e(text)}</code></pre>'
                f'<button type="button" class="copy" data-copy="{cid}">Copy</button>')

    def rule_text(self, rid: str) -> str:
        r = self.rules.get(rid)
        if r is None:
            return '<div class="rule muted">(no rule text in the document)</div>'
        head = " · ".join(e(x) for x in (r.get("name"), r.get("category"), r.get("severity")) if x)
        return (f'<div class="rule">{head}: {e(r.get("summary", ""))} '
                f'<a href="#{self.rule_anchor[rid]}">rule {e(rid)}</a></div>')

    def findings(self, cell: dict[str, Any]) -> str:
        fs = [f for f in cell.get("findings") or [] if isinstance(f, dict)]
        seen = {str(f.get("id")) for f in fs}
        items = []
        for f in fs:
            sev = f.get("severity") if f.get("severity") in ("error", "warning", "info") else "info"
            fix = ' <span class="muted">(fixable)</span>' if f.get("fixable") else ""
            items.append(f'<li><b class="sev-{sev}">{e(f.get("id", ""))}</b> {e(sev)}: {e(f.get("message", ""))}'
                         f'{fix}{self.rule_text(str(f.get("id")))}</li>')
        for rid in cell.get("finding_ids") or []:
            if str(rid) not in seen:
                items.append(f"<li><b>{e(rid)}</b>{self.rule_text(str(rid))}</li>")
        return f'<ul class="findings">{"".join(items)}</ul>' if items else ""

    def cell_body(self, cell: dict[str, Any]) -> str:
        parts = []
        if cell.get("message"):
            parts.append(f"<p>{e(cell['message'])}</p>")
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
                parts.append("<ul>" + "".join(f"<li>{e(d)}</li>" for d in decisions) + "</ul>")
            if fix.get("command"):
                parts.append(self.copyable(str(fix["command"])))
        for key, label in (("score", "score (offline)"), ("live", "live")):
            acc = cell.get(key)
            if isinstance(acc, dict):
                parts.append(f"<p>{label}:</p><dl>{_acceptance_dl(acc)}</dl>")
        facts = []
        if _is_int(cell.get("exit_code")):
            facts.append(f"exit code {cell['exit_code']}")
        if cell.get("cached") is not None:
            facts.append("cached" if cell.get("cached") else "computed")
        if isinstance(cell.get("seconds"), (int, float)) and not isinstance(cell.get("seconds"), bool):
            facts.append(f"{cell['seconds']:.2f} s")
        if facts:
            parts.append(f'<p class="muted">{e(", ".join(facts))}</p>')
        return "".join(parts)

    def cell(self, cell: dict[str, Any]) -> str:
        s = state_of(cell)
        ids = " ".join(str(i) for i in cell.get("finding_ids") or [])
        extra = f' <span class="ids">{e(ids)}</span>' if ids else ""
        for key in ("live", "score"):
            al = acceptance_length(cell.get(key))
            if al is not None:
                extra += f" <span>AL {e(number(al))}</span>"
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
        items = [f"{label[k]}: <code>{e(v)}</code>" for k, v in const.items() if v]
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
                         f'<button type="button">{e(c.label)}</button>{inst}</th>')
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
            badge = f' <span class="muted">({e(method)})</span>' if method and method != "eagle3" else ""
            err = ' <span class="muted">(draft error)</span>' if r.draft.get("error") else ""
            tgt = (f"{e(r.target_id)} <span class=\"muted\">({e(r.target_state)})</span>" if r.target_id
                   else '<span class="st s-none"><span class="sym" aria-hidden="true">?</span> unknown</span>')
            row = [f'<th scope="row"><a href="#draft-{n}">{e(r.name)}</a>{badge}{err}</th>']
            row += [td for k, td in (("target", f'<td class="tgt">{tgt}</td>'),
                                     ("producer", f'<td>{e(r.draft.get("producer") or "—")}</td>'),
                                     ("step", f"<td>{'' if step is None else step}</td>")) if k not in const]
            if g.has_score:
                row.append(f"<td>{e(score_text(r.draft) or '—')}</td>")
            if g.has_rank:
                row.append(f"<td>{'—' if rank is None else rank}</td>")
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
                + '<button type="reset">Reset</button><output id="f-count" aria-live="polite">'
                + f"{len(g.rows)} of {len(g.rows)} drafts shown</output></form>"
                + "<noscript><p>Sorting, filtering and copying need JavaScript; everything else reads without it."
                "</p></noscript>")

    def plot_html(self) -> str:
        svg = svg_plot(self.doc)
        if svg is None:
            return ""
        rows = "".join(f"<tr><td>{p['step']}</td><td>{e(number(p['al']))}</td>"
                       f"<td>{'—' if p['rank'] is None else p['rank']}</td><td>{e(p['draft'])}</td></tr>"
                       for p in plot_points(self.doc))
        trace = (self.doc.get("ranking") or {}).get("trace")
        note = f"<p class=\"meta\">Scored against the trace {e(trace)}. Hollow points are not ranked.</p>" if trace \
            else '<p class="meta">Hollow points are not ranked.</p>'
        return (f'<section id="plot"><h2>Score per training step</h2>{note}{svg}'
                '<details><summary>The plotted figures</summary><table class="grid"><thead><tr><th>Step</th>'
                f"<th>AL</th><th>Rank</th><th>Draft</th></tr></thead><tbody>{rows}</tbody></table></details>"
                "</section>")

    def draft_html(self, n: int, r: Row) -> str:
        d = r.draft
        items: list[tuple[str, str]] = []
        for key in ("revision", "source", "producer", "method"):
            if d.get(key) is not None:
                items.append((key, e(d[key])))
        t = d.get("target") if isinstance(d.get("target"), dict) else {}
        ev = [x for x in t.get("evidence") or []]
        ev_html = ("<ul>" + "".join(f"<li>{e(x)}</li>" for x in ev) + "</ul>") if ev else \
            '<span class="muted">no evidence recorded</span>'
        items.append(("target", f"{e(r.target_id or 'unknown')} ({e(r.target_state)}){ev_html}"))
        if _is_int(d.get("step")):
            items.append(("step", str(d["step"])))
        if isinstance(d.get("score"), dict):
            items.append(("score", f"<dl>{_acceptance_dl(d['score'])}</dl>"))
        if _is_int(d.get("rank")):
            items.append(("rank", str(d["rank"])))
        if d.get("error"):
            items.append(("error", e(d["error"])))
        cells = []
        for i, col in enumerate(self.g.columns):
            for c in r.cells.get(i, []):
                ids = " ".join(str(x) for x in c.get("finding_ids") or [])
                cells.append(f"<li>{e(col.label)}: {_state_badge(state_of(c))} {e(ids)}"
                             + (f" <span class=\"muted\">{e(c['message'])}</span>" if c.get("message") else "")
                             + "</li>")
        if cells:
            items.append(("cells", "<ul>" + "".join(cells) + "</ul>"))
        fix = d.get("fix_command")
        items.append(("fix command", self.copyable(str(fix)) if fix else '<span class="muted">none</span>'))
        dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
        return f'<article class="draft" id="draft-{n}"><h3>{e(r.name)}</h3><dl>{dl}</dl></article>'

    def rules_html(self) -> str:
        if not self.rules:
            return ""
        out = []
        for rid in sorted(self.rules):
            r = self.rules[rid]
            head = " · ".join(e(x) for x in (r.get("category"), r.get("severity")) if x)
            body = f"<p>{e(r.get('summary', ''))}</p>"
            if r.get("why"):
                body += f"<p><b>Why:</b> {e(r['why'])}</p>"
            if r.get("fix"):
                body += f"<p><b>Fix:</b> {e(r['fix'])}</p>"
            out.append(f'<dt id="{self.rule_anchor[rid]}">{e(rid)} {e(r.get("name", ""))} '
                       f'<span class="muted">{head}</span></dt><dd>{body}</dd>')
        return ('<section id="rules"><h2>Rules</h2><p class="meta">The <code>kconvert rules</code> text of every '
                f"finding the cells cite.</p><dl>{''.join(out)}</dl></section>")

    def page(self) -> str:
        doc, g = self.doc, self.g
        tool = doc.get("tool") or {}
        s = doc.get("summary") or {}
        title = f"kconvert matrix: {len(g.rows)} drafts × {len(g.columns)} engine columns"
        badges = "".join(f"<li>{_state_badge(k, f': {e(s.get(k, 0))}')}</li>" for k in STATES)
        legend = "".join(f"<li>{_state_badge(k)}</li>" for k in STATES)
        ranking = doc.get("ranking") or {}
        rank_line = ""
        if ranking.get("best") or ranking.get("trace"):
            rank_line = (f'<p class="meta">Ranked by scored AL against {e(ranking.get("trace") or "a trace")}; '
                         f'best: <code>{e(ranking.get("best") or "none")}</code></p>')
        timings = doc.get("timings") or {}
        t_line = ""
        if isinstance(timings, dict) and timings:
            t_line = "<p class=\"meta\">Wall seconds: " + e(", ".join(
                f"{k} {v:.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{k} {v}"
                for k, v in timings.items())) + "</p>"
        drafts = "".join(self.draft_html(n, r) for n, r in enumerate(g.rows))
        head = (f'<meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{e(_csp(JS))}">'
                '<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<title>{e(title)}</title><style>{CSS}</style>")
        body = (f"<header><h1>kconvert matrix</h1><p class=\"meta\">kconvert {e(tool.get('version', '?'))} · "
                f"{len(g.rows)} drafts × {len(g.columns)} engine columns · {e(s.get('cells', 0))} cells · "
                f"exit code {e(doc.get('exit_code', '?'))}</p>"
                f'<ul class="badges" aria-label="summary">{badges}</ul>{rank_line}</header>'
                f'<section id="legend"><h2>Legend</h2><ul class="badges">{legend}</ul><p class="meta">Each cell is '
                "a draft on an engine row: the rules (static) or verify on the installed engine (live). Click a "
                "cell to open its findings; click a column head to sort.</p></section>"
                f'<section id="matrix"><h2>Matrix</h2>{self.filters_html()}{self.constant_html()}{self.grid_html()}'
                "</section>"
                f'{self.plot_html()}<section id="drafts"><h2>Drafts</h2>'
                f'{drafts or "<p>No drafts.</p>"}</section>{self.rules_html()}<footer>{t_line}</footer>')
        return (f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>{body}'
                f"<script>{JS}</script></body></html>\n")


def render_html(doc: dict[str, Any]) -> str:
    """The matrix document as one self-contained HTML page."""
    return _Page(doc).page()
