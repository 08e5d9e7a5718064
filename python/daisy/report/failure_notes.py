"""What the Execution Summary says under a task whose blocks failed: each
failed block once with its write ROI and attempts, why blocks were
orphaned, why a task was abandoned, the run's first traceback, and what to
do next (rerun, and which worker logs to read). Made from what a
distributed run returned (`RunFailures`), worded here; every count and
every decision in it (abandonment, its reason and next step, orphans by
cause) is the core's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daisy._daisy import FailedBlock, Failure, TaskState

#: the most failed attempts listed per task in the Execution Summary
MAX_LISTED_FAILURES = 10


@dataclass
class RunFailures:
    """What a finished run says about its failures, and where it kept its
    stores and logs (as they were when it began)."""

    #: the task states at the run's end, by task id
    states: dict[str, TaskState] = field(default_factory=dict)
    #: the run's tasks, by id
    task_map: dict[str, Any] = field(default_factory=dict)
    #: the failed attempts the run noted, first first
    failures: list[Failure] = field(default_factory=list)
    #: failed attempts past those, counted only
    failures_unnoted: int = 0
    #: the blocks with a failed attempt
    failed_blocks: list[FailedBlock] = field(default_factory=list)
    #: the tasks whose retried blocks failed the same way every time (the
    #: core's judgement: a rerun would fail again)
    failing_alike: list[str] = field(default_factory=list)
    #: ``(task id, reason)`` of each abandoned task
    abandoned: list[tuple[str, str]] = field(default_factory=list)
    #: each tracked task's store
    stores: dict[str, str] = field(default_factory=dict)
    #: whether the run used its stores
    block_tracking: bool = True
    #: the run's log base directory
    log_dir: Path | None = None

    def _rerun_note(self, task: Any) -> str:
        """What a rerun of ``task`` skips: how its done blocks are known (the
        store this run marked them in, though the base directory changed)."""
        store = None if task is None else self.stores.get(task.task_id)
        if store is not None and self.block_tracking:
            return f"done blocks are skipped: tracking store at {store}"
        if task is not None and task._pre_check is not None:
            return "done blocks are skipped: the task's check_function finds them"
        return (
            "without a tracking store every block runs again; give the task a tracking_path "
            "to skip the done ones"
        )

    def notes(self) -> dict[str, list[str]]:
        """Per task, the lines the Execution Summary shows under it: each
        failed block once with its write ROI and attempts (at most
        `MAX_LISTED_FAILURES`), why blocks were orphaned, why a task was
        abandoned, the run's first traceback (once, under its task), and
        what to do next: rerun, and which worker logs to read."""
        notes: dict[str, list[str]] = {}
        for tid, reason in self.abandoned:
            notes.setdefault(tid, []).append(f"abandoned: {reason}")
        blocks: dict[str, list[FailedBlock]] = {}
        for b in self.failed_blocks:
            blocks.setdefault(b.task_id, []).append(b)
        for tid, state in self.states.items():
            rows = sorted(blocks.get(tid, []), key=lambda b: not b.failed)  # failed ones first
            task = self.task_map.get(tid)
            lines = [
                *self._failed_block_lines(state, rows, task),
                *_orphan_lines(state),
                *self._first_failure_lines(tid),
                *self._next_step_lines(tid, state, rows, task),
                *self._worker_log_lines(tid),
            ]
            if lines:
                notes.setdefault(tid, []).extend(lines)
        return notes

    def _failed_block_lines(
        self, state: TaskState, rows: list[FailedBlock], task: Any
    ) -> list[str]:
        """A task's failed blocks (or failed attempts), each with its write
        ROI, its attempts and its message; failed ones first."""
        lines: list[str] = []
        allowed = None if task is None else int(task.max_retries) + 1
        if rows:
            if any(b.failed for b in rows):
                lines.append("Failed Blocks:")
            elif state.abandoned:
                lines.append(
                    "Failed attempts (their blocks were orphaned when the task was abandoned):"
                )
            else:
                lines.append("Failed attempts (each block was retried):")
        for b in rows[:MAX_LISTED_FAILURES]:
            if b.failed and allowed is not None and b.attempts <= allowed:
                what = f"failed {b.attempts} of {allowed} attempts"
            else:
                plural = "s" if b.attempts != 1 else ""
                retried = "" if b.failed else ", retried"
                what = f"failed {b.attempts} attempt{plural}{retried}"
            lines.append(f"  block {b.spatial_id} {b.write_roi}: {what}: {b.message}")
        if len(rows) > MAX_LISTED_FAILURES:
            lines.append(f"  ... and {len(rows) - MAX_LISTED_FAILURES} more blocks")
        if (rows or state.failed_count) and self.failures_unnoted:
            lines.append(
                f"  (the run noted its first {len(self.failures)} failed attempts one by one; "
                f"{self.failures_unnoted} more, in all tasks, were counted in the figures "
                "above but not listed)"
            )
        return lines

    def _first_failure_lines(self, tid: str) -> list[str]:
        """The run's first failure, with its traceback, under its task."""
        first = self.failures[0] if self.failures else None
        if first is None or first.task_id != tid:
            return []
        where = "" if first.worker_id is None else f", worker {first.worker_id}"
        return [
            f"First failure (block {first.spatial_id}{where}):",
            *(f"  {line}" for line in first.reason.rstrip().splitlines()),
        ]

    def _next_step_lines(
        self, tid: str, state: TaskState, rows: list[FailedBlock], task: Any
    ) -> list[str]:
        """What to do next: the core's advice for an abandoned task, or a
        rerun for a task with blocks left; nothing when every failed
        attempt was retried and succeeded."""
        if state.abandoned and state.abandon_next:
            return [f"Next: {state.abandon_next}, then rerun ({self._rerun_note(task)})"]
        unfinished = any(b.failed for b in rows) or state.failed_count or state.orphaned_count
        if not unfinished:
            return []
        same = (
            "its failed blocks failed the same way on every attempt, which points at the "
            "code or the block's ROI, not chance: fix that, then "
            if tid in self.failing_alike
            else ""
        )
        return [f"Next: {same}rerun to retry the failed blocks ({self._rerun_note(task)})"]

    def _worker_log_lines(self, tid: str) -> list[str]:
        """Where the logs of the task's workers that failed a block are (in
        the log base directory of the run, not today's)."""
        log_dir = self.log_dir
        workers = sorted(
            {f.worker_id for f in self.failures if f.task_id == tid and f.worker_id is not None}
        )
        if log_dir is None or not workers:
            return []
        logs = [str(Path(log_dir) / tid / f"worker_{w}.err") for w in workers]
        shown = ", ".join(logs[:MAX_LISTED_FAILURES])
        more = len(logs) - MAX_LISTED_FAILURES
        return [f"worker logs: {shown}" + (f" and {more} more" if more > 0 else "")]


def _orphan_lines(state: TaskState) -> list[str]:
    """Why a task's blocks were orphaned, by cause (the core's counts)."""
    lines: list[str] = []
    if state.orphaned_by_neighbour_count:
        lines.append(
            f"{state.orphaned_by_neighbour_count} orphaned: a conflicting block of this "
            "task failed, and they may not run before it"
        )
    own = (
        state.orphaned_count - state.orphaned_by_neighbour_count - state.orphaned_by_upstream_count
    )
    if state.abandoned and own:
        lines.append(f"{own} orphaned: the task was abandoned before they were done")
    if state.orphaned_by_upstream_count and state.abandoned_by is not None:
        lines.append(
            f"{state.orphaned_by_upstream_count} orphaned: upstream task "
            f'"{state.abandoned_by}" was abandoned'
        )
    elif state.orphaned_by_upstream_count:
        lines.append(
            f"{state.orphaned_by_upstream_count} orphaned: a block of an upstream task "
            "failed, and they read its output"
        )
    return lines
