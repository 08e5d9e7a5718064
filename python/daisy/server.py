"""`Server`: runs a pipeline with workers (``daisy.server`` in daisy 1.x).

The distributed runtime (a Rust TCP server and worker processes) is the
next piece of work and is not in this build yet. Until it lands,
`Server.run_blockwise` runs block functions in this process, with the
semantics workers give them: an exception fails that block (it is logged
and retried up to ``max_retries``), it does not stop the run. A warning
says so once per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from daisy._daisy import Block, TaskState
from daisy.block import BlockStatus
from daisy.scheduler import Scheduler

logger = logging.getLogger(__name__)


def _catching(task_id: str, fn: Callable[[Block], Any]) -> Callable[[Block], None]:
    """``fn`` with any exception turned into a failed block, as a worker
    would report it."""

    def run(block: Block) -> None:
        try:
            fn(block)
        except Exception:
            logger.exception("block %s of task %r failed", block.block_id[1], task_id)
            block.status = BlockStatus.FAILED

    return run


class Server:
    """Runs the blocks of a pipeline and reports every task's state."""

    def __init__(self, host: str | None = None, port: int | None = None) -> None:
        self.host = host
        self.port = port

    def run_blockwise(self, tasks: Any, scheduler: Scheduler | None = None) -> dict[str, TaskState]:
        """Run every block of ``tasks`` and return the task states by id."""
        if scheduler is None:
            scheduler = Scheduler(tasks)
        for task in scheduler.tasks:
            if task.process_function is None:
                raise ValueError(
                    f"process_function: task {task.task_id!r} has none; give it a function "
                    "that takes a block"
                )
            if task.spawn_worker_function is not None:
                raise NotImplementedError(
                    f"task {task.task_id!r} has a worker function (no arguments); worker "
                    "functions need the distributed runtime, which this build of daisy does "
                    "not have yet"
                )
        logger.warning(
            "daisy: worker processes are not available in this build yet; running the blocks "
            "in this process (an exception fails its block, as in a worker)"
        )
        scheduler._native.run_serial(
            {t.task_id: _catching(t.task_id, t.process_function) for t in scheduler.tasks},
            {t.task_id: t._post_check for t in scheduler.tasks if t._post_check},
        )
        return scheduler.task_states
