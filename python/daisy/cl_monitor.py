"""Command-line monitoring of a run (``daisy.cl_monitor`` in daisy 1.x).

`CLMonitor(server)` shows a tqdm bar per task while the server runs,
collects each task's `TaskSummary`, and prints the Execution Summary when
the server exits. ``run_blockwise`` already shows
progress bars of its own; this is for code that drives a `daisy.Server`
itself and wants the 1.x monitor.
"""

from __future__ import annotations

import logging
from typing import Any

from daisy import _v1_names
from daisy.progress import TqdmProgress
from daisy.report.execution_summary import print_execution_summary
from daisy.server_observer import ServerObservee, ServerObserver


class BlockFailure:
    """A failed block, with its exception and the worker that reported it."""

    def __init__(self, block: Any, exception: Any, worker_id: Any) -> None:
        self.block = block
        self.exception = exception
        self.worker_id = worker_id

    def __repr__(self) -> str:
        block_id = getattr(self.block, "block_id", self.block)
        return f"block {block_id} in worker {self.worker_id} with exception {self.exception!r}"


class TaskSummary:
    """The last known state of a task and its block failures."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.block_failures: list[BlockFailure] = []


class TqdmLoggingHandler:
    """Wraps a logging handler so records are written with ``tqdm.write``
    and do not break the progress bars."""

    def __init__(self, handler: logging.Handler) -> None:
        self.handler = handler

    def emit(self, record: logging.LogRecord) -> None:
        """Write one record above the bars."""
        from tqdm import tqdm

        try:
            tqdm.write(self.handler.format(record), end=self.handler.terminator)  # type: ignore[attr-defined]
        except Exception:
            self.handler.handleError(record)

    def handle(self, record: logging.LogRecord) -> bool:
        """Emit the record if the wrapped handler's filters let it through."""
        if not self.handler.filter(record):
            return False
        self.emit(record)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handler, name)


class CLMonitor(ServerObserver):
    """A tqdm bar per task of the observed server, and per-task summaries."""

    def __init__(self, server: ServerObservee) -> None:
        super().__init__(server)
        self.summaries: dict[str, TaskSummary] = {}
        self._bars = TqdmProgress([])

    def _update(self, task_id: str, task_state: Any) -> None:
        if task_id not in self._bars._order:
            self._bars._order.append(task_id)
        self.summaries.setdefault(task_id, TaskSummary(task_state)).state = task_state
        self._bars.update(task_id, task_state, 0)

    def on_task_start(self, task_id: str, task_state: Any) -> None:
        """Open the task's bar."""
        self._update(task_id, task_state)

    def on_acquire_block(self, task_id: str, task_state: Any) -> None:
        """Update the task's bar."""
        self._update(task_id, task_state)

    def on_release_block(self, task_id: str, task_state: Any) -> None:
        """Update the task's bar."""
        self._update(task_id, task_state)

    def on_task_done(self, task_id: str, task_state: Any) -> None:
        """Finish the task's bar."""
        self._update(task_id, task_state)

    def on_block_failure(self, block: Any, exception: Any, context: Any) -> None:
        """Remember the failure in its task's summary."""
        task_id = getattr(block, "task_id", None)
        worker_id = context.get("worker_id") if isinstance(context, dict) else context
        if task_id in self.summaries:
            self.summaries[task_id].block_failures.append(BlockFailure(block, exception, worker_id))

    def on_server_exit(self) -> None:
        """Close the bars and print the Execution Summary of every task seen,
        with its block failures (as daisy 1.x's monitor did)."""
        self._bars.close()
        notes = {
            task_id: [f"{failure!r}" for failure in summary.block_failures]
            for task_id, summary in self.summaries.items()
            if summary.block_failures
        }
        print_execution_summary({t: s.state for t, s in self.summaries.items()}, notes)


__getattr__ = _v1_names.lazy_names(__name__)
