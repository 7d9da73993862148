"""The processes of a live run: the environment a child kconvert process starts with, and the reaping of a process
group so that no engine process outlives its run (vLLM's EngineCore and workers are grandchildren)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping

KILL_GRACE_S = 10.0

def _group_members(pgid: int) -> list[Any]:
    import psutil  # deferred: ~8 ms of imports; only a started engine's process group needs it

    members = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


def _alive(p: Any) -> bool:
    import psutil  # deferred: ~8 ms of imports; only a started engine's process group needs it

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def terminate_group(proc: subprocess.Popen, known: list[Any] | None = None, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the worker's process group, wait ``grace_s``, SIGKILL what remains, reap the worker.

    ``known`` are descendants seen earlier (psutil processes); any of them still alive outside the group is
    killed by pid as well, so an engine process cannot survive its worker.
    """
    import psutil  # deferred: ~8 ms of imports; only a started engine's process group needs it

    pgid = proc.pid  # start_new_session=True: the worker leads its own group
    known = list(known or [])
    try:
        known += psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in known:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if proc.poll() is None:
                time.sleep(0.1)
                continue
            if not any(_alive(p) for p in known) and not _group_members(pgid):
                break
            time.sleep(0.1)
        else:
            continue
        break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child process: this one's, `extra` on top, and this kconvert first on PYTHONPATH."""
    env = dict(os.environ)
    env.update(extra)
    # The worker must import this very kconvert even when it is not installed.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env




def remember_children(pid: int, known: dict[int, Any]) -> None:
    """Add every descendant of `pid` alive now to `known` (pid -> psutil process), so that one that leaves the
    process group can still be reaped by pid."""
    import psutil  # deferred: ~8 ms of imports; only a started engine's process group needs it

    try:
        for child in psutil.Process(pid).children(recursive=True):
            known.setdefault(child.pid, child)
    except psutil.Error:
        pass
