"""The full view (rich), readable down to 80 columns: computing lives elsewhere, this only draws.

At 80 columns (rich's width when stdout is not a terminal) nothing that carries meaning is cut: findings are a
list whose message and evidence wrap under their header instead of table cells, the verdict has a line of its
own, table cells fold instead of ending in an ellipsis, and commands are printed unwrapped so they copy whole.

The document arrives with its strings escaped (`kconvert.cli._output.emit_report`, kconvert.guard.text). Its
strings reach rich only inside `Text` objects (`_t`, `Text.assemble`, table cells and titles), which rich never
reads as markup or emoji codes: a config value `[bold red]x[/]` or `:smile:` prints as written. kconvert's own
styling is given as styles, never as markup around a document string.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kconvert.engines.output_health import health_line
from kconvert.engines.serve_lines import serve_lines
from kconvert.report.concise import dry_run_lines, evidence_text, finding_path, one_line
from kconvert.report.figures import attention_text, number, percent, runner_line, series

SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _t(text: Any, style: str = "") -> Text:
    """A document string as rich shows it: literally (a Text is never parsed for markup or emoji codes)."""
    return Text(one_line(text), style=style)


def _title(text: str) -> Text:
    """A table title holding document strings, in rich's title style (a str title would be read as markup)."""
    return Text(one_line(text), style="table.title")


def _verdict(doc: dict[str, Any], suffix: str = "") -> Text:
    passed = doc["verdict"] == "pass"
    return Text.assemble("verdict: ", ("PASS" if passed else "FAIL", "bold green" if passed else "bold red"), suffix)


def _check(chk: dict[str, Any]) -> Text:
    return Text.assemble(("pass", "green") if chk["passed"] else ("FAIL", "red"), " ", one_line(chk["message"]))


def _fmt(v: Any) -> str:
    """A fact as a reader wants it: lists without brackets and quotes, floats short, None as a dash."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v):
            return ", ".join(v) if v else "[]"
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items())
    return one_line(v)


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], label_width: int | None = None) -> Table:
    tab = Table(title=title, box=box.SIMPLE_HEAD, expand=False, title_justify="left", pad_edge=False)
    for i, col in enumerate(columns):
        # Values keep their longest word whole (an architecture name, a config key) where the width allows: the
        # short labels of the first column wrap first. Past that, values fold rather than end in an ellipsis.
        longest = max((len(w) for r in rows for w in r[i].split()), default=0) if i else None
        tab.add_column(col, overflow="fold", no_wrap=False, min_width=longest, max_width=None if i else label_width,
                       style="bold" if i == 0 else None)
    for r in rows:
        tab.add_row(*(Text(c) for c in r))
    return tab


def facts_table(doc: dict[str, Any]) -> Group:
    d = doc.get("draft") or {}
    t = doc.get("target") or {}
    rows = [
        ("architectures", d.get("architectures"), t.get("architectures")),
        ("model_type", d.get("model_type"), t.get("text_model_type") or t.get("model_type")),
        ("layer family", d.get("layer_family"), "mla" if t.get("mla") else ("llama" if t else None)),
        ("layers", d.get("num_hidden_layers"), t.get("num_hidden_layers")),
        ("hidden size", d.get("hidden_size"), t.get("hidden_size")),
        ("vocab", d.get("vocab_size"), t.get("vocab_size")),
        ("max positions", d.get("max_position_embeddings"), t.get("max_position_embeddings")),
        ("dtype", d.get("torch_dtype"), t.get("torch_dtype")),
        ("key layout / prefix", d.get("key_layout"), t.get("weight_prefix") or None),
    ]
    both = _table("Draft and target", ("fact", "draft", "target"), [(n, _fmt(a), _fmt(b)) for n, a, b in rows],
                  label_width=13)
    only = [
        ("target hidden (declared)", d.get("target_hidden_size")),
        ("fc shape", d.get("fc_shape")),
        ("aux layer ids", d.get("aux_layer_ids")),
        ("aux ids read from", d.get("aux_layer_ids_source")),
        ("aux ids convention", d.get("aux_convention")),
        ("draft vocab / lm_head rows", f"{_fmt(d.get('draft_vocab_size'))} / {_fmt(d.get('lm_head_rows'))}"),
        ("d2t / t2d / embeddings", f"{_fmt(d.get('has_d2t'))} / {_fmt(d.get('has_t2d'))} / "
                                   f"{_fmt(d.get('has_embeddings'))}"),
        ("tensor dtypes", d.get("tensor_dtypes")),
    ]
    draft = _table("Draft only", ("fact", "value"), [(n, _fmt(v)) for n, v in only])
    return Group(both, draft)


def _fix_label(f: dict[str, Any]) -> Text:
    if f.get("needs_decision"):
        return Text("needs a decision", style="yellow")
    return Text("fixable", style="green") if f.get("fixable") else Text("not fixable", style="dim")


def findings_view(doc: dict[str, Any]) -> Group:
    parts: list[Any] = [Text("Findings", style="italic")]
    for f in doc.get("findings") or []:
        head = Text.assemble((f["id"], "bold"), " ", (f["severity"], SEV_STYLE.get(f["severity"], "")), " ",
                             (f"[{f['category']}]", "dim"), " · ", _fix_label(f))
        body = [Text(one_line(f["message"])), Text(f"at {finding_path(doc, f)}", style="dim")]
        body += [Text(f"evidence: {evidence_text(e)}") for e in f.get("evidence") or []]
        if f.get("needs_decision"):
            body.append(Text(f"decide with {one_line(f['needs_decision'])}", style="yellow"))
        parts += [head, Padding(Group(*body), (0, 0, 1, 2))]
    return Group(*parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def header(doc: dict[str, Any]) -> Panel:
    fmt = doc.get("format") or {}
    s = doc["summary"]
    eng = doc.get("engine") or {}
    verdict_style = "bold green" if doc["verdict"] == "pass" else "bold red"
    lines = [
        Text(str(doc["subject"]["source"]), style="bold"),
        Text.assemble("producer: ", (f"{fmt.get('producer')} ({fmt.get('confidence', 0):.0%})", "bold"),
                      f" · engine: {eng.get('name')} {eng.get('rules_version', '')}".rstrip()
                      # a bare vLLM version does not say which model runner it is (a V1 row ends in /v1)
                      + (" (Model Runner V2)" if eng.get("runner") == "v2" else "")),
        Text("evidence: " + "; ".join(fmt.get("evidence", [])), style="dim"),
        *([oracle_line(doc["oracle"])] if doc.get("oracle") else []),
        Text.assemble((_plural(s["errors"], "error"), SEV_STYLE["error"] if s["errors"] else ""), ", ",
                      (_plural(s["warnings"], "warning"), "yellow" if s["warnings"] else ""), ", ",
                      f"{s['info']} info · {s.get('fixable', 0)} fixable by `kconvert fix`"
                      + (f", {s['needs_decision']} {'needs' if s['needs_decision'] == 1 else 'need'} a decision"
                         if s.get("needs_decision") else "")),
        *([Text(f"set aside by the rule selection: " + "; ".join(
            f"{a['id']} ({a['reason']})" for a in (doc.get("rule_selection") or {}).get("set_aside", [])),
            style="dim")] if (doc.get("rule_selection") or {}).get("set_aside") else []),
        Text.assemble("verdict: ", (str(doc["verdict"]).upper(), verdict_style),
                      (" (--fail-on warning)" if doc.get("fail_on") == "warning" else "", "dim")),
    ]
    return Panel(Group(*lines), title=f"kconvert {doc['command']}", title_align="left", box=box.ROUNDED)


def oracle_line(o: dict[str, Any]) -> Text:
    """--oracle: which release's code was asked and what it answered (K107 lists each disagreement)."""
    a = o.get("answers") or {}
    said = (f"raises {a['raises']}" if a.get("raises") else
            f"feeds {a.get('ids_fed')}, fc {a.get('fc_weight_shape')}, serves {a.get('served_max_model_len')} tokens"
            + (f", skips {', '.join(a['dropped'])}" if a.get("dropped") else ""))
    return Text(f"oracle: {o.get('engine')} {o.get('release')}'s own code ({o.get('asked')}, {o.get('seconds')} s): "
                f"{said}", style="dim")


def render_next(console: Console, doc: dict[str, Any]) -> None:
    gaps = doc.get("not_checked") or []
    if gaps:
        console.print("Static checks passed. They cannot see:", style="bold")
        for g in gaps:
            console.print(Padding(Text(f"- {one_line(g)}"), (0, 0, 0, 2)))
    for step in doc.get("next_steps") or []:
        console.print(Text(f"Next ({one_line(step['why'])}):", style="bold"))
        # unwrapped: a terminal folds it for the eye, and a copy of it stays one command
        console.print(_t(f"  {step['command']}"), highlight=False, soft_wrap=True)


def render_report(console: Console, doc: dict[str, Any], *, next_steps: bool = True) -> None:
    console.print(header(doc))
    console.print(facts_table(doc))
    if doc["findings"]:
        console.print(findings_view(doc))
    if next_steps:
        render_next(console, doc)


def acceptance_table(title: str, counters: dict[str, Any], acceptance: dict[str, Any],
                     extra: list[tuple[str, Any]] | None = None) -> Table:
    """The figures of one measurement (verify's live run, a server's scrapes), both conventions side by side."""
    tab = Table(title=_title(title))
    tab.add_column("measure")
    tab.add_column("value", justify="right")
    rows: list[tuple[str, Any]] = [
        ("drafts (verify steps)", counters["drafts"]),
        ("draft tokens", counters["draft_tokens"]),
        ("accepted tokens", counters["accepted"]),
        ("acceptance rate", percent(acceptance["acceptance_rate"])),
        ("mean acceptance length (vLLM, bonus incl.)", number(acceptance["mean_acceptance_length"])),
        ("SGLang/SpecForge accept_length equivalent", number(acceptance["sglang_accept_length"])),
        ("per position", series(acceptance["per_position"])),
        ("conditional", series(acceptance["conditional"])),
    ]
    for name, val in rows + list(extra or []):
        tab.add_row(name, _t(val))
    return tab


def render_verify(console: Console, doc: dict[str, Any]) -> None:
    """A verify report: the static view, then the live figures, the gate, the diagnosis, the serve lines."""
    render_report(console, doc, next_steps=False)
    if doc.get("refused"):
        console.print(Text.assemble(("refused:", "red"), " ", one_line(doc["refused"]["reason"])))
    if doc.get("dry_run"):
        for line in dry_run_lines(doc):
            console.print(_t(line), highlight=False, soft_wrap=True)
        console.print(_verdict(doc, " (static)"))
        render_next(console, doc)
        return
    if doc.get("refused"):
        render_next(console, doc)
        return
    if doc.get("static_blocked"):
        what = "errors" if doc.get("fail_on", "error") == "error" else "errors or warnings (--fail-on warning)"
        console.print(f"[red]static checks found {what}: no engine was started (fix them with `kconvert fix`, or "
                      "measure the defect with --skip-static)[/]")
        # the runner the run would have used, and what the other runner's row changes (it can be the very
        # finding that blocked the run: K405 is an error under Model Runner V2 only)
        if runner_line(doc):
            console.print(_t(runner_line(doc)), highlight=False, soft_wrap=True)
        render_next(console, doc)
        return
    if runner_line(doc):
        console.print(_t(runner_line(doc)), highlight=False, soft_wrap=True)
    live = doc["live"]
    extra: list[tuple[str, Any]] = [("engine start / generate (s)", f"{number(live['timings']['engine_start_s'])} / "
                                                                    f"{number(live['timings']['generate_s'])}")]
    if live.get("lossless") is not None:
        ll = live["lossless"]
        extra.append(("lossless", "identical" if ll["identical"] else f"DIFFERS at {ll['first_difference']}"))
    if live.get("attention_backends"):
        extra.append(("attention backend", attention_text(live["attention_backends"])))
    if live.get("output_health"):
        extra.append(("output health", health_line(live["output_health"])))
    console.print(acceptance_table(f"Live acceptance ({live['engine']} {live['engine_version']}, "
                                   f"k={live['num_speculative_tokens']}, {live['num_prompts']} prompts of "
                                   f"'{live['prompt_set']}')", live["counters"], live["acceptance"], extra))
    for chk in (doc.get("thresholds") or {}).get("checks", []):
        console.print(_check(chk))
    if doc.get("diagnosis"):
        render_diagnosis(console, doc["diagnosis"])
    _render_serve_lines(console, doc, live)
    console.print(_verdict(doc))
    render_next(console, doc)


def _render_serve_lines(console: Console, doc: dict[str, Any], live: dict[str, Any]) -> None:
    try:
        lines = serve_lines(doc["subject"]["source"], live["target"], k=live["num_speculative_tokens"],
                            tp=live["tp"], draft_tp=live.get("draft_tp"),
                            extra={k: v for k, v in (live.get("speculative_config") or {}).items()
                                   if k not in ("model", "method", "num_speculative_tokens",
                                                "draft_tensor_parallel_size")},
                            engine_args=live.get("engine_args"), env=live.get("env"),
                            method=(live.get("speculative_config") or {}).get("method", "eagle3"),
                            recorded=live.get("engine_settings"))
    except Exception:  # serve lines are a convenience; never fail a verify on them
        return
    console.print("[bold]Serve it:[/]")
    for key, line in lines.items():
        console.print(Text.assemble("  ", (f"{key}:", "dim"), " ", one_line(line)), highlight=False, soft_wrap=True)


def render_diagnosis(console: Console, diag: dict[str, Any]) -> None:
    """The readings a diagnosis tried, live (verify --diagnose: the baseline is a figure) or offline (score
    --diagnose: the baseline is the draft as loaded, with each reading's paired gain); every text from the files
    or an engine is a Text, so a name or an error message holding [brackets] prints as written."""
    offline = isinstance(diag.get("baseline"), dict)
    if not diag.get("ran"):
        reason = diag.get("reason", "not run")
        console.print(_t(f"diagnose: {reason}" if offline else f"diagnose: not needed ({reason})", "dim"))
        return
    if offline:
        b = diag["baseline"]
        head = f"AL {b['mean_acceptance_length']:.3f}" if b["mean_acceptance_length"] is not None else \
            f"does not run: {b['error']}"
        tab = Table(title=_title(f"Readings tried offline (as loaded: {head})"))
        tab.add_column("reading")
    else:
        tab = Table(title=f"Diagnosis (as loaded: AL {diag['baseline']:.3f})")
        tab.add_column("candidate")
    tab.add_column("mean acceptance length", justify="right")
    if offline:
        tab.add_column("vs as loaded", justify="right")
    for c in diag["candidates"]:
        al = c.get("mean_acceptance_length")
        if al is not None:
            figure = f"{al:.3f}"
        elif offline:
            figure = f"fails: {(c.get('error') or '')[:70]}"
        else:
            figure = f"engine failed: {(c.get('error') or '')[:60]}"
        row = [_t(c["candidate"]), _t(figure)]
        if offline:
            g = c.get("gain")
            row.append(_t("" if not g else f"{g['mean']:+.3f} ± {g['stderr']:.3f}" if g.get("stderr") is not None
                          else f"{g['mean']:+.3f} (one sequence: no error estimate)"))
        tab.add_row(*row)
    console.print(tab)
    for n in diag.get("notes") or []:
        console.print(_t(n, "dim"))
    if offline:
        if diag.get("best"):
            console.print(_t(f"best: {diag['best']}", "bold green"))
            if diag.get("fix_command"):
                console.print(_t(f"  apply it with: {diag['fix_command']}"), soft_wrap=True)
        else:
            console.print("no reading beats the draft as loaded by a margin the trace resolves")
    elif diag.get("fix_command"):
        console.print(Text.assemble((f"best: {one_line(diag['best'])}", "bold green"), " — apply it with:\n",
                                    f"  {one_line(diag['fix_command'])}"))
    else:
        console.print("no candidate beats the draft as loaded")


def render_score(console: Console, doc: dict[str, Any]) -> None:
    """A score report: the static view, the offline acceptance, the gate, the diagnosis, the verdict."""
    render_report(console, doc)
    sc = doc.get("score")
    if doc.get("refused"):
        console.print(Text.assemble(("refused:", "red"), " ", one_line(doc["refused"]["reason"])))
        return
    if doc.get("static_blocked") and not doc.get("diagnosis"):
        console.print("[red]static checks found errors: nothing scored (fix them with `kconvert fix`, measure the "
                      "defect with --skip-static, or try readings with --diagnose)[/]")
        return
    if sc is not None:
        tr = sc["trace"]
        title = (f"Offline acceptance (k={sc['num_speculative_tokens']}, {tr['num_sequences']} sequences of "
                 f"'{tr['prompt_set'].get('name')}', trace {tr['sha256'][:12]}, {sc['dtype']} on {sc['device']})")
        if sc["error"]:
            console.print(Text.assemble(("the engine could not run the draft as read:", "red"), " ",
                                        one_line(sc["error"])))
        else:
            acc, c = sc["acceptance"], sc["counters"]
            tab = Table(title=_title(title))
            tab.add_column("measure")
            tab.add_column("value", justify="right")
            for name, val in [("drafts (verify steps)", c["drafts"]), ("draft tokens", c["draft_tokens"]),
                              ("accepted tokens", c["accepted"]),
                              ("acceptance rate", percent(acc["acceptance_rate"])),
                              ("mean acceptance length (vLLM, bonus incl.)", number(acc["mean_acceptance_length"])),
                              ("per position", " / ".join(number(x) for x in acc["per_position"])),
                              ("conditional", " / ".join(number(x) for x in acc["conditional"])),
                              ("aux ids fed", str(sc["reading"]["aux_ids"])),
                              ("scored in (s)", number(sc["timings"].get("score_s")))]:
                tab.add_row(name, _t(val))
            console.print(tab)
        for chk in (doc.get("thresholds") or {}).get("checks", []):
            console.print(_check(chk))
    if doc.get("diagnosis"):
        render_diagnosis(console, doc["diagnosis"])
    console.print(_verdict(doc))


def render_acceptance(console: Console, err_console: Console, doc: dict[str, Any]) -> None:
    """`kconvert acceptance`: the figures of a server's scrapes, and what makes them doubtful on stderr."""
    span = "between the two scrapes" if doc.get("before") else "since the server started"
    models = doc["model"] or ", ".join(doc["model_names"]) or "—"
    extra = [("requests finished", doc["requests_finished"])] if doc.get("requests_finished") is not None else []
    console.print(acceptance_table(f"Acceptance {span} (vLLM, model {models}, k={doc['num_speculative_tokens']})",
                                   doc["counters"], doc["acceptance"], extra))
    for w in doc["warnings"]:
        err_console.print(Text.assemble(("warning:", "yellow"), " ", one_line(w)), highlight=False)
    sampler = doc.get("sampler") or {}
    for line in sampler.get("forced") or []:
        console.print(Text.assemble(("FAIL", "red"), " forced acceptance: ", one_line(line)), highlight=False)
    if sampler.get("note"):
        err_console.print(Text.assemble(("sampler:", "dim"), " ", one_line(sampler["note"])), highlight=False)

