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

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kconvert._version import __version__

if TYPE_CHECKING:
    from kconvert.fix import FixResult
    from kconvert.results.thresholds import Thresholds
    from kconvert.push import PushResult
    from kconvert.inspect import InspectResult
    from kconvert.rules import Decisions, Options
    from kconvert.target import TargetModel
    from kconvert.verify import VerifyResult, VerifySettings

__all__ = ["inspect", "fix", "verify", "push", "InspectResult", "FixResult", "VerifyResult", "VerifySettings",
           "PushResult", "Decisions", "Options", "Thresholds", "__version__"]

# The functions import their implementations lazily, which keeps `import kconvert` (and `kconvert --help`) fast.


def inspect(source: str, *, target: str | TargetModel | None = None, engine: str = "vllm",
            engine_version: str | None = None, decisions: Decisions | None = None,
            options: Options | None = None, fail_on: str = "error", selection: Any = None) -> InspectResult:
    """Static checks of an EAGLE-3 draft: producer, canonical description, every incompatibility with the target
    and the engine. Reads config, index and safetensors headers (and d2t/t2d and a few embedding rows), never the
    weights, never code from the checkpoint.

    source: a local folder or a Hub id `org/name[@revision]`.
    target: a built-in profile (`kimi-k2.5`, ...), a folder, a Hub id (only its config.json is read), a
        `TargetModel`, or None (target-dependent rules are skipped and say so).
    engine / engine_version: whose loading rules apply (`vllm` or `sglang`; default the installed version).
    decisions: what the files cannot settle (`kconvert.Decisions`: aux ids, their convention, d2t kind);
        `options=` is its earlier name (`kconvert.Options` = `kconvert.Decisions`).
    fail_on: "error" (default) or "warning": the least severe finding that makes `.verdict` "fail".
    selection: `kconvert.rules.selection.Selection`, the rules in force (select / ignore with a reason); the
        findings it sets aside are in `.set_aside` and the report's `rule_selection`.

    Returns an `InspectResult` (`.findings`, `.verdict`, `.exit_code`, `.to_dict()` = `kconvert inspect --json`).
    Raises `KConvertError` subclasses for unreadable or hostile input and bad arguments.
    """
    from kconvert.inspect import inspect as _inspect

    return _inspect(source, target=target, engine=engine, engine_version=engine_version, decisions=decisions,
                    options=options, fail_on=fail_on, selection=selection)


def fix(source: str, out_dir: str | Path | None, *, target: str | TargetModel | None = None, engine: str = "vllm",
        engine_version: str | None = None, decisions: Decisions | None = None, options: Options | None = None,
        only: set[str] | None = None,
        dry_run: bool = False, partial: bool = False, force: bool = False, to_format: str | None = None,
        progress: Callable[[int, int, str], None] | None = None, durable: bool = True,
        from_pickle: bool = False, decided_by: dict[str, Any] | None = None, selection: Any = None,
        fail_on: str = "error") -> FixResult:
    """Write a corrected copy of a draft that `engine` loads with the intended meaning.

    Streams the tensors (unchanged ones by byte range), keeps sharding, writes into a temporary folder beside
    `out_dir`, checks the result and renames it into place, with provenance in `kconvert.json`; never modifies
    the input, and a failed fix leaves nothing at `out_dir`.

    A finding that needs a decision no flag gave leaves its setting exactly as it is (`.plan.left_as_is`, recorded
    in kconvert.json); every repair that needs no decision is applied. Nothing to change: nothing is written
    (`.noop`, `.written` None, verdict pass).

    only: apply only the fixes of these rule ids (an unknown id is a `UsageError`; an id with no finding here
        changes nothing, as a fix with nothing to do). fail_on: "warning" fails the fix (exit 1) while the output
        still carries a warning. dry_run: plan only (`out_dir` may be None). partial: write what can be
        fixed even when unfixable errors remain. force: replace an existing `out_dir`. to_format: "flat" or
        "speculators". progress(done_bytes, total_bytes, message). durable: fsync before the rename.
        from_pickle: convert PyTorch pickle weights (.bin/.pt) to safetensors through
        `torch.load(weights_only=True)` after the static opcode check (without it such a draft is refused).
        decided_by: the measurement behind the decision flags (`kconvert.score.cite.decision` of a
        `kconvert score --diagnose` report), recorded in kconvert.json.

    Returns a `FixResult` (`.plan`, `.written`, `.verdict`, `.to_dict()` = `kconvert fix --json`). Raises
    `AmbiguityError` where a flag must decide (the message names it), `UnfixableError`, `UsageError`, `InputError`.
    """
    from kconvert.fix import fix as _fix

    return _fix(source, out_dir, target=target, engine=engine, engine_version=engine_version, decisions=decisions,
                options=options, only=only, dry_run=dry_run, partial=partial, force=force, to_format=to_format,
                progress=progress, durable=durable, from_pickle=from_pickle, decided_by=decided_by,
                selection=selection, fail_on=fail_on)


def verify(draft: str, target: str, *, engine: str = "vllm", engine_version: str | None = None,
           settings: VerifySettings | None = None, thresholds: Thresholds | None = None,
           decisions: Decisions | None = None, options: Options | None = None,
           progress: Callable[[str], None] | None = None,
           fail_on: str = "error", selection: Any = None, dry_run: bool = False) -> VerifyResult:
    """Static checks, then the draft next to `target` in a real vLLM engine (child process, hard timeout):
    acceptance from the engine's own counters, the optional lossless check, and the gate.

    target: a folder, a Hub id, or a profile name (mapped to its Hub id for the engine).
    settings: `kconvert.VerifySettings` (tp, k, prompts, max tokens, engine args, timeout, lossless, ...).
    thresholds: `kconvert.Thresholds` to gate on (None: no gate). fail_on: "error" or "warning" for the static
    checks (failing findings stop before the engine starts unless `settings.skip_static`). dry_run: the static
    checks and the planned engine arguments and serve line (`.planned`); nothing started, no engine imported.

    Returns a `VerifyResult` (`.acceptance`, `.verdict`, `.exit_code`, `.to_dict()` = `kconvert verify --json`).
    Raises `EngineError` when the engine could not run, and the other `KConvertError` subclasses.
    """
    from kconvert.verify import verify as _verify

    return _verify(draft, target, engine=engine, engine_version=engine_version, settings=settings,
                   thresholds=thresholds, decisions=decisions, options=options, progress=progress, fail_on=fail_on,
                   selection=selection, dry_run=dry_run)


def push(folder: str | Path, repo_id: str, *, report: str | Path | dict[str, Any], revision: str | None = None,
         create_pr: bool = False, private: bool | None = None, dry_run: bool = False,
         commit_message: str | None = None, token: str | None = None, endpoint: str | None = None,
         base_model: str | None = None, tp: int | None = None,
         progress: Callable[[int, int, str], None] | None = None,
         on_upload: Callable[[int, int], None] | None = None) -> PushResult:
    """Publish `folder` to the Hub repository `repo_id` only if it is, byte for byte, the checkpoint a passing
    verify `report` (a path or the dict of `VerifyResult.to_dict()`) measured: one commit with the model card.

    dry_run: check the gate and render the card, no network. base_model: the target's Hub id for the card
    (needed when verify ran against a local folder). endpoint/token: huggingface_hub's defaults otherwise.

    Returns a `PushResult` (`.verdict`, `.to_dict()` = `kconvert push --json`). Raises `GateError` when the
    report does not pass or does not match the files, `InputError` for Hub errors, `UsageError` for a bad id.
    """
    from kconvert.push import push as _push

    return _push(folder, repo_id, report=report, revision=revision, create_pr=create_pr, private=private,
                 dry_run=dry_run, commit_message=commit_message, token=token, endpoint=endpoint,
                 base_model=base_model, tp=tp, progress=progress, on_upload=on_upload)


_API = {"inspect": inspect, "fix": fix, "verify": verify, "push": push}
_TYPES = {"InspectResult": "kconvert.inspect", "FixResult": "kconvert.fix", "VerifyResult": "kconvert.verify",
          "VerifySettings": "kconvert.verify", "PushResult": "kconvert.push", "Decisions": "kconvert.rules",
          "Options": "kconvert.rules",
          "Thresholds": "kconvert.results.thresholds"}


def __getattr__(name: str) -> Any:
    if name in _TYPES:
        import importlib

        return getattr(importlib.import_module(_TYPES[name]), name)
    raise AttributeError(f"module 'kconvert' has no attribute {name!r}")


class _Package(types.ModuleType):
    """Importing a submodule binds it on its package (`import kconvert.inspect` sets `kconvert.inspect` to the
    module), which would replace the function of the same name after the first call. The package keeps its
    functions; the modules stay reachable as `sys.modules["kconvert.inspect"]` and through `from kconvert.inspect
    import ...`."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _API.get(name) is not None and name in self.__dict__:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
