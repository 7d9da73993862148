"""Live runs on vLLM, parent side: build the engine arguments, run the worker in its own process group with a
hard timeout, reap every process it started, and turn its result (or its failure) into kconvert's types.

The same path serves a tiny model on vLLM's CPU build and Kimi-K2.5 on 8 GPUs; only the request differs.
Settings that only vLLM's CPU platform needs are applied here, automatically and only on that platform, and
every one of them is recorded in the result so a report can show what the engine really ran with.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from kconvert.engines.live import LiveRequest, LiveResult
from kconvert.errors import EngineError, UsageError
from kconvert.writer.config import deep_merge

WORKER_MODULE = "kconvert.engines.vllm_worker"
STAGE_MARKER = "@@kconvert-stage "  # kept equal to vllm_worker's, which must not be imported here (no vllm)
ERROR_MARKER = "@@kconvert-error "

# CPU-platform defaults (see docs/vllm-cpu-notes.md for the errors without them).
CPU_KVCACHE_SPACE_GIB = "1"  # vLLM's CPU default sizes the KV cache from free RAM, far too much beside a trainer
CPU_GPU_MEMORY_UTILIZATION = 0.5  # 0.92 default: "Available memory on node 0 ... is less than desired ..."
CPU_MAX_MODEL_LEN = 512
KILL_GRACE_S = 10.0
POLL_S = 0.25
LAST_LINES = 20

ProgressFn = Callable[[str], None]


# ----------------------------------------------------------------------------------------------- platform


def detect_platform(environ: Mapping[str, str] | None = None) -> str:
    """``"cpu"`` when vLLM would pick its CPU platform, else ``"gpu"``, without importing vLLM (5 s here).

    Mirrors ``vllm.platforms.cpu_platform_plugin``: ``VLLM_TARGET_DEVICE=cpu``, a ``+cpu`` version of the
    ``vllm`` distribution, the ``vllm-cpu`` distribution, or macOS. The worker checks the real platform
    and logs a warning when the two disagree.
    """
    environ = os.environ if environ is None else environ
    if environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu":
        return "cpu"
    try:
        if "cpu" in metadata.version("vllm"):
            return "cpu"
        return "gpu" if not sys.platform.startswith("darwin") else "cpu"
    except metadata.PackageNotFoundError:
        pass
    try:
        metadata.version("vllm-cpu")
        return "cpu"
    except metadata.PackageNotFoundError:
        pass
    return "cpu" if sys.platform.startswith("darwin") else "gpu"


def engine_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def read_model_config(path_or_id: str | None, *, revision: str | None = None) -> dict[str, Any] | None:
    """The ``config.json`` of a local folder or, for a hub id, from the hub cache / hub; ``None`` if unknown."""
    if not path_or_id:
        return None
    p = Path(path_or_id)
    if p.is_dir():
        cfg = p / "config.json"
        try:
            return json.loads(cfg.read_text(encoding="utf-8")) if cfg.is_file() else None
        except (OSError, json.JSONDecodeError):
            return None
    try:
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(path_or_id, "config.json", revision=revision)
        return json.loads(Path(local).read_text(encoding="utf-8"))
    except Exception:
        return None


# ----------------------------------------------------------------------------------------------- arguments


def _is_mla(config: Mapping[str, Any] | None) -> bool:
    if not config:
        return False
    text = config.get("text_config") or {}
    return config.get("kv_lora_rank") is not None or (isinstance(text, dict) and text.get("kv_lora_rank") is not None)


def _is_kimi_k25(config: Mapping[str, Any] | None) -> bool:
    if not config:
        return False
    archs = " ".join(config.get("architectures") or [])
    return config.get("model_type") == "kimi_k25" or "KimiK25" in archs


def _cpu_core_list() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def build_engine_args(
    req: LiveRequest,
    *,
    platform: str,
    target_config: Mapping[str, Any] | None = None,
    draft_config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    cpu_cores: list[int] | None = None,
    draft_path: str | None = None,
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Return ``(engine_args, env, auto_settings)`` for ``vllm.LLM`` (pure: reads nothing, imports no vLLM).

    ``env`` holds only what kconvert sets on top of ``environ`` (the caller's environment): automatic
    settings first, then ``req.env``. ``req.engine_args`` are merged last and win. ``auto_settings`` names every
    choice made automatically, for the report. ``draft_path`` replaces ``req.draft`` (a patched temp copy).
    """
    environ = os.environ if environ is None else environ
    auto: list[str] = []
    user_env = dict(req.env)

    def user_has_env(key: str) -> bool:
        return key in user_env or bool(environ.get(key))

    args: dict[str, Any] = {
        "model": req.target,
        "tensor_parallel_size": int(req.tp),
        "trust_remote_code": bool(req.trust_remote_code),
        "disable_log_stats": False,  # get_metrics() is empty without stats
        "seed": 0,
    }
    draft = draft_path or req.draft
    if draft:
        spec: dict[str, Any] = dict(req.speculative_extra)
        spec.update({
            "model": draft,
            "method": req.method,
            "num_speculative_tokens": int(req.num_speculative_tokens),
        })
        if req.draft_tp is not None:
            spec["draft_tensor_parallel_size"] = int(req.draft_tp)
        args["speculative_config"] = spec

    env: dict[str, str] = {}
    if platform == "cpu":
        if not user_has_env("VLLM_CPU_KVCACHE_SPACE"):
            env["VLLM_CPU_KVCACHE_SPACE"] = CPU_KVCACHE_SPACE_GIB
            auto.append(f"VLLM_CPU_KVCACHE_SPACE={CPU_KVCACHE_SPACE_GIB} (GiB of KV cache on vLLM's CPU platform)")
        if "gpu_memory_utilization" not in req.engine_args:
            args["gpu_memory_utilization"] = CPU_GPU_MEMORY_UTILIZATION
            auto.append(f"gpu_memory_utilization={CPU_GPU_MEMORY_UTILIZATION} (CPU platform)")
        if "enforce_eager" not in req.engine_args:
            args["enforce_eager"] = True
            auto.append("enforce_eager=True (CPU platform: no graph compilation)")
        if "max_model_len" not in req.engine_args:
            mml = max(CPU_MAX_MODEL_LEN, int(req.max_tokens) + CPU_MAX_MODEL_LEN - 64)
            text = (target_config or {}).get("text_config") or target_config or {}
            cap = text.get("max_position_embeddings") if isinstance(text, dict) else None
            if isinstance(cap, int) and 0 < cap < mml:
                mml = cap
            args["max_model_len"] = mml
            auto.append(f"max_model_len={mml} (CPU platform: small KV cache)")
        if int(req.tp) > 1 and not user_has_env("VLLM_CPU_OMP_THREADS_BIND"):
            cores = cpu_cores if cpu_cores is not None else _cpu_core_list()
            bind = "|".join(str(cores[i % len(cores)]) for i in range(int(req.tp)))
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
            auto.append(f"VLLM_CPU_OMP_THREADS_BIND={bind} (one core per CPU worker)")
        draft_archs = " ".join((draft_config or {}).get("architectures") or [])
        if draft and _is_mla(target_config) and "deepseek" not in draft_archs.lower():
            if not user_has_env("VLLM_MLA_DISABLE"):
                env["VLLM_MLA_DISABLE"] = "1"
                auto.append(
                    "VLLM_MLA_DISABLE=1 (Llama-layer draft beside an MLA target on CPU: "
                    "'No common block size for 16 (CPU_MLA ...; CPU_ATTN ...)')"
                )
    if _is_kimi_k25(target_config):
        if "limit_mm_per_prompt" not in req.engine_args and "language_model_only" not in req.engine_args:
            args["limit_mm_per_prompt"] = {"vision_chunk": 0}
            auto.append("limit_mm_per_prompt={'vision_chunk': 0} (Kimi-K2.5 target: text-only run)")
    elif target_config and target_config.get("vision_config") is not None:
        if "limit_mm_per_prompt" not in req.engine_args and "language_model_only" not in req.engine_args:
            args["language_model_only"] = True
            auto.append("language_model_only=True (multimodal target: text-only run)")

    env.update({str(k): str(v) for k, v in user_env.items()})
    args.update(req.engine_args)
    return args, env, auto


def patched_draft_folder(draft: str, overrides: Mapping[str, Any], dest: Path) -> Path:
    """A folder that is ``draft`` with ``overrides`` merged into its ``config.json`` (other files symlinked).

    vLLM 0.32's ``SpeculativeConfig`` has no ``hf_overrides`` for the draft: only a *callable* target
    ``hf_overrides`` reaches the draft config, dict overrides stay target-only.
    """
    src = Path(draft)
    if not src.is_dir() or not (src / "config.json").is_file():
        raise UsageError(f"draft overrides need a local draft folder with config.json: {draft}")
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name != "config.json":
            os.symlink(entry.resolve(), dest / entry.name)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    (dest / "config.json").write_text(json.dumps(deep_merge(config, overrides), indent=2), encoding="utf-8")
    return dest


# ----------------------------------------------------------------------------------------------- log parsing

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PROGRESS = re.compile(r"(\d+%\|)|(\|\s*\d+/\d+\s*\[)|(it/s\]|s/it\])")
_ERRORISH = re.compile(
    r"(^\([\w:]+\) |Traceback \(most recent call last\)|^\s*File \"|\bERROR\b|\bCRITICAL\b|^\s*\w+(\.\w+)*(Error|Exception|Exit|Interrupt)\b"
    r"|Killed|Cannot allocate|OutOfMemory|out of memory|Segmentation fault|core dumped|"
    r"^\s*(raise|assert)\b|^\s{4}\S)"
)
_OOM = re.compile(
    r"(OutOfMemory|out of memory|Cannot allocate memory|MemoryError|std::bad_alloc|"
    r"less than requested memory for kv|is less than desired CPU memory)",
    re.IGNORECASE,
)


_VLLM_PREFIX = re.compile(
    r"^\((?P<proc>[\w:]+) pid=\d+\) (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:]+ \[[^\]]*\] ?"
)
_CARETS = re.compile(r"^[\s~^]+$")
_EXC_LINE = re.compile(r"^(?:\([\w:]+\) )?\s*(?P<exc>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<msg>.*))?$")
_GENERIC = ("Engine core initialization failed", "EngineCore encountered", "EngineDeadError", "Worker failed with error")

# vLLM's executor when a worker dies: "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), ..."
_SIGKILLED = re.compile(r"died unexpectedly \(exit code: -9\)")


def meaningful_lines(text: str) -> list[str]:
    """Log lines without ANSI colours, progress bars, caret underlines, blank lines and kconvert's stage
    markers; vLLM's record prefix ``(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] `` is shortened to
    ``(EngineCore) `` for errors and dropped for other levels."""
    out: list[str] = []
    for raw in text.split("\n"):  # not splitlines(): a "\r" redraw belongs to its line
        line = _ANSI.sub("", raw.split("\r")[-1]).rstrip()
        if not line.strip() or line.startswith(STAGE_MARKER) or _PROGRESS.search(line):
            continue
        m = _VLLM_PREFIX.match(line)
        if m:
            rest = line[m.end():]
            if not rest.strip() or _CARETS.match(rest):
                continue
            line = f"({m.group('proc')}) {rest}" if m.group("level") in ("ERROR", "CRITICAL") else f"{m.group('level')} {rest}"
        elif _CARETS.match(line):
            continue
        out.append(line[:500])
    return out


def _is_root_cause(line: str) -> bool:
    m = _EXC_LINE.match(line)
    return bool(m) and not any(g in line for g in _GENERIC)


def error_lines(text: str, n: int = LAST_LINES) -> list[str]:
    """The engine's error lines, at most ``n``: the traceback tail that ends in the first specific exception
    (the root cause: vLLM logs it first, then wraps it in generic errors), then later exception lines, and
    the worker's final exception line. Falls back to the last ``n`` meaningful lines when nothing looks like
    an error."""
    lines = meaningful_lines(text)
    final = next((ln[len(ERROR_MARKER):] for ln in reversed(lines) if ln.startswith(ERROR_MARKER)), None)
    lines = [ln for ln in lines if not ln.startswith(ERROR_MARKER)]
    seen: set[str] = set()
    errs: list[str] = []
    for ln in lines:
        if _ERRORISH.search(ln) and ln not in seen:  # tracebacks are often logged twice (worker, core)
            seen.add(ln)
            errs.append(ln)
    if not errs:
        return lines[-n:] + ([final] if final else [])
    root = next((i for i, ln in enumerate(errs) if _is_root_cause(ln)), None)
    if root is None:
        picked = errs[-n:]
    else:
        later = [ln for ln in errs[root + 1:] if _EXC_LINE.match(ln)]
        room = max(1, n - len(later) - (1 if final else 0))
        picked = errs[max(0, root + 1 - room): root + 1] + later
        picked = picked[-(n - (1 if final else 0)):] if len(picked) > n else picked
    if final and not any(final in ln for ln in picked):
        picked = picked[-(n - 1):] + [final]
    return picked


def _exception_line(text: str) -> str | None:
    for ln in reversed(meaningful_lines(text)):
        if ln.startswith(ERROR_MARKER):
            return ln[len(ERROR_MARKER):]
    return None


def _root_cause(lines: list[str]) -> str | None:
    """The first specific exception (``IndexError: ...``), else the last exception line of any kind."""
    found = []
    for ln in lines:
        m = _EXC_LINE.match(ln)
        if m:
            found.append((m.group("exc") + (f": {m.group('msg')}" if m.group("msg") else ""), _is_root_cause(ln)))
    specific = [f for f, ok in found if ok]
    if specific:
        return specific[0]
    return found[-1][0] if found else None


def classify_failure(
    log_text: str, returncode: int | None, *, timed_out: bool, timeout_s: float, stage: str | None
) -> EngineError:
    """One-line reason plus the last error lines for a run that produced no result."""
    last = error_lines(log_text)
    where = f" (stage: {stage})" if stage else ""
    if timed_out:
        return EngineError(f"vLLM engine timed out after {timeout_s:g} s{where}", last_lines=last)
    lines = [ln for ln in meaningful_lines(log_text) if not ln.startswith(ERROR_MARKER)]
    oom_lines = [ln for ln in lines if _OOM.search(ln)]
    cause = _root_cause(lines) or _exception_line(log_text)
    if oom_lines:
        detail = _root_cause(oom_lines) or oom_lines[0].strip()
        return EngineError(f"vLLM engine ran out of memory{where}: {detail[:300]}", last_lines=last)
    killed = next((ln for ln in lines if _SIGKILLED.search(ln)), None)
    if killed is not None:
        return EngineError(
            f"a vLLM engine process was killed by SIGKILL{where} (likely out of memory): {killed.strip()[:200]}",
            last_lines=last,
        )
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        reason = f"vLLM engine was killed by {name}{where}"
        if sig == signal.SIGKILL:
            reason += " (likely out of memory: the kernel's OOM killer sends SIGKILL)"
        return EngineError(reason, last_lines=last)
    detail = f": {cause[:300]}" if cause else ""
    return EngineError(f"vLLM engine failed (exit {returncode}){where}{detail}", last_lines=last)


# ----------------------------------------------------------------------------------------------- processes


def _group_members(pgid: int) -> list[Any]:
    import psutil

    members = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return members


def _alive(p: Any) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def terminate_group(proc: subprocess.Popen, known: list[Any] | None = None, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the worker's process group, wait ``grace_s``, SIGKILL what remains, reap the worker.

    ``known`` are descendants seen earlier (psutil processes); any of them still alive outside the group is
    killed by pid as well, so an engine process cannot survive its worker.
    """
    import psutil

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


# ----------------------------------------------------------------------------------------------- run


def _child_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    # The worker must import this very kconvert even when it is not installed.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


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
    if python is None and engine_version() is None:
        raise EngineError("vLLM is not installed (install kconvert[live]: vllm, or vllm-cpu on CPU)")
    say = progress or (lambda _stage: None)
    t_start = time.perf_counter()
    platform = detect_platform()
    workdir = Path(tempfile.mkdtemp(prefix="kconvert-vllm-"))
    failed = True
    try:
        draft_path = None
        if req.draft and req.draft_overrides:
            draft_path = str(patched_draft_folder(req.draft, req.draft_overrides, workdir / "draft"))
        target_config = read_model_config(req.target)
        draft_config = read_model_config(draft_path or req.draft) if req.draft else None
        engine_args, env, auto = build_engine_args(
            req, platform=platform, target_config=target_config, draft_config=draft_config, draft_path=draft_path
        )
        if req.draft_overrides:
            auto.append(f"draft config patched in a temporary copy: {json.dumps(req.draft_overrides)}")
        request_path, result_path, log_path = workdir / "request.json", workdir / "result.json", workdir / "engine.log"
        request_path.write_text(
            json.dumps(
                {
                    "engine_args": engine_args,
                    "prompts": list(req.prompts),
                    "chat_template": req.chat_template,
                    "sampling": {"temperature": float(req.temperature), "max_tokens": int(req.max_tokens)},
                    "platform": platform,
                    "parent_pid": os.getpid(),
                }
            ),
            encoding="utf-8",
        )
        log_text, returncode, timed_out, stage = _spawn_and_wait(
            python or sys.executable, request_path, result_path, log_path, env, req.timeout_s, say, on_spawn
        )
        if returncode != 0 or timed_out or not result_path.is_file():
            err = classify_failure(log_text, returncode, timed_out=timed_out, timeout_s=req.timeout_s, stage=stage)
            err.hint = f"full engine log: {log_path}"
            raise err
        data = json.loads(result_path.read_text(encoding="utf-8"))
        if draft_path:
            # The temporary copy is gone after the run; report the draft the user named (the patch is in auto).
            engine_args = json.loads(json.dumps(engine_args))
            engine_args["speculative_config"]["model"] = req.draft
        timings = dict(data["timings"])
        timings["total_s"] = time.perf_counter() - t_start
        result = LiveResult.from_dict(
            {
                **data,
                "timings": timings,
                "engine_args": engine_args,
                "env": env,
                "auto_settings": auto,
                "num_prompts": len(req.prompts),
                "num_speculative_tokens": req.num_speculative_tokens if req.draft else None,
                "log_tail": meaningful_lines(log_text)[-LAST_LINES:],
            }
        )
        say("done")
        failed = False
        return result
    finally:
        if not keep_dir and not failed:
            shutil.rmtree(workdir, ignore_errors=True)
        elif not keep_dir:
            # Keep only the log of a failed run (its path is in the error's hint).
            for name in ("request.json", "result.json"):
                (workdir / name).unlink(missing_ok=True)
            shutil.rmtree(workdir / "draft", ignore_errors=True)


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
    import psutil

    stage: str | None = None
    timed_out = False
    known: dict[int, Any] = {}  # every descendant seen, in case one leaves the group
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python, "-m", WORKER_MODULE, str(request_path), str(result_path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(env),
            start_new_session=True,
        )
    try:
        if on_spawn is not None:
            on_spawn(proc.pid)
        deadline = time.monotonic() + float(timeout_s)
        offset, pending = 0, b""
        with open(log_path, "rb") as tail:
            while True:
                done = proc.poll() is not None
                tail.seek(offset)
                chunk = tail.read()
                offset += len(chunk)
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    line = raw.decode("utf-8", "replace").strip()
                    if line.startswith(STAGE_MARKER):
                        stage = line[len(STAGE_MARKER):]
                        if stage != "done":  # the parent reports "done" once it has parsed the result
                            say(stage)
                if done:
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                try:
                    for child in psutil.Process(proc.pid).children(recursive=True):
                        known.setdefault(child.pid, child)
                except psutil.Error:
                    pass
                time.sleep(POLL_S)
    finally:
        # Also on success: vLLM's EngineCore may outlive the worker for a moment; and on KeyboardInterrupt.
        terminate_group(proc, list(known.values()))
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    return log_text, proc.returncode if not timed_out else None, timed_out, stage
