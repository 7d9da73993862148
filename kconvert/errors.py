"""The errors kconvert raises on purpose, its exit codes, and the signals that interrupt it.

Every failure the user can cause or meet (bad arguments, unreadable or hostile checkpoints, an engine that
cannot run) is one of these; the CLI turns them into one line and a stable exit code, never a traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

from kconvert._version import install_hint, vllm_install_hint

EXIT_OK = 0
EXIT_FINDINGS = 1  # error-level findings, or a failed gate
EXIT_USAGE = 2  # bad usage or unreadable input
EXIT_ENGINE = 3  # this machine cannot run the step: the engine could not run, or an optional package is missing
EXIT_INTERNAL = 70  # an unexpected exception: a kconvert bug (EX_SOFTWARE of sysexits.h)


def did_you_mean(word: str, choices: "list[str] | tuple[str, ...]") -> str:
    """" (did you mean 'kimi-k2.5'?)" for a misspelt name, as ruff and git say it; "" when nothing is close."""
    import difflib  # deferred: every command's start-up loads this module; only a mistyped name needs difflib

    low = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.strip().lower(), list(low), n=1, cutoff=0.6)
    return f" (did you mean {low[close[0]]!r}?)" if close else ""


class KConvertError(Exception):
    """Base class: a problem kconvert explains in one line."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class UsageError(KConvertError):
    """The command line or an argument value is wrong."""


class InputError(KConvertError):
    """A checkpoint, config, index or report cannot be read or is not what it claims to be."""


class HeaderError(InputError):
    """A safetensors header or index violates the format (lengths, offsets, dtypes, paths)."""

    def __init__(self, file: str, message: str, *, tensor: str | None = None):
        where = f"{file}" + (f" [{tensor}]" if tensor else "")
        super().__init__(f"{where}: {message}")
        self.file = file
        self.tensor = tensor


class AmbiguityError(KConvertError):
    """The files cannot settle a decision; a flag must decide it."""

    exit_code = EXIT_FINDINGS


class UnfixableError(KConvertError):
    """Error-level findings remain that no op can repair."""

    exit_code = EXIT_FINDINGS


class NothingToFixError(KConvertError):
    """`fix --only` named rules none of which has a finding in this checkpoint: nothing was written."""

    exit_code = EXIT_FINDINGS


class SelfCheckError(KConvertError):
    """fix's own output would still carry a fixable error (a kconvert bug); the output was not written."""

    exit_code = EXIT_FINDINGS


class GateError(KConvertError):
    """A gate (thresholds, push binding) refused."""

    exit_code = EXIT_FINDINGS


class MissingPackageError(KConvertError):
    """This machine cannot run the step: an optional package (torch, transformers, vLLM) is not installed. The
    same exit code as an engine that could not run, so a CI step tells 'install something' from 'bad input'."""

    exit_code = EXIT_ENGINE

    def __init__(self, step: str, needs: str, extra: str):
        super().__init__(f"{step} needs {needs}, which is not installed here",
                         hint=vllm_install_hint() if needs.lower() == "vllm" else install_hint(extra))
        self.extra = extra


class EngineError(KConvertError):
    """The engine could not run the live test: crash, timeout, out of memory."""

    exit_code = EXIT_ENGINE

    def __init__(self, message: str, *, last_lines: list[str] | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.last_lines = list(last_lines or [])


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (`raise_interrupted`, the handler of both): the run stops and cleans up as for
    Ctrl-C (a KeyboardInterrupt, which every cleanup path already handles), and the command line exits 128 + the
    signal's number, 130 or 143, as a shell reports a process that signal ended (a cancelled CI job is no
    kconvert bug)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


_RECEIVED: list[int] = []  # the signals `raise_interrupted` handled in this process, last last


def raise_interrupted(signum: int, frame: object) -> None:
    """The handler of SIGINT and SIGTERM while kconvert runs (kconvert.cli.main, kconvert.writer.atomic)."""
    _RECEIVED.append(signum)
    raise Interrupted(signum)


def signals_received() -> int:
    """How many SIGINT/SIGTERM `raise_interrupted` has handled in this process (a caller compares two counts)."""
    return len(_RECEIVED)


def interrupt_of(exc: BaseException | None) -> KeyboardInterrupt | None:
    """The interrupt behind `exc`: itself, or the one it was raised while handling, followed through
    `__context__` and `__cause__`. An exception raised while cleaning up after Ctrl-C or SIGTERM (a BufferError
    from a buffer a hash thread still holds, click's Abort around a KeyboardInterrupt) is the interrupt's, not a
    kconvert bug."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__ or exc.__cause__
    return None


def interrupt_signal(exc: BaseException | None = None) -> int:
    """The signal an interrupt came from: its own, else the last one handled, else SIGINT (Python's own Ctrl-C)."""
    it = interrupt_of(exc)
    if isinstance(it, Interrupted):
        return it.signum
    return _RECEIVED[-1] if _RECEIVED else int(signal.SIGINT)


def interrupt_exit_code(exc: BaseException | None = None) -> int:
    """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + interrupt_signal(exc)


def interrupt_message(exc: BaseException | None = None) -> str:
    return signal_message(interrupt_signal(exc))


def signal_message(signum: int) -> str:
    """`interrupted by SIGTERM`: what kconvert says of a signal that stopped it, wherever it is said."""
    return f"interrupted by {signal.Signals(signum).name}"


def exit_on_signal(signum: int, frame: object) -> None:
    """A signal after the command finished (the process ending): its line and exit code at once, the command's
    work being done; raising into the interpreter's end would print a traceback instead."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, RuntimeError):  # a closed pipe, a closed file, the flush this signal interrupted
        pass
    os.write(2, f"error: {signal_message(signum)}\n".encode())
    os._exit(128 + signum)


def end_process(rc: int, line: str | None = None) -> None:
    """End the command line's process with `rc` (after writing `line` to stderr, if given), SIGINT and SIGTERM
    answered by `exit_on_signal` to the last instruction. CPython's own exit puts both back to their default action
    (`_PySignal_Fini`) before it collects garbage and tears the modules down (tens of ms): a SIGTERM there ended a
    finished `fix` with no line and no exit code of kconvert's (-15; a clean-clone CI run of tests/test_signals.py,
    the signal at 7/8 of the run). So kconvert does the parts of that exit that matter, in its order: the
    non-daemon threads joined (`threading._shutdown`, what `Py_FinalizeEx` calls first; private, hence getattr),
    the atexit handlers (logging's flush, multiprocessing's joins, weakref.finalize), the standard streams
    flushed; then `os._exit`. Skipped: the collection and the modules' deallocation (~15 ms of a `kconvert
    --help`, bench/NOTES.md), which finish nothing kconvert leaves open: its files are written and closed
    (kconvert.writer.atomic), its temporary folders are context managers or weakref.finalize (an atexit handler)."""
    if threading.current_thread() is threading.main_thread():  # Python sets handlers from the main thread only
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a signal the caller ignores stays ignored
                signal.signal(sig, exit_on_signal)
    if line is not None:
        try:  # what the run left in the stream first, so that the line comes last
            if sys.stderr is not None:
                sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.write(2, (line + "\n").encode())  # as exit_on_signal writes: no stream needed (sys.stderr may be None)
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    import atexit  # deferred: only the process's end needs it

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # the reader left (`| head -1`): as kconvert.cli answers a closed pipe
            rc = rc or 141
        except (OSError, ValueError):
            rc = rc or 120  # CPython's own exit status when flushing the standard streams fails
    # C's stdio buffers too, which exit(3) flushes and _exit(2) does not: a C extension's own prints (torch's), in
    # a process that loaded ctypes (torch and numpy do; a command that loaded neither wrote nothing through them)
    ctypes = sys.modules.get("ctypes")
    if ctypes is not None:
        try:
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError):
            pass
    os._exit(rc)
