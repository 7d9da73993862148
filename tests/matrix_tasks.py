"""Module-level task functions for the executor tests: each runs real kconvert code (`kconvert.inspect` of a shipped
tiny draft against one engine row), so a Ray worker imports it by reference as it would a matrix cell.

Kept out of the test module so that a Ray worker importing it loads no pytest fixtures.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
DRAFTS = sorted(p for p in (TINY / "drafts").iterdir() if p.is_dir())
ROWS = (("vllm", "0.32"), ("vllm", "0.33"), ("sglang", "post-25454"), ("sglang", "0.5.23"))


def inspect_cell(arg: tuple[str, str, str]) -> dict[str, Any]:
    """One static cell: what `kconvert inspect DRAFT --target T --engine E --engine-version V --json` decides
    (the verdict, exit code and finding ids; the report's `created` timestamp stays out)."""
    import kconvert

    draft, engine, version = arg
    r = kconvert.inspect(draft, target=str(TINY / "target"), engine=engine, engine_version=version).to_dict()
    return {"draft": draft, "engine": engine, "engine_version": version, "verdict": r["verdict"],
            "exit_code": r["exit_code"], "finding_ids": sorted(f["id"] for f in r["findings"])}


def cells() -> list[tuple[str, str, str]]:
    return [(str(d), e, v) for d in DRAFTS for e, v in ROWS]


def pid_then_inspect(arg: tuple[str, tuple[str, str, str]]) -> dict[str, Any]:
    """Append this worker's pid to a file, then (first attempt only) wait to be killed; then inspect.
    A retry sees the first attempt's line and goes straight on."""
    pidfile, cell = arg
    p = Path(pidfile)
    first = not p.exists() or not p.read_text().strip()
    with p.open("a") as f:
        f.write(f"{os.getpid()}\n")
    if first:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the driver kills this process meanwhile
            time.sleep(0.05)
    return inspect_cell(cell)


def slow_inspect(arg: tuple[str, tuple[str, str, str]]) -> dict[str, Any]:
    """Mark the start in a folder, run 20 s, mark the end: what a SIGINT must cancel or interrupt. It waits in
    short steps, as a live cell polls its engine process, so an interrupt lands within 0.1 s."""
    folder, cell = arg
    name = f"{Path(cell[0]).name}-{cell[1]}-{cell[2]}"
    (Path(folder) / f"{name}.started").touch()
    for _ in range(200):
        time.sleep(0.1)
    out = inspect_cell(cell)
    (Path(folder) / f"{name}.finished").touch()
    return out


def env_probe(name: str) -> dict[str, Any]:
    return {"name": name, "value": os.environ.get(name)}
