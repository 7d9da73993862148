"""The default executor: in-process and sequential for one worker, a process pool for more (`--workers N`).

Keeps the contract of `kconvert.matrix.executors`: results in completion order through `on_result`, a task that
raised or whose worker died through `on_error` (never an exception out of `run`), and on KeyboardInterrupt no new
task starts, what has not started is cancelled, and the interrupt is re-raised after the results already
delivered. Processes are started with "spawn": a forked copy of a parent that has imported torch or started
threads (rich's live display, huggingface_hub's pools) can deadlock, and spawn is what every platform supports.
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from kconvert.matrix.executors import Task


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


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
                on_error(t.key, _message(e))
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
        pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx)
        pending: dict[Future, Task] = {}
        broken: list[Task] = []
        try:
            for t in tasks:
                pending[pool.submit(t.fn, t.arg)] = t
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    t = pending.pop(fut)
                    try:
                        value = fut.result()
                    except BrokenProcessPool:
                        broken.append(t)
                        continue
                    except Exception as e:
                        on_error(t.key, _message(e))
                        continue
                    on_result(t.key, value)
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


__all__ = ["LocalExecutor"]
