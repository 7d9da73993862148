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

from typing import TYPE_CHECKING, Any

from kconvert._version import __version__

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and readers
    from kconvert.commands.fix import fix
    from kconvert.commands.inspect import inspect
    from kconvert.commands.push import PushResult, push
    from kconvert.commands.verify.command import verify
    from kconvert.results.fix import FixResult
    from kconvert.results.inspect_result import InspectResult
    from kconvert.results.thresholds import Thresholds
    from kconvert.results.verify import VerifyResult, VerifySettings
    from kconvert.rules import Decisions, Options

__all__ = ["inspect", "fix", "verify", "push", "InspectResult", "FixResult", "VerifyResult", "VerifySettings",
           "PushResult", "Decisions", "Options", "Thresholds", "__version__"]


def __getattr__(name: str) -> Any:
    """The library's names, imported when first asked for: Python calls a module's `__getattr__` only for a name
    the module lacks (PEP 562). Each branch is a plain import: deferred so that `import kconvert`, which every
    `kconvert` command runs first, does not load the rules, formats and readers (~40 ms more on `kconvert --help`).
    The commands live in `kconvert.commands`, whose module names shadow nothing here (docs/design.md#layers)."""
    # deferred, every branch: `import kconvert` runs first in every command, and these load the rules and readers
    if name == "inspect":
        from kconvert.commands.inspect import inspect
        return inspect
    if name == "fix":
        from kconvert.commands.fix import fix
        return fix
    if name == "verify":
        from kconvert.commands.verify.command import verify
        return verify
    if name in ("push", "PushResult"):
        from kconvert.commands import push
        return getattr(push, name)
    if name == "InspectResult":
        from kconvert.results.inspect_result import InspectResult
        return InspectResult
    if name == "FixResult":
        from kconvert.results.fix import FixResult
        return FixResult
    if name in ("VerifyResult", "VerifySettings"):
        from kconvert.results import verify as verify_results
        return getattr(verify_results, name)
    if name in ("Decisions", "Options"):
        from kconvert.rules import decisions
        return getattr(decisions, name)
    if name == "Thresholds":
        from kconvert.results.thresholds import Thresholds
        return Thresholds
    raise AttributeError(f"module 'kconvert' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
