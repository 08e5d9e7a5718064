"""The figures of a task's run report, one class per section of its JSON
line (`Stat`, `BlockSummary`, `WorkerRecord`, `JobRecord`,
`WorkerSummary`, `BlockRecord`, `FailureCauses`, `FailedAttempt`): each
reads its section (``from_dict``, a missing key at its default), writes it
back (``to_dict``) and says its figures in words where the panel shows
them. Every figure is the core's; nothing is computed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from daisy.units import format_bytes as format_bytes
from daisy.units import format_percent, seconds_scale, seconds_text
from daisy.units import format_seconds as format_seconds

if TYPE_CHECKING:
    from daisy._daisy import BlockStats

#: spawners whose workers wait in a queue before they start
QUEUED_SPAWNERS = ("slurm", "dask")


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)


# -- the report objects --------------------------------------------------------


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
    #: seconds each block's worker waited for a core (runnable, on the run
    #: queue), over the blocks that have the figure
    run_queue: Stat = field(default_factory=Stat)
    #: the share of those blocks' wall spent waiting for a core (the
    #: core's); None without the figure
    run_queue_per_wall: float | None = None
    #: the median and 95th percentile of the blocks' peak RSS, bytes
    #: (within 2.2 %, the core's); None without measurements
    peak_rss_p50: float | None = None
    peak_rss_p95: float | None = None

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
        "run_queue",
    )
    #: the stats that count bytes or percent (the others count seconds)
    _UNITS = {"peak_rss": "B", "io_read": "B", "io_write": "B", "gpu_mem": "B", "gpu_util": "%"}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> BlockSummary:
        """From the report JSON (a missing key takes its default)."""
        defaults: dict[str, Any] = {"count": 0, "skipped": 0, "failures": 0}
        defaults.update(has_stats=False, trend_slope_ms=0.0, trend_shown=False, peak_rss_source="")
        defaults.update(warmup_ratio=None, slowest=[], cpu_per_wall=None)
        defaults.update(run_queue_per_wall=None, peak_rss_p50=None, peak_rss_p95=None)
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
            run_queue_per_wall=_opt_float(f["run_queue_per_wall"]),
            peak_rss_p50=_opt_float(f["peak_rss_p50"]),
            peak_rss_p95=_opt_float(f["peak_rss_p95"]),
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
        from daisy.report.notebook import block_summary_html

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
        out["run_queue_per_wall"] = self.run_queue_per_wall
        out["peak_rss_p50"] = self.peak_rss_p50
        out["peak_rss_p95"] = self.peak_rss_p95
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
        from daisy.report.notebook import worker_summary_html

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


@dataclass(frozen=True)
class EtaCheckpoint:
    """An ETA a run gave for a task from the model: with ``done`` of its
    blocks done in the run, ``elapsed_seconds`` after the run's start, it
    said ``eta_seconds`` were left. See "Planning a run" in the docs."""

    done: int
    elapsed_seconds: float
    eta_seconds: float
    #: the seconds that really were left, until the task's last block came
    #: back (None: it never came back)
    left_seconds: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EtaCheckpoint:
        """From one entry of the report JSON's ``eta``."""
        defaults = {"done": 0, "elapsed_seconds": 0.0, "eta_seconds": 0.0, "left_seconds": None}
        f = _fields(d, defaults, "an ETA")
        return cls(
            done=int(f["done"]),
            elapsed_seconds=float(f["elapsed_seconds"]),
            eta_seconds=float(f["eta_seconds"]),
            left_seconds=_opt_float(f["left_seconds"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON's entry."""
        return {
            "done": self.done,
            "elapsed_seconds": self.elapsed_seconds,
            "eta_seconds": self.eta_seconds,
            "left_seconds": self.left_seconds,
        }


@dataclass(frozen=True)
class MemoryReport:
    """The memory budget a task's blocks were let in by in a run, where it
    came from, and how many blocks the memory guard held back (stopped
    their worker before the kernel's OOM killer would, and ran them again
    when they fit). See "Memory and workers" in the docs."""

    #: the budget, bytes
    budget_bytes: int
    #: where it came from, in words
    budget_source: str
    #: blocks the guard held back
    held_back: int = 0

    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "budget_bytes": 0,
        "budget_source": "",
        "held_back": 0,
    }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> MemoryReport | None:
        """From the report JSON's ``memory`` (None: no gate ran)."""
        if d is None:
            return None
        f = _fields(d, dict(cls._DEFAULTS), "a memory report")
        return cls(
            budget_bytes=int(f["budget_bytes"]),
            budget_source=str(f["budget_source"]),
            held_back=int(f["held_back"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The report JSON's ``memory``."""
        return {
            "budget_bytes": self.budget_bytes,
            "budget_source": self.budget_source,
            "held_back": self.held_back,
        }

    def describe(self) -> str:
        """The panel's line: the budget, its source, what the guard did."""
        text = f"memory budget {format_bytes(self.budget_bytes)} from {self.budget_source}"
        if self.held_back:
            plural = "s" if self.held_back != 1 else ""
            text += (
                f"; {self.held_back} block{plural} held back by the memory guard (its "
                "worker stopped before the kernel's OOM killer would), then run again"
            )
        return text
