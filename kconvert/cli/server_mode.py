"""`kconvert verify --server URL`: measure a running deployment instead of starting an engine."""
from __future__ import annotations

from typing import Any

import typer

from kconvert.cli._output import console, emit_json
from kconvert.errors import UsageError


def run_server_mode(url: str, *, engine: str, prompts: str, k: int, max_tokens: int, max_prompts: int | None,
                    as_json: bool, report: str | None) -> None:
    from kconvert.prompts import load_prompts

    set_name, plist = load_prompts(prompts)
    if max_prompts:
        plist = plist[:max_prompts]
    if engine == "vllm":
        from kconvert.engines.server import measure_vllm_server

        result: dict[str, Any] = measure_vllm_server(url, plist, max_tokens=max_tokens, k=k)
    elif engine == "sglang":
        from kconvert.engines.sglang_server import measure_sglang_server

        result = measure_sglang_server(url, plist, max_tokens=max_tokens)
    else:
        raise UsageError(f"--engine {engine!r}: choose vllm or sglang")
    result = {"server": url, "engine": engine, "prompt_set": set_name, **result}
    if report:
        from kconvert.writer_util import write_json_atomic

        write_json_atomic(report, result)
    if as_json:
        emit_json(result)
    else:
        acc = result.get("acceptance") or {}
        console.print(f"[bold]{engine} server {url}[/] ({len(plist)} prompts of '{set_name}')")
        for key in ("drafts", "draft_tokens", "accepted", "acceptance_rate", "mean_acceptance_length",
                    "sglang_accept_length", "per_position"):
            if key in acc:
                console.print(f"  {key}: {acc[key]}")
    raise typer.Exit(0)
