"""Progress of a running pipeline: a tqdm bar per task on a terminal, a
log line every few seconds otherwise (cluster logs must not grow by
gigabytes of redrawn bars), and `JsonProgressObserver` for machines.

Observers get ``update(task_id, state, workers)`` on every server tick
(about 20 times a second) and ``close()`` when the run ends.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from daisy._daisy import TaskState

logger = logging.getLogger("daisy.progress")

#: seconds between progress log lines when stderr is not a terminal
LOG_INTERVAL = 30.0


class ProgressObserver(Protocol):
    """Receives task states while a run goes."""

    def update(self, task_id: str, state: TaskState, workers: int) -> None: ...

    def close(self) -> None: ...


def _counts(state: TaskState) -> dict[str, int]:
    return {
        "pending": state.pending_count + state.ready_count,
        "processing": state.processing_count,
        "completed": state.completed_count,
        "failed": state.failed_count,
        "orphaned": state.orphaned_count,
    }


class TqdmProgress:
    """One tqdm bar per task, in pipeline order, on stderr."""

    def __init__(self, task_ids: Sequence[str]) -> None:
        self._bars: dict[str, Any] = {}
        self._order = list(task_ids)

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        bar = self._bars.get(task_id)
        if bar is None:
            from tqdm import tqdm  # imported here: worker processes never need it

            bar = tqdm(
                total=state.total_block_count,
                desc=f"{task_id} ▶",
                unit="blocks",
                position=self._order.index(task_id),
                leave=True,
                file=sys.stderr,
            )
            self._bars[task_id] = bar
        done = state.completed_count + state.failed_count + state.orphaned_count
        c = _counts(state)
        bar.set_postfix(
            {
                "⧗": c["pending"],
                "▶": c["processing"],
                "✔": c["completed"],
                "✗": c["failed"],
                "∅": c["orphaned"],
                "workers": workers,
            },
            refresh=False,
        )
        bar.update(done - bar.n)
        if done >= state.total_block_count:
            bar.set_description(f"{task_id} {'✔' if state.all_completed else '✗'}")

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


class LogProgress:
    """A log line per task every `LOG_INTERVAL` seconds, and a last one."""

    def __init__(self, interval: float = LOG_INTERVAL) -> None:
        self.interval = interval
        self._last = 0.0
        self._latest: dict[str, tuple[TaskState, int]] = {}

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        self._latest[task_id] = (state, workers)
        now = time.monotonic()
        if now - self._last >= self.interval and task_id == next(iter(self._latest)):
            self._last = now
            self._emit()

    def _emit(self) -> None:
        for task_id, (state, workers) in self._latest.items():
            c = _counts(state)
            logger.info(
                "%s: %d/%d blocks done (pending %d, processing %d, completed %d, failed %d, "
                "orphaned %d), %d workers",
                task_id,
                c["completed"] + c["failed"] + c["orphaned"],
                state.total_block_count,
                c["pending"],
                c["processing"],
                c["completed"],
                c["failed"],
                c["orphaned"],
                workers,
            )

    def close(self) -> None:
        self._emit()


class JsonProgressObserver:
    """Writes one JSON line per task per update to ``path``: the task id, a
    wall-clock time stamp, the block counts and the live workers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        record = {"task_id": task_id, "time": time.time(), "total": state.total_block_count}
        record.update(_counts(state))
        record["skipped"] = state.skipped_count
        record["workers"] = workers
        self._file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._file.flush()
        self._file.close()


def default_observers(task_ids: Sequence[str], progress: Any) -> list[ProgressObserver]:
    """What ``run_blockwise(progress=...)`` asks for: True (a bar per task on
    a terminal, log lines otherwise), False (nothing), an observer or a
    list of observers."""
    if progress is False or progress is None:
        return []
    if progress is True:
        if sys.stderr.isatty():
            return [TqdmProgress(task_ids)]
        return [LogProgress()]
    if isinstance(progress, list | tuple):
        return list(progress)
    if hasattr(progress, "update"):
        return [progress]
    raise TypeError(
        "progress: expected True, False, an observer with update()/close(), or a list of them"
    )
