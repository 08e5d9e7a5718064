"""Progress of a running pipeline: a tqdm bar per task on a terminal or
in a notebook, a compact line per task every 30 s otherwise (cluster logs
must not grow by gigabytes of redrawn bars), and `JsonProgressObserver`
for machines.

Observers get ``update(task_id, state, workers)`` on every server tick
(about 20 times a second) and ``close()`` when the run ends. Observers
written for daisy 2.0 (``on_start``/``on_progress``/``on_finish``, given
all tasks' states at once) are driven from the same ticks by
`StagedObserver`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from daisy._daisy import TaskState

#: seconds between progress lines when stderr is not a terminal: two lines
#: a minute per running task keep a week-long job's log small and still
#: tell a user looking at it that the run moves
LOG_INTERVAL = 30.0


class ProgressObserver(Protocol):
    """Receives task states while a run goes."""

    def update(self, task_id: str, state: TaskState, workers: int) -> None: ...

    def close(self) -> None: ...


class PacedObserver(ProgressObserver, Protocol):
    """An observer that also shows the core's pace of each task: a
    distributed run calls `pace` after each `update` with the task's
    blocks per second over the last 30 s and its ETA in seconds, as the
    core makes them: the model's (the blocks left, each as costly as its
    nearest measured block, on the task's workers; see "Planning a run")
    from the first 5 % of its blocks on, before that their rate over the
    last 30 s (None while nothing completes)."""

    def pace(self, task_id: str, blocks_per_second: float, eta_seconds: float | None) -> None: ...


def _counts(state: TaskState) -> dict[str, int]:
    return {
        "pending": state.pending_count + state.ready_count,
        "processing": state.processing_count,
        "completed": state.completed_count,
        "failed": state.failed_count,
        "orphaned": state.orphaned_count,
    }


class TqdmProgress:
    """One tqdm bar per task, in pipeline order, on stderr; with
    ``notebook=True``, ``tqdm.auto``'s bars (widgets in a Jupyter kernel
    with ipywidgets), updated in place."""

    def __init__(self, task_ids: Sequence[str], notebook: bool = False) -> None:
        self._bars: dict[str, Any] = {}
        self._order = list(task_ids)
        self._notebook = notebook
        #: per task: the state and worker count its bar shows last
        self._latest: dict[str, tuple[TaskState, int]] = {}
        #: per task: the skipped blocks its bar counts
        self._skipped: dict[str, int] = {}
        #: per task: the display handle of its notebook widget
        self._shown: dict[str, Any] = {}

    @staticmethod
    def _postfix(state: TaskState, workers: int) -> dict[str, int]:
        c = _counts(state)
        return {
            "⧗": c["pending"],
            "▶": c["processing"],
            "✔": c["completed"],
            "✗": c["failed"],
            "∅": c["orphaned"],
            "workers": workers,
        }

    #: what the bars' glyphs stand for, said once above the first bar
    LEGEND = "daisy: ⧗ pending  ▶ processing  ✔ done  ✗ failed  ∅ orphaned (blocks)"

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        bar = self._bars.get(task_id)
        if bar is None:
            if not self._bars:
                # (a notebook shows stderr as an error: its legend is output)
                print(self.LEGEND, file=sys.stdout if self._notebook else sys.stderr, flush=True)
            # imported here: worker processes never need it
            if self._notebook:
                from tqdm.auto import tqdm
            else:
                from tqdm import tqdm
            where: dict[str, Any] = {}
            if not self._notebook:
                where["position"] = self._order.index(task_id)
            widget = self._notebook and hasattr(tqdm, "status_printer")
            if widget:
                where["display"] = False  # shown below, where it can be updated
            bar = tqdm(
                total=state.total_block_count,
                desc=f"{task_id} ▶",
                unit="blocks",
                leave=True,
                file=sys.stderr,
                **where,
            )
            if widget:
                from IPython.display import display

                # shown with a display id: its saved text fallback (what a
                # viewer without the widget state shows) is updated at close
                self._shown[task_id] = display(bar.container, display_id=True)  # type: ignore[no-untyped-call]
                bar.displayed = True
            self._bars[task_id] = bar
        self._latest[task_id] = (state, workers)
        bar.set_postfix(self._postfix(state, workers), refresh=False)
        # skipped blocks fill the bar but are no work: they join its count
        # outside tqdm's rate (a resumed run's bar said 230 blocks/s for
        # blocks that take 50 ms on 2 workers), both its moving average
        # (last_print_n) and the average it shows before that has a sample
        # ((n - initial) / elapsed)
        skipped = state.skipped_count - self._skipped.get(task_id, 0)
        if skipped > 0:
            self._skipped[task_id] = state.skipped_count
            bar.n += skipped
            bar.last_print_n += skipped
            bar.initial += skipped
        bar.update(state.completed_count + state.failed_count + state.orphaned_count - bar.n)
        if state.is_done():
            bar.set_description(f"{task_id} {'✔' if state.all_completed else '✗'}")

    def close(self) -> None:
        """End every bar. A task the run ended early says ``stopped``, with
        nothing processing and no worker left; a notebook bar of a task
        with a failed or orphaned block ends red, not green (tqdm's
        notebook bar turns green when it is full)."""
        for task_id, bar in self._bars.items():
            state, _ = self._latest[task_id]
            if not state.is_done():
                bar.set_description(f"{task_id} stopped", refresh=False)
                bar.set_postfix({**self._postfix(state, 0), "▶": 0}, refresh=False)
            bar.close()
            if not state.all_completed and hasattr(bar, "container"):  # a notebook widget
                bar.disp(bar_style="danger", check_delay=False)
            shown = self._shown.get(task_id)
            if shown is not None:
                # the output again, as it ends: its text fallback read "0% 0/27"
                shown.update(bar.container)


def _duration(seconds: float) -> str:
    """``1m32s``, ``2h05m``, ``41s``: short enough for a log line."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class LineProgress:
    """Progress for logs (stderr not a terminal: a batch job, a pipe): a
    compact line per task on stderr when it starts, at most one per
    ``interval`` seconds while it runs, and one when it ends::

        daisy: smooth 1234/5000 done, 3 failed, 2 workers, 41.0 blk/s, eta 1m32s

    ``done`` counts completed blocks (skipped ones included); ``blk/s``
    and ``eta`` are the core's pace of the task (blocks completed per
    second over the last 30 s, skips excluded, and what is left at that
    pace: the dashboard's figures too); the last line says ``finished in``
    instead of ``eta`` (``stopped after`` when the run ended before the
    task did), and names the workers that served the task at its last
    tick. A run of a day with
    the default interval writes a few thousand lines, not gigabytes.
    """

    def __init__(self, interval: float | None = None, file: TextIO | None = None) -> None:
        self.interval = progress_interval() if interval is None else float(interval)
        self._file = file
        #: per task: when it was first seen, when its last line was written
        self._started: dict[str, float] = {}
        self._written: dict[str, float] = {}
        self._latest: dict[str, tuple[TaskState, int]] = {}
        #: per task: its live workers at its last tick before it ended (what
        #: its "finished" line names: by the tick it ends, or the run's last
        #: count, its workers may have left)
        self._serving: dict[str, int] = {}
        self._ended: set[str] = set()
        #: per task: the core's pace, as `pace` last gave it
        self._pace: dict[str, tuple[float, float | None]] = {}

    def pace(self, task_id: str, blocks_per_second: float, eta_seconds: float | None) -> None:
        """The core's pace of a task, for its next line."""
        self._pace[task_id] = (blocks_per_second, eta_seconds)

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        """Write the task's line if it starts, ends or is due."""
        if task_id in self._ended:
            return
        now = time.monotonic()
        self._latest[task_id] = (state, workers)
        if not state.is_done() and workers:
            self._serving[task_id] = workers
        if task_id not in self._started:
            self._started[task_id] = now
            self._write(task_id, now)
        elif state.is_done():
            self._write(task_id, now)
        elif now - self._written[task_id] >= self.interval:
            self._write(task_id, now)

    def close(self) -> None:
        """The run ended: the last line of every task that has not ended."""
        now = time.monotonic()
        for task_id in list(self._latest):
            if task_id not in self._ended:
                self._write(task_id, now, last=True)

    def _write(self, task_id: str, now: float, last: bool = False) -> None:
        state, workers = self._latest[task_id]
        self._written[task_id] = now
        elapsed = now - self._started[task_id]
        rate, eta = self._pace.get(task_id, (0.0, None))
        if state.is_done():
            self._ended.add(task_id)
            tail = f"finished in {_duration(elapsed)}"
            workers = self._serving.get(task_id, workers)
        elif last:  # the run ended before the task did (it was stopped)
            self._ended.add(task_id)
            tail = f"stopped after {_duration(elapsed)}"
        else:
            tail = f"eta {_duration(eta)}" if eta is not None else "eta ?"
        orphaned = f", {state.orphaned_count} orphaned" if state.orphaned_count else ""
        if state.held_back_count:
            orphaned += f", {state.held_back_count} held back (memory)"
        plural = "s" if workers != 1 else ""
        file = self._file or sys.stderr
        print(
            f"daisy: {task_id} {state.completed_count}/{state.total_block_count} done, "
            f"{state.failed_count} failed{orphaned}, {workers} worker{plural}, "
            f"{rate:.1f} blk/s, {tail}",
            file=file,
            flush=True,
        )


#: the environment variable that sets `LineProgress`'s interval in seconds
INTERVAL_VARIABLE = "DAISY_PROGRESS_INTERVAL"


def check_interval(value: Any, name: str) -> float:
    """``value`` (a number, or its text) as seconds between progress lines;
    a ValueError naming ``name`` unless it is a number above 0."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float) or not number > 0:
        raise ValueError(
            f"{name}: expected seconds between progress lines (a number above 0, e.g. 30), "
            f"got {value!r}"
        )
    return float(number)


def progress_interval() -> float:
    """Seconds between `LineProgress` lines: ``$DAISY_PROGRESS_INTERVAL``,
    else `LOG_INTERVAL` (30 s)."""
    text = os.environ.get(INTERVAL_VARIABLE)
    if text is None or text.strip() == "":
        return LOG_INTERVAL
    return check_interval(text, INTERVAL_VARIABLE)


def in_notebook() -> bool:
    """True in a Jupyter kernel (where stderr is not a terminal, but a
    notebook can show live bars)."""
    shell = sys.modules.get("IPython")
    if shell is None or "ipykernel" not in sys.modules:
        return False
    get_ipython = getattr(shell, "get_ipython", None)
    ip = get_ipython() if get_ipython is not None else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


#: what `JsonProgressObserver` writes for each state counter, in order
JSON_COUNTERS = (
    ("total", "total_block_count"),
    ("ready", "ready_count"),
    ("processing", "processing_count"),
    ("completed", "completed_count"),
    ("skipped", "skipped_count"),
    ("failed", "failed_count"),
    ("orphaned", "orphaned_count"),
)
#: counters a state may lack (ours had none before daisy 2.0 named them): 0
JSON_OPTIONAL_COUNTERS = (
    ("restarts", "worker_restart_count"),
    ("failures", "worker_failure_count"),
)
_STAGES = ("on_start", "on_progress", "on_finish")


class TickStates(dict[str, TaskState]):
    """What `StagedObserver` hands an observer: each task's `TaskState` by
    task id, in pipeline order (a plain ``dict`` to anyone who expects
    one), and in `workers` each task's live workers at that tick."""

    def __init__(self, states: dict[str, TaskState], workers: dict[str, int]) -> None:
        super().__init__(states)
        #: live workers per task id
        self.workers = dict(workers)


class JsonProgressObserver:
    """Streams the run's progress as JSON lines, for dashboards, log
    aggregators or ``jq``: one line per task per event, written and
    flushed as it happens.

    Give a ``path`` (the file is created, or emptied, at once; missing
    directories are made) or a ``stream`` (any object with ``write`` and
    ``flush``, left open), not both; with neither, lines go to
    ``sys.stdout``. Pass it as ``run_blockwise(..., progress=observer)``:
    a "start" line per task at the first look at the run, a "progress"
    line per task whenever a count changed, a "finish" line per task at
    the end.

    Each line, as in daisy 2.0: ``t`` (``time.time()``, the same for every
    line of one event), ``event`` ("start", "progress" or "finish"),
    ``task`` (the task id), ``total``, ``ready``, ``processing``,
    ``completed``, ``skipped``, ``failed``, ``orphaned`` (block counts),
    ``restarts`` and ``failures`` (workers restarted, workers that died).
    Then the names earlier versions of this package wrote: ``task_id``
    and ``time`` (the same as ``task`` and ``t``), ``pending`` (blocks not
    yet started: waiting on upstream blocks or ready), and, in a run,
    ``workers`` (the task's live workers).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, stream: Any = None) -> None:
        if path is not None and stream is not None:
            raise ValueError("specify path OR stream, not both")
        self.path = None if path is None else Path(path)
        self._sink: Any
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        else:
            self._sink = sys.stdout if stream is None else stream
        self._owns_sink = self.path is not None

    def on_start(self, states: Mapping[Any, Any]) -> None:
        """A "start" line per task: ``states`` maps task ids to their
        `TaskState` as the run begins."""
        self._emit("start", states)

    def on_progress(self, states: Mapping[Any, Any]) -> None:
        """A "progress" line per task, after counts changed."""
        self._emit("progress", states)

    def on_finish(self, states: Mapping[Any, Any]) -> None:
        """A "finish" line per task with the final counts; then the file
        (not a stream given) is closed."""
        self._emit("finish", states)
        self.close()

    def close(self) -> None:
        """Close the file given as ``path`` (a stream is left open)."""
        if self._owns_sink and not self._sink.closed:
            self._sink.close()

    def _emit(self, event: str, states: Mapping[Any, Any]) -> None:
        t = time.time()
        workers = getattr(states, "workers", {})
        lines = []
        for task_id, state in states.items():
            record: dict[str, Any] = {"t": t, "event": event, "task": task_id}
            for key, name in JSON_COUNTERS:
                record[key] = int(getattr(state, name))
            for key, name in JSON_OPTIONAL_COUNTERS:
                record[key] = int(getattr(state, name, 0))
            record["task_id"] = task_id
            record["time"] = t
            record["pending"] = int(getattr(state, "pending_count", 0)) + record["ready"]
            if task_id in workers:
                record["workers"] = workers[task_id]
            lines.append(json.dumps(record) + "\n")
        for line in lines:
            self._sink.write(line)
        self._sink.flush()


def _stage_key(state: TaskState, workers: int) -> tuple[int, ...]:
    names = [n for _, n in JSON_COUNTERS] + [n for _, n in JSON_OPTIONAL_COUNTERS]
    return (*(int(getattr(state, n, 0)) for n in names), workers)


class StagedObserver:
    """Drives an observer written for daisy 2.0 (``on_start``,
    ``on_progress``, ``on_finish``, each given all tasks' states as
    `TickStates`) from the server's ticks: ``on_start`` at the first tick,
    ``on_progress`` at a tick where any count (or a task's live workers)
    changed, ``on_finish`` at `close`, with the last states seen. Methods
    the observer lacks are skipped."""

    def __init__(self, observer: Any, task_ids: Sequence[str]) -> None:
        self.observer = observer
        self._order = list(task_ids)
        self._tick: dict[str, tuple[TaskState, int]] = {}
        self._states = TickStates({}, {})
        self._last: tuple[tuple[int, ...], ...] | None = None

    def update(self, task_id: str, state: TaskState, workers: int) -> None:
        """Collect one task's state; a tick is complete with its last task."""
        self._tick[task_id] = (state, workers)
        if self._order and task_id != self._order[-1]:
            return
        seen = [(t, *self._tick[t]) for t in self._order if t in self._tick]
        key = tuple(_stage_key(s, n) for _, s, n in seen)
        self._states = TickStates({t: s for t, s, _ in seen}, {t: n for t, _, n in seen})
        if self._last is None:
            self._last = key
            self._call("on_start")
        elif key != self._last:
            self._last = key
            self._call("on_progress")

    def close(self) -> None:
        """The run ended: ``on_finish`` with the last states seen."""
        self._call("on_finish")

    def _call(self, stage: str) -> None:
        method = getattr(self.observer, stage, None)
        if method is not None:
            method(TickStates(self._states, self._states.workers))


def default_observers(
    task_ids: Sequence[str], progress: Any, interval: float | None = None
) -> list[ProgressObserver]:
    """What ``run_blockwise(progress=...)`` asks for: True (a bar per task in
    a notebook or on a terminal, `LineProgress` lines every ``interval``
    seconds otherwise), False (nothing), an observer or a list of
    observers. An observer has ``update()``/``close()``, or daisy
    2.0's ``on_start()``/``on_progress()``/``on_finish()`` (such as
    `JsonProgressObserver`), driven by a `StagedObserver`."""
    if progress is False or progress is None:
        return []
    if progress is True:
        if in_notebook():
            return [TqdmProgress(task_ids, notebook=True)]
        if sys.stderr.isatty():
            return [TqdmProgress(task_ids)]
        return [LineProgress(interval)]
    observers: list[ProgressObserver] = []
    for observer in progress if isinstance(progress, list | tuple) else [progress]:
        if hasattr(observer, "update"):
            observers.append(observer)
        elif any(hasattr(observer, stage) for stage in _STAGES):
            observers.append(StagedObserver(observer, task_ids))
        else:
            raise TypeError(
                "progress: expected True, False, an observer (with update()/close(), or "
                f"on_start()/on_progress()/on_finish()) or a list of them, got {observer!r}"
            )
    return observers
