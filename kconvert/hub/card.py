"""The model card of a pushed draft: pure functions from (report, provenance, existing README) to README text.

The card is built with huggingface_hub's `ModelCard` / `ModelCardData` so the metadata block is exactly what the
Hub parses. kconvert owns only the part between its two HTML comment markers; everything else in an existing
README (prose, YAML keys) is kept, and tags are merged as a union.

`library_name` is the engine the draft was verified on (`vllm`, `sglang` or `tokenspeed`), not `transformers`: an EAGLE-3 draft
(`LlamaForCausalLMEagle3`, `Eagle3Speculator`, ...) is not a model transformers can load, and the Hub turns
`library_name: transformers` into an `AutoModelForCausalLM` snippet and a "Use with vLLM" button that would serve
the draft on its own as if it were a language model. Neither engine is a registered library key on the Hub
(huggingface.js `model-libraries.ts`), so the name is shown as a filterable tag with no misleading snippet.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kconvert._version import __version__
from kconvert.engines.expectations import ENGINE_LABELS, KNOWN, NEWEST, EngineRules, engine_rules
from kconvert.engines.serve_lines import serve_lines
from kconvert.errors import UsageError
from kconvert.report.markdown import engine_label, num_speculative_tokens, render_markdown_section
from kconvert.targets import profile_hub_id

START = "<!-- kconvert:validation:start -->"
END = "<!-- kconvert:validation:end -->"
_SECTION = re.compile(re.escape(START) + r".*?" + re.escape(END) + r"\n?", re.DOTALL)

BASE_TAGS = ("eagle3", "speculative-decoding")
TARGET_PLACEHOLDER = "<target-hub-id>"


def target_hub_id(report: dict[str, Any]) -> str | None:
    """The target's Hub id: recorded by verify, a built-in profile's `hub_id`, or a Hub-origin target name."""
    t = report.get("target") or {}
    if t.get("hub_id"):
        return str(t["hub_id"])
    name = t.get("name")
    if not name:
        return None
    if t.get("origin") == "profile":
        return profile_hub_id(str(name))
    if t.get("origin") == "hub":
        return str(name).split("@", 1)[0]
    # verify records what the engine was given; a Hub id there names the target even when the summary does not
    engine_target = (report.get("live") or {}).get("target")
    if isinstance(engine_target, str) and _looks_like_hub_id(engine_target):
        return engine_target.split("@", 1)[0]
    return None


def commit_message(report: dict[str, Any]) -> str:
    """The default summary of the commit that publishes a verified draft: the engine and its acceptance length."""
    al = ((report.get("live") or {}).get("acceptance") or {}).get("mean_acceptance_length")
    tail = f", AL {al:.2f}" if isinstance(al, (int, float)) else ""
    return f"Upload EAGLE-3 draft verified by kconvert {__version__} ({engine_label(report)}{tail})"


def _looks_like_hub_id(ref: str) -> bool:
    return (ref.count("/") == 1 and not ref.startswith((".", "/", "~")) and all(ref.split("/"))
            and not Path(ref).exists())


def tensor_parallel_size(report: dict[str, Any]) -> int:
    live = report.get("live") or {}
    for v in (live.get("tp"), live.get("tensor_parallel_size"), (live.get("request") or {}).get("tp"),
              (live.get("engine_args") or {}).get("tensor_parallel_size")):
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return 1


def _trust_remote_code(report: dict[str, Any]) -> bool:
    live = report.get("live") or {}
    return bool(live.get("trust_remote_code") or (live.get("request") or {}).get("trust_remote_code")
                or (live.get("engine_args") or {}).get("trust_remote_code"))


# speculative_config keys verify ran with beyond the draft, the method and k: a replayed production serve line's,
# `parallel_drafting` for a P-EAGLE draft, `draft_tensor_parallel_size`. The card's line serves what was verified.
_RESET_KEYS = ("model", "method", "num_speculative_tokens")


def _verified_extra(report: dict[str, Any]) -> dict[str, Any]:
    spec = (report.get("live") or {}).get("speculative_config") or {}
    return {k: v for k, v in spec.items() if k not in _RESET_KEYS}


def verified_vllm_row(report: dict[str, Any]) -> EngineRules | None:
    """The vLLM row the report was checked under (`engine.rules_version`: `0.33` is Model Runner V2, `0.33/v1`
    Model Runner V1), or None for an SGLang report or a row kconvert does not know."""
    eng = report.get("engine") or {}
    if eng.get("name") != "vllm" or not eng.get("rules_version"):
        return None
    try:
        return engine_rules("vllm", str(eng["rules_version"]))
    except UsageError:
        return None


def runner_note(report: dict[str, Any]) -> str | None:
    """What the card's vLLM line runs: the verified row's model runner, the environment it needs, and the runner
    the numbers were measured on when that is another (the report's `runner` block)."""
    row = verified_vllm_row(report)
    if row is None or row.runner is None:
        return None
    env = " ".join(f"`{k}={v}`" for k, v in row.serve_env)
    if row.runner == "v1":
        note = (f"The vLLM line runs {row.runner_label} ({env}), the runner of the verified row {row.key}; "
                "without the variable vLLM on GPUs runs Model Runner V2")
    else:
        note = f"The vLLM line runs {row.runner_label}, what vLLM on GPUs runs (the verified row {row.key})"
    r = report.get("runner") or {}
    if r.get("measured") and r["measured"] != row.runner:
        note += f"; the live numbers were measured on Model Runner {r['measured'].upper()} ({r.get('why')})"
    diffs = r.get("differs") or []
    if diffs:
        note += (f"; under {r.get('other_row')} the static checks differ: "
                 + ", ".join(f"{d['id']} {d['severity']} only under {d['only_under'].upper()}" for d in diffs))
    return note + "."


def serve_commands(report: dict[str, Any], repo_id: str, *, target: str | None = None,
                   tp: int | None = None) -> dict[str, str]:
    """The vLLM, SGLang and tokenspeed command lines that serve `target` with this draft at the verified k, built by
    the builders whose lines inspect and verify print (kconvert.engines.serve_lines), from what the report records.

    A card is read on the Hub, where the folder verify ran against means nothing: the target is named by its
    Hub id (`target`, else the one the report records) and never by a local path; without one the line says
    `<target-hub-id>` (push notes that --base-model names it). The vLLM line keeps the speculative keys verify ran
    with (a replayed line's, `parallel_drafting`, the recorded sampling methods) and the recorded environment; the
    verified row's runner: a Model Runner V1 row's line starts with VLLM_USE_V2_MODEL_RUNNER=0 (EngineRules
    serve_env), since vLLM on GPUs runs V2 otherwise (config/vllm.py use_v2_model_runner). The platform's own engine
    arguments (a CPU run's dtype, cache size) stay in the report's live block, not in a line for the Hub."""
    tgt = target or target_hub_id(report) or TARGET_PLACEHOLDER
    k = num_speculative_tokens(report) or 3
    n = tp or tensor_parallel_size(report)
    trc = _trust_remote_code(report)
    row = verified_vllm_row(report)
    lines = serve_lines(repo_id, tgt, k=k, tp=n, engine_aux_note=False, extra=_verified_extra(report),
                        engine_args={"trust_remote_code": True} if trc else None,
                        env=dict(row.serve_env) if row is not None else None,
                        recorded=(report.get("live") or {}).get("engine_settings"))
    # SGLang's and tokenspeed's --trust-remote-code (sglang server_args.py, tokenspeed 0.1.1 utils/server_args.py
    # add_cli_args) default to off, as vLLM's does
    return {name: line + (" --trust-remote-code" if trc and name != "vllm" else "") for name, line in lines.items()}


def unserved_on(report: dict[str, Any], engine: str) -> str | None:
    """Why the card gives no `engine` line, or None: a draft of another method (a P-EAGLE draft is the one that
    reaches push, verified on vLLM) that the newest `engine` row kconvert has read serves with nothing (K105); a
    reference line for it would start a server that refuses the draft or runs it as sequential EAGLE-3."""
    method = (report.get("draft") or {}).get("method") or "eagle3"
    row = KNOWN[engine][NEWEST[engine]]
    if method == "eagle3" or row.methods is None or method in row.methods:
        return None
    return (f"no line: {row.key} serves no {method} draft (K105; `kconvert rules K105` says which engine "
            "releases do)")


def _op_line(op: dict[str, Any]) -> str:
    kind = op.get("kind", "op")
    if "path" in op and "value" in op:
        what = f"`{op['path']}` = `{json.dumps(op['value'])}`"
    elif "path" in op:
        what = f"delete `{op['path']}`"
    elif "old" in op and "new" in op:
        what = f"`{op['old']}` → `{op['new']}`"
    elif "name" in op:
        what = f"`{op['name']}`"
    else:
        what = ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("kind", "reason"))
    reason = f" — {op['reason']}" if op.get("reason") else ""
    return f"- {kind}: {what}{reason}"


def render_provenance(provenance: dict[str, Any] | None, *, heading_level: int = 3) -> str:
    """What `kconvert fix` changed and from which source (kconvert.json), as Markdown."""
    h = "#" * heading_level
    if not provenance:
        return (f"{h} Provenance\n\nNo `kconvert.json` in the pushed folder: these files were verified as they "
                "are, not written by `kconvert fix`.\n")
    inp = provenance.get("input") or {}
    src = inp.get("source") or "unknown source"
    rev = inp.get("commit") or inp.get("revision")
    lines = [f"{h} Provenance", "",
             f"Written by kconvert {provenance.get('version', '?')} `fix` from `{src}`"
             + (f" at revision `{rev}`" if rev else "")
             + (f" (producer: {inp['producer']})" if inp.get("producer") else "") + "."]
    fixed = provenance.get("findings_fixed") or []
    if fixed:
        lines.append(f"Findings fixed: {', '.join(f'`{f}`' for f in fixed)}"
                     " (`kconvert rules ID` explains each).")
    left = provenance.get("findings_left") or []
    if left:
        lines.append(f"Findings left as they were: {', '.join(f'`{f}`' for f in left)}.")
    aux = provenance.get("aux_ids")
    if isinstance(aux, dict) and aux.get("written") is not None:
        lines.append(f"Aux hidden-state layers: written `{aux.get('written')}` for {aux.get('engine', 'the engine')}"
                     + (f" (physical layers `{aux['physical']}`)" if aux.get("physical") is not None else "") + ".")
    ops = provenance.get("ops") or []
    lines.append("")
    if ops:
        lines.append(f"{len(ops)} op(s) applied:")
        lines.append("")
        lines += [_op_line(op) for op in ops]
    else:
        lines.append("No op applied: the source already loaded as intended.")
    in_files = inp.get("files") or {}
    if in_files:
        lines += ["", "<details><summary>Input files (sha256)</summary>", "",
                  "| File | Size (bytes) | sha256 |", "|---|---:|---|"]
        lines += [f"| `{n}` | {e.get('size', '')} | `{e.get('sha256', '')}` |" for n, e in sorted(in_files.items())]
        lines += ["", "</details>"]
    return "\n".join(lines).rstrip() + "\n"


def render_section(report: dict[str, Any], repo_id: str, provenance: dict[str, Any] | None = None, *,
                   target: str | None = None, tp: int | None = None) -> str:
    """The kconvert-owned part of the README, markers included."""
    cmds = serve_commands(report, repo_id, target=target, tp=tp)
    engine = (report.get("live") or {}).get("engine") or (report.get("engine") or {}).get("name")
    shown = report
    if report.get("target"):
        # the card names the target by its Hub id: a folder on the machine that ran verify means nothing there
        hub_id = target or target_hub_id(report)
        shown = {**report, "target": {**report["target"],
                                      "name": hub_id or "a local folder (its Hub id was not given)"}}
    body = render_markdown_section(shown, heading_level=2)
    # one line per engine kconvert has rows for (ENGINE_LABELS), the verified one marked: a card verified on
    # tokenspeed through `verify --server` names tokenspeed's line as the verified one, not vLLM's
    why_not = {name: None if engine == name else unserved_on(report, name) for name in ENGINE_LABELS}
    serve = ["### Serve", ""]
    for name, label in ENGINE_LABELS.items():
        if why_not[name]:
            serve += [f"{label}: {why_not[name]}.", ""]
        else:
            serve += [label + (" (verified):" if engine == name else ":"), "", "```bash", cmds[name], "```", ""]
            if name == "vllm" and runner_note(report):
                serve += [runner_note(report), ""]
    others = [name for name in ENGINE_LABELS if name != engine and not why_not[name]]
    if others:
        labels = " and ".join(ENGINE_LABELS[name] for name in others)
        runs = ", ".join(f"`kconvert verify --engine {name}`" for name in others)
        serve += [f"The numbers above were measured on {engine_label(report)}; the {labels} "
                  f"line{'s are' if len(others) > 1 else ' is'} given for reference — run {runs} before relying "
                  f"on {'them' if len(others) > 1 else 'it'}.", ""]
    else:
        serve += [f"The numbers above were measured on {engine_label(report)}.", ""]
    parts = [START, body, "\n".join(serve), render_provenance(provenance), END]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


def card_metadata(report: dict[str, Any], *, target: str | None = None) -> dict[str, Any]:
    engine = (report.get("live") or {}).get("engine") or (report.get("engine") or {}).get("name") or "vllm"
    meta: dict[str, Any] = {"tags": [*BASE_TAGS, str(engine)], "library_name": str(engine)}
    base = target or target_hub_id(report)
    if base:
        meta["base_model"] = base
    return meta


def _merge_tags(old: Any, new: list[str]) -> list[str]:
    old_list = [old] if isinstance(old, str) else list(old or [])
    out: list[str] = []
    for t in [*old_list, *new]:
        if t not in out:
            out.append(t)
    return out


def render_card(report: dict[str, Any], repo_id: str, *, provenance: dict[str, Any] | None = None,
                existing: str | None = None, target: str | None = None, tp: int | None = None) -> str:
    """README.md text: existing prose and metadata kept, kconvert's section added or replaced (never twice)."""
    # deferred: huggingface_hub is ~35-120 ms of imports; only a Hub id or an upload needs it
    from huggingface_hub import ModelCard, ModelCardData

    old = ModelCard(existing, ignore_metadata_errors=True) if existing and existing.strip() else None
    meta = dict(old.data.to_dict()) if old is not None else {}
    new = card_metadata(report, target=target)
    meta["tags"] = _merge_tags(meta.get("tags"), new.pop("tags"))
    meta.update(new)
    data = ModelCardData(**meta)
    section = render_section(report, repo_id, provenance, target=target, tp=tp)
    if old is not None:
        text = old.text
        if _SECTION.search(text):
            first = True

            def _sub(_m: re.Match[str]) -> str:
                nonlocal first
                out, first = (section if first else ""), False
                return out

            text = _SECTION.sub(_sub, text)
        else:
            text = text.rstrip("\n") + "\n\n" + section
    else:
        base = new.get("base_model") or "its target"
        text = (f"# {repo_id.split('/')[-1]}\n\nAn EAGLE-3 speculative-decoding draft model for `{base}`, "
                "checked and verified live with kconvert before upload.\n\n" + section)
    card = ModelCard("---\n" + data.to_yaml() + "\n---\n\n" + text.lstrip("\n"))
    return str(card)


__all__ = ["END", "START", "card_metadata", "render_card", "render_provenance", "render_section",
           "serve_commands", "target_hub_id", "tensor_parallel_size", "unserved_on"]
