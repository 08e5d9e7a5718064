"""A task's report of one run (`TaskReport`: its figures, the blocks of
its tracking store, its section of the Resource Utilization panel) and a
whole run's (`RunReport`, also `last_report`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from daisy.units import format_bytes as format_bytes
from daisy.units import format_seconds as format_seconds

if TYPE_CHECKING:
    pass
from daisy.report.figures import (
    QUEUED_SPAWNERS,
    BlockRecord,
    BlockSummary,
    EtaCheckpoint,
    FailedAttempt,
    FailureCauses,
    MemoryReport,
    WorkerRecord,
    WorkerSummary,
    _fields,
    _notices,
    _opt_float,
)


def _eta_line(eta: Sequence[EtaCheckpoint]) -> str | None:
    """The ETAs the run gave at about a quarter, half and three quarters
    of the task's blocks against the time really left: "eta said / was"."""
    if len(eta) < 4:
        return None
    total = eta[-1].done
    parts = []
    for q in (25, 50, 75):
        c = min(eta, key=lambda c: abs(c.done - total * q / 100))
        if c.left_seconds is None:
            return None
        parts.append(f"{q} % {format_seconds(c.eta_seconds)} / {format_seconds(c.left_seconds)}")
    return "eta said / was at " + ", ".join(parts)


class ReportedTask(Protocol):
    """What a report needs of its task (a `daisy.Task` is one): where its
    reports and store are, and its block records. A protocol, so the
    module that defines tasks imports this one and not the other way
    round."""

    _last_report: TaskReport | None

    @property
    def task_id(self) -> str: ...
    @property
    def tracking_path(self) -> Path | None: ...
    def block_record(self, block: Any) -> BlockRecord | None: ...
    def block_records(self) -> list[BlockRecord]: ...


class TaskReport:
    """One task's report of one run: ``blocks`` and ``workers`` summaries,
    ``worker(id)`` and ``block(...)`` to drill down."""

    def __init__(
        self,
        task_id: str,
        blocks: BlockSummary,
        workers: WorkerSummary,
        started_at: float = 0.0,
        finished_at: float = 0.0,
        tracked: bool = False,
        outcome: str = "completed",
        utilisation: float | None = None,
        first_block_at: float | None = None,
        last_block_at: float | None = None,
        failure_causes: FailureCauses | None = None,
        notices: list[str] | None = None,
        failed_attempts: Sequence[FailedAttempt] = (),
        memory: MemoryReport | None = None,
        eta: Sequence[EtaCheckpoint] = (),
        forecast_sample: bool = False,
        function_sha256: str | None = None,
    ) -> None:
        self.task_id = task_id
        #: a SHA-256 of the block function's code the run ran (None where
        #: not known)
        self.function_sha256 = function_sha256
        #: the run was a forecast's sample (`daisy.forecast`), not a run of
        #: the task
        self.forecast_sample = forecast_sample
        #: the ETAs the run gave from the model, one every 5 % of the
        #: task's blocks (set them against ``last_block_at``)
        self.eta = tuple(eta)
        #: the memory budget its blocks were let in by, and what the memory
        #: guard did; None where no gate ran
        self.memory = memory
        #: when this run's failed attempts ran, on which worker (the first
        #: 1,000)
        self.failed_attempts = tuple(failed_attempts)
        #: what the run had to say once about this task, e.g. ``"no GPU
        #: figures: NVML not found"``
        self.notices = list(notices or [])
        #: when this task's first block was handed out and its last came
        #: back (epoch seconds; None when it had none): its own span
        self.first_block_at = first_block_at
        self.last_block_at = last_block_at
        #: why blocks failed in this run
        self.failure_causes = failure_causes or FailureCauses()
        #: whether a ``Task.reset()`` came between the run before and this
        #: one (set by `read_runs`; False for a report a run returned)
        self.after_reset = False
        #: the share of the workers' lives that went into blocks (computed
        #: by the core); None without workers
        self.utilisation = utilisation
        self.blocks = blocks
        self.workers = workers
        self.started_at = started_at
        self.finished_at = finished_at
        self.tracked = tracked
        self.outcome = outcome
        self._task: ReportedTask | None = None
        #: what the run that made this report said under the task in its
        #: Execution Summary (failed blocks with their ROIs, the first
        #: failure's traceback, what to do next), for the HTML panel; empty
        #: for a report read back from a history
        self.failure_notes: list[str] = []

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskReport:
        """From the report JSON; a missing key takes its default. What daisy
        reads here the core gives with every key (its report types decode
        each history line); tests/test_report_schema.py checks these
        classes against the core's schema."""
        defaults: dict[str, Any] = {"task_id": None, "blocks": None, "workers": None}
        defaults.update(started_at=0.0, finished_at=0.0, tracked=False)
        defaults.update(outcome="completed", utilisation=None)
        defaults.update(first_block_at=None, last_block_at=None, failure_causes=None)
        defaults.update(notices=None, failed_attempts=[], memory=None, eta=[])
        defaults.update(forecast_sample=False, function_sha256=None)
        f = _fields(d, defaults, "a task report")
        if f["task_id"] is None:
            raise ValueError("run report: a task report has no 'task_id'")
        return cls(
            task_id=str(f["task_id"]),
            blocks=BlockSummary.from_dict(f["blocks"]),
            workers=WorkerSummary.from_dict(f["workers"]),
            started_at=float(f["started_at"]),
            finished_at=float(f["finished_at"]),
            tracked=bool(f["tracked"]),
            outcome=str(f["outcome"]),
            utilisation=None if f["utilisation"] is None else float(f["utilisation"]),
            first_block_at=_opt_float(f["first_block_at"]),
            last_block_at=_opt_float(f["last_block_at"]),
            failure_causes=FailureCauses.from_dict(f["failure_causes"]),
            notices=_notices(f["notices"]),
            failed_attempts=[FailedAttempt.from_dict(a) for a in f["failed_attempts"] or ()],
            memory=MemoryReport.from_dict(f["memory"]),
            eta=[EtaCheckpoint.from_dict(e) for e in f["eta"] or ()],
            forecast_sample=bool(f["forecast_sample"]),
            function_sha256=None if f["function_sha256"] is None else str(f["function_sha256"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON (what ``runs.jsonl`` holds)."""
        return {
            "task_id": self.task_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "tracked": self.tracked,
            "outcome": self.outcome,
            "blocks": self.blocks.to_dict(),
            "workers": self.workers.to_dict(),
            "utilisation": self.utilisation,
            "first_block_at": self.first_block_at,
            "last_block_at": self.last_block_at,
            "failure_causes": self.failure_causes.to_dict(),
            "notices": list(self.notices),
            "failed_attempts": [a.to_dict() for a in self.failed_attempts],
            "memory": None if self.memory is None else self.memory.to_dict(),
            "eta": [e.to_dict() for e in self.eta],
            "forecast_sample": self.forecast_sample,
            "function_sha256": self.function_sha256,
        }

    @property
    def elapsed(self) -> float:
        """Wall seconds of the run, start to report."""
        return max(0.0, self.finished_at - self.started_at)

    @property
    def span(self) -> float | None:
        """Wall seconds of this task's own work in the run: its first block
        handed out to its last block back. In a pipeline, a downstream
        task's span leaves out the time it waited for upstream blocks
        before its first block. None when no block was handed out."""
        if self.first_block_at is None or self.last_block_at is None:
            return None
        return max(0.0, self.last_block_at - self.first_block_at)

    def worker(self, worker_id: int) -> WorkerRecord:
        """The record of one worker."""
        return self.workers.by_id[int(worker_id)]

    def _attached_task(self, what: str) -> ReportedTask:
        if self._task is None:
            raise RuntimeError(
                f"TaskReport({self.task_id!r}).{what}: no task attached; per-block lookup reads "
                "the tracking store through the Task, so use task.report() or a report a run "
                "returned"
            )
        return self._task

    def block(self, block: Any) -> BlockRecord | None:
        """What the tracking store holds for one block: a `daisy.Block`, a
        grid cell (a tuple, one int per axis, anchored at ``total_roi`` like
        the store's arrays) or a spatial id (an int; found by a scan of the
        grid). None when the task has no store or no such block."""
        task = self._attached_task("block()")
        return task.block_record(block)

    def block_records(self) -> list[BlockRecord]:
        """Every block the store has a record of (done, or with failures),
        in grid order (row-major over the block grid). Walks the whole
        grid: for very large tasks read the store's Zarr arrays directly."""
        task = self._attached_task("block_records()")
        return task.block_records()

    def __repr__(self) -> str:
        return (
            f"TaskReport({self.task_id!r}, blocks={self.blocks.count}, "
            f"workers={self.workers.count})"
        )

    def _repr_html_(self) -> str:
        """This task's panel as HTML, for Jupyter (see `daisy.report.notebook`)."""
        from daisy.report.notebook import task_report_html

        return task_report_html(self)

    # -- the panel -------------------------------------------------------

    def render(self, max_workers: int = 10) -> str:
        """This task's section of the Resource Utilization panel: its head
        line, its blocks, its failures and its workers."""
        lines = self._head_lines()
        lines += self._block_lines()
        lines += self._failure_lines()
        lines += self._worker_lines(max_workers)
        return "\n".join(lines)

    #: where the blocks' and failures' lines start, after their label
    _PAD = " " * len("    blocks  ")

    def _head_lines(self) -> list[str]:
        """Blocks, workers and wall time; and the task's own span where a
        pipeline's waits for other tasks made its wall longer."""
        b, w = self.blocks, self.workers
        head = f"  {self.task_id}  {b.count} blocks"
        if b.skipped:
            head += f" ({b.skipped} skipped)"
        if w.count:
            head += f", {w.count} worker{'' if w.count == 1 else 's'}"
        if self.elapsed > 0:
            head += f", {format_seconds(self.elapsed)} wall"
        lines = [head]
        span = self.span
        if span is not None and span > 0 and self.elapsed > span * 1.05:
            # the task's own share of the run's wall: in a pipeline it left
            # out the waits for other tasks; the rest went to worker start
            # and teardown
            lines.append(
                f"    span     {format_seconds(span)} of its own "
                "(its first block out to its last back)"
            )
        return lines

    def _block_lines(self) -> list[str]:
        """What the blocks cost: round trip, measured figures, GPU, the
        reading of cpu per wall, warm-up, the slowest blocks, notices."""
        b, pad = self.blocks, self._PAD
        lines: list[str] = []
        label = "    blocks  "
        if b.round_trip:
            lines.append(f"{label} round trip {b.round_trip.format()}")
            label = pad
        if b.has_stats:
            lines.append(
                f"{label} wall {b.wall.format()}   cpu {b.cpu.format()}"
                f"   peak RSS {b.peak_rss.format('B')}"
            )
            second = (
                f"{pad} io read {format_bytes(b.io_read.total)}"
                f"  write {format_bytes(b.io_write.total)}"
            )
            if b.overhead:
                second += f"   overhead {b.overhead.format()}"
            if b.trend_shown:
                second += f"   trend ∠ {b.trend_slope_ms:+.4f} ms/block"
            lines.append(second)
            if b.peak_rss_p50 is not None and b.peak_rss_p95 is not None:
                lines.append(
                    f"{pad} peak memory per block p50 {format_bytes(b.peak_rss_p50)}"
                    f"  p95 {format_bytes(b.peak_rss_p95)}  max {format_bytes(b.peak_rss.max)}"
                )
            if b.gpu_mem:
                lines.append(
                    f"{pad} gpu {b.gpu_util.format()}"
                    f"   gpu memory peak {format_bytes(b.gpu_mem.max)}"
                    f" (mean {format_bytes(b.gpu_mem.mean)})"
                )
            if b.peak_rss_source == "process_peak":
                lines.append(
                    f"{pad} (peak RSS is each worker's peak so far: this system "
                    "cannot reset it per block)"
                )
        if b.cpu_per_wall is not None:
            waited = _core_wait_words(b)
            lines.append(
                f"{pad} cpu per block-second {b.cpu_per_wall:.2f} "
                f"({waited or _cpu_words(b.cpu_per_wall)})"
            )
        if b.warmup_ratio is not None and b.warmup_ratio >= WARMUP_SHOWN:
            first = format_seconds(b.first_on_worker.mean)
            # the workers measured their first block's imports: where the
            # core found them most of it, its note (below) says so
            imports = any(n.startswith(IMPORT_NOTE) for n in self.notices)
            why = (
                "mostly imports: see below"
                if imports
                else "set-up in the function, caches, first touch; move one-off set-up out "
                "of the block function"
            )
            lines.append(
                f"{pad} warm-up: each worker's first block took {first}, "
                f"{b.warmup_ratio:.0f}x the others' mean ({why})"
            )
        if b.slowest and b.count - b.skipped > len(b.slowest):
            shown = ", ".join(f"{i} ({format_seconds(t)})" for i, t in b.slowest)
            lines.append(f"{pad} slowest blocks {shown}")
        if self.memory is not None:
            lines.append(f"{pad} {self.memory.describe()}")
        eta = _eta_line(self.eta)
        if eta:
            lines.append(f"{pad} {eta}")
        lines.extend(f"{pad} {n}" for n in self.notices)
        return lines

    def _failure_lines(self) -> list[str]:
        """How many attempts failed, and the most frequent causes."""
        lines: list[str] = []
        if self.blocks.failures:
            lines.append(f"{self._PAD} {self.blocks.failures} failed attempt(s)")
        if self.failure_causes:
            lines.append("    failed because")
            lines.extend(self.failure_causes.render(indent=self._PAD + " "))
        return lines

    def _worker_lines(self, max_workers: int) -> list[str]:
        """The workers' phases, exits, starts and idle time, their jobs,
        and a table of at most `max_workers` of them."""
        w = self.workers
        if not w.count:
            if w.unmanaged_clients:
                return [f"    workers  {w.unmanaged_clients} unmanaged client(s)"]
            return []
        lines = [
            f"    workers  startup {w.startup.format()}   idle {w.idle.format()}"
            f"   teardown {w.teardown.format()}"
        ]
        exits = " ".join(f"{n} {kind}" for kind, n in w.exits.items() if n)
        tail = f"             exits {exits or '—'}"
        if w.spawner in QUEUED_SPAWNERS:
            tail += f"   ({w.spawner} workers: startup includes the queue wait)"
        if w.unmanaged_clients:
            tail += f" (+ {w.unmanaged_clients} unmanaged client(s))"
        lines.append(tail)
        lines.append(f"             starts {w.starts_line()}")
        lines.append(f"             {w.idle_line()}")
        jobs = w.jobs_line()
        if jobs is not None:
            lines.append(f"             {jobs}")
        lines.extend(self._worker_table(max_workers))
        return lines

    def _worker_table(self, max_workers: int) -> list[str]:
        columns = [
            ("id", 4),
            ("startup", 9),
            ("blocks", 6),
            ("idle", 9),
            ("idle / block", 19),
            ("compute", 9),
            ("compute / block", 19),
            ("teardown", 9),
        ]
        rows = sorted(self.workers.by_id.values(), key=lambda r: r.worker_id)
        out = ["      " + "  ".join(f"{name:>{width}}" for name, width in columns) + "  exit"]
        for r in rows[:max_workers]:
            cells = [
                str(r.worker_id),
                format_seconds(r.startup),
                str(r.blocks),
                format_seconds(r.idle.total) if r.idle else "—",
                r.idle.format(),
                format_seconds(r.compute.total) if r.compute else "—",
                r.compute.format(),
                format_seconds(r.teardown),
            ]
            line = "  ".join(f"{c:>{width}}" for c, (_, width) in zip(cells, columns, strict=True))
            out.append(f"      {line}  {r.exit or 'running'}")
        if len(rows) > max_workers:
            out.append(
                f"      … +{len(rows) - max_workers} more; see "
                f'report.tasks["{self.task_id}"].workers.by_id'
            )
        return out


#: the report of this process's last run (see `last_report`)
_last_run: RunReport | None = None


#: the warm-up ratio (a worker's first block over the others) from which
#: the panel calls it out: below it, first blocks are ordinary noise
WARMUP_SHOWN = 3.0

#: how the core's note on a first block of imports begins (`run_report::warmup`)
IMPORT_NOTE = "warm-up: a worker's first block was mostly imports"


def _cpu_words(ratio: float) -> str:
    """What a CPU-per-wall ratio says about a block function, in words."""
    if ratio > 1.2:
        return "more than one core: threads"
    if ratio >= 0.8:
        return "CPU-bound"
    if ratio >= 0.3:
        return "part CPU, part waiting"
    return "mostly waiting: IO, locks or sleep"


#: the share of a block's wall spent waiting for a core from which the
#: panel says so: below it, a scheduler's ordinary jitter
CORE_WAIT_SHOWN = 0.25


def _core_wait_words(b: BlockSummary) -> str | None:
    """ "waiting for a core" with its figure, where the blocks' time that
    was not CPU went mostly to the run queue (more busy processes than
    cores); None otherwise."""
    queued = b.run_queue_per_wall
    if queued is None or b.cpu_per_wall is None or queued < CORE_WAIT_SHOWN:
        return None
    other_wait = max(0.0, 1.0 - b.cpu_per_wall - queued)
    if queued < other_wait:
        return None
    return (
        f"waiting for a core: {format_seconds(b.run_queue.mean)} of "
        f"{format_seconds(b.wall.mean)} per block ({queued:.0%}) on the run queue; "
        "more busy workers than cores: set fewer max_workers, or fewer threads per block"
    )


def last_report() -> RunReport | None:
    """The `RunReport` of the last run in this process (by
    ``daisy.run_blockwise``, a `Server` or a `SerialServer`, finished or
    stopped), or None before any run. Per task: ``task.report()``."""
    return _last_run


class RunReport:
    """The reports of every task of one run, by task id."""

    def __init__(self, tasks: dict[str, TaskReport]) -> None:
        self.tasks = tasks

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RunReport:
        """From ``{task_id: task report JSON}`` (see `TaskReport.from_dict`)."""
        return cls({tid: TaskReport.from_dict(t) for tid, t in (d or {}).items()})

    @classmethod
    def from_json(cls, text: str) -> RunReport:
        """From the JSON text of `to_dict` or of the core's report."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        """``{task_id: task report JSON}``."""
        return {tid: t.to_dict() for tid, t in self.tasks.items()}

    def to_json(self) -> str:
        """`to_dict` as JSON text."""
        return json.dumps(self.to_dict())

    def __getitem__(self, task_id: str) -> TaskReport:
        return self.tasks[task_id]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return f"RunReport({sorted(self.tasks)})"

    def _repr_html_(self) -> str:
        """The Resource Utilization panel as HTML, for Jupyter (see
        `daisy.report.notebook`)."""
        from daisy.report.notebook import run_report_html

        return run_report_html(self)

    @property
    def measured(self) -> dict[str, TaskReport]:
        """Tasks whose blocks were measured (``resource_tracking=True``)."""
        return {tid: t for tid, t in self.tasks.items() if t.blocks.has_stats}

    @property
    def timed(self) -> dict[str, TaskReport]:
        """Tasks with anything to show: workers, a round trip, or
        measurements. A serial task without resource tracking has none."""
        return {
            tid: t
            for tid, t in self.tasks.items()
            if t.workers.count
            or t.workers.unmanaged_clients
            or t.blocks.round_trip
            or t.blocks.has_stats
        }

    def attach(self, tasks: Sequence[ReportedTask]) -> None:
        """Give each task report its `Task` (for `TaskReport.block`), keep
        it on the task (for `Task.report` when nothing is on disk) and keep
        the whole report as this process's last run (`last_report`). Every
        runner attaches the report of every run, finished or stopped; the
        core has already appended each task's line to its history
        (`runs_file_for`)."""
        global _last_run
        _last_run = self
        for task in tasks:
            report = self.tasks.get(task.task_id)
            if report is None:
                continue
            report._task = task
            task._last_report = report

    def attach_failure_notes(self, notes: Mapping[str, Sequence[str]]) -> None:
        """Keep, per task, the lines a run's Execution Summary says under it
        (`daisy.Server.failure_notes`): the HTML panel shows them, so a
        notebook that runs a `Server` (which prints no summary) sees the
        failed blocks, their ROIs and the first traceback."""
        for tid, lines in notes.items():
            report = self.tasks.get(tid)
            if report is not None:
                report.failure_notes = list(lines)

    def render(self, task_order: list[str] | None = None, max_workers: int = 10) -> str:
        """The Resource Utilization panel: one section per task with
        anything to show, in ``task_order`` (by default the report's own
        order: the pipeline's, upstream first); empty when no task has any
        (a table of zeros is worse than no table)."""
        shown = self.timed
        if not shown:
            return ""
        order = [t for t in (task_order or []) if t in shown]
        order += [t for t in shown if t not in order]
        parts = ["", "Resource Utilization", "--------------------"]
        for tid in order:
            parts += ["", shown[tid].render(max_workers=max_workers)]
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.render()
