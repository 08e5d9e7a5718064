"""`Scheduler`: drive the Rust scheduler by hand (``daisy.scheduler`` in
daisy 1.x). ``acquire_block(task_id)`` hands out the next ready block (or
None), ``release_block(block)`` takes it back with its status set, and
``task_states`` reports every task's counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daisy import _v1_names
from daisy._daisy import Block, TaskState
from daisy._daisy import DependencyGraph as _NativeGraph
from daisy._daisy import Scheduler as _NativeScheduler
from daisy.logging import get_log_basedir, get_log_mode
from daisy.pipeline import Pipeline
from daisy.task_outputs import describe_outputs
from daisy.tracking_store import (
    TrackedTask,
    check_block_tracking,
    resource_tracking_task_ids,
    skip_masks,
    tracking_paths,
)


class Scheduler:
    """Hands out the blocks of a pipeline in dependency order.

    Args:
        tasks: a Task, a list of tasks or a Pipeline; upstream tasks are
            included automatically.
        count_all_orphans: accepted for daisy 1.x compatibility; orphans
            are always counted exactly.
        block_tracking: False runs without the tasks' tracking stores: no
            block is skipped for a done marker, none is marked (daisy
            2.0.0's option).
        strict: True refuses a pipeline whose downstream blocks read where
            no upstream block writes (by default that is a warning).
    """

    def __init__(
        self,
        tasks: Any,
        count_all_orphans: bool = True,
        block_tracking: bool = True,
        strict: bool = False,
    ) -> None:
        self._pipeline = Pipeline.of(tasks)
        log_dir = get_log_basedir()  # untracked tasks' run histories go next to their logs
        self._tasks = {t.task_id: t for t in self._pipeline.tasks}
        check_block_tracking(block_tracking)
        self._native = _NativeScheduler(
            self._pipeline.specs(),
            {tid: t._pre_check for tid, t in self._tasks.items() if t._pre_check},
            tracking_paths(self._tasks.values()),
            skip_masks(self._tasks.values()),
            resource_tracking_task_ids(self._tasks.values()),
            [tid for tid, t in self._tasks.items() if t.gpu_tracking],
            log_dir=None if log_dir is None else Path(log_dir).absolute(),
            log_mode=get_log_mode(),
            block_tracking=block_tracking,
            strict=strict,
            outputs={
                tid: describe_outputs(t.outputs, len(t.total_roi.shape))
                for tid, t in self._tasks.items()
                if t.outputs
            },
        )

    @property
    def tasks(self) -> list[Any]:
        """Tasks in pipeline (topological) order."""
        return [self._tasks[tid] for tid in self._native.task_ids]

    def acquire_block(self, task_id: str) -> Block | None:
        """The next ready block of ``task_id`` (skipping blocks its
        ``check_function`` reports done), or None if none is ready now, or
        if the scheduler has no such task (as in 1.2.2 and 2.0.0)."""
        if task_id not in self._tasks:
            return None
        return self._native.acquire_block(task_id)

    def release_block(self, block: Block) -> None:
        """Take back a block whose ``status`` is SUCCESS or FAILED."""
        self._native.release_block(block)

    @property
    def dependency_graph(self) -> _NativeGraph:
        """The block dependency graph of the scheduler's pipeline, as the
        core holds it: ``upstream(block)`` and ``downstream(block)``, as in
        daisy 2.0.0 (and ``num_blocks``, ``roots``, ... by task id)."""
        return _NativeGraph(self._pipeline.specs())

    @property
    def task_states(self) -> dict[str, TaskState]:
        """A fresh snapshot of every task's counts, by task id."""
        return {tid: self._native.task_state(tid) for tid in self._native.task_ids}

    def get_ready_tasks(self) -> list[TrackedTask]:
        """Tasks that have a block ready now."""
        return [self._tasks[tid] for tid in self._native.ready_task_ids()]

    def is_done(self) -> bool:
        """True once every block is completed, failed or orphaned."""
        return self._native.is_done()


__getattr__ = _v1_names.lazy_names(__name__)
