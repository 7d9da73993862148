"""Matrix cells as Ray tasks: on an existing cluster, or on a local Ray instance (the `ray` extra:
`pip install 'kconvert-eagle3[ray]'`).

A cell is the same module-level function over the same picklable argument that the local pool runs, so a Ray
run and a local run give the same results (docs/design.md, "Ray's task API"). What Ray adds is where it runs:

- static cells ask for CPUs (`Resources.num_cpus`);
- score cells ask for one GPU where the cluster has one (Ray then sets CUDA_VISIBLE_DEVICES and the scorer's
  `--device auto` picks it), for CPUs otherwise;
- live cells ask for `num_gpus = tp` in a one-bundle placement group with strategy STRICT_PACK, so all `tp`
  devices are reserved on one node before the engine starts (a tensor-parallel vLLM engine runs on one node);
  on a cluster without GPUs a live cell asks for every CPU of the largest node instead (a vLLM CPU engine binds
  its OpenMP threads to the cores it is given, and two engines on one node slow each other down), and says
  so (a warning on the `kconvert.matrix.executors.ray` logger, stderr by default, and in `notes`);
- a worker that dies (killed, out of memory, node lost) is retried by Ray up to `max_retries` times; an
  exception the cell raised is deterministic, so it is not retried (`retry_exceptions=False`) and becomes
  `on_error(key, "<Type>: <message>")`;
- results are collected with `ray.wait` in completion order and delivered from the calling thread;
- consecutive tasks of one `group` (the static cells of one draft) are one Ray task over their list
  (`run_unit`), so the draft's rows share that worker's Hub read cache; each still gets its own result or
  error, and a retry after a worker's death runs the whole unit again (cells are pure functions of their spec);
- on KeyboardInterrupt every undelivered task is cancelled (`ray.cancel(force=False)`): a queued one never
  starts; Ray cannot tell the driver cheaply which have started, so a running one gets a KeyboardInterrupt of
  its own at its next Python bytecode (a cell inside one long C call finishes that call first), which runs its
  cleanup, such as stopping a live cell's engine process, where killing the worker would orphan it. Results
  that had already finished are still delivered; the cancel is repeated until every cell has stopped or 3 s
  have passed (a cancel that reaches a worker while the task is handed over interrupts nothing), then
  KeyboardInterrupt is re-raised so the caller writes the partial matrix.

Connecting: `address=None` starts a new local instance (`ray.init(address="local")`, so a RAY_ADDRESS in the
environment never redirects a local run), with `workers` CPUs (`--workers`; default: the CPUs this process may
run on, `os.sched_getaffinity`), so at most that many static or score cells run at once, GPUs as Ray detects them, a 256 MB object store (cells return small JSON dicts;
Ray's default reserves 30% of the RAM in /dev/shm) and no dashboard. `address="auto"` joins the cluster that
RAY_ADDRESS names (or the one running on this machine), any other string is a cluster address
(`ray://host:10001` or `host:6379`). When Ray is already initialised in this process, that session is used.
The workers of an existing cluster must be able to import kconvert: install it there, or ship it with
`runtime_env` (`{"pip": ["kconvert==X"]}` or `{"py_modules": [...]}`), which is passed to every task as given.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kconvert.errors import EngineError, MissingPackageError, UsageError
from kconvert.matrix.executors import ExecutorOptions, Resources, Task, register, run_unit, units

log = logging.getLogger(__name__)

LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
CANCEL_GRACE_S = 3.0  # how long a SIGINT waits for the cancelled cells to stop (each is cancelled every POLL_S)
POLL_S = 0.2  # ray.wait's timeout: how soon a SIGINT is seen while cells run


def _import_ray():
    try:
        import ray
    except ImportError:
        raise MissingPackageError("--executor ray", "Ray", "ray") from None
    return ray


def run_cell(fn: Callable[[Any], dict[str, Any]], arg: Any) -> dict[str, Any]:
    """What each Ray task runs: the cell's own function (kept module-level so Ray pickles it by reference)."""
    return fn(arg)


def _local_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _unreachable(address: str) -> str | None:
    """Why the Ray head at `address` cannot be reached, or None. `ray.init` itself retries an unreachable GCS for
    minutes before it gives up; a refused or timed-out TCP connection says the same in seconds."""
    import socket

    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        if not address or address == "auto":
            return None  # Ray looks for a cluster started on this machine; it answers quickly when there is none
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None  # not host:port; let Ray say what it makes of it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as e:
        return f"{host}:{port}: {e.strerror or e}"


def _error_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class RayExecutor:
    """Run matrix cells as Ray tasks (see the module docstring for placement, retries and SIGINT)."""

    name = "ray"

    def __init__(self, address: str | None = None, runtime_env: dict[str, Any] | None = None, *,
                 max_retries: int = 3, workers: int | None = None) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if workers is not None and workers < 1:
            raise ValueError("workers must be at least 1")
        self.address = address
        self.runtime_env = runtime_env
        self.max_retries = max_retries
        self.workers = workers  # the CPUs of a local instance; a cluster's own resources decide otherwise
        self.notes: list[str] = []  # what the executor decided that the caller may want to show
        self._started = False
        self._ray: Any = None
        self._remote: Any = None
        self._remote_unit: Any = None

    # -- connection ---------------------------------------------------------------------------------------------
    def connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = _import_ray()
        if not ray.is_initialized():
            common = dict(log_to_driver=False,  # worker output must not mix into `--json` on stdout
                          include_dashboard=False, logging_level="WARNING")
            try:
                if self.address is None:
                    ray.init(address="local", num_cpus=self.workers or _local_cpus(),
                             object_store_memory=LOCAL_OBJECT_STORE_BYTES, **common)
                else:
                    why = _unreachable(self.address)
                    if why is not None:
                        raise ConnectionError(f"cannot reach the Ray head ({why})")
                    ray.init(address=self.address, **common)
            except (ConnectionError, RuntimeError, ValueError) as e:
                where = "a local Ray instance" if self.address is None else f"Ray at {self.address!r}"
                raise EngineError(f"could not start or join {where}: {e}",
                                  hint="check --ray-address, or use --executor local") from None
            self._started = True
        self._ray = ray
        self._remote = ray.remote(run_cell)
        self._remote_unit = ray.remote(run_unit)
        return ray

    def close(self) -> None:
        """Shut down the Ray session if this executor started it (a session it found is left running)."""
        if self._ray is not None and self._started:
            self._ray.shutdown()
        self._ray = self._remote = self._remote_unit = None
        self._started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- placement ----------------------------------------------------------------------------------------------
    def _largest_node(self) -> tuple[float, float]:
        """(CPUs, GPUs) of the largest alive node: what one task can be given (an autoscaler's future nodes are
        not counted)."""
        cpus = gpus = 0.0
        for node in self._ray.nodes():
            if node.get("Alive"):
                res = node.get("Resources", {})
                cpus = max(cpus, float(res.get("CPU", 0)))
                gpus = max(gpus, float(res.get("GPU", 0)))
        return cpus, gpus

    def _placement(self, key: str, res: Resources, node_cpus: float, node_gpus: float) -> dict[str, Any]:
        """Ray options for one task, or raises ValueError with the reason no node can run it."""
        if res.kind == "live":
            if node_gpus >= res.tp:
                from ray.util import placement_group
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
                cpus = max(res.num_cpus, 1.0)
                pg = placement_group([{"GPU": float(res.tp), "CPU": cpus}], strategy="STRICT_PACK")
                return {"num_gpus": float(res.tp), "num_cpus": cpus,
                        "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
                        "_pg": pg}
            if node_gpus > 0:
                raise ValueError(f"a live cell with tp={res.tp} needs {res.tp} GPUs on one node; the largest node "
                                 f"has {node_gpus:g}")
            if node_cpus < 1:
                raise ValueError("no node of the Ray cluster has a CPU to run a live cell")
            note = (f"no GPU in the Ray cluster: live cells run on CPUs, each taking the {node_cpus:g} CPUs of a "
                    f"whole node")
            if note not in self.notes:
                self.notes.append(note)
                log.warning("kconvert matrix: %s", note)  # stderr by default: `--json` on stdout stays clean
            return {"num_cpus": node_cpus, "num_gpus": 0}
        if res.kind == "score" and node_gpus >= 1:
            return {"num_cpus": res.num_cpus, "num_gpus": 1}
        if res.num_cpus > node_cpus:
            raise ValueError(f"a {res.kind} cell asks for {res.num_cpus:g} CPUs; the largest node has "
                             f"{node_cpus:g}")
        return {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus}

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task], *, on_result: Callable[[str, dict[str, Any]], None],
            on_error: Callable[[str, str], None]) -> None:
        ray = self.connect()
        from ray.exceptions import RayTaskError, TaskCancelledError
        from ray.util import remove_placement_group

        node_cpus, node_gpus = self._largest_node()
        pending: dict[Any, list[str]] = {}  # a Ray task -> the keys of the cells it runs (one, or a unit's)
        unit_refs: set[Any] = set()
        groups: dict[Any, Any] = {}

        def settle(ref: Any) -> None:
            keys = pending.pop(ref)
            pg = groups.pop(ref, None)
            if pg is not None:
                remove_placement_group(pg)
            try:
                value = ray.get(ref)
            except TaskCancelledError:  # before RayTaskError: a running task cancelled is RayTaskError(this) too
                return  # cancelled after SIGINT: not computed, so not in the matrix
            except RayTaskError as e:  # the cell raised: deterministic, never retried
                cause = e.cause if isinstance(e.cause, BaseException) else e
                for key in keys:
                    on_error(key, _error_message(cause))
            except ray.exceptions.RayError as e:  # the worker or its node died past the retries
                for key in keys:
                    on_error(key, f"the Ray worker died ({self.max_retries + 1} attempts): {_error_message(e)}")
            else:
                if ref not in unit_refs:
                    on_result(keys[0], value)
                    return
                unit_refs.discard(ref)
                for key, (ok, v) in zip(keys, value):
                    (on_result if ok else on_error)(key, v)

        try:
            for unit in units(tasks):
                task = unit[0]  # a unit's tasks are static cells of one draft: the same resources
                try:
                    opts = self._placement(task.key, task.resources, node_cpus, node_gpus)
                except ValueError as e:
                    for t in unit:
                        on_error(t.key, str(e))
                    continue
                pg = opts.pop("_pg", None)
                if self.runtime_env is not None:
                    opts["runtime_env"] = self.runtime_env
                fn, args = (self._remote, (task.fn, task.arg)) if len(unit) == 1 else \
                    (self._remote_unit, ([(t.fn, t.arg) for t in unit],))
                ref = fn.options(max_retries=self.max_retries, retry_exceptions=False, name=task.key[:200],
                                 **opts).remote(*args)
                if len(unit) > 1:
                    unit_refs.add(ref)
                pending[ref] = [t.key for t in unit]
                if pg is not None:
                    groups[ref] = pg
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                if ready:
                    # Whatever else has finished meanwhile, in one call instead of one wait per result.
                    more, _ = ray.wait([r for r in pending if r != ready[0]], num_returns=len(pending) - 1,
                                       timeout=0) if len(pending) > 1 else ([], [])
                    for ref in [*ready, *more]:
                        settle(ref)
        except KeyboardInterrupt:
            # Cancel, and cancel again what has not settled: a cancel that reaches a worker while the task is
            # being handed to it finds nothing to interrupt, and the task would then run to its end. Results that
            # finished before the cancel are still delivered; the cancelled ones drop out.
            deadline = time.monotonic() + CANCEL_GRACE_S
            left = list(pending)
            while left:
                for ref in left:
                    ray.cancel(ref, force=False)
                done, left = ray.wait(left, num_returns=len(left), timeout=POLL_S)
                for ref in done:
                    settle(ref)
                if time.monotonic() > deadline:
                    break
            raise
        finally:
            for pg in groups.values():
                remove_placement_group(pg)


def runtime_env(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`--ray-runtime-env`: JSON text (or a mapping from a library caller) that is one JSON object, or None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise UsageError(f"--ray-runtime-env: not JSON: {e}") from None
    if not isinstance(value, Mapping):
        raise UsageError("--ray-runtime-env: a JSON object, e.g. '{\"pip\": [\"vllm==0.33.0\"]}'")
    return dict(value)


@register("ray")
def create(options: ExecutorOptions) -> RayExecutor:
    """`--executor ray`: the runtime env checked first, then Ray itself (missing: MissingPackageError, exit 3,
    before any cell is planned); Ray starts or is joined when the cells run."""
    env = runtime_env(options.runtime_env)
    _import_ray()
    return RayExecutor(address=options.address, runtime_env=env, workers=options.workers)
