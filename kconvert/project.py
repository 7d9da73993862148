"""The project's settings for a library caller and every command alike (`kconvert.cli` only passes its flags in).

The project configuration, as ruff finds its own: `kconvert.toml`, or `[tool.kconvert]` in `pyproject.toml`, in
the working directory or the closest parent that has one (in one directory `kconvert.toml` wins). The command
line overrides it key by key. Every ignored rule needs a stated reason, which the report records.

    [tool.kconvert]
    engine = "vllm"
    engine-version = "0.32"
    target = "kimi-k2.5"
    fail-on = "warning"
    select = ["K"]                       # rule ids, id prefixes (K4), categories (aux-layers) or rule names

    [tool.kconvert.ignore]               # selector = the reason it is accepted
    K902 = "rope scaling dropped on purpose; verify measured AL 2.9 (verify.json, 2026-11-30)"

    from kconvert.project import project_settings
    ps = project_settings()                      # kconvert.toml found upward from the working directory
    ps = project_settings("kconvert.ci.toml", target="kimi-k2.5", fail_on="warning")   # as --config, --target ...
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, UsageError, did_you_mean
from kconvert.results.inspection import check_fail_on
from kconvert.rules.selection import Ignored, Selection, from_flags

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KEYS = ("select", "ignore", "fail-on", "engine", "engine-version", "target")


@dataclass
class ProjectConfig:
    path: str | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def selection(self) -> Selection:
        ign = self.values.get("ignore") or {}
        sel = self.values.get("select")
        return Selection(select=tuple(sel) if sel is not None else None,
                         ignore=tuple(Ignored(k, v, self.path or "") for k, v in ign.items()), config_file=self.path)


def _table(path: Path) -> dict[str, Any] | None:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML: {e}") from None
    if path.name == "pyproject.toml":
        tool = doc.get("tool")
        t = tool.get("kconvert") if isinstance(tool, dict) else None
        return t if isinstance(t, dict) else None
    return doc


def find_config(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "kconvert.toml").is_file():
            return d / "kconvert.toml"
        py = d / "pyproject.toml"
        if py.is_file() and _table(py) is not None:
            return py
    return None


def _validate(path: Path, t: dict[str, Any]) -> dict[str, Any]:
    where = f"{path}" + (" [tool.kconvert]" if path.name == "pyproject.toml" else "")
    for k in t:
        if k not in KEYS:
            raise UsageError(f"{where}: unknown key {k!r}{did_you_mean(k, KEYS)}; keys: {', '.join(KEYS)}")
    sel = t.get("select")
    if sel is not None and not (isinstance(sel, list) and all(isinstance(s, str) for s in sel)):
        raise UsageError(f"{where}: select must be a list of rule ids, prefixes, categories or names")
    ign = t.get("ignore")
    if ign is not None:
        if isinstance(ign, list):
            raise UsageError(f"{where}: ignore must say why each rule is ignored: a table such as "
                             f"[tool.kconvert.ignore] {ign[0] if ign else 'RULE'} = \"the reason\"")
        if not isinstance(ign, dict) or not all(isinstance(v, str) and v.strip() for v in ign.values()):
            raise UsageError(f"{where}: ignore maps each rule to the reason it is ignored (a non-empty string)")
    for k in ("fail-on", "engine", "engine-version", "target"):
        if k in t and not isinstance(t[k], str):
            raise UsageError(f"{where}: {k} must be a string")
    fail_on = t.get("fail-on")
    if fail_on is not None and fail_on not in ("error", "warning"):  # kconvert.results.inspection.FAIL_ON
        raise UsageError(f"{where}: fail-on = {fail_on!r}{did_you_mean(fail_on, ('error', 'warning'))}; write "
                         "fail-on = \"error\" or fail-on = \"warning\"")
    if t.get("target") is not None and not t["target"].strip():
        raise UsageError(f"{where}: target = \"\" is empty; name a profile, a folder or a Hub id, or remove the key")
    return t


def load_config(path: str | None = None, *, isolated: bool = False) -> ProjectConfig:
    """`--config FILE`, else the configuration found upward from the working directory; `--isolated`: none."""
    if isolated:
        if path:
            raise UsageError("--config and --isolated disagree: --isolated reads no configuration")
        return ProjectConfig()
    p = Path(path) if path else find_config()
    if p is None:
        return ProjectConfig()
    if not p.is_file():
        raise UsageError(f"--config {path}: no such file")
    t = _table(p)
    if t is None:
        raise UsageError(f"--config {p}: no [tool.kconvert] table")
    return ProjectConfig(str(p), _validate(p, t))


@dataclass(frozen=True)
class ProjectSettings:
    """The run's settings resolved once: the caller's values (the command line) over the project configuration
    over the defaults."""

    selection: Selection
    engine: str
    engine_version: str | None
    target: str | None
    fail_on: str


def project_settings(config: str | None = None, isolated: bool = False, *, select: str | None = None,
                     ignore: str | None = None, extend_ignore: str | None = None, engine: str | None = None,
                     engine_version: str | None = None, target: str | None = None,
                     fail_on: str | None = None) -> ProjectSettings:
    """The run's settings: the given values (`--select`, `--target`, ...) over the project configuration
    (`config`, else the one found upward; `isolated`: none) over the defaults; a `fail_on` (or `fail-on` key)
    other than error/warning is refused here, before any command starts."""
    if target is not None and not target.strip():
        raise UsageError("--target '': empty; give a profile (kimi-k2.5, ...), a target folder or a Hub id, or leave "
                         "--target out for the target-less checks")
    cfg = load_config(config, isolated=isolated)
    return ProjectSettings(
        selection=from_flags(select, ignore, extend_ignore, config=cfg.selection()),
        engine=engine or cfg.get("engine") or "vllm",
        engine_version=engine_version or cfg.get("engine-version"),
        target=target or cfg.get("target"),
        fail_on=check_fail_on(fail_on or cfg.get("fail-on") or "error"),
    )


__all__ = ["KEYS", "ProjectConfig", "ProjectSettings", "find_config", "load_config", "project_settings"]
