"""The errors kconvert raises on purpose.

Every failure the user can cause or meet (bad arguments, unreadable or hostile checkpoints, an engine that
cannot run) is one of these; the CLI turns them into one line and a stable exit code, never a traceback.
"""
from __future__ import annotations

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
