"""What one matrix cell is asked to compute: plain, frozen, picklable data, so any process or Ray node can run it.

`CellSpec` is the one argument of every cell function in `kconvert.matrix.cells` (`static_cell`, `score_cell`,
`live_cell`). Its `key()` is the cell's cache key: the draft's revision (Hub commit sha or local content digest),
the engine row, kconvert's version and the digest of its own code (`code_digest`), the trace's digest and every
setting that changes the result.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kconvert._version import __version__

KINDS = ("static", "score", "live")
PACKAGE = Path(__file__).resolve().parent.parent


def code_digest(root: Path = PACKAGE) -> str:
    """sha256 over kconvert's own code and data (every .py and .json under `root`, by relative path and content).

    The version alone does not name what judged a cell: a checkout or an editable install keeps "0.1.0" through
    every change of the rules, and a cache kept across such updates (a CI runner's) would hand back the verdicts
    of older code. Content, not modification times, so a fresh clone of the same commit hits the same cells.
    About 1 MB of text, a few ms, once per process."""
    h = hashlib.sha256()
    for f in sorted(q for q in root.rglob("*") if q.suffix in (".py", ".json") and "__pycache__" not in q.parts):
        rel = f.relative_to(root).as_posix().encode()
        data = f.read_bytes()
        h.update(b"%d:%s%d:" % (len(rel), rel, len(data)))
        h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _own_code() -> str:
    return code_digest()


@dataclass(frozen=True)
class CellSpec:
    """One cell: `draft` (a local path or Hub id as given) on one engine row, of one kind.

    kind: "static" (the rules, as `kconvert inspect`), "score" (`kconvert score` against `trace`) or "live"
    (`kconvert verify` on the installed vLLM). target: the target reference (profile, folder or Hub id) or None
    when the draft's target is unknown (static: target-less checks only; score/live: skipped).
    """

    draft: str
    engine: str = "vllm"
    engine_version: str = "0.32"
    kind: str = "static"
    target: str | None = None
    revision: str | None = None
    source: str = "local"  # local | hub (kconvert.matrix.gather.DraftEntry.source)
    trace: str | None = None
    trace_digest: str | None = None
    # score: draft tokens per step, torch threads, sequences; live: k, prompts, max tokens, engine args, timeout
    settings: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    # the gate, as `kconvert inspect` resolves it (--select/--ignore/--fail-on over the project configuration):
    # a kconvert.rules.selection.Selection (frozen, picklable) or None for every rule, and the least severity that fails
    selection: Any = None
    fail_on: str = "error"

    @property
    def row(self) -> str:
        return f"{self.engine}:{self.engine_version}"

    @property
    def read_ref(self) -> str:
        """The draft as a cell reads it: a Hub id at the commit gather resolved (`org/name@sha`), so that a branch
        that moves during the run cannot have a cell judged at a commit other than the one it is cached under (and
        the cell's fix command names the commit judged); a local folder, or a Hub id given with its own revision,
        as given."""
        if self.source == "hub" and self.revision and "@" not in self.draft:
            return f"{self.draft}@{self.revision}"
        return self.draft

    def setting(self, name: str, default: Any = None) -> Any:
        return dict(self.settings).get(name, default)

    def key(self) -> str:
        """The cache key: everything the cell's result depends on, and kconvert's version and code (a new release or
        a changed rule may judge differently). The draft's path is part of it because the cell names it (and its
        fix command does)."""
        d = asdict(self)
        d["settings"] = sorted([list(kv) for kv in self.settings])
        d.pop("trace")  # the trace is identified by its digest, wherever it lies
        d["kconvert"] = __version__
        d["kconvert_code"] = _own_code()
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()

    def base_cell(self) -> dict[str, Any]:
        """The fields every cell of this spec carries, whatever its state."""
        return {"draft": self.draft, "revision": self.revision, "target": self.target, "engine": self.engine,
                "engine_version": self.engine_version, "kind": "live" if self.kind == "live" else "static"}


def settings_tuple(**kw: Any) -> tuple[tuple[str, Any], ...]:
    """Settings as a sorted tuple of pairs (hashable, picklable, one order); None values are left out."""
    return tuple(sorted((k, v) for k, v in kw.items() if v is not None))


__all__ = ["KINDS", "CellSpec", "settings_tuple"]
