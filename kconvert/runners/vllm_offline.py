"""Live runs on vLLM's offline `LLM`, parent side: the worker (`kconvert.runners.vllm_worker`) runs in its own
process group with a hard timeout, every process it started is reaped, and its result (or its failure) becomes
kconvert's types.

The same path serves a tiny model on vLLM's CPU build and Kimi-K2.5 on 8 GPUs; only the request differs
(`kconvert.runners.vllm_args` builds the engine's arguments).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from kconvert.runners.engine_log import LAST_LINES, classify_failure, meaningful_lines
from kconvert.engines.installed import installed_version
from kconvert.engines.live_messages import LiveRequest, LiveResult
from kconvert.runners.processes import child_env, remember_children, terminate_group
from kconvert.runners.engine_setup import EngineSetup, setup_engine
from kconvert.runners.vllm_worker import STAGE_MARKER
from kconvert.errors import EngineError, MissingPackageError, UsageError

WORKER_MODULE = "kconvert.runners.vllm_worker"
POLL_S = 0.25

ProgressFn = Callable[[str], None]


def run_vllm(
    req: LiveRequest,
    progress: ProgressFn | None = None,
    *,
    python: str | None = None,
    keep_dir: bool = False,
    on_spawn: Callable[[int], None] | None = None,
) -> LiveResult:
    """Run ``req`` on vLLM in a child process and return its result.

    Raises :class:`EngineError` (exit 3) on a crash, non-zero exit, out of memory or timeout, with the
    engine's last error lines; no process of the run survives, whether it succeeds, fails, times out or
    the caller is interrupted (KeyboardInterrupt is re-raised after the cleanup). ``on_spawn`` receives the
    worker's pid (= its process group id), for callers that watch the processes.
    """
    if not req.prompts:
        raise UsageError("no prompts to run")
    if req.tp < 1 or req.num_speculative_tokens < 1 or req.max_tokens < 1:
        raise UsageError("tp, num_speculative_tokens and max_tokens must be at least 1")
    if python is None and installed_version("vllm") is None:
        raise MissingPackageError("verify (live)", "vLLM", "live")
    say = progress or (lambda _stage: None)
    t_start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="kconvert-vllm-"))
    failed = True
    try:
        setup = setup_engine(req, workdir)
        if req.draft_overrides:
            setup.auto_settings.append(f"draft config patched in a temporary copy: {json.dumps(req.draft_overrides)}")
        request_path, result_path, log_path = workdir / "request.json", workdir / "result.json", workdir / "engine.log"
        _write_request(request_path, req, setup)
        log_text, returncode, timed_out, stage = _spawn_and_wait(
            python or sys.executable, request_path, result_path, log_path, {**_rpc_env(workdir), **setup.env},
            req.timeout_s, say, on_spawn
        )
        if returncode != 0 or timed_out or not result_path.is_file():
            err = classify_failure(log_text, returncode, timed_out=timed_out, timeout_s=req.timeout_s, stage=stage)
            err.hint = f"full engine log: {log_path}"
            raise err
        result = _live_result(req, setup, json.loads(result_path.read_text(encoding="utf-8")), log_text, t_start)
        say("done")
        failed = False
        return result
    finally:
        if not keep_dir and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not keep_dir:
            # Keep only the log of a failed run (its path is in the error's hint): not the request, the result,
            # the patched draft copy, nor the sockets a killed engine left.
            for entry in workdir.iterdir():
                if entry.name == "engine.log":
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


# vLLM's engine processes talk over ZMQ ipc sockets it creates as files in VLLM_RPC_BASE_PATH (default: the temp
# folder; vllm/utils/network_utils.py get_open_zmq_ipc_path), which a killed or crashed engine never unlinks: the
# CI runs left ~220 of them in /tmp per run. In the run's own folder they go with it. A user's setting wins, and
# so does the temp folder where the folder's path would leave too little of a socket path's 107 bytes (AF_UNIX)
# for vLLM's 36-character names.
def _rpc_env(workdir: Path) -> dict[str, str]:
    if "VLLM_RPC_BASE_PATH" in os.environ or len(os.fsencode(workdir)) > 64:
        return {}
    return {"VLLM_RPC_BASE_PATH": str(workdir)}


def _write_request(path: Path, req: LiveRequest, setup: EngineSetup) -> None:
    """What the worker reads: the engine's arguments, the prompts and the sampling."""
    path.write_text(json.dumps({
        "engine_args": setup.engine_args,
        "prompts": list(req.prompts),
        "chat_template": req.chat_template,
        "sampling": {"temperature": float(req.temperature), "max_tokens": int(req.max_tokens), **req.sampling_extra},
        "platform": setup.platform,
        "parent_pid": os.getpid(),
    }), encoding="utf-8")


def _live_result(req: LiveRequest, setup: EngineSetup, data: dict[str, Any], log_text: str,
                 t_start: float) -> LiveResult:
    engine_args = setup.engine_args
    if setup.draft_path:
        # The temporary copy is gone after the run; report the draft the user named (the patch is in auto).
        engine_args = json.loads(json.dumps(engine_args))
        engine_args["speculative_config"]["model"] = req.draft
        if (data.get("engine_settings") or {}).get("speculative_config.model") is not None:
            data = {**data, "engine_settings": {**data["engine_settings"], "speculative_config.model": req.draft}}
    timings = dict(data["timings"])
    timings["total_s"] = time.perf_counter() - t_start
    return LiveResult.from_dict({
        **data,
        "timings": timings,
        "engine_args": engine_args,
        "env": setup.env,
        "auto_settings": setup.auto_settings,
        "num_prompts": len(req.prompts),
        "num_speculative_tokens": req.num_speculative_tokens if req.draft else None,
        "log_tail": meaningful_lines(log_text)[-LAST_LINES:],
    })


def _spawn_and_wait(
    python: str,
    request_path: Path,
    result_path: Path,
    log_path: Path,
    env: Mapping[str, str],
    timeout_s: float,
    say: ProgressFn,
    on_spawn: Callable[[int], None] | None = None,
) -> tuple[str, int | None, bool, str | None]:
    """Run the worker; return ``(log_text, returncode, timed_out, last_stage)``. Always reaps the group."""
    stage: str | None = None
    timed_out = False
    known: dict[int, Any] = {}  # every descendant seen, in case one leaves the group
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python, "-m", WORKER_MODULE, str(request_path), str(result_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(env),
            start_new_session=True,
        )
    try:
        if on_spawn is not None:
            on_spawn(proc.pid)
        deadline = time.monotonic() + float(timeout_s)
        stages = _StageTail(log_path)
        while True:
            done = proc.poll() is not None
            for stage in stages.new_stages():
                if stage != "done":  # the parent reports "done" once it has parsed the result
                    say(stage)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            remember_children(proc.pid, known)
            time.sleep(POLL_S)
    finally:
        # Also on success: vLLM's EngineCore may outlive the worker for a moment; and on KeyboardInterrupt.
        terminate_group(proc, list(known.values()))
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    return log_text, proc.returncode if not timed_out else None, timed_out, stages.last


class _StageTail:
    """Follows the worker's log for its stage lines (`@@kconvert-stage <stage>`)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.pending = b""
        self.last: str | None = None

    def new_stages(self) -> list[str]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        self.offset += len(chunk)
        self.pending += chunk
        *complete, self.pending = self.pending.split(b"\n")
        out = []
        for raw in complete:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith(STAGE_MARKER):
                self.last = line[len(STAGE_MARKER):]
                out.append(self.last)
        return out
