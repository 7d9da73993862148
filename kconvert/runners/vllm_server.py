"""vLLM in server mode: measure a running OpenAI-compatible ``vllm serve`` from its own counters.

:func:`measure_vllm_server` needs nothing but the server's URL. It scrapes ``/metrics``, sends the prompts
through ``/v1/completions`` (raw text, the default) or ``/v1/chat/completions`` (the server renders the user
message with the model's chat template, as ``verify`` does offline) at temperature 0, waits until the
server has counted every request, scrapes again, and reports the difference of the spec-decode counters
with :func:`kconvert.engines.acceptance.summarize`. Other traffic on the server between the two scrapes is
counted too; ``vllm:request_success`` shows it and the result warns about it.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kconvert.engines.acceptance import summarize
from kconvert.engines.arg_policy import sampler_verdict
from kconvert.engines.metrics import VLLM, SpecMetrics, counters_delta, spec_decode_counters
from kconvert.engines.output_health import summarize_health
from kconvert.errors import EngineError, UsageError

API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
SETTLE_TIMEOUT_S = 10.0  # how long to wait for the last requests to show up in /metrics
POLL_S = 0.25


# ----------------------------------------------------------------------------------------------- HTTP


def _client(url: str, timeout: float) -> Any:
    import httpx  # deferred: ~60 ms (httpx loads its CLI's rich and click); only --server talks HTTP

    return httpx.Client(base_url=url.rstrip("/"), timeout=timeout)


def _get(client: Any, path: str, *, what: str) -> Any:
    import httpx  # deferred: ~60 ms (httpx loads its CLI's rich and click); only --server talks HTTP

    try:
        r = client.get(path)
    except httpx.TransportError as exc:  # refused, reset, timed out
        raise EngineError(f"{what}: cannot reach {client.base_url}{path} ({type(exc).__name__}: {exc})") from None
    if r.status_code >= 400:
        _raise_status(r, what)
    return r


def _raise_status(r: Any, what: str) -> None:
    body = r.text.strip().replace("\n", " ")[:300]
    msg = f"{what}: HTTP {r.status_code} from {r.request.method} {r.request.url.path}: {body}"
    if 400 <= r.status_code < 500:
        raise UsageError(msg)
    raise EngineError(msg)


def scrape(client: Any) -> str:
    """The ``/metrics`` text."""
    return _get(client, "/metrics", what="metrics scrape").text


def server_version(client: Any) -> str | None:
    try:
        return _get(client, "/version", what="server version").json().get("version")
    except (UsageError, ValueError, AttributeError):  # older servers: no /version
        return None


SERVER_INFO_PATH = "/server_info?config_format=json"


def server_sampler(client: Any) -> dict[str, Any]:
    """What the server reveals about its sampler: vLLM serves its whole VllmConfig and VLLM_* variables at
    /server_info only under VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/dev/server_info/api_router.py); elsewhere the
    answer is 404 and the verdict says the figure is only as honest as the server's sampler."""
    import httpx  # deferred: ~60 ms (httpx loads its CLI's rich and click); only --server talks HTTP

    source = f"{client.base_url}{SERVER_INFO_PATH}"
    try:
        r = client.get(SERVER_INFO_PATH)
        body = r.json() if r.status_code == 200 else None
    except (httpx.TransportError, ValueError):
        body = None
    config = body.get("vllm_config") if isinstance(body, dict) else None
    if not isinstance(config, dict):
        return sampler_verdict("vllm", revealed=False, source=f"{source} answered no JSON config (served only under "
                                                              "VLLM_SERVER_DEV_MODE=1)")
    env = body.get("vllm_env") if isinstance(body.get("vllm_env"), dict) else {}
    return sampler_verdict("vllm", config_dump=config, env=env, revealed=True, source=source)


def served_models(client: Any) -> list[str]:
    data = _get(client, "/v1/models", what="model list").json()
    return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and "id" in m]


def _send(client: Any, api: str, model: str, prompt: str, max_tokens: int, extra: Mapping[str, Any]) -> dict:
    import httpx  # deferred: ~60 ms (httpx loads its CLI's rich and click); only --server talks HTTP

    # return_token_ids: the generated ids in each choice's token_ids (CompletionRequest / ChatCompletionRequest,
    # vllm/entrypoints/openai/{completion,chat_completion}/protocol.py), for the output-health figures; a server
    # that predates the field ignores it and answers without ids
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "temperature": 0.0,
                            "return_token_ids": True, **extra}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    try:
        r = client.post(API_PATHS[api], json=body)
    except httpx.TransportError as exc:
        raise EngineError(f"request to {client.base_url}{API_PATHS[api]} failed ({type(exc).__name__}: {exc})") from None
    if r.status_code >= 400:
        _raise_status(r, "generation request")
    return r.json()


def _token_ids_of(resp: Mapping[str, Any]) -> list[int] | None:
    ids = ((resp.get("choices") or [{}])[0]).get("token_ids")
    return [int(i) for i in ids] if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else None


def output_health_of(ids: Sequence[list[int] | None], warnings: list[str]) -> dict[str, Any] | None:
    """The output health of a server's answers (kconvert/engines/output_health.py), or None with a warning when an
    answer came without its token ids."""
    if any(i is None for i in ids):
        warnings.append("the server returned no token ids for some answers: output health not measured (the "
                        "acceptance may be counted on degenerate outputs)")
        return None
    return summarize_health([list(i) for i in ids if i is not None])


def _text_of(api: str, resp: Mapping[str, Any]) -> str:
    choice = (resp.get("choices") or [{}])[0]
    if api == "chat":
        return (choice.get("message") or {}).get("content") or ""
    return choice.get("text") or ""


# ----------------------------------------------------------------------------------------------- measure


def measure_vllm_server(
    url: str,
    prompts: Sequence[str],
    *,
    model: str | None = None,
    max_tokens: int = 64,
    k: int | None = None,
    timeout: float = 600.0,
    api: str = "completions",
    concurrency: int = 8,
    extra_body: Mapping[str, Any] | None = None,
    keep_metrics_text: bool = False,
    progress: Callable[[str], None] | None = None,
    metrics: SpecMetrics = VLLM,
) -> dict[str, Any]:
    """Acceptance of the draft behind a running vLLM server, from its own counters.

    ``metrics``: which engine's counters to read (kconvert.engines.metrics: ``VLLM``, or ``TOKENSPEED`` for a
    tokenspeed server, whose OpenAI routes and vLLM-shaped counters the same measurement reads).

    ``model``: which served model to call (default: the only one; required when the server lists several);
    the counters are taken from that ``model_name`` when the scrape carries it, else summed. ``k``: the
    number of speculative tokens for the summary (default: the positions the server exports). ``api``:
    ``"completions"`` sends each prompt as raw text; ``"chat"`` sends it as a user message. ``timeout``: per
    HTTP request. ``extra_body`` is merged into every request (e.g. ``{"ignore_eos": True}``).

    Raises :class:`EngineError` (exit 3) when the server cannot be reached or fails a request,
    :class:`UsageError` (exit 2) for a 4xx answer, an unknown model, or a server without spec-decode
    counters (started without ``--speculative-config``).
    """
    if not prompts:
        raise UsageError("no prompts to send")
    if api not in API_PATHS:
        raise UsageError(f"api {api!r}: choose completions or chat")
    if max_tokens < 1 or concurrency < 1 or (k is not None and k < 1):
        raise UsageError("max_tokens, concurrency and k must be at least 1")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    with _client(url, timeout) as client:
        m = _Measurement(url, client, metrics=metrics)
        m.choose_model(model)
        sampler = server_sampler(client) if metrics.engine == "vllm" else sampler_verdict(
            metrics.engine, revealed=False, source=f"{metrics.engine}: no sampler endpoint read by kconvert")
        m.scrape_before()
        say(f"sending {len(prompts)} prompts to {API_PATHS[api]}")
        t_gen = time.perf_counter()
        extra = dict(extra_body or {})
        with ThreadPoolExecutor(max_workers=min(concurrency, len(prompts))) as pool:
            responses = list(pool.map(lambda p: _send(client, api, m.model, p, max_tokens, extra), prompts))
        generate_s = time.perf_counter() - t_gen
        m.scrape_after(len(prompts))
    k, counters, finished = m.difference(k, len(prompts))
    usage = [r.get("usage") or {} for r in responses]
    result: dict[str, Any] = {
        "engine": metrics.engine,
        "mode": "server",
        "url": url,
        "engine_version": m.version,
        "models": m.models,
        "model": m.model,
        "api": API_PATHS[api],
        "num_prompts": len(prompts),
        "max_tokens": int(max_tokens),
        "num_speculative_tokens": k,
        "counters": counters,
        "acceptance": summarize(
            counters["drafts"], counters["draft_tokens"], counters["accepted"], counters["accepted_per_pos"], k
        ),
        "counters_before": _public(m.before),
        "counters_after": _public(m.after),
        "requests_finished": finished,
        "prompt_tokens": sum(int(u.get("prompt_tokens") or 0) for u in usage),
        "completion_tokens": sum(int(u.get("completion_tokens") or 0) for u in usage),
        "output_texts": [_text_of(api, r) for r in responses],
        "output_health": output_health_of([_token_ids_of(r) for r in responses], m.warnings),
        "timings": {"generate_s": generate_s, "total_s": time.perf_counter() - t0},
        "warnings": m.warnings,
        "sampler": sampler,
    }
    if keep_metrics_text:
        result["metrics_text"] = {"before": m.text_before, "after": m.text_after}
    return result


@dataclass
class _Measurement:
    """The counters of one server around one prompt set: before, after, and what stands between them."""

    url: str
    client: Any
    version: str | None = None
    models: list[str] = field(default_factory=list)
    model: str = ""
    metric_model: str | None = None  # the model_name label the counters are taken from (None: summed)
    text_before: str = ""
    text_after: str = ""
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    metrics: SpecMetrics = VLLM

    @property
    def source(self) -> str:
        return f"{self.url}/metrics"

    def choose_model(self, model: str | None) -> None:
        self.version = server_version(self.client)
        self.models = served_models(self.client)
        if model is None:
            if len(self.models) != 1:
                raise UsageError(f"the server serves {len(self.models)} models ({', '.join(self.models)}): pick one "
                                 "with model=")
            model = self.models[0]
        elif model not in self.models:
            raise UsageError(f"model {model!r} is not served at {self.url} (served: "
                             f"{', '.join(self.models) or 'none'})")
        self.model = model

    def scrape_before(self) -> None:
        self.text_before = scrape(self.client)
        pre = spec_decode_counters(self.text_before, source=self.source, names=self.metrics)
        if not pre["found"]:
            start = ("--speculative-algorithm EAGLE3 --enable-metrics" if self.metrics.engine == "tokenspeed" else
                     "--speculative-config")
            raise UsageError(f"{self.source} has no {self.metrics.drafts.split('_num_')[0]}_* counters: the server "
                             f"runs without a draft or without its metrics (start it with {start})")
        self.metric_model = self.model if self.model in pre["model_names"] else None
        if self.metric_model is None and len(pre["model_names"]) > 1:
            self.warnings.append(f"model_name label {self.model!r} not in the scrape; counters summed over "
                                 f"{pre['model_names']}")
        self.before = self._counters(self.text_before)

    def scrape_after(self, n_requests: int) -> None:
        """vLLM records a request's stats in the output loop around the moment it answers; wait until every
        request is counted and two scrapes agree."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        self.text_after = scrape(self.client)
        self.after = self._counters(self.text_after)
        while True:
            time.sleep(POLL_S)
            again_text = scrape(self.client)
            again = self._counters(again_text)
            if _all_counted(self.before, again, n_requests) and _same_counters(again, self.after):
                break
            self.text_after, self.after = again_text, again
            if time.monotonic() > deadline:
                self.warnings.append(f"the counters were still moving {SETTLE_TIMEOUT_S:g} s after the last answer")
                break

    def _counters(self, text: str) -> dict[str, Any]:
        return spec_decode_counters(text, model=self.metric_model, source=self.source, names=self.metrics)

    def difference(self, k: int | None, n_requests: int) -> tuple[int | None, dict[str, Any], int | None]:
        """k (the one asked, else the positions the server exports), the counters between the two scrapes, and the
        requests the server finished meanwhile; warns where these disagree with what was sent."""
        counters = counters_delta(self.before, self.after)
        exported_k = self.after.get("num_speculative_tokens")
        if k is None:
            k = exported_k
        elif exported_k is not None and exported_k != k:
            self.warnings.append(f"k={k} but the server exports {exported_k} draft positions (num_speculative_tokens)")
        finished = counters.pop("requests_finished")
        if finished is not None and finished > n_requests:
            self.warnings.append(f"the server finished {finished - n_requests} other request(s) during the "
                                 "measurement; the counters include them")
        counters.pop("num_speculative_tokens", None)
        return k, counters, finished


def _all_counted(before: Mapping[str, Any], after: Mapping[str, Any], n: int) -> bool:
    b, a = before.get("requests_finished"), after.get("requests_finished")
    return a is None or b is None or a - b >= n


def _same_counters(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "requests_finished")
    return all(a.get(x) == b.get(x) for x in keys)


def _public(c: Mapping[str, Any]) -> dict[str, Any]:
    return {x: c[x] for x in ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "requests_finished")}
