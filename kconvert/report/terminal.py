"""Human rendering of reports with rich. Computing lives elsewhere; this only draws."""
from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def facts_table(doc: dict[str, Any]) -> Table:
    d = doc.get("draft") or {}
    t = doc.get("target") or {}
    tab = Table(title="Draft and target", show_lines=False, expand=False)
    tab.add_column("fact")
    tab.add_column("draft")
    tab.add_column("target")
    rows = [
        ("architectures", d.get("architectures"), t.get("architectures")),
        ("model_type", d.get("model_type"), t.get("text_model_type") or t.get("model_type")),
        ("layer family", d.get("layer_family"), "mla" if t.get("mla") else ("llama" if t else None)),
        ("layers", d.get("num_hidden_layers"), t.get("num_hidden_layers")),
        ("hidden size", d.get("hidden_size"), t.get("hidden_size")),
        ("target hidden (declared)", d.get("target_hidden_size"), None),
        ("fc shape", d.get("fc_shape"), None),
        ("aux layer ids", d.get("aux_layer_ids"), None),
        ("aux ids source / convention", f"{d.get('aux_layer_ids_source')} / {d.get('aux_convention')}", None),
        ("vocab", d.get("vocab_size"), t.get("vocab_size")),
        ("draft vocab / lm_head rows", f"{d.get('draft_vocab_size')} / {d.get('lm_head_rows')}", None),
        ("d2t / t2d / embeddings", f"{d.get('has_d2t')} / {d.get('has_t2d')} / {d.get('has_embeddings')}", None),
        ("max positions", d.get("max_position_embeddings"), t.get("max_position_embeddings")),
        ("dtype (config / tensors)", f"{d.get('torch_dtype')} / {d.get('tensor_dtypes')}", t.get("torch_dtype")),
        ("key layout", d.get("key_layout"), t.get("weight_prefix") or None),
    ]
    for name, a, b in rows:
        tab.add_row(name, _fmt(a), _fmt(b))
    return tab


def findings_table(findings: list[dict[str, Any]]) -> Table:
    tab = Table(title="Findings", expand=False, show_lines=True)
    tab.add_column("id", no_wrap=True)
    tab.add_column("severity", no_wrap=True)
    tab.add_column("category", no_wrap=True)
    tab.add_column("message")
    tab.add_column("evidence (observed → expected)")
    tab.add_column("fix", no_wrap=True)
    for f in findings:
        ev = "\n".join(f"{e['where']}: {_fmt(e.get('observed'))} → {_fmt(e.get('expected'))}"
                       for e in f.get("evidence", [])[:3])
        fix = "yes" if f["fixable"] and not f.get("needs_decision") else (
            "needs flag" if f.get("needs_decision") else "no")
        tab.add_row(f["id"], Text(f["severity"], style=SEV_STYLE[f["severity"]]), f["category"], f["message"], ev, fix)
    return tab


def render_report(console: Console, doc: dict[str, Any]) -> None:
    fmt = doc.get("format") or {}
    s = doc["summary"]
    head = Text.assemble(
        (f"{doc['subject']['source']}", "bold"), "  producer: ",
        (f"{fmt.get('producer')} ({fmt.get('confidence', 0):.0%})", "bold"),
        f"  engine: {doc['engine']['name']} {doc['engine'].get('rules_version', '')}",
    )
    evid = Text("evidence: " + "; ".join(fmt.get("evidence", [])), style="dim")
    verdict_style = "bold green" if doc["verdict"] == "pass" else "bold red"
    summary = Text.assemble((f"{s['errors']} error(s)", SEV_STYLE["error"] if s["errors"] else ""), ", ",
                            (f"{s['warnings']} warning(s)", "yellow" if s["warnings"] else ""), ", ",
                            f"{s['info']} info, {s.get('fixable', 0)} fixable by `kconvert fix`   verdict: ",
                            (doc["verdict"].upper(), verdict_style))
    console.print(Panel(Group(head, evid, summary), title=f"kconvert {doc['command']}"))
    console.print(facts_table(doc))
    if doc["findings"]:
        console.print(findings_table(doc["findings"]))
    needs = [f for f in doc["findings"] if f.get("needs_decision")]
    for f in needs:
        console.print(Text(f"{f['id']}: decide with {f['needs_decision']}", style="yellow"))
