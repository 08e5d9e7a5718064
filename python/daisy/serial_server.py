"""`SerialServer`: run every block in the calling process, in dependency
order (``daisy.serial_server`` in daisy 1.x). The loop and every
scheduling decision are in the Rust core; exceptions from a block function
propagate unchanged, with their traceback."""

from __future__ import annotations

from typing import Any

from daisy import _v1_names
from daisy._daisy import TaskState
from daisy.block_function import block_call
from daisy.report.task_report import RunReport
from daisy.scheduler import Scheduler
from daisy.server_observer import ServerObservee, StateEvents
from daisy.task_arguments import check_runnable
from daisy.tracking_store import log_skips


class SerialServer(ServerObservee):
    """Runs a pipeline in this process, one block at a time. After a run,
    `last_report` is its `daisy.RunReport` (resource measurements only for
    tasks with ``resource_tracking=True``; serial runs have no workers)."""

    def __init__(self) -> None:
        super().__init__()
        self.last_report: RunReport | None = None
        #: the task states when the last run stopped before its end (Ctrl-C,
        #: an exception), by task id; None after a run that went to its end
        self.stopped_states: dict[str, TaskState] | None = None

    def run_blockwise(
        self, tasks: Any, scheduler: Scheduler | None = None, block_tracking: bool = True
    ) -> dict[str, TaskState]:
        """Run every block of ``tasks`` (a Task, a list or a Pipeline) and
        return the task states by task id, in pipeline order.
        ``block_tracking=False`` runs without the tasks' tracking stores
        (nothing skipped, nothing marked).

        A block fails when its function sets ``block.status =
        daisy.BlockStatus.FAILED`` (it is then retried up to ``max_retries``
        times); an exception stops the run and propagates."""
        if scheduler is None:
            scheduler = Scheduler(tasks, block_tracking=block_tracking)
        for task in scheduler.tasks:
            check_runnable(task, in_process=True)
        result = scheduler._native.run_serial(
            {
                t.task_id: block_call(t.process_function)
                for t in scheduler.tasks
                if t.process_function is not None
            },
            {t.task_id: t._post_check for t in scheduler.tasks if t._post_check},
        )
        self.last_report = RunReport.from_json(result.report_json)
        self.last_report.attach(scheduler.tasks)
        stopped = result.stopped
        if stopped is not None:
            # the run stopped on this exception (Ctrl-C, or a block's own
            # error): its partial report rides on it
            stopped.daisy_run_report = self.last_report  # type: ignore[attr-defined]
            self.stopped_states = dict(result.states)
            raise stopped
        states = scheduler.task_states
        events = StateEvents(self)
        for tid, state in states.items():
            events.update(tid, state)
        self.notify_server_exit()
        log_skips(scheduler.tasks, states)
        return states


__getattr__ = _v1_names.lazy_names(__name__)
