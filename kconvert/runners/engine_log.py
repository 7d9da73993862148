"""Reading an engine's log: the lines worth showing, and one reason for a run that produced no result (a crash, a
timeout, out of memory, a signal), with the engine's last error lines. Shared by the offline run and the server
mode."""
from __future__ import annotations

import re
import signal

from kconvert.runners.vllm_worker import ERROR_MARKER, STAGE_MARKER
from kconvert.errors import EngineError

LAST_LINES = 20

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


