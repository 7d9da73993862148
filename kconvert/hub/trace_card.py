"""The dataset card of a pushed trace: a pure function from trace.json (a dict) to README text.

The metadata block is built with huggingface_hub's `DatasetCardData`, so it is what the Hub parses. `viewer: false`:
the dataset viewer cannot read a trace (safetensors tensors, not rows), so the Hub is told not to try. The card
is kconvert's alone: it is rendered again, whole, on every push (a trace is never edited by hand).
"""
from __future__ import annotations

from typing import Any

from kconvert._version import __version__, install_hint

TAGS = ("kconvert-trace", "eagle3", "speculative-decoding")


def _size_category(positions: int) -> str:
    # the Hub's size_categories buckets (huggingface.js dataset-libraries), counted in positions (rows)
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if positions < bound:
            return name
    return "10M<n<100M"


def data_bytes(doc: dict[str, Any]) -> int:
    d = doc.get("data") or {}
    return sum(int(f.get("size", 0)) for f in (d.get("files") or [d]))


def recorded_by(doc: dict[str, Any]) -> str:
    """The engine and its version that computed the states (`recorder.backend`, e.g. "transformers 4.57.1")."""
    rec = doc.get("recorder") or {}
    return str(rec.get("engine") or rec.get("backend") or rec.get("tool") or "unknown")


def render_trace_card(doc: dict[str, Any], repo_id: str, *, revision: str | None = None) -> str:
    from huggingface_hub import DatasetCard, DatasetCardData

    t = doc.get("target") or {}
    ps = doc.get("prompt_set") or {}
    cont = doc.get("continuation") or {}
    rec = doc.get("recorder") or {}
    data = doc.get("data") or {}
    files = data.get("files") or [data]
    size = data_bytes(doc)
    source = str(t.get("source") or "?")
    where = t.get("commit") or t.get("revision")
    card_data = DatasetCardData(
        pretty_name=f"kconvert trace of {source}", tags=list(TAGS), size_categories=[_size_category(
            int(doc.get("num_positions") or 0))], viewer=False,
        kconvert_trace={"format_version": str(doc.get("version")), "target": source, "target_revision": where,
                        "dtype": doc.get("dtype"), "recorder": recorded_by(doc), "layers": doc.get("layers"),
                        "num_positions": doc.get("num_positions"), "num_sequences": doc.get("num_sequences"),
                        "bytes": size})
    ref = repo_id + (f"@{revision}" if revision and revision != "main" else "")
    rows = [
        ("Target", f"`{source}`" + (f" at `{where}`" if where else "")),
        ("Architecture", ", ".join(t.get("architectures") or []) or str(t.get("model_type") or "?")),
        ("Dtype", f"`{doc.get('dtype')}` (hidden states and embedding rows stored in it)"),
        ("Recorded by", f"{recorded_by(doc)} on `{rec.get('device', '?')}`, {rec.get('tool', 'kconvert')} "
                        f"{rec.get('version', '?')}"),
        ("Prompt set", f"`{ps.get('name')}`: {ps.get('num_prompts')} prompts"
                       + (", chat template applied" if ps.get("chat_template_applied") else "")
                       + (f" (sha256 `{str(ps.get('sha256'))[:16]}…`)" if ps.get("sha256") else "")),
        ("Continuation", f"{cont.get('source')}, max_tokens {cont.get('max_tokens')}, lookahead "
                         f"{cont.get('lookahead')}"),
        ("Layers", f"{doc.get('layers')} of {doc.get('num_hidden_layers')} (input of layer k, vLLM's numbering)"),
        ("Positions", f"{doc.get('num_positions')} in {doc.get('num_sequences')} sequences"),
        ("lm_head", "stored" if doc.get("has_lm_head") else "not stored"),
        ("Size", f"{size:,} bytes in {len(files)} file{'s' if len(files) > 1 else ''}"),
        ("Format", f"kconvert trace {doc.get('version')} (schemas/trace.schema.json)"),
    ]
    table = "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in rows)
    body = f"""# kconvert trace of `{source}`

What the target produced on a prompt set, enough to score EAGLE-3 draft checkpoints without the target:
per position the token, the target's greedy next token and its residual streams at the recorded layers,
plus the target's embedding rows (safetensors and one JSON file, never a pickle).

{table}

## Use

```bash
{install_hint()}
kconvert score DRAFT --trace {ref}
```

`kconvert score` reads it through the Hugging Face cache (`HF_HUB_OFFLINE=1` works once cached) and checks
every file's sha256 against `trace.json`. Pin a revision with `--trace {repo_id}@<commit>`.

Pushed by kconvert {__version__}.
"""
    # the card's own layout (DatasetCard: YAML between --- lines, then the text); the text is not a template
    return str(DatasetCard("---\n" + card_data.to_yaml() + "\n---\n\n" + body))


__all__ = ["TAGS", "data_bytes", "recorded_by", "render_trace_card"]
