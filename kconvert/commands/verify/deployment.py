"""A deployment's acceptance, from the engine's own counters: a running server measured with a prompt set
(`kconvert verify --server`), or a vLLM server's saved `/metrics` scrapes (`kconvert acceptance`)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from kconvert.engines.acceptance import summarize
from kconvert.engines.arg_policy import sampler_verdict
from kconvert.engines.expectations import check_engine
from kconvert.engines.metrics import BY_ENGINE, counters_delta, spec_decode_counters
from kconvert._version import __version__
from kconvert.errors import InputError, UsageError
from kconvert.guard.paths import read_text
from kconvert.guard.urls import server_url
from kconvert.prompts import load_prompts
from kconvert.runners.sglang_server import measure_sglang_server
from kconvert.runners.vllm_server import measure_vllm_server


def measure_server(url: str, *, engine: str, prompts: str, k: int, max_tokens: int,
                   max_prompts: int | None = None) -> dict[str, Any]:
    """Send a prompt set to the server at `url` and measure the acceptance of its draft (vLLM: the difference of
    its spec-decode counters; SGLang: the speculative fields of its answers)."""
    url = server_url(url)
    set_name, plist = load_prompts(prompts)
    if max_prompts:
        plist = plist[:max_prompts]
    check_engine(engine)
    if engine == "sglang":
        result: dict[str, Any] = measure_sglang_server(url, plist, max_tokens=max_tokens)
    else:
        # vLLM and tokenspeed: OpenAI completions and Prometheus counters, each engine's names (engines/metrics.py)
        result = measure_vllm_server(url, plist, max_tokens=max_tokens, k=k, metrics=BY_ENGINE[engine])
    # the tool marker kconvert's JSON documents carry (schemas/report.schema.json `tool`): what lets a later run's
    # --report replace this one, and only this one (kconvert.report.formats.json.owns)
    return {"tool": {"name": "kconvert", "version": __version__}, "server": url, "engine": engine,
            "prompt_set": set_name, **result}


def acceptance_from_files(metrics: str, before: str | None = None, *, model: str | None = None,
                          k: int | None = None, server_info: str | None = None) -> dict[str, Any]:
    """`kconvert acceptance METRICS [--before BEFORE] [--server-info FILE]`: the acceptance document of saved scrapes
    (a path, or '-' for standard input), with the names it read them from, and what the server's saved
    `/server_info?config_format=json` says of its sampler (`sampler`; `sampler.forced`: the figure measures a forced
    acceptance knob, exit 1)."""
    if sum(x == "-" for x in (metrics, before, server_info)) > 1:
        raise UsageError("only one of the inputs can come from stdin")
    doc = acceptance_from_scrapes(read_scrape(metrics, "metrics file"),
                                  read_scrape(before, "--before file") if before is not None else None,
                                  model=model, k=k, after_name=metrics, before_name=before or "before")
    return {"metrics": metrics, "before": before, **doc, "sampler": sampler_from_file(server_info)}


def sampler_from_file(path: str | None) -> dict[str, Any]:
    """The sampler verdict of a saved vLLM /server_info answer (None: not given, so the figure is only as honest as
    the server's sampler)."""
    if path is None:
        return sampler_verdict("vllm", revealed=False, source="no --server-info given (save one with: curl -s "
                                                              "'http://HOST:8000/server_info?config_format=json' > "
                                                              "server_info.json)")
    text = read_scrape(path, "--server-info file")
    try:
        body = json.loads(text)
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e}); save it with curl -s "
                         "'http://HOST:8000/server_info?config_format=json'") from None
    config = body.get("vllm_config") if isinstance(body, dict) else None
    if not isinstance(config, dict):
        raise InputError(f"{path}: no vllm_config object (vLLM's /server_info answers one with "
                         "?config_format=json under VLLM_SERVER_DEV_MODE=1)")
    env = body.get("vllm_env") if isinstance(body.get("vllm_env"), dict) else {}
    return sampler_verdict("vllm", config_dump=config, env=env, revealed=True, source=path)


# A vLLM /metrics scrape is tens of KB (a few MB with every histogram of a large deployment).
MAX_SCRAPE_BYTES = 64 * 1024 * 1024


def read_scrape(path: str, what: str) -> str:
    if path == "-":
        text = sys.stdin.read(MAX_SCRAPE_BYTES + 1)  # an endless stdin (`< /dev/zero`) stops at the cap
        if len(text) > MAX_SCRAPE_BYTES:
            raise InputError(f"standard input (the {what}): more than the {MAX_SCRAPE_BYTES:,} bytes kconvert reads")
        return text
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file (the {what}); save a scrape first: "
                         "curl -s http://HOST:8000/metrics > metrics.txt, or pass '-' to read stdin")
    # the read guard: a regular file only (a FIFO or device is refused unopened), bounded, UTF-8
    return read_text(path, f"{what} {path}", max_bytes=MAX_SCRAPE_BYTES)


def acceptance_from_scrapes(after_text: str, before_text: str | None = None, *, model: str | None = None,
                            k: int | None = None, after_name: str = "metrics", before_name: str = "before") -> dict[str, Any]:
    """The acceptance document for one scrape (counters since the server started) or the difference of two."""
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
