"""`kconvert acceptance`: acceptance figures from saved vLLM /metrics scrapes."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from kconvert.cli import app
from kconvert.cli._common import json_opt
from kconvert.cli._output import begin, console, emit_json, err_console
from kconvert.errors import InputError, UsageError

EXAMPLES = """
Examples:

  curl -s localhost:8000/metrics > after.txt && kconvert acceptance after.txt

  kconvert acceptance after.txt --before before.txt --model kimi-k2.5 -k 3

  kconvert acceptance after.txt --before before.txt --json
"""


def _read(path: str, what: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} not found: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from None


def acceptance_from_scrapes(after_text: str, before_text: str | None = None, *, model: str | None = None,
                            k: int | None = None, after_name: str = "metrics", before_name: str = "before") -> dict[str, Any]:
    """The acceptance document for one scrape (counters since the server started) or the difference of two."""
    from kconvert.engines.metrics import counters_delta, spec_decode_counters
    from kconvert.engines.acceptance import summarize

    after = spec_decode_counters(after_text, model=model, source=after_name)
    if not after["found"]:
        raise InputError(f"{after_name}: no vllm:spec_decode_* counters (the server runs without "
                         "--speculative-config, or this is not a vLLM scrape)")
    before = spec_decode_counters(before_text, model=model, source=before_name) if before_text is not None else None
    if before is not None and not before["found"]:
        raise InputError(f"{before_name}: no vllm:spec_decode_* counters")
    counters = counters_delta(before, after) if before is not None else dict(after)
    warnings: list[str] = []
    exported = after["num_speculative_tokens"]
    if k is None:
        k = exported
    elif exported is not None and exported != k:
        warnings.append(f"-k {k} but the scrape has {exported} draft positions (the server's num_speculative_tokens)")
    if model is None and len(after["model_names"]) > 1:
        warnings.append(f"counters summed over {len(after['model_names'])} model names; pick one with --model")
    c = {key: counters[key] for key in ("drafts", "draft_tokens", "accepted", "accepted_per_pos")}
    check_counters(c, k, after_name if before is None else f"{before_name} → {after_name}")
    return {
        "command": "acceptance",
        "engine": "vllm",
        "model": model,
        "model_names": after["model_names"],
        "engines": after["engines"],
        "num_speculative_tokens": k,
        "counters": c,
        "requests_finished": counters.get("requests_finished"),
        "acceptance": summarize(c["drafts"], c["draft_tokens"], c["accepted"], c["accepted_per_pos"], k),
        "warnings": warnings,
    }


def check_counters(c: dict[str, Any], k: int | None, what: str) -> None:
    """Refuse counters that no vLLM server can produce: a per-position count is the number of verify steps that
    accepted at least i+1 tokens, so the counts fall with the position, none exceeds the steps, and together they
    are the accepted total (a scrape that mixes servers or label sets breaks these)."""
    drafts, tokens, accepted = c["drafts"], c["draft_tokens"], c["accepted"]
    per = list(c.get("accepted_per_pos") or [])
    problem = None
    if accepted > tokens:
        problem = f"{accepted} accepted tokens exceed the {tokens} draft tokens"
    elif k is not None and tokens > drafts * k:
        problem = f"{tokens} draft tokens exceed {drafts} drafts × k={k}"
    elif sum(per) > accepted:
        problem = (f"the per-position counts {per} add up to {sum(per)}, more than the {accepted} accepted tokens")
    elif per and per[0] > drafts:
        problem = f"{per[0]} acceptances at position 1 exceed the {drafts} drafts"
    else:
        rise = next((i for i in range(1, len(per)) if per[i] > per[i - 1]), None)
        if rise is not None:
            problem = (f"position {rise + 1} was accepted {per[rise]} times, more than position {rise} "
                       f"({per[rise - 1]}): a token is accepted only after the one before it")
    if problem:
        raise InputError(f"{what}: inconsistent spec-decode counters: {problem}",
                         hint="scrape one vLLM server (or pick one with --model); a scrape mixing servers or "
                              "restarts cannot be summarised")


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2%}"


def render_acceptance(doc: dict[str, Any]) -> None:
    acc, c = doc["acceptance"], doc["counters"]
    span = "between the two scrapes" if doc.get("before") else "since the server started"
    models = doc["model"] or ", ".join(doc["model_names"]) or "—"
    tab = Table(title=f"Acceptance {span} (vLLM, model {models}, k={doc['num_speculative_tokens']})")
    tab.add_column("measure")
    tab.add_column("value", justify="right")
    rows = [
        ("drafts (verify steps)", c["drafts"]),
        ("draft tokens", c["draft_tokens"]),
        ("accepted tokens", c["accepted"]),
        ("acceptance rate", _pct(acc["acceptance_rate"])),
        ("mean acceptance length (vLLM, bonus incl.)", _num(acc["mean_acceptance_length"])),
        ("SGLang/SpecForge accept_length equivalent", _num(acc["sglang_accept_length"])),
        ("per position", " / ".join(_num(x) for x in acc["per_position"]) or "n/a"),
        ("conditional", " / ".join(_num(x) for x in acc["conditional"]) or "n/a"),
    ]
    if doc.get("requests_finished") is not None:
        rows.append(("requests finished", doc["requests_finished"]))
    for name, val in rows:
        tab.add_row(name, str(val))
    console.print(tab)
    for w in doc["warnings"]:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)


@app.command("acceptance", epilog=EXAMPLES)
def acceptance_command(
    metrics: Annotated[str, typer.Argument(help="A vLLM /metrics scrape (Prometheus text; '-' reads stdin).",
                                           show_default=False)],
    before: Annotated[Optional[str], typer.Option(
        "--before", help="An earlier scrape of the same server: report the counters between the two.")] = None,
    model: Annotated[Optional[str], typer.Option(
        "--model", help="Only this model_name label (default: sum over every model and engine).")] = None,
    k: Annotated[Optional[int], typer.Option(
        "-k", "--num-speculative-tokens", min=1,
        help="Speculative tokens per step (default: the draft positions the scrape exports).")] = None,
    as_json: json_opt("acceptance") = False,
) -> None:
    """Acceptance rate, mean acceptance length and per-position rates from vLLM's spec-decode counters.

    Reads vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens and
    _num_accepted_tokens_per_pos (with or without _total), summed over engines. One scrape gives the figures
    since the server started; --before gives those of the traffic between two scrapes.
    """
    begin("acceptance", "json" if as_json else "full", source=metrics)
    if before is not None and before == metrics == "-":
        raise UsageError("only one of the scrapes can come from stdin")
    doc = acceptance_from_scrapes(
        _read(metrics, "metrics file"),
        _read(before, "--before file") if before is not None else None,
        model=model, k=k, after_name=metrics, before_name=before or "before",
    )
    doc = {"metrics": metrics, "before": before, **doc}
    if as_json:
        emit_json(doc)
    else:
        render_acceptance(doc)
    raise typer.Exit(0)
