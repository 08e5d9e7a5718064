"""`WorkerPool`: a set of `Worker` processes started by one function
(``daisy.worker_pool`` in daisy 1.x)."""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable
from typing import Any

from daisy.context import Context
from daisy.worker import Worker


class WorkerPool:
    """Keeps a number of `Worker` processes running ``spawn_worker_function``.

    An exception raised in a worker is queued, and `check_for_errors`
    raises it in the process that owns the pool."""

    def __init__(
        self, spawn_worker_function: Callable[[], Any], context: Context | None = None
    ) -> None:
        self.spawn_worker_function = spawn_worker_function
        self.context = context
        self.workers: dict[int, Worker] = {}
        self.error_queue = multiprocessing.get_context("spawn").Queue()

    def set_num_workers(self, num_workers: int) -> None:
        """Start or stop workers until ``num_workers`` run."""
        alive = [w for w in self.workers.values() if w.process is not None]
        if len(alive) < num_workers:
            self.inc_num_workers(num_workers - len(alive))
        for w in alive[num_workers:]:
            self.stop(w.worker_id)

    def inc_num_workers(self, num_workers: int) -> None:
        """Start ``num_workers`` more workers."""
        for _ in range(num_workers):
            w = Worker(self.spawn_worker_function, self.context, self.error_queue)
            self.workers[w.worker_id] = w

    def stop(self, worker_id: int | None = None) -> None:
        """Stop every worker, or the one with ``worker_id``."""
        ids = list(self.workers) if worker_id is None else [worker_id]
        for i in ids:
            w = self.workers.pop(i, None)
            if w is not None:
                w.stop()

    def check_for_errors(self) -> None:
        """Raise, here, the first exception a worker reported."""
        try:
            text, tb = self.error_queue.get(block=False)
        except queue.Empty:
            return
        raise RuntimeError(f"a worker failed with {text}:\n{tb}")
