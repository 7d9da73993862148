"""`kconvert verify --server URL`: measure a running deployment instead of starting an engine."""
from __future__ import annotations

import json

import typer
from rich.text import Text

from kconvert.cli._output import console, emit_json, write
from kconvert.commands.verify.deployment import measure_server
from kconvert.guard.urls import server_url
from kconvert.engines.output_health import health_line
from kconvert.errors import UsageError
from kconvert.guard.text import visible
from kconvert.prompts import load_prompts
from kconvert.report.formats import get, output_formats


def run_server_mode(url: str, *, engine: str, prompts: str, k: int, max_tokens: int, max_prompts: int | None,
                    fmt: str, report: str | None, dry_run: bool = False) -> None:
    url = server_url(url)  # before anything else: a dry run and a measurement refuse the same URLs
    if not get(fmt).server:
        # gitlab, junit and sarif carry a checkpoint's findings; a running server has none to report
        able = [f.name for f in output_formats() if f.server]
        raise UsageError(f"--server: --output-format {fmt} reports a checkpoint's findings and a server "
                         f"measurement has none; use {', '.join(able[:-1])} or {able[-1]}")
    if dry_run:
        _dry_run(url, engine=engine, prompts=prompts, k=k, max_tokens=max_tokens, max_prompts=max_prompts, fmt=fmt)
    result = measure_server(url, engine=engine, prompts=prompts, k=k, max_tokens=max_tokens, max_prompts=max_prompts)
    set_name, n_prompts = result["prompt_set"], result["num_prompts"]
    sampler = result.get("sampler") or {}
    forced = bool(sampler.get("forced"))
    if report:
        from kconvert.cli._common import command_inputs
        from kconvert.report.files import write_json_report  # deferred: the path guard, only for a --report

        write_json_report(report, "verify", result, inputs=command_inputs())
    acc = result.get("acceptance") or {}
    if fmt == "json":
        emit_json(result)
    elif fmt == "full":
        console.print(Text.assemble((visible(f"{engine} server {url}"), "bold"),
                                    visible(f" ({n_prompts} prompts of '{set_name}')")), highlight=False)
        for key in ("drafts", "draft_tokens", "accepted", "acceptance_rate", "mean_acceptance_length",
                    "sglang_accept_length", "per_position"):
            if key in acc:
                value = acc[key]
                if value is None and key == "mean_acceptance_length":
                    value = "not reported (vLLM's convention needs SGLang's spec_accept_token_num)"
                console.print(Text(visible(f"  {key}: {value}")), highlight=False)
        if result.get("output_health"):
            console.print(Text(visible(f"  output health: {health_line(result['output_health'])}")), highlight=False)
        for line in sampler.get("forced") or []:
            console.print(Text.assemble(("FAIL", "red"), " forced acceptance: ", visible(line)), highlight=False)
        if sampler.get("note"):
            console.print(Text.assemble(("sampler:", "dim"), " ", visible(sampler["note"])), highlight=False)
    else:
        figures = ", ".join(f"{key} {json.dumps(acc[key])}" for key in (
            "mean_acceptance_length", "acceptance_rate", "per_position", "drafts", "draft_tokens", "accepted",
            "sglang_accept_length") if key in acc)
        line = f"server: {engine} {url}, {n_prompts} prompts of '{set_name}': {figures}"
        if result.get("output_health"):
            line += f"; output health: {health_line(result['output_health'])}"
        if sampler.get("note"):
            line += f"; sampler: {sampler['note']}"
        if forced:
            line += "; forced acceptance: " + "; ".join(sampler["forced"])
        if fmt == "github":
            from kconvert.report.github import command  # deferred: the report package loads the checkpoint readers

            line = command("error" if forced else "notice", line, title="kconvert verify --server")
        write(line + "\n")
    # a server that forces or loosens acceptance never passes: its counters measure the knob (issue #46)
    raise typer.Exit(1 if forced else 0)


def _dry_run(url: str, *, engine: str, prompts: str, k: int, max_tokens: int, max_prompts: int | None,
             fmt: str) -> None:
    """What `--server` would measure, without contacting the server: the prompts, the step count, the figures."""
    url = server_url(url)
    from kconvert.engines.expectations import check_engine
    from kconvert.engines.metrics import BY_ENGINE

    check_engine(engine)
    set_name, texts = load_prompts(prompts)
    n = len(texts[:max_prompts] if max_prompts else texts)
    source = (f"/metrics before and after ({BY_ENGINE[engine].drafts.split('_num_')[0]}_* counters)"
              if engine in BY_ENGINE else "each response's meta_info (spec_verify_ct, completion_tokens)")
    sampler = {"vllm": "/server_info?config_format=json (served under VLLM_SERVER_DEV_MODE=1)",
               "sglang": "/server_info internal_states env_vars (shown under SGLANG_EXPOSE_OWN_ENV_VARS=1)"}.get(
        engine, "nothing: kconvert reads no sampler endpoint of this engine")
    plan = {"dry_run": {"server": url, "engine": engine, "prompt_set": set_name, "num_prompts": n,
                        "max_tokens": max_tokens, "num_speculative_tokens": k, "figures_from": source,
                        "sampler_from": sampler}}
    if fmt == "json":
        emit_json(plan)
    else:
        write(f"dry run: would measure the {engine} server at {url}: {n} prompts of '{set_name}', {max_tokens} "
              f"tokens each, greedy, k={k}; figures from {source}; forced acceptance read from {sampler}; nothing "
              "contacted\n")
    raise typer.Exit(0)
