"""Where matrix cells run: a local process pool by default, Ray tasks on a cluster
(`pip install 'kconvert-eagle3[ray]'`).

The contract every executor keeps (the matrix's assembly code depends on nothing else):
- a task is a module-level function and one picklable argument, so any process or node can run it;
- `run` calls `on_result(key, value)` once per task, in completion order, from the calling thread;
  a task that raised, whose worker died past its retries, or that timed out yields
  `on_error(key, message)` instead, never an exception out of `run`: one bad cell never stops the others;
- on KeyboardInterrupt `run` stops submitting, cancels what has not started, and re-raises after the
  results already delivered, so the caller can write the partial matrix atomically;
- results are JSON-compatible dicts; nothing an executor adds may change them (timings go elsewhere),
  so a Ray run and a local run of the same matrix give the same document;
- tasks that share a `group` (the static cells of one draft) may be run one after another in one worker, so
  what that process keeps (the Hub reads of the draft at its commit, `kconvert.source.hub.READ_CACHE`) serves
  them all; an executor may ignore it: results are the same either way, one per task.

Executors are chosen by name (`kconvert matrix --executor NAME`, `kconvert.matrix.matrix(executor=NAME)`): the
name is a module of this package, which registers its factory with `@register(NAME)`; `make_executor` imports
that module the first time the name is asked for (so `ray` costs nothing until used) and calls the factory with
the run's `ExecutorOptions`. Adding an executor is that one module (CONTRIBUTING.md, "Adding an executor").
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kconvert.errors import UsageError


@dataclass(frozen=True)
class Resources:
    """What one cell needs. Static and score cells need CPUs; a live cell needs `tp` devices on one node."""

    kind: str = "static"  # static | score | live
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    tp: int = 1


@dataclass(frozen=True)
class Task:
    key: str
    fn: Callable[[Any], dict[str, Any]]
    arg: Any
    resources: Resources = field(default_factory=Resources)
    group: str | None = None  # tasks best run in one worker (see the module's contract); None: any worker


class Executor(Protocol):
    name: str

    def run(
        self,
        tasks: Sequence[Task],
        *,
        on_result: Callable[[str, dict[str, Any]], None],
        on_error: Callable[[str, str], None],
    ) -> None: ...


def task_message(e: BaseException) -> str:
    """`<Type>: <first line>`: how an exception a task raised reaches `on_error`."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def units(tasks: Sequence[Task]) -> list[list[Task]]:
    """Consecutive tasks of one `group` as one unit (one call in one worker); every other task alone."""
    out: list[list[Task]] = []
    for t in tasks:
        if t.group is not None and out and out[-1][0].group == t.group:
            out[-1].append(t)
        else:
            out.append([t])
    return out


def run_unit(calls: list[tuple[Callable[[Any], dict[str, Any]], Any]]) -> list[tuple[bool, Any]]:
    """In a worker: each call of a unit, one after another; (True, value) or (False, message) per call, so one
    that raises leaves the others' results as they would be alone."""
    out: list[tuple[bool, Any]] = []
    for fn, arg in calls:
        try:
            out.append((True, fn(arg)))
        except Exception as e:  # the contract: one bad task never stops the others
            out.append((False, task_message(e)))
    return out



@dataclass(frozen=True)
class ExecutorOptions:
    """What every executor's factory is given: `--workers`, `--ray-address` and `--ray-runtime-env` (JSON text as
    given on the command line, or a mapping from a library caller). A factory refuses (UsageError) an option
    it does not take, so a flag that would be ignored never is."""

    workers: int = 1
    address: str | None = None
    runtime_env: str | Mapping[str, Any] | None = None


Factory = Callable[[ExecutorOptions], Executor]
FACTORIES: dict[str, Factory] = {}


def register(name: str) -> Callable[[Factory], Factory]:
    """`@register("local")` over a factory `(ExecutorOptions) -> Executor`: `--executor local` makes one."""
    def add(factory: Factory) -> Factory:
        if FACTORIES.get(name, factory) is not factory:
            raise ValueError(f"executor {name!r} is registered twice")
        FACTORIES[name] = factory
        return factory

    return add


def _modules() -> list[str]:
    return [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]


def names() -> list[str]:
    """Every executor that can be asked for: the registered ones and this package's modules, local first."""
    return sorted(set(FACTORIES) | set(_modules()), key=lambda n: (n != "local", n))


def make_executor(name: str, options: ExecutorOptions | None = None) -> Executor:
    """The executor `name` for these options; an unknown name is a UsageError listing the known ones, and a
    factory's own refusals (an option it does not take, an optional package missing: MissingPackageError,
    exit 3) come out as it raises them."""
    if name not in FACTORIES and name in _modules():
        importlib.import_module(f"{__name__}.{name}")  # the module registers its factory
    factory = FACTORIES.get(name)
    if factory is None:
        known = names()
        choices = " or ".join(known) if len(known) <= 2 else f"{', '.join(known[:-1])} or {known[-1]}"
        raise UsageError(f"--executor {name!r}: choose {choices}")
    return factory(options or ExecutorOptions())
