"""`kconvert matrix` as one library call: the project configuration (kconvert.project) under the caller's
selection, target and gate, an executor chosen by name (kconvert.matrix.executors), the cell cache by its option
value, then `run_matrix`. The command line only parses into this call and renders what it returns.

    from kconvert.matrix import matrix
    doc = matrix(["runs/*/epoch_*"], trace="./trace", engines="vllm", workers=2)   # reads kconvert.toml as the CLI
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable

from kconvert.engines.arg_policy import check_request
from kconvert.errors import UsageError
from kconvert.matrix.build import MatrixRequest, run_matrix
from kconvert.matrix.cache import CellCache
from kconvert.matrix.executors import Executor, ExecutorOptions, make_executor
from kconvert.matrix.gather import listed_inputs
from kconvert.project import project_settings


def matrix(drafts: list[str] | None = None, *, config: str | None = None, isolated: bool = False,
           select: str | None = None, ignore: str | None = None, extend_ignore: str | None = None,
           target: str | None = None, fail_on: str | None = None, executor: str | Executor = "local",
           workers: int = 1, ray_address: str | None = None, ray_runtime_env: Any = None,
           cache: str | CellCache | None = None, on_cell: Callable[[dict[str, Any]], None] | None = None,
           **request: Any) -> dict[str, Any]:
    """The matrix document (schemas/matrix.schema.json) of `drafts` and the other `MatrixRequest` fields given as
    `request` (from_file, hub_search, engines, trace, live, k, ...).

    `config` / `isolated` / `select` / `ignore` / `extend_ignore` / `target` / `fail_on`: as inspect takes them,
    the given values over the project configuration (`kconvert.project.project_settings`), so a draft and row give
    the same verdict and exit code in both. `executor`: a registered name (`local`, `ray`, ...) made with
    `workers` / `ray_address` / `ray_runtime_env`, or an executor object. `cache`: a path, `off`, None for the
    default file, or an open `CellCache` (left open). Refusals are UsageError (exit 2), a missing optional
    package MissingPackageError (exit 3), before any cell runs."""
    req = MatrixRequest(drafts=list(drafts or []), **request)
    if req.hub_search is not None and not req.hub_search.strip():
        raise UsageError("--hub-search: give the text to search for")
    # the engine-argument policy before any cell runs (each live cell's verify checks it again): exit 2, and the
    # variables a Ray runtime_env passes to the workers that start the engines
    check_request(req.engine_args, env=_runtime_env_vars(ray_runtime_env))
    ps = project_settings(config, isolated, select=select, ignore=ignore, extend_ignore=extend_ignore,
                          target=target, fail_on=fail_on)
    ex = executor if not isinstance(executor, str) else make_executor(
        executor, ExecutorOptions(workers=workers, address=ray_address, runtime_env=ray_runtime_env))
    req = replace(req, target=ps.target, selection=None if ps.selection.is_default else ps.selection,
                  fail_on=ps.fail_on)
    # what the run reads, as given: the cell cache may be none of them, nor hold nor lie inside one
    inputs = [*req.drafts, *listed_inputs(req.drafts, req.from_file), req.from_file, req.trace, req.prompts,
              ps.target, config]
    store = cache if isinstance(cache, CellCache) else CellCache.from_option(cache, inputs=inputs)
    try:
        return run_matrix(req, executor=ex, cache=store, on_cell=on_cell)
    finally:
        if store is not cache:
            store.close()


def _runtime_env_vars(runtime_env: Any) -> dict[str, Any]:
    """The env_vars of a Ray runtime_env (a JSON string or a mapping; the Ray executor parses and checks the rest)."""
    if isinstance(runtime_env, str):
        try:
            runtime_env = json.loads(runtime_env)
        except ValueError:
            return {}
    env = runtime_env.get("env_vars") if isinstance(runtime_env, dict) else None
    return dict(env) if isinstance(env, dict) else {}


__all__ = ["matrix"]
