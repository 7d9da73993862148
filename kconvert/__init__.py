"""kconvert: find, fix, prove and publish EAGLE-3 draft checkpoints for vLLM and SGLang.

Library use mirrors the CLI; every call returns a typed result with `.verdict` ("pass" / "fail") and `.to_dict()`,
the same document that the command's `--json` prints:

    import kconvert
    result = kconvert.inspect("org/draft", target="kimi-k2.5", engine="vllm")
    for f in result.findings: print(f.id, f.severity, f.message)
    fixed = kconvert.fix("org/draft", "./draft-vllm", target="kimi-k2.5")
    report = kconvert.verify("./draft-vllm", "moonshotai/Kimi-K2.5").to_dict()
    kconvert.push("./draft-vllm", "my-org/draft", report=report)

Errors the user can cause are raised as `kconvert.errors.KConvertError` subclasses with a one-line message.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kconvert._version import __version__

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and readers
    from kconvert.commands.fix import fix
    from kconvert.commands.inspect import inspect
    from kconvert.commands.push import PushResult, push
    from kconvert.commands.verify.run import verify
    from kconvert.results.fix import FixResult
    from kconvert.results.inspect import InspectResult
    from kconvert.results.thresholds import Thresholds
    from kconvert.results.verify import VerifyResult, VerifySettings
    from kconvert.rules import Decisions, Options

# The library's names and the modules that define them: plain re-exports, resolved on first use (PEP 562), so that
# `import kconvert` and `kconvert --help` do not load the rules, formats and readers (0.1 s instead of 0.6 s).
# The commands live in `kconvert.commands`, whose module names shadow nothing here (docs/design.md#layers).
_EXPORTS = {
    "inspect": "kconvert.commands.inspect",
    "fix": "kconvert.commands.fix",
    "verify": "kconvert.commands.verify.run",
    "push": "kconvert.commands.push",
    "InspectResult": "kconvert.results.inspect",
    "FixResult": "kconvert.results.fix",
    "VerifyResult": "kconvert.results.verify",
    "VerifySettings": "kconvert.results.verify",
    "PushResult": "kconvert.commands.push",
    "Decisions": "kconvert.rules",
    "Options": "kconvert.rules",
    "Thresholds": "kconvert.results.thresholds",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # looked up once
        return value
    raise AttributeError(f"module 'kconvert' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
