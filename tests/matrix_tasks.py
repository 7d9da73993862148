"""Module-level task functions for the executor tests. Each runs the matrix's own static cell
(`kconvert.matrix.cells.static_cell`: `kconvert inspect` of a shipped tiny draft on one engine row), so a Ray
worker imports it by reference as it does a matrix cell; the wrappers add what a fault test needs (a pid to kill,
a long run to interrupt).

Kept out of the test module so that a Ray worker importing it loads no pytest fixtures.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kconvert.matrix.spec import CellSpec

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
DRAFTS = sorted(p for p in (TINY / "drafts").iterdir() if p.is_dir())
ROWS = (("vllm", "0.32"), ("vllm", "0.33"), ("sglang", "post-25454"), ("sglang", "0.5.23"))


def specs() -> list[CellSpec]:
    return [CellSpec(draft=str(d), engine=e, engine_version=v, target=str(TINY / "target"))
            for d in DRAFTS for e, v in ROWS]


def cell(spec: CellSpec) -> dict[str, Any]:
    """The static cell, less its timing (`seconds`), which is the one field two runs may differ in."""
    from kconvert.matrix.cells import static_cell

    return {k: v for k, v in static_cell(spec).items() if k != "seconds"}


def raw_inspect(spec: CellSpec) -> dict[str, Any]:
    """`kconvert.inspect` without the cell's guard: raises what inspect raises (a missing draft: InputError)."""
    import kconvert

    r = kconvert.inspect(spec.draft, target=spec.target, engine=spec.engine, engine_version=spec.engine_version)
    return {"verdict": r.verdict, "finding_ids": sorted(f.id for f in r.findings)}


def pid_then_cell(arg: tuple[str, CellSpec]) -> dict[str, Any]:
    """Append this worker's pid to a file, then (first attempt only) wait to be killed; then run the cell.
    A retry sees the first attempt's line and goes straight on."""
    pidfile, spec = arg
    p = Path(pidfile)
    first = not p.exists() or not p.read_text().strip()
    with p.open("a") as f:
        f.write(f"{os.getpid()}\n")
    if first:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the driver kills this process meanwhile
            time.sleep(0.05)
    return cell(spec)


def slow_cell(arg: tuple[str, CellSpec]) -> dict[str, Any]:
    """Mark the start in a folder, run 20 s, mark the end: what a SIGINT must cancel or interrupt. It waits in
    short steps, as a live cell polls its engine process, so an interrupt lands within 0.1 s."""
    folder, spec = arg
    name = f"{Path(spec.draft).name}-{spec.engine}-{spec.engine_version}"
    (Path(folder) / f"{name}.started").touch()
    for _ in range(200):
        time.sleep(0.1)
    out = cell(spec)
    (Path(folder) / f"{name}.finished").touch()
    return out


def without_timings(doc: dict[str, Any]) -> dict[str, Any]:
    """A matrix document less what measures time: `timings` and each cell's `seconds` (schemas/matrix.schema.json)."""
    out = {k: v for k, v in doc.items() if k != "timings"}
    out["cells"] = [{k: v for k, v in c.items() if k != "seconds"} for c in doc["cells"]]
    return out


def env_probe(name: str) -> dict[str, Any]:
    return {"name": name, "value": os.environ.get(name)}


def gpus_assigned(_: Any) -> dict[str, Any]:
    """The GPUs Ray assigned to this task (`ray.get_gpu_ids()`) and what CUDA_VISIBLE_DEVICES says."""
    import ray

    return {"ids": sorted(str(i) for i in ray.get_gpu_ids()), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}


def pid_cell(spec: CellSpec | str) -> dict[str, Any]:
    """The cell with the pid of the worker that ran it (a group's tasks share one); "bad" raises."""
    if spec == "bad":
        raise ValueError("a cell that raised")
    return {**cell(spec), "pid": os.getpid()}  # type: ignore[arg-type]
