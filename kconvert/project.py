"""The project's settings for a library caller and every command alike (`kconvert.cli` only passes its flags in).

The project configuration, as ruff finds its own: `kconvert.toml`, or `[tool.kconvert]` in `pyproject.toml`, in
the working directory or the closest parent that has one (in one directory `kconvert.toml` wins). The command
line overrides it key by key. A path in it (`target = "./target"`) is relative to the file, as ruff reads its
own; an error names the file and the key. An ignored rule should state its reason, which the report records;
ruff's plain list (`ignore = ["K902"]`) is accepted with a warning (`ProjectSettings.warnings`).

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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kconvert.errors import UsageError, did_you_mean
from kconvert.guard.paths import read_toml
from kconvert.results.inspection import check_fail_on
from kconvert.rules.selection import Ignored, Selection, from_flags, resolve

KEYS = ("select", "ignore", "fail-on", "engine", "engine-version", "target")


NO_REASON = "no reason given"


@dataclass
class ProjectConfig:
    path: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def selection(self) -> Selection:
        ign = self.values.get("ignore") or {}
        sel = self.values.get("select")
        return Selection(select=tuple(sel) if sel is not None else None,
                         ignore=tuple(Ignored(k, v, self.path or "") for k, v in ign.items()), config_file=self.path)


# A project configuration is a few hundred bytes; a pyproject.toml a few KB.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _table(path: Path, given: bool = False) -> dict[str, Any] | None:
    # the read guard: a regular file, bounded, UTF-8, nested at most 64 levels before tomllib runs (a kconvert.toml
    # a checked-out repository carries is found automatically, and read like --config)
    doc = read_toml(path, f"--config {path}" if given else str(path), max_bytes=MAX_CONFIG_BYTES)
    if path.name == "pyproject.toml":
        tool = doc.get("tool")
        t = tool.get("kconvert") if isinstance(tool, dict) else None
        return t if isinstance(t, dict) else None
    return doc


def find_config(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        # lexists, not is_file: a FIFO or a folder of that name is refused by the read guard, not skipped
        if os.path.lexists(d / "kconvert.toml"):
            return d / "kconvert.toml"
        py = d / "pyproject.toml"
        if os.path.lexists(py) and _table(py) is not None:
            return py
    return None


def _validate(path: Path, t: dict[str, Any], warnings: list[str] | None = None) -> dict[str, Any]:
    where = f"{path}" + (" [tool.kconvert]" if path.name == "pyproject.toml" else "")
    table = "[tool.kconvert.ignore]" if path.name == "pyproject.toml" else "[ignore]"
    for k in t:
        if k not in KEYS:
            raise UsageError(f"{where}: unknown key {k!r}{did_you_mean(k, KEYS)}; keys: {', '.join(KEYS)}")
    sel = t.get("select")
    if sel is not None and not (isinstance(sel, list) and all(isinstance(s, str) for s in sel)):
        raise UsageError(f"{where}: select must be a list of rule ids, prefixes, categories or names")
    for s in sel or ():
        resolve(s, flag=f"{where}: select")  # a bad id is the file's, named with its key (not --select's)
    ign = t.get("ignore")
    if ign is not None:
        if isinstance(ign, list) and all(isinstance(v, str) for v in ign):
            # ruff's form: accepted, each with no reason; the reason stays the habit, so say how to give one
            if warnings is not None and ign:
                warnings.append(f"{where}: ignore = {ign!r} gives no reason; the report records "
                                f"{NO_REASON!r} for each. State why in a table: {table} {ign[0]} = \"the reason\"")
            ign = t["ignore"] = {v: NO_REASON for v in ign}
        if not isinstance(ign, dict) or not all(isinstance(v, str) and v.strip() for v in ign.values()):
            raise UsageError(f"{where}: ignore maps each rule to the reason it is ignored (a non-empty string)")
        for k in ign:
            resolve(k, flag=f"{where}: ignore")
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


def _relative_to_the_file(path: Path, t: dict[str, Any]) -> dict[str, Any]:
    """`target` as a path is relative to the configuration file, as ruff resolves the paths in its own (issue #48:
    it was read against the working directory). A profile name or a Hub id that names no path there is kept as
    written; a file in the working directory keeps its value as written."""
    target = t.get("target")
    if not isinstance(target, str) or not target.strip():
        return t
    base = path.resolve().parent
    here = Path.cwd().resolve()
    given = Path(target).expanduser()
    explicit = target.startswith(("./", "../", "~", "/"))
    if given.is_absolute() or base == here or not (explicit or (base / given).exists()):
        return t
    resolved = base / given
    try:
        shown = str(resolved.relative_to(here))
    except ValueError:
        shown = str(resolved)
    return {**t, "target": shown}


def load_config(path: str | None = None, *, isolated: bool = False) -> ProjectConfig:
    """`--config FILE`, else the configuration found upward from the working directory; `--isolated`: none."""
    if isolated:
        if path:
            raise UsageError("--config and --isolated disagree: --isolated reads no configuration")
        return ProjectConfig()
    p = Path(path) if path else find_config()
    if p is None:
        return ProjectConfig()
    if not os.path.lexists(p):
        raise UsageError(f"--config {path}: no such file")
    t = _table(p, given=bool(path))
    if t is None:
        raise UsageError(f"--config {p}: no [tool.kconvert] table")
    warnings: list[str] = []
    return ProjectConfig(str(p), _relative_to_the_file(p, _validate(p, t, warnings)), warnings)


@dataclass(frozen=True)
class ProjectSettings:
    """The run's settings resolved once: the caller's values (the command line) over the project configuration
    over the defaults."""

    selection: Selection
    engine: str
    engine_version: str | None
    target: str | None
    fail_on: str
    warnings: tuple[str, ...] = ()  # what the configuration accepted but should say otherwise (an ignore without reason)

    def to_dict(self) -> dict[str, Any]:
        """`--show-settings --json` (schemas/settings.schema.json): what the run would use, and from where."""
        sel = self.selection
        return {"config_file": sel.config_file, "engine": self.engine, "engine_version": self.engine_version,
                "target": self.target, "fail_on": self.fail_on,
                "select": list(sel.select) if sel.select is not None else None,
                "selected": sorted(sel.selected),
                "ignore": [{"selector": i.selector, "reason": i.reason, "source": i.source} for i in sel.ignore],
                "warnings": list(self.warnings)}


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
        warnings=tuple(cfg.warnings),
    )


__all__ = ["KEYS", "ProjectConfig", "ProjectSettings", "find_config", "load_config", "project_settings"]
