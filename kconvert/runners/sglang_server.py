"""SGLang in server mode: acceptance of a running SGLang server from its per-request speculative fields.

SGLang is not run here (it needs a GPU): this module is tested on response bodies shaped as SGLang writes them
and on the speculative keys SGLang 0.5.23's own code wrote for given counts (tests/data/sglang_*.json, sources
in tests/data/README.md).

What SGLang reports (``python/sglang/srt/managers/tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``,
called when a request finishes on a server started with ``--speculative-algorithm``): the ``meta_info`` of a
``/generate`` answer carries

- ``completion_tokens``: tokens generated for the request;
- ``spec_verify_ct``: verify steps of the request (all versions with speculative decoding);
- newer versions also ``spec_accept_token_num`` (draft tokens accepted), ``spec_draft_token_num``
  (= ``spec_verify_ct`` x (``speculative_num_draft_tokens`` - 1)), ``spec_accept_rate`` (their ratio) and
  ``spec_accept_length`` (= ``completion_tokens / spec_verify_ct``);
- 0.5.23 names the two counts ``spec_num_correct_drafts`` and ``spec_num_proposed_drafts``, adds
  ``spec_correct_drafts_histogram`` (verify steps per number of accepted drafts, which gives vLLM's per-position
  counts) and writes none of these for a request that finished without a verify step (its own code's output:
  tests/data/sglang_generate_0_5_23.json, recorded by tests/sglang_oracle/record.py).

SGLang's ``accept_length`` (and SpecForge ``bench_eagle3.py``'s) is sum(completion_tokens) /
sum(spec_verify_ct), bonus token included. It counts the token of the prefill pass too, so it exceeds vLLM's
mean acceptance length 1 + accepted / drafts by up to 1 / verify steps per request; over long answers the
two agree (docs/formats-and-engines.md#acceptance-metrics). Per-position counts come only from 0.5.23's histogram.

``/server_info`` (``/get_server_info`` before 0.5.23, deprecated there) is the server's ``ServerArgs``
(``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
``speculative_num_draft_tokens``, ``speculative_draft_model_path``, ``model_path``, ``tp_size`` ...) merged with
scheduler info, ``internal_states`` (one per DP rank; recent
versions put ``avg_spec_accept_length`` there) and ``version``.

Bodies are accepted from ``/generate`` (one object, or a list for a batch) and, where the SGLang version adds
it, from OpenAI-style answers whose ``choices[]`` carry ``meta_info``; :func:`measure_sglang_server` uses
``/generate``, the documented form.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from kconvert.errors import EngineError, InputError, UsageError
from kconvert.engines.acceptance import summarize
from kconvert.engines.output_health import summarize_health
from kconvert.engines.arg_policy import sampler_verdict

SERVER_INFO_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def meta_infos(body: Any, *, source: str = "response") -> list[dict[str, Any]]:
    """The ``meta_info`` objects of one response body: a ``/generate`` object, a list of them (batch), or
    an OpenAI-style object whose choices carry ``meta_info``. Raises :class:`InputError` when there is none."""
    if isinstance(body, list):
        out: list[dict[str, Any]] = []
        for item in body:
            out += meta_infos(item, source=source)
        return out
    if not isinstance(body, Mapping):
        raise InputError(f"{source}: expected a JSON object or list, got {type(body).__name__}")
    if isinstance(body.get("meta_info"), Mapping):
        return [dict(body["meta_info"])]
    choices = body.get("choices")
    if isinstance(choices, list):
        found = [dict(c["meta_info"]) for c in choices if isinstance(c, Mapping) and isinstance(c.get("meta_info"), Mapping)]
        if found:
            return found
        raise InputError(f"{source}: OpenAI-style answer without meta_info in its choices "
                         "(this SGLang version does not return it there: use /generate)")
    raise InputError(f"{source}: no meta_info (not an SGLang /generate answer)")


def _int(meta: Mapping[str, Any], key: str, source: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{source}: meta_info.{key} is {value!r}, not a count") from None
    if n < 0 or n != float(value):
        raise InputError(f"{source}: meta_info.{key} is {value!r}, not a count")
    return n


def _first(meta: Mapping[str, Any], keys: Sequence[str], source: str) -> int | None:
    for key in keys:
        value = _int(meta, key, source)
        if value is not None:
            return value
    return None


def parse_server_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The speculative settings of ``/get_server_info`` (keys absent from the answer are left out), plus the
    server's own running ``avg_spec_accept_length`` per DP rank when it reports one."""
    if not isinstance(info, Mapping):
        raise InputError("server info: expected a JSON object")
    out = {k: info[k] for k in SERVER_INFO_KEYS if k in info}
    states = info.get("internal_states")
    if isinstance(states, list):
        avg = [s.get("avg_spec_accept_length") for s in states if isinstance(s, Mapping)]
        avg = [float(a) for a in avg if a is not None]
        if avg:
            out["avg_spec_accept_length"] = avg
    return out


def server_env_vars(info: Mapping[str, Any]) -> dict[str, str] | None:
    """The SGLANG_* variables a server shows: its internal_states carry `env_vars` only under
    SGLANG_EXPOSE_OWN_ENV_VARS=1 (srt/managers/scheduler_components/internal_state.py _add_env_vars); None when
    no rank shows them."""
    states = info.get("internal_states") if isinstance(info, Mapping) else None
    found: dict[str, str] | None = None
    for state in states if isinstance(states, list) else []:
        env = state.get("env_vars") if isinstance(state, Mapping) else None
        if isinstance(env, Mapping):
            found = {**(found or {}), **{str(k): str(v) for k, v in env.items()}}
    return found


def sglang_sampler(info: Mapping[str, Any], source: str) -> dict[str, Any]:
    """What an SGLang server's /server_info reveals about forced acceptance (SGLANG_SIMULATE_ACC_LEN, an environment
    variable: srt/environ.py)."""
    env = server_env_vars(info)
    if env is None:
        return sampler_verdict("sglang", revealed=False, source=f"{source} lists no environment (it does only under "
                                                                "SGLANG_EXPOSE_OWN_ENV_VARS=1)")
    return sampler_verdict("sglang", env=env, revealed=True, source=source)


def num_speculative_tokens(server: Mapping[str, Any]) -> int | None:
    """Draft tokens per verify step: ``speculative_num_draft_tokens - 1`` (topk 1 chains ``num_steps``
    tokens and verifies them plus the root), else ``speculative_num_steps``."""
    n = server.get("speculative_num_draft_tokens")
    if isinstance(n, int) and n > 1:
        return n - 1
    steps = server.get("speculative_num_steps")
    return steps if isinstance(steps, int) and steps > 0 else None


def summarize_sglang(metas: Iterable[Mapping[str, Any]], *, server: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Acceptance over the ``meta_info`` of finished requests.

    ``accept_length`` is SGLang's figure, sum(completion_tokens) / sum(spec_verify_ct). When every request
    also reports ``spec_accept_token_num`` (newer SGLang), ``counters`` map onto vLLM's (drafts = verify
    steps, draft_tokens, accepted) and ``acceptance`` is :func:`summarize` of them, with
    ``sglang_accept_length`` set to ``accept_length`` beside vLLM's ``mean_acceptance_length``; otherwise
    ``counters`` is None and ``acceptance`` carries ``sglang_accept_length`` alone (vLLM's figure None).
    Raises :class:`InputError` when no answer has ``spec_verify_ct`` (the server runs without speculative
    decoding) or a field is not a count.
    """
    server = dict(server or {})
    metas = list(metas)
    if not metas:
        raise InputError("no SGLang answers to summarize")
    if not any("spec_verify_ct" in m for m in metas):
        raise InputError("answer 0: meta_info has no spec_verify_ct: the server runs without speculative decoding")
    completion = verify = 0
    accepted: int | None = 0
    draft_tokens: int | None = 0
    histogram: list[int] | None = []
    for i, meta in enumerate(metas):
        src = f"answer {i}"
        ct = _int(meta, "completion_tokens", src)
        # SGLang 0.5.23 writes no speculative field at all for a request that finished without a verify step
        # (tokenizer_manager.py:3149 `spec_verify_ct[i] > 0`); older versions wrote spec_verify_ct 0
        vc = _int(meta, "spec_verify_ct", src) or 0
        if ct is None:
            raise InputError(f"{src}: meta_info has no completion_tokens")
        completion += ct
        verify += vc
        # the accepted / proposed draft counts under both names SGLang has used (0.5.23: spec_num_correct_drafts,
        # spec_num_proposed_drafts, tokenizer_manager.py:3170)
        acc = _first(meta, ("spec_accept_token_num", "spec_num_correct_drafts"), src)
        dt = _first(meta, ("spec_draft_token_num", "spec_num_proposed_drafts"), src)
        if vc == 0:  # SGLang leaves the detailed fields out of a request with no verify step
            acc, dt = acc or 0, dt or 0
        accepted = None if accepted is None or acc is None else accepted + acc
        draft_tokens = None if draft_tokens is None or dt is None else draft_tokens + dt
        # 0.5.23's spec_correct_drafts_histogram[j] = verify steps that accepted j draft tokens
        # (schedule_batch.py update_spec_correct_drafts_histogram)
        h = meta.get("spec_correct_drafts_histogram")
        if histogram is not None and vc:
            if not isinstance(h, list) or not all(isinstance(x, int) and x >= 0 for x in h) or sum(h) != vc:
                histogram = None
            else:
                n = max(len(histogram), len(h))
                histogram = [(histogram[j] if j < len(histogram) else 0) + (h[j] if j < len(h) else 0)
                             for j in range(n)]
    k = num_speculative_tokens(server)
    if draft_tokens is None and accepted is not None and k is not None:
        draft_tokens = verify * k
    counters = None
    accept_length = completion / verify if verify else None
    # Both conventions side by side, as `verify` reports them: SGLang's own accept_length (completion tokens /
    # verify steps, the prefill token included) and vLLM's mean acceptance length 1 + accepted / verify steps,
    # which needs SGLang's accepted-token count (newer versions only; never inferred from completion tokens).
    acceptance: dict[str, Any] = {"sglang_accept_length": accept_length, "mean_acceptance_length": None,
                                  "num_speculative_tokens": k}
    # vLLM's per-position count (verify steps whose position i was accepted) = steps that accepted more than i
    per_pos = [sum(histogram[i + 1:]) for i in range(len(histogram) - 1)] if histogram else []
    if per_pos and (accepted is None or sum(per_pos) != accepted):
        per_pos = []
    if accepted is not None and draft_tokens is not None:
        counters = {"drafts": verify, "draft_tokens": draft_tokens, "accepted": accepted, "accepted_per_pos": per_pos}
        acceptance = summarize(verify, draft_tokens, accepted, per_pos or None, k if per_pos else None)
        acceptance["num_speculative_tokens"] = k  # without a histogram per position is unknown: no zero padding
        acceptance["sglang_accept_length"] = accept_length  # SGLang's figure, not summarize()'s vLLM-counter one
    return {
        "engine": "sglang",
        "num_requests": len(metas),
        "completion_tokens": completion,
        "spec_verify_ct": verify,
        "accept_length": accept_length,
        "num_speculative_tokens": k,
        "counters": counters,
        "acceptance": acceptance,
        "server": server,
    }


# ----------------------------------------------------------------------------------------------- measure


def measure_sglang_server(
    url: str,
    prompts: Sequence[str],
    *,
    max_tokens: int = 64,
    timeout: float = 600.0,
    concurrency: int = 8,
    sampling_extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Send ``prompts`` as raw text to a running SGLang server's ``/generate`` (temperature 0) and summarize
    the speculative fields of the answers with the server's settings from ``/get_server_info``.

    Raises :class:`EngineError` when the server cannot be reached or answers 5xx, :class:`UsageError` on 4xx,
    :class:`InputError` when the answers carry no speculative fields.
    """
    import httpx  # deferred: ~60 ms (httpx loads its CLI's rich and click); only --server talks HTTP

    if not prompts:
        raise UsageError("no prompts to send")
    if max_tokens < 1 or concurrency < 1:
        raise UsageError("max_tokens and concurrency must be at least 1")
    base = url.rstrip("/")

    def call(method: str, path: str, *, missing_ok: bool = False, **kw: Any) -> Any:
        try:
            r = client.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise EngineError(f"cannot reach {base}{path} ({type(exc).__name__}: {exc})") from None
        if missing_ok and r.status_code == 404:
            return None
        if r.status_code >= 400:
            msg = f"HTTP {r.status_code} from {method} {path}: {r.text.strip()[:300]}"
            raise (UsageError if r.status_code < 500 else EngineError)(msg)
        return r.json()

    sampling = {"temperature": 0.0, "max_new_tokens": int(max_tokens), **(sampling_extra or {})}
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, timeout=timeout) as client:
        # /server_info since SGLang 0.5.23 (http_server.py: /get_server_info is deprecated there), else the old one
        info = call("GET", "/server_info", missing_ok=True)
        info_path = "/server_info" if info is not None else "/get_server_info"
        if info is None:
            info = call("GET", "/get_server_info")
        server = parse_server_info(info)
        sampler = sglang_sampler(info, f"{base}{info_path}")
        if not server.get("speculative_algorithm"):
            raise UsageError(f"{base} runs without speculative decoding (speculative_algorithm is not set)")
        with ThreadPoolExecutor(max_workers=min(concurrency, len(prompts))) as pool:
            bodies = list(pool.map(lambda p: call("POST", "/generate", json={"text": p, "sampling_params": sampling}), prompts))
    metas: list[dict[str, Any]] = []
    for i, body in enumerate(bodies):
        metas += meta_infos(body, source=f"answer {i}")
    out = summarize_sglang(metas, server=server)
    out.update(
        mode="server",
        url=base,
        engine_version=server.get("version"),
        api="/generate",
        num_prompts=len(prompts),
        max_tokens=int(max_tokens),
        output_texts=[b.get("text", "") if isinstance(b, Mapping) else "" for b in bodies],
        output_health=output_health(bodies),
        timings={"total_s": time.perf_counter() - t0},
        sampler=sampler,
    )
    return out


def output_health(bodies: Sequence[Any]) -> dict[str, Any] | None:
    """The output health of `/generate` answers (kconvert/engines/output_health.py): a finished request's answer
    carries its generated ids as ``output_ids`` (SGLang 0.5.23 ``tokenizer_manager.py``
    ``_handle_batch_output``); None when an answer has none (an older SGLang)."""
    ids = []
    for b in bodies:
        got = b.get("output_ids") if isinstance(b, Mapping) else None
        n = ((b.get("meta_info") or {}) if isinstance(b, Mapping) else {}).get("completion_tokens")
        # ids that are not all of the request's generated tokens are not its output (an answer without them)
        if not isinstance(got, list) or not all(isinstance(t, int) for t in got) or (n is not None and n != len(got)):
            return None
        ids.append(got)
    return summarize_health(ids) if ids else None
