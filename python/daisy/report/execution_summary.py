"""The Execution Summary printed after every run, in daisy 1.x's layout,
with a status mark per task (✔ all completed, ✗ failed or orphaned blocks,
⧗ blocks left unfinished)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from daisy._daisy import TaskState


def _mark(state: TaskState) -> str:
    if state.all_completed:
        return "✔"
    if state.failed_count or state.orphaned_count:
        return "✗"
    return "⧗"


def format_execution_summary(
    states: Mapping[str, TaskState],
    failure_notes: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The summary text for task states in pipeline order. ``failure_notes``
    adds lines under a task (which blocks failed, where the logs are)."""
    out = ["", "Execution Summary", "-----------------", ""]
    for task_id, s in states.items():
        out += [
            f"  Task {task_id}: {_mark(s)}",
            "",
            f"    num blocks : {s.total_block_count}",
            f"    completed ✔: {s.completed_count} (skipped {s.skipped_count})",
            f"    failed    ✗: {s.failed_count}",
            f"    orphaned  ∅: {s.orphaned_count}",
            "",
        ]
        if s.skipped_count:
            # the DONE_MARKERS spec's line for a resumed run: not a bare
            # repeat of the 1.x line's count, it says what skipping means
            out += [
                f"    Skipped: {s.skipped_count} (found done before they ran, by done markers, "
                "the skip mask or the check_function: not processed again)",
                "",
            ]
        pending = s.total_block_count - s.completed_count - s.failed_count - s.orphaned_count
        if pending > 0:
            out += [
                f"    unfinished ⧗: {pending} (the run stopped before they were done: never "
                "started, or cut short while they ran)",
                "",
            ]
        if s.total_block_count == 0:
            out += ["    no blocks: the task's ROIs leave none (the warning above says why)", ""]
        elif s.all_completed:
            out += ["    all blocks processed successfully", ""]
        for line in (failure_notes or {}).get(task_id, ()):
            out.append(f"    {line}")
        if (failure_notes or {}).get(task_id):
            out.append("")
    return "\n".join(out)


def print_execution_summary(
    states: Mapping[str, TaskState],
    failure_notes: Mapping[str, Sequence[str]] | None = None,
    file: TextIO | None = None,
) -> None:
    """Print `format_execution_summary` to stdout (or ``file``)."""
    print(format_execution_summary(states, failure_notes), file=file or sys.stdout)


def format_interrupted(
    states: Mapping[str, TaskState],
    tasks: Iterable[Any],
    block_tracking: bool = True,
    how: str = "interrupted",
) -> str:
    """What a run stopped early (Ctrl-C, or ``how="terminated (SIGTERM)"``)
    says: the summary at shutdown and, per task, what a rerun finds done.
    The counts are the core's final ones, the blocks its tracking store
    records (what a rerun skips)."""
    by_id = {t.task_id: t for t in tasks}
    lines = ["", f"Run {how}; counts at shutdown:", format_execution_summary(states), ""]
    for task_id, s in states.items():
        task = by_id.get(task_id)
        done, total = s.completed_count, s.total_block_count
        store = None if task is None or not block_tracking else task.tracking_path
        if s.all_completed:
            lines.append(f"  {task_id}: all {total} blocks were done")
        elif store is not None:
            lines.append(
                f"  {task_id}: {done} of {total} blocks are recorded as done in {store}; "
                "rerun to resume (they are skipped)"
            )
        elif task is not None and getattr(task, "_pre_check", None) is not None:
            lines.append(
                f"  {task_id}: {done} of {total} blocks were done; on a rerun its "
                "check_function says which to skip"
            )
        else:
            lines.append(
                f"  {task_id}: {done} of {total} blocks were done, but it has no tracking "
                "store: a rerun processes every block again (give it a tracking_path)"
            )
    return "\n".join(lines)
