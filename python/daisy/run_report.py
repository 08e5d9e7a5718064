"""Run reports: what every block and every worker of a run cost.

The Rust core builds one JSON object per task when a run ends (see
``daisy-core/src/run_report.rs``), appends it as one line to the task's
``runs.jsonl`` and hands the same JSON to Python, where these classes read
it. The object a run returns and the record it leaves on disk are
therefore the same thing. ``runs.jsonl`` lives in the task's tracking store
when it has one, else under ``<log basedir>/<task_id>/`` next to its worker
logs (written here, when file logging is on).

In the process that ran the pipeline or any later one::

    t = task.report()          # TaskReport: the last line of runs.jsonl
    t.blocks.round_trip        # Stat: n, mean, std, min, max, total (seconds)
    t.blocks.wall              # the worker's own measurement (resource_tracking)
    t.workers.startup          # Stat over workers
    t.worker(1)                # WorkerRecord
    t.block((1, 2))            # BlockRecord read from the tracking store
    print(t.render())          # the task's section of the panel

``daisy.Server().last_report`` is the whole run's `RunReport`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from daisy._daisy import history_file, read_history
from daisy.units import format_bytes as format_bytes
from daisy.units import format_percent, seconds_scale, seconds_text
from daisy.units import format_seconds as format_seconds

if TYPE_CHECKING:
    from daisy._daisy import BlockStats


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


RUNS_FILE = "runs.jsonl"

#: spawners whose workers wait in a queue before they start
QUEUED_SPAWNERS = ("slurm", "dask")


# -- where reports live -------------------------------------------------------


def runs_file_for(task: ReportedTask) -> Path | None:
    """The ``runs.jsonl`` a task's reports go to (the core's rule, which
    its writer follows): in its tracking store, else next to its worker
    logs when file logging is on, else None."""
    from daisy.logging import get_log_basedir, get_log_mode

    base = get_log_basedir()
    path = history_file(
        task.task_id,
        task.tracking_path,
        None if base is None else Path(base).absolute(),
        get_log_mode(),
    )
    return None if path is None else Path(path)


# What a history line must be to be read as a report: the core's published
# JSON Schema of a report line (``report_schema.json``, generated from the
# core's report types by ``daisy-core/src/run_report.rs``, whose test fails
# when the file is stale). It is read here, not restated.

#: the schema's file, shipped in the package
SCHEMA_FILE = Path(__file__).with_name("report_schema.json")


@functools.cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema of one ``runs.jsonl`` line, as the core publishes
    it."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


#: the skipped lines each history file was last warned about, with its size
#: and modification time then: one warning per file, not one per reading
_warned: dict[str, tuple[int, int, list[tuple[int, str]]]] = {}

#: line numbers a warning names for one reason before it counts the rest
_LINES_NAMED = 10


def _warn_skipped(path: Path, skipped: list[tuple[int, str]]) -> None:
    """One warning for every line of ``path`` that is not a report: the
    file, each reason with the numbers of its lines. Said once per file
    for as long as the file stays as it is."""
    try:
        stat = path.stat()
        state = (stat.st_size, stat.st_mtime_ns, skipped)
    except OSError:
        state = (-1, -1, skipped)
    key = str(path.absolute())
    if _warned.get(key) == state:
        return
    _warned[key] = state
    by_reason: dict[str, list[int]] = {}
    for number, reason in skipped:
        by_reason.setdefault(reason, []).append(number)
    parts = []
    for reason, numbers in by_reason.items():
        shown = ", ".join(str(n) for n in numbers[:_LINES_NAMED])
        if len(numbers) > _LINES_NAMED:
            shown += f" and {len(numbers) - _LINES_NAMED} more"
        parts.append(f"{'lines' if len(numbers) > 1 else 'line'} {shown} ({reason})")
    what = (
        "line that is not a run report" if len(skipped) == 1 else "lines that are not run reports"
    )
    logging.getLogger(__name__).warning(
        "daisy: %s: skipped %d %s: %s", path, len(skipped), what, "; ".join(parts)
    )


def _report_lines(path: Path) -> list[TaskReport]:
    """Every report of a ``runs.jsonl``, oldest first; a report that follows
    a reset record has ``after_reset`` set. The core reads the file and
    decodes each line by the report's own types (``read_history``): a line
    that is no report (cut short by a full disk or a killed writer, or
    valid JSON that is not a report: another program's, a hand edit) is
    skipped, and one warning names every such line and why: one odd line
    must not cost the rest of the history."""
    reports, skipped = read_history(path)
    out: list[TaskReport] = []
    for _number, after_reset, text in reports:
        report = TaskReport.from_dict(json.loads(text))
        report.after_reset = after_reset
        out.append(report)
    if skipped:
        _warn_skipped(path, skipped)
    return out


def read_last_run(path: str | os.PathLike[str]) -> TaskReport | None:
    """The last report of a ``runs.jsonl``, or None."""
    runs = _report_lines(Path(path))
    return runs[-1] if runs else None


def read_runs(path: str | os.PathLike[str]) -> list[TaskReport]:
    """Every report of a ``runs.jsonl``, oldest first. Reset records (which
    ``Task.reset()`` leaves where it keeps the history) are not reports:
    the report after one has ``after_reset`` set. Any other line that is
    not a report the core wrote (damaged, not JSON, or JSON of another
    shape) is skipped, and one warning names the file, those lines and
    why."""
    return _report_lines(Path(path))


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


# -- the report objects --------------------------------------------------------


#: the key of a reset record in ``runs.jsonl`` (``Task.reset()`` writes
#: ``{"reset_at": <epoch seconds>}`` where it keeps the history)
RESET_KEY = "reset_at"


def _notices(value: Any) -> list[str]:
    """A report's ``notices``: a list of texts (None where the line is
    older than them)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ValueError(f"run report: notices is {value!r}, expected a list of texts")
    return list(value)


def _fields(d: Any, defaults: dict[str, Any], what: str) -> dict[str, Any]:
    """``d``'s values for the keys of ``defaults``; a missing key takes its
    default. What daisy reads (a run's report, a history line) the core
    has decoded by the report's types and gives with every key; a dict a
    user wrote may leave keys out."""
    if not isinstance(d, dict):
        raise ValueError(f"run report: {what} is {type(d).__name__}, expected an object")
    return {k: d.get(k, default) for k, default in defaults.items()}


#: a statistic's keys in the report JSON, with the values of an empty one
_ZERO_STAT = {"n": 0, "mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "sum": 0.0}


@dataclass(frozen=True)
class Stat:
    """A distribution: sample count, mean, sample standard deviation, min,
    max and total. Falsy and shown as ``—`` when nothing was measured."""

    n: int = 0
    mean: float = 0.0
    std: float = 0.0
    min: float = 0.0
    max: float = 0.0
    total: float = 0.0
    #: what the samples count: "s" (seconds), "B" (bytes) or "%"
    #: (percent); not part of the JSON, set by the summary that holds it
    unit: str = field(default="s", compare=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, unit: str = "s") -> Stat:
        """From the report JSON (``sum`` is the total); None (nothing
        measured) is the empty Stat; a missing key takes its default. ``unit``
        is what the samples count (see ``unit``)."""
        if d is None:
            return cls(unit=unit)
        f = _fields(d, _ZERO_STAT, "a statistic")
        return cls(
            int(f["n"]),
            float(f["mean"]),
            float(f["std"]),
            float(f["min"]),
            float(f["max"]),
            float(f["sum"]),
            unit,
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON."""
        return {
            "n": self.n,
            "mean": self.mean,
            "std": self.std,
            "min": self.min,
            "max": self.max,
            "sum": self.total,
        }

    def format(self, unit: str | None = None) -> str:
        """``mean ± std`` in the Stat's own unit (or ``unit``): seconds
        scaled by the mean (``50.5 ms ± 0.1 ms``), or bytes (``25.5 MB ±
        0.0 B``)."""
        if not self:
            return "—"
        unit = unit or self.unit
        if unit == "B":
            return f"{format_bytes(self.mean)} ± {format_bytes(self.std)}"
        if unit == "%":
            return f"{format_percent(self.mean)} ± {format_percent(self.std)}"
        scale, name = seconds_scale(self.mean)
        return f"{seconds_text(self.mean, scale, name)} ± {seconds_text(self.std, scale, name)}"

    def __bool__(self) -> bool:
        return self.n > 0

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        if not self:
            return "Stat(n=0)"
        shown = {"B": format_bytes, "%": format_percent}.get(self.unit, format_seconds)
        mean, std, lo, hi, total = (
            shown(v) for v in (self.mean, self.std, self.min, self.max, self.total)
        )
        return f"Stat(n={self.n}, mean={mean}, std={std}, min={lo}, max={hi}, total={total})"


@dataclass(frozen=True)
class BlockSummary:
    """Per-block figures of one task over one run.

    ``round_trip`` (dispatch to return, timed by the server) is there for
    every distributed task. The other stats are measured inside the worker
    and are empty unless the task set ``resource_tracking=True``;
    ``overhead`` is round trip minus wall, daisy's own cost per block.
    ``count`` is the scheduler's completion count of this run, skipped
    blocks included; ``skipped`` of them contributed no samples."""

    count: int = 0
    skipped: int = 0
    failures: int = 0
    has_stats: bool = False
    round_trip: Stat = field(default_factory=Stat)
    wall: Stat = field(default_factory=Stat)
    cpu: Stat = field(default_factory=Stat)
    peak_rss: Stat = field(default_factory=Stat)
    io_read: Stat = field(default_factory=Stat)
    io_write: Stat = field(default_factory=Stat)
    overhead: Stat = field(default_factory=Stat)
    #: per block, the worker process's mean GPU utilisation (percent) and
    #: peak GPU memory (bytes), over the blocks that have them
    #: (``gpu_tracking``); empty otherwise
    gpu_util: Stat = field(default_factory=Stat)
    gpu_mem: Stat = field(default_factory=Stat)
    trend_slope_ms: float = 0.0
    #: whether the trend means something (fitted to enough blocks: the
    #: core's ``TREND_MIN_BLOCKS``); views show it only then
    trend_shown: bool = False
    #: where ``peak_rss`` comes from: "high_water_mark" (the kernel's mark,
    #: reset at each block's start), "process_peak" (no reset possible on
    #: that system: the process's peak so far), "" without stats
    peak_rss_source: str = ""
    #: the time of each worker's first block (wall where measured, else
    #: round trip): the workers' warm-up is in it
    first_on_worker: Stat = field(default_factory=Stat)
    #: those first blocks' mean over the other blocks' mean (the core's);
    #: None without both
    warmup_ratio: float | None = None
    #: the run's slowest blocks, slowest first: ``(spatial id, seconds)``
    slowest: tuple[tuple[int, float], ...] = ()
    #: CPU seconds per wall second of the blocks: about 1 CPU-bound on one
    #: core, well below waiting (IO, locks), above several threads
    cpu_per_wall: float | None = None

    _STATS = (
        "round_trip",
        "wall",
        "cpu",
        "peak_rss",
        "io_read",
        "io_write",
        "overhead",
        "gpu_util",
        "gpu_mem",
        "first_on_worker",
    )
    #: the stats that count bytes or percent (the others count seconds)
    _UNITS = {"peak_rss": "B", "io_read": "B", "io_write": "B", "gpu_mem": "B", "gpu_util": "%"}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> BlockSummary:
        """From the report JSON (a missing key takes its default)."""
        defaults: dict[str, Any] = {"count": 0, "skipped": 0, "failures": 0}
        defaults.update(has_stats=False, trend_slope_ms=0.0, trend_shown=False, peak_rss_source="")
        defaults.update(warmup_ratio=None, slowest=[], cpu_per_wall=None)
        defaults.update(dict.fromkeys(cls._STATS))
        f = _fields({} if d is None else d, defaults, "blocks")
        slowest = []
        for b in f["slowest"] or ():
            g = _fields(b, {"spatial_id": 0, "seconds": 0.0}, "a slow block")
            slowest.append((int(g["spatial_id"]), float(g["seconds"])))
        return cls(
            warmup_ratio=_opt_float(f["warmup_ratio"]),
            slowest=tuple(slowest),
            cpu_per_wall=_opt_float(f["cpu_per_wall"]),
            count=int(f["count"]),
            skipped=int(f["skipped"]),
            failures=int(f["failures"]),
            has_stats=bool(f["has_stats"]),
            trend_slope_ms=float(f["trend_slope_ms"]),
            trend_shown=bool(f["trend_shown"]),
            peak_rss_source=str(f["peak_rss_source"]),
            **{k: Stat.from_dict(f[k], cls._UNITS.get(k, "s")) for k in cls._STATS},
        )

    def __repr__(self) -> str:
        shown = f"BlockSummary(count={self.count}, skipped={self.skipped}, failures={self.failures}"
        if self.round_trip:
            shown += f", round_trip={self.round_trip.format()}"
        if self.has_stats:
            shown += f", wall={self.wall.format()}, peak_rss={self.peak_rss.format('B')}"
        if self.gpu_mem:
            shown += f", gpu_util={self.gpu_util.format()}, gpu_mem={self.gpu_mem.format()}"
        return shown + ")"

    def _repr_html_(self) -> str:
        from daisy.report_view import block_summary_html

        return block_summary_html(self)

    def trend_ms(self, x: float) -> float:
        """The core's least-squares line of block wall time (ms) against
        completion order, at block ``x``: it passes through the mean, so
        the core's slope and mean wall time fix it (nothing is refitted)."""
        return self.wall.mean * 1e3 + self.trend_slope_ms * (x - (self.wall.n - 1) / 2)

    def to_dict(self) -> dict[str, Any]:
        """The report JSON."""
        out: dict[str, Any] = {
            "count": self.count,
            "skipped": self.skipped,
            "failures": self.failures,
            "has_stats": self.has_stats,
        }
        out.update({k: getattr(self, k).to_dict() for k in self._STATS})
        out["trend_slope_ms"] = self.trend_slope_ms
        out["trend_shown"] = self.trend_shown
        out["peak_rss_source"] = self.peak_rss_source
        out["warmup_ratio"] = self.warmup_ratio
        out["slowest"] = [{"spatial_id": i, "seconds": t} for i, t in self.slowest]
        out["cpu_per_wall"] = self.cpu_per_wall
        return out


@dataclass(frozen=True)
class WorkerRecord:
    """One worker's life, in seconds. None where a phase never happened
    (no startup for a worker that never connected, no teardown for one
    that crashed or was cut off)."""

    worker_id: int
    startup: float | None = None
    blocks_ok: int = 0
    blocks_failed: int = 0
    idle: Stat = field(default_factory=Stat)
    compute: Stat = field(default_factory=Stat)
    final_wait: float | None = None
    teardown: float | None = None
    #: "clean", "error", "timeout", "interrupted", "idle" (handed back after
    #: its task's idle_timeout), "left" (it exited on its own after some
    #: blocks while its task had work: no death), or None if still running
    exit: str | None = None
    #: "warm" (forked by the task's launcher) or "cold" (a fresh process)
    start: str = "cold"
    #: the job that hosted it where workers share jobs (``workers_per_job``):
    #: the batch system's job id, or "job N"; None for a worker with a
    #: process (or job) of its own
    job_id: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkerRecord:
        """From the report JSON (a missing key takes its default)."""
        defaults: dict[str, Any] = {"worker_id": None, "startup": None, "blocks_ok": 0}
        defaults.update(blocks_failed=0, idle=None, compute=None)
        defaults.update(final_wait=None, teardown=None, exit=None, start="cold", job_id=None)
        f = _fields(d, defaults, "a worker record")
        return cls(
            worker_id=int(f["worker_id"]),
            startup=f["startup"],
            blocks_ok=int(f["blocks_ok"]),
            blocks_failed=int(f["blocks_failed"]),
            idle=Stat.from_dict(f["idle"]),
            compute=Stat.from_dict(f["compute"]),
            final_wait=f["final_wait"],
            teardown=f["teardown"],
            exit=f["exit"],
            start=str(f["start"]),
            job_id=None if f["job_id"] is None else str(f["job_id"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON."""
        return {
            "worker_id": self.worker_id,
            "startup": self.startup,
            "blocks_ok": self.blocks_ok,
            "blocks_failed": self.blocks_failed,
            "idle": self.idle.to_dict(),
            "compute": self.compute.to_dict(),
            "final_wait": self.final_wait,
            "teardown": self.teardown,
            "exit": self.exit,
            "start": self.start,
            # written only where there is one, as the core writes it
            **({} if self.job_id is None else {"job_id": self.job_id}),
        }

    @property
    def blocks(self) -> int:
        """Blocks this worker handled, completed or failed."""
        return self.blocks_ok + self.blocks_failed


@dataclass(frozen=True)
class JobRecord:
    """One job that hosted several workers of a task (``workers_per_job``),
    in seconds."""

    #: the batch system's job id, or "job N" where it gave none
    job_id: str
    #: the workers it hosted, by id (replacements included)
    workers: tuple[int, ...] = ()
    #: submission to its launcher connecting (queue wait and interpreter
    #: start); None: it never connected
    queue_wait: float | None = None
    #: its launcher connecting to it having loaded the function
    launcher_startup: float | None = None
    #: the launcher being ready to each worker's start, in order
    starts: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobRecord:
        """From the report JSON (a missing key takes its default)."""
        defaults: dict[str, Any] = {"job_id": None, "workers": [], "queue_wait": None}
        defaults.update(launcher_startup=None, starts=[])
        f = _fields(d, defaults, "a job record")
        return cls(
            job_id=str(f["job_id"]),
            workers=tuple(int(w) for w in f["workers"]),
            queue_wait=_opt_float(f["queue_wait"]),
            launcher_startup=_opt_float(f["launcher_startup"]),
            starts=tuple(float(s) for s in f["starts"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON."""
        return {
            "job_id": self.job_id,
            "workers": list(self.workers),
            "queue_wait": self.queue_wait,
            "launcher_startup": self.launcher_startup,
            "starts": list(self.starts),
        }


@dataclass(frozen=True)
class WorkerSummary:
    """The workers daisy started for one task: ``startup`` and
    ``teardown`` have one sample per worker, ``idle`` and ``compute`` pool
    every worker's per-block samples. ``by_id`` holds each worker's
    record."""

    count: int = 0
    unmanaged_clients: int = 0
    startup: Stat = field(default_factory=Stat)
    idle: Stat = field(default_factory=Stat)
    compute: Stat = field(default_factory=Stat)
    teardown: Stat = field(default_factory=Stat)
    exits: dict[str, int] = field(default_factory=dict)
    by_id: dict[int, WorkerRecord] = field(default_factory=dict)
    #: where the workers ran: "local", "slurm", "dask", ...
    spawner: str = ""
    #: workers forked warm by the task's launcher (the others started cold)
    warm_starts: int = 0
    #: seconds from starting the task's launcher to it being ready to fork
    #: (it loaded the function); None without a launcher
    launcher_startup: float | None = None
    #: why workers of a task that asked for warm starts started cold (a
    #: thread in the launcher, a function that did not load, a launcher
    #: that died); None when nothing went wrong
    cold_start_reason: str | None = None
    #: worker-seconds the workers spent connected without a block (the gaps
    #: before their blocks and their final waits: nodes held idle)
    idle_seconds: float = 0.0
    #: the idle timeout the workers ran under (seconds), or None
    idle_timeout: float | None = None
    #: the jobs that hosted several workers each (``workers_per_job``);
    #: empty where every worker had a process (or job) of its own
    jobs: tuple[JobRecord, ...] = ()
    #: the jobs' queue waits (one sample per job that connected)
    job_queue_wait: Stat = field(default_factory=Stat)

    @property
    def handed_back(self) -> int:
        """Workers that left after waiting ``idle_timeout`` for a block."""
        return self.exits.get("idle", 0)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> WorkerSummary:
        """From the report JSON (a missing key takes its default)."""
        defaults: dict[str, Any] = {"count": 0, "unmanaged_clients": 0, "exits": {}, "by_id": []}
        defaults.update(dict.fromkeys(("startup", "idle", "compute", "teardown")), spawner="")
        defaults.update(warm_starts=0, launcher_startup=None, cold_start_reason=None)
        defaults.update(idle_seconds=0.0, idle_timeout=None, jobs=[], job_queue_wait=None)
        f = _fields({} if d is None else d, defaults, "workers")
        records = [WorkerRecord.from_dict(r) for r in f["by_id"]]
        return cls(
            count=int(f["count"]),
            unmanaged_clients=int(f["unmanaged_clients"]),
            startup=Stat.from_dict(f["startup"]),
            idle=Stat.from_dict(f["idle"]),
            compute=Stat.from_dict(f["compute"]),
            teardown=Stat.from_dict(f["teardown"]),
            exits={str(k): int(v) for k, v in f["exits"].items()},
            by_id={r.worker_id: r for r in records},
            spawner=str(f["spawner"]),
            warm_starts=int(f["warm_starts"]),
            launcher_startup=_opt_float(f["launcher_startup"]),
            cold_start_reason=(
                None if f["cold_start_reason"] is None else str(f["cold_start_reason"])
            ),
            idle_seconds=float(f["idle_seconds"]),
            idle_timeout=_opt_float(f["idle_timeout"]),
            jobs=tuple(JobRecord.from_dict(j) for j in f["jobs"] or ()),
            job_queue_wait=Stat.from_dict(f["job_queue_wait"]),
        )

    def __repr__(self) -> str:
        exits = {k: n for k, n in self.exits.items() if n}
        return (
            f"WorkerSummary(count={self.count}, exits={exits}, startup={self.startup.format()}, "
            f"teardown={self.teardown.format()})"
        )

    def _repr_html_(self) -> str:
        from daisy.report_view import worker_summary_html

        return worker_summary_html(self)

    def to_dict(self) -> dict[str, Any]:
        """The report JSON."""
        return {
            "spawner": self.spawner,
            "count": self.count,
            "unmanaged_clients": self.unmanaged_clients,
            "startup": self.startup.to_dict(),
            "idle": self.idle.to_dict(),
            "compute": self.compute.to_dict(),
            "teardown": self.teardown.to_dict(),
            "exits": dict(self.exits),
            "by_id": [r.to_dict() for r in self.by_id.values()],
            "warm_starts": self.warm_starts,
            "launcher_startup": self.launcher_startup,
            "cold_start_reason": self.cold_start_reason,
            "idle_seconds": self.idle_seconds,
            "idle_timeout": self.idle_timeout,
            # written only where there are some, as the core writes them
            **({"jobs": [j.to_dict() for j in self.jobs]} if self.jobs else {}),
            "job_queue_wait": self.job_queue_wait.to_dict(),
        }

    def jobs_line(self) -> str | None:
        """The jobs that hosted the workers, in words: ``8 workers in 2
        jobs; queue wait median 1.20 s (max 1.50 s)``; None without such
        jobs."""
        if not self.jobs:
            return None
        hosted = sum(len(j.workers) for j in self.jobs)
        jobs = len(self.jobs)
        text = f"{hosted} worker{'s' * (hosted != 1)} in {jobs} job{'s' * (jobs != 1)}"
        if self.job_queue_wait.n:
            text += (
                f"; queue wait mean {format_seconds(self.job_queue_wait.mean)} "
                f"(max {format_seconds(self.job_queue_wait.max)})"
            )
        return text

    def idle_line(self) -> str:
        """The idle worker-seconds and what the idle timeout handed back:
        ``idle in all 42.0 s of worker time; 3 handed back (idle_timeout
        5.00 s)``."""
        text = f"idle in all {format_seconds(self.idle_seconds)} of worker time"
        if self.idle_timeout is not None:
            text += (
                f"; {self.handed_back} handed back "
                f"(idle_timeout {format_seconds(self.idle_timeout)})"
            )
        return text

    def starts_line(self) -> str:
        """How the workers were started, in words: ``2 warm (launcher ready
        in 812.0 ms)``, ``3 cold``, ``1 warm, 2 cold (started cold: ...)``."""
        cold = self.count - self.warm_starts
        parts = [f"{n} {kind}" for kind, n in (("warm", self.warm_starts), ("cold", cold)) if n]
        text = ", ".join(parts) or "none"
        if self.launcher_startup is not None:
            text += f" (launcher ready in {format_seconds(self.launcher_startup)})"
        if self.cold_start_reason:
            text += f" (started cold: {self.cold_start_reason})"
        return text


@dataclass(frozen=True)
class BlockRecord:
    """What a task's tracking store holds for one block."""

    block_id: tuple[str, int]
    done: bool
    failures: int
    #: a `daisy.BlockStats`, or None (no resource tracking, or never ran)
    stats: BlockStats | None
    #: the worker that completed it, or None (serial run, unmanaged client)
    worker_id: int | None
    #: seconds since the UNIX epoch, on the scheduler's clock
    sent_at: float | None
    returned_at: float | None

    @property
    def wall_seconds(self) -> float | None:
        """The block's own wall time, if measured."""
        return None if self.stats is None else self.stats.wall_seconds

    @property
    def peak_rss_bytes(self) -> int | None:
        """The worker's peak RSS while the block ran, if measured."""
        return None if self.stats is None else self.stats.peak_rss_bytes

    @property
    def round_trip(self) -> float | None:
        """Dispatch to return, seconds, from the scheduler's stamps."""
        if self.sent_at is None or self.returned_at is None:
            return None
        return self.returned_at - self.sent_at

    @classmethod
    def from_native(cls, task_id: str, d: dict[str, Any]) -> BlockRecord:
        """From the dict the native scheduler returns."""
        return cls(
            block_id=(task_id, int(d["spatial_id"])),
            done=bool(d["done"]),
            failures=int(d["failures"]),
            stats=d["stats"],
            worker_id=d["worker_id"],
            sent_at=d["sent_at"],
            returned_at=d["returned_at"],
        )


@dataclass(frozen=True)
class FailureCauses:
    """Why a task's blocks failed in one run, as its report line keeps it:
    the causes of its failed attempts with how many attempts gave each, in
    order of first appearance (at most 20; ``other`` counts the attempts
    past them), and the first failure's whole text (its last 16 KiB).
    Attempts group by cause: for a Python traceback the exception type and
    the source line that raised it (``causes``, e.g. ``"ValueError at
    smooth.py:12 in smooth"``), so messages naming a block id still group;
    for other texts, their last line. ``messages`` holds each cause's
    first message (an example) with its count."""

    messages: tuple[tuple[str, int], ...] = ()
    other: int = 0
    first_traceback: str | None = None
    #: per entry of ``messages``: its cause ("" where the text was no
    #: traceback, or the line older than causes)
    causes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FailureCauses:
        """From the report JSON's ``failure_causes`` (None: nothing failed,
        or a line written before daisy kept causes)."""
        if d is None:
            return cls()
        f = _fields(d, {"messages": [], "other": 0, "first_traceback": None}, "failure_causes")
        messages, causes = [], []
        for m in f["messages"]:
            g = _fields(m, {"message": "", "count": 0, "cause": ""}, "a failure message")
            messages.append((str(g["message"]), int(g["count"])))
            causes.append(str(g["cause"] or ""))
        first = f["first_traceback"]
        return cls(
            tuple(messages),
            int(f["other"]),
            None if first is None else str(first),
            tuple(causes),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON's ``failure_causes``."""
        causes = self.causes or ("",) * len(self.messages)
        return {
            "messages": [
                {"message": m, "count": n, "cause": c}
                for (m, n), c in zip(self.messages, causes, strict=True)
            ],
            "other": self.other,
            "first_traceback": self.first_traceback,
        }

    def __bool__(self) -> bool:
        return bool(self.messages) or self.other > 0

    def render(self, indent: str = "    ", limit: int = 5) -> list[str]:
        """The panel's lines: the most frequent causes, one per line, each
        with an example message."""
        causes = self.causes or ("",) * len(self.messages)
        ranked = sorted(zip(self.messages, causes, strict=True), key=lambda entry: -entry[0][1])
        lines = []
        for (message, n), cause in ranked[:limit]:
            lines.append(
                f"{indent}{n}× {cause}, e.g. {message}" if cause else f"{indent}{n}× {message}"
            )
        more = sum(n for (_, n), _ in ranked[limit:]) + self.other
        if more:
            lines.append(f"{indent}… {more} more failed attempt(s) with other causes")
        return lines


@dataclass(frozen=True)
class FailedAttempt:
    """One failed attempt of a block in a run: where it ran and when (the
    first 1,000 of a task's run; the tracking store times only a block's
    successful attempt)."""

    #: the block's cell on the task's block grid (C order, the store's index)
    index: int
    #: the block's spatial id
    block: int
    #: the worker it ran on (None: an unmanaged client, or a serial run)
    worker_id: int | None
    #: when it was handed out and when it came back, epoch seconds
    sent_at: float
    returned_at: float
    #: it ran past the task's timeout and was reclaimed
    timed_out: bool = False

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "index": 0,
        "block": 0,
        "worker_id": None,
        "sent_at": 0.0,
        "returned_at": 0.0,
        "timed_out": False,
    }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FailedAttempt:
        """From one entry of the report JSON's ``failed_attempts``."""
        f = _fields(d, dict(cls._DEFAULTS), "a failed attempt")
        return cls(
            index=int(f["index"]),
            block=int(f["block"]),
            worker_id=None if f["worker_id"] is None else int(f["worker_id"]),
            sent_at=float(f["sent_at"]),
            returned_at=float(f["returned_at"]),
            timed_out=bool(f["timed_out"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The entry of the report JSON."""
        return {
            "index": self.index,
            "block": self.block,
            "worker_id": self.worker_id,
            "sent_at": self.sent_at,
            "returned_at": self.returned_at,
            "timed_out": self.timed_out,
        }


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
    ) -> None:
        self.task_id = task_id
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
        defaults.update(notices=None, failed_attempts=[])
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
        """This task's panel as HTML, for Jupyter (see `daisy.report_view`)."""
        from daisy.report_view import task_report_html

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
            lines.append(
                f"{pad} cpu per block-second {b.cpu_per_wall:.2f} ({_cpu_words(b.cpu_per_wall)})"
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
        `daisy.report_view`)."""
        from daisy.report_view import run_report_html

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
