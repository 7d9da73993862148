"""`kconvert engines`: the engine rows kconvert knows and where each fact came from (`engines_list`), a release
learned from its own code (`engines_learn`), and what changed between two releases (`engines_diff`).

The library functions behind the command group; each returns a result whose `to_dict()` is what `--json` prints
(schemas/engines.schema.json).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kconvert.engines import learned
from kconvert.engines.expectations import ALL_ROWS, EngineRules, KNOWN, row_for
from kconvert.engines.installed import detect_platform, installed_version
from kconvert.errors import UsageError

_SPEC = re.compile(r"^(?P<engine>[a-z]+)\s*==\s*(?P<release>\d+\.\d+\.\d+)$")


def parse_release(spec: str) -> tuple[str, str]:
    """`vllm==0.34.0` -> ("vllm", "0.34.0"); the release is exact (a learned file is one release's code)."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise UsageError(f"{spec!r}: name one release as ENGINE==X.Y.Z, e.g. vllm==0.34.0")
    return m["engine"], m["release"]


# --------------------------------------------------------------------------------------------------- engines list

@dataclass
class RowFacts:
    row: EngineRules

    def to_dict(self) -> dict[str, Any]:
        r = self.row
        return {"row": r.key, "engine": r.engine, "version": r.version, "runner": r.runner,
                "learned_from": r.learned_from,
                "facts": {name: {"learned": src.learned, "source": src.where, "file": src.file}
                          for name, src in sorted(r.provenance.items())},
                "not_sourced": sorted(_unsourced(r))}


def _unsourced(row: EngineRules) -> list[str]:
    """Fact fields of a row without a provenance entry (the rows read by hand before provenance: SGLang's)."""
    from dataclasses import fields

    skip = {"engine", "version", "source", "aliases", "notes", "provenance", "learned_from", "runner"}
    return [f.name for f in fields(row) if f.name not in skip and f.name not in row.provenance]


@dataclass
class EnginesList:
    rows: list[RowFacts]
    installed: dict[str, str | None]
    platform: str
    committed: list[str]
    cached: list[str]
    cache: str

    def to_dict(self) -> dict[str, Any]:
        return {"command": "engines list", "rows": [r.to_dict() for r in self.rows],
                "installed": [{"engine": e, "version": v, "row": _row_key(e, v) if v else None}
                              for e, v in self.installed.items()],
                "platform": self.platform, "learned": {"committed": self.committed, "cached": self.cached,
                                                       "cache": self.cache}}


def _row_key(engine: str, version: str) -> str | None:
    """The row kconvert applies here for the installed release (its runner as vLLM picks it here), None without
    one."""
    from kconvert.engines.expectations import engine_rules

    return engine_rules(engine).key if row_for(engine, version) else None


def engines_list(row: str | None = None) -> EnginesList:
    """Every row (or the one named, `vllm 0.34` / `0.34` / `sglang 0.5.23`) with the source of each fact, the
    engines installed here and the learned files."""
    rows = list(ALL_ROWS)
    if row:
        engine, _, version = row.strip().rpartition(" ")
        engine = engine or "vllm"
        picked = row_for(engine, version) if engine in KNOWN else None
        if picked is None:
            names = [r.key for r in ALL_ROWS]
            from kconvert.errors import did_you_mean
            raise UsageError(f"no engine row {row!r}{did_you_mean(row, names)}; `kconvert engines list` lists them")
        rows = [picked]
    return EnginesList([RowFacts(r) for r in rows], {e: installed_version(e) for e in KNOWN}, detect_platform(),
                       [f"{e}=={v}" for e, v in learned.committed()], [f"{e}=={v}" for e, v in learned.cached()],
                       str(learned.cache_root()))


# -------------------------------------------------------------------------------------------------- engines learn

@dataclass
class LearnResult:
    engine: str
    release: str
    source: str
    written: str
    seconds: float
    doc: dict[str, Any] = field(repr=False)
    committed_same: bool | None = None  # a committed learned file of this release agrees (None: there is none)

    def to_dict(self) -> dict[str, Any]:
        facts = self.doc["facts"]
        return {"command": "engines learn", "engine": self.engine, "release": self.release,
                "learned_from": self.source, "written": self.written, "seconds": round(self.seconds, 1),
                "facts": {k: {"value": v["value"], "from": v["from"]} for k, v in facts.items()},
                "not_learned": self.doc["not_learned"], "patched": self.doc.get("patched", []),
                "committed_same": self.committed_same}


def engines_learn(spec: str, *, out: str | Path | None = None, cache: str | Path | None = None,
                  say: Callable[[str], None] | None = None) -> LearnResult:
    """Fetch a release's Python files (or use the installed release), run its config, loader and runner functions
    over the probe set in a child interpreter, and write its learned file (`out`: a folder, else the cache's
    `learned/`). Needs torch and transformers (the `learn` extra; MissingPackageError, exit 3, otherwise)."""
    from kconvert.runners.engine_oracle import ask  # deferred: the runner is needed by learn only

    engine, release = parse_release(spec)
    root = Path(cache).expanduser() if cache else learned.cache_root()
    t0 = time.perf_counter()
    raw, source = ask(engine, release, cache=root, say=say)
    doc = learned.document(raw, engine=engine, release=release, learned_from=source)
    took = time.perf_counter() - t0
    folder = Path(out).expanduser() if out else root / "learned"
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / learned.file_name(engine, release)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_text(text)
    tmp.replace(dest)
    same = None
    shipped = learned.HERE / learned.file_name(engine, release)
    if shipped.is_file() and shipped.resolve() != dest.resolve():
        same = learned.comparable(json.loads(shipped.read_text())) == learned.comparable(doc)
    learned.load.cache_clear()
    return LearnResult(engine, release, source, str(dest), took, doc, same)


# --------------------------------------------------------------------------------------------------- engines diff

@dataclass
class EnginesDiff:
    a: str
    b: str
    changes: list[Any]

    def to_dict(self) -> dict[str, Any]:
        return {"command": "engines diff", "a": self.a, "b": self.b, "changes": [c.to_dict() for c in self.changes]}


def _learned_doc(spec: str) -> dict[str, Any]:
    """A learned release named as `vllm==0.34.0`, `vllm 0.34`, `0.34` or `0.34.0` (vLLM unless named)."""
    s = spec.strip()
    m = _SPEC.match(s)
    if m:
        engine, release = m["engine"], m["release"]
    else:
        engine, _, version = s.rpartition(" ")
        engine = engine or "vllm"
        row = row_for(engine, version) if engine in KNOWN else None
        release = None
        if row is not None and row.learned_from:
            release = Path(row.learned_from).stem.partition("-")[2]
        elif re.fullmatch(r"\d+\.\d+\.\d+", version):
            release = version
    doc = learned.load(engine, release) if release else None
    if doc is None:
        have = [f"{e}=={v}" for e, v in learned.committed() + learned.cached()]
        raise UsageError(f"{spec!r}: no learned release of that name; learned: {', '.join(have)}",
                         hint=f"learn it first: kconvert engines learn {engine}=={release or 'X.Y.Z'}")
    return doc


def engines_diff(a: str, b: str) -> EnginesDiff:
    """What changed for EAGLE-3 drafts from release `a` to release `b` (both learned)."""
    from kconvert.engines.release_diff import diff_releases

    da, db = _learned_doc(a), _learned_doc(b)
    return EnginesDiff(f"{da['engine']} {da['release']}", f"{db['engine']} {db['release']}", diff_releases(da, db))
