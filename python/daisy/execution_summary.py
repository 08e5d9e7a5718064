"""The Execution Summary printed after every run, in daisy 1.x's layout,
with a status mark per task (✔ all completed, ✗ failed or orphaned blocks,
⧗ blocks left unfinished)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

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
            # the DONE_MARKERS spec's line for a resumed run
            out += [f"    Skipped: {s.skipped_count}", ""]
        pending = s.total_block_count - s.completed_count - s.failed_count - s.orphaned_count
        if pending > 0:
            out += [f"    unfinished ⧗: {pending} (the run stopped before they ran)", ""]
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
