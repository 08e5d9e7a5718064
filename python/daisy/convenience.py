"""`run_blockwise`: run a pipeline and print its Execution Summary
(``daisy.convenience`` in daisy 1.x)."""

from __future__ import annotations

from typing import Any

from daisy.execution_summary import print_execution_summary
from daisy.scheduler import Scheduler
from daisy.serial_server import SerialServer
from daisy.server import Server


def run_blockwise(tasks: Any, multiprocessing: bool = True, *, summary: bool = True) -> bool:
    """Run every block of ``tasks`` (a Task, a list of tasks or a
    Pipeline; upstream tasks are included) in dependency order.

    Args:
        tasks: what to run.
        multiprocessing: ``False`` runs every block in this process, one at
            a time, and lets the first exception propagate (for debugging).
        summary: print the Execution Summary to stdout when the run ends.

    Returns:
        True if every block of every task completed; False if any block
        failed or was orphaned.
    """
    if not isinstance(multiprocessing, bool):
        raise TypeError(f"multiprocessing: expected True or False, got {multiprocessing!r}")
    scheduler = Scheduler(tasks)
    server = Server() if multiprocessing else SerialServer()
    states = server.run_blockwise(tasks, scheduler=scheduler)
    if summary:
        print_execution_summary(states)
    return all(s.completed_count == s.total_block_count for s in states.values())
