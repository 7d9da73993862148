"""The default executor: in-process and sequential for one worker, a process pool for more (`--workers N`).

Keeps the contract of `kconvert.matrix.executors`: results in completion order through `on_result`, a task that
raised or whose worker died through `on_error` (never an exception out of `run`), and on KeyboardInterrupt no new
task starts, what has not started is cancelled, and the interrupt is re-raised after the results already
delivered. Processes are started with "spawn": a forked copy of a parent that has imported torch or started
threads (rich's live display, huggingface_hub's pools) can deadlock, and spawn is what every platform supports.
Consecutive tasks of one `group` (the static cells of one draft) go to a worker as one call: the first reads the
draft from the Hub, the others reuse what that process kept; each task still has its own result or error.
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from kconvert.errors import UsageError
from kconvert.matrix.executors import ExecutorOptions, Task, register, run_unit, task_message, units


class LocalExecutor:
    name = "local"

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers

    def run(self, tasks: Sequence[Task], *, on_result: Callable[[str, dict[str, Any]], None],
            on_error: Callable[[str, str], None]) -> None:
        if self.workers == 1 or len(tasks) <= 1:
            self._sequential(tasks, on_result, on_error)
        else:
            self._pool(tasks, on_result, on_error)

    @staticmethod
    def _sequential(tasks, on_result, on_error) -> None:
        for t in tasks:
            try:
                value = t.fn(t.arg)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # the contract: one bad task never stops the others
                on_error(t.key, task_message(e))
                continue
            on_result(t.key, value)

    def _pool(self, tasks, on_result, on_error) -> None:
        # A worker that dies breaks the whole pool (concurrent.futures cannot tell which task killed it): each
        # task it took down runs once more, alone, and one that kills that worker too is an error.
        broken = self._pool_once(list(tasks), on_result, on_error, self.workers)
        for t in broken:
            # alone in a pool of its own: only the task that kills its worker is reported so
            if self._pool_once([t], on_result, on_error, 1):
                on_error(t.key, "the worker process died (killed, or out of memory) before the cell finished")

    @staticmethod
    def _pool_once(tasks, on_result, on_error, workers: int) -> list[Task]:
        ctx = multiprocessing.get_context("spawn")
        todo = units(tasks)
        pool = ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=ctx)
        pending: dict[Future, list[Task]] = {}
        broken: list[Task] = []
        try:
            # A unit (the static cells of one draft) is one call, so its tasks share the worker's Hub read cache.
            for unit in todo:
                pending[pool.submit(run_unit, [(t.fn, t.arg) for t in unit])] = unit
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit = pending.pop(fut)
                    try:
                        values = fut.result()
                    except BrokenProcessPool:
                        broken += unit
                        continue
                    except Exception as e:  # the unit's results could not come back (e.g. not picklable)
                        for t in unit:
                            on_error(t.key, task_message(e))
                        continue
                    for t, (ok, value) in zip(unit, values):
                        if ok:
                            on_result(t.key, value)
                        else:
                            on_error(t.key, value)
        except KeyboardInterrupt:
            for fut in pending:
                fut.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return broken


@register("local")
def create(options: ExecutorOptions) -> LocalExecutor:
    """`--executor local` (the default): `--workers` processes; the Ray options are refused, not ignored."""
    if options.address or options.runtime_env:
        raise UsageError("--ray-address and --ray-runtime-env go with --executor ray")
    return LocalExecutor(workers=options.workers)


__all__ = ["LocalExecutor", "create"]
