"""`daisy.forecast`: how long the rest of a run takes, how much memory a
worker needs and how many workers fit this node, before committing to it.

It runs a sample of each task's blocks for real (spread over the volume, so
a costly region anywhere is seen; with the upstream blocks they read), with
resource tracking on, and forecasts the rest from what the sample and the
tracking store's earlier runs measured: a block's cost from its measured
neighbours in space, the blocks still to run simulated on the workers the
run would give them. The model, the interval and the simulation are the
core's (``daisy_core::forecast``); this module runs the sample and renders
the figures.

With a tracking store, the sample's blocks are marked done and the run
skips them; without one, the sample runs in a temporary store and the run
will do those blocks again (the forecast says so). See "Planning a run" in
the docs.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daisy import _daisy
from daisy.pipeline import Pipeline
from daisy.units import format_bytes, format_seconds

logger = logging.getLogger(__name__)

__all__ = ["Forecast", "TaskForecast", "forecast"]


class TaskForecast:
    """One task's figures in a `Forecast` (``fc[task_id]``): its blocks,
    the model's block time and memory percentiles over every block, and the
    workers that fit this node."""

    def __init__(self, figures: dict[str, Any]) -> None:
        self._figures = figures

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_figures"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._figures))

    def to_dict(self) -> dict[str, Any]:
        """The task's figures as a plain dict."""
        return dict(self._figures)

    def __repr__(self) -> str:
        return f"TaskForecast({self._figures['task_id']!r})"


class Forecast:
    """A forecast of the rest of a run (`daisy.forecast` makes it).

    Its figures are attributes (None where a task has no measured block):
    ``wall_seconds``, the seconds the rest of the run takes, with
    ``wall_seconds_low`` and ``wall_seconds_high``, the ends of an interval
    that widens with a small or heavy-tailed sample; ``cpu_seconds`` of the
    blocks still to run; ``node_hours``, the wall on one node;
    ``bounding_task``, the task whose blocks end last; ``sampled``, the
    blocks this forecast ran for real, by task id; ``notes``, what it could
    not use or assumed, in words.

    ``fc[task_id]`` is a `TaskForecast`; ``print(fc)`` a short table;
    ``fc.to_dict()`` every figure; ``fc.slurm`` the advice for one SLURM job.
    """

    def __init__(self, figures: dict[str, Any], sampled: dict[str, int]) -> None:
        self._figures = figures
        self.sampled = sampled
        self._tasks = {t["task_id"]: TaskForecast(t) for t in figures["tasks"]}

    def __getattr__(self, name: str) -> Any:
        figures = self.__dict__.get("_figures", {})
        if name in figures and name != "tasks":
            return figures[name]
        raise AttributeError(name)

    def __getitem__(self, task_id: str) -> TaskForecast:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"{task_id!r}: the forecast has tasks {sorted(self._tasks)}") from None

    def __iter__(self) -> Iterator[TaskForecast]:
        return iter(self._tasks.values())

    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain data (what ``json.dumps`` takes)."""
        out: dict[str, Any] = json.loads(json.dumps(self._figures))
        out["sampled"] = dict(self.sampled)
        out["slurm"] = self.slurm
        return out

    @property
    def slurm(self) -> dict[str, Any] | None:
        """The advice for running the rest in one SLURM job on a node like
        this one: ``workers_per_job`` (the bounding task's recommended
        workers), ``mem`` (per worker: the largest block peak seen or
        predicted, plus a quarter), ``time`` (the interval's high end plus a
        quarter), as ``SlurmSpawner(...)`` and as ``sbatch`` flags. None
        without a wall forecast."""
        high = self._figures.get("wall_seconds_high")
        bound = self._figures.get("bounding_task")
        if high is None or bound is None:
            return None
        task = self._tasks[bound]
        peak = task.peak_rss_bytes_max or 0.0
        workers = task.recommended_workers or 1
        mem_mib = max(256, int(peak * 1.25 / 2**20 + 1))
        minutes = max(1, int(high * 1.25 / 60 + 1))
        time = f"{minutes // 60}:{minutes % 60:02d}:00"
        return {
            "workers_per_job": workers,
            "mem": f"{mem_mib}M",
            "time": time,
            "spawner": f'SlurmSpawner(mem="{mem_mib}M", time="{time}", workers_per_job={workers})',
            "sbatch": f"--mem={mem_mib * workers}M --time={time} --cpus-per-task={workers}",
        }

    def _rows(self) -> list[tuple[str, ...]]:
        rows: list[tuple[str, ...]] = []
        for t in self:
            rows.append(
                (
                    t.task_id,
                    f"{t.blocks_left}/{t.blocks}",
                    str(self.sampled.get(t.task_id, 0))
                    + f" (+{t.measured - self.sampled.get(t.task_id, 0)})",
                    _seconds(t.block_seconds_p50) + " / " + _seconds(t.block_seconds_p95),
                    _bytes(t.peak_rss_bytes_p95) + " / " + _bytes(t.peak_rss_bytes_max),
                    f"{t.workers} ({t.recommended_workers if t.recommended_workers else '?'})",
                    _wall(t.wall_seconds),
                )
            )
        return rows

    _HEADER = (
        "task",
        "left/blocks",
        "sampled (+history)",
        "block p50 / p95",
        "peak p95 / max",
        "workers (fit)",
        "ends at",
    )

    def __str__(self) -> str:
        f = self._figures
        lines = []
        if f["wall_seconds"] is None:
            lines.append("Forecast: no wall time (a task has no measured block)")
        else:
            bound = (
                f"bound by {f['bounding_task']!r}"
                if f["bounding_task"] is not None
                else "nothing left to run"
            )
            lines.append(
                f"Forecast: the rest of the run takes {_wall(f['wall_seconds'])} "
                f"({_wall(f['wall_seconds_low'])} to {_wall(f['wall_seconds_high'])}), "
                f"{f['cpu_seconds'] / 3600:.2f} CPU hours, {f['node_hours']:.2f} node hours; "
                f"{bound}"
            )
        rows = [self._HEADER, *self._rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._HEADER))]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        lines.append(
            f"  node: {f['cores']} cores, {_bytes(f['memory_budget_bytes'])} budget "
            f"({f['memory_budget_source']})"
        )
        advice = self.slurm
        if advice is not None:
            lines.append(f"  one SLURM job: {advice['spawner']}  (sbatch {advice['sbatch']})")
        lines.extend(f"  note: {n}" for n in f["notes"])
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"<daisy.Forecast wall={_wall(self._figures['wall_seconds'])} tasks={len(self._tasks)}>"
        )

    def _repr_html_(self) -> str:
        f = self._figures
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self._HEADER)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
            for r in self._rows()
        )
        title = html.escape(str(self).splitlines()[0])
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in f["notes"])
        return (
            f"<div class='daisy-forecast'><p><b>{title}</b></p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<ul>{notes}</ul>" if notes else "")
            + "</div>"
        )


def _seconds(s: float | None) -> str:
    return "?" if s is None else format_seconds(s)


def _wall(s: float | None) -> str:
    """Seconds as ``12.3 s``, or ``1:02:03`` from two minutes on."""
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.1f} s"
    whole = int(round(s))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _bytes(b: float | None) -> str:
    return "?" if b is None else format_bytes(int(b))


def _check_count(value: Any, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: expected a whole number >= {least}, got {value!r}")
    return value


@contextlib.contextmanager
def _sample_run(
    tasks: list[Any], stores: dict[str, Path], masks: dict[str, bytes]
) -> Iterator[None]:
    """The tasks set to run their sample (their own store or a temporary
    one, resource tracking on, every other block skipped), put back after."""
    saved = [(t, t._tracking_path, t.resource_tracking, t._skip_mask) for t in tasks]
    try:
        for t in tasks:
            t._tracking_path = stores[t.task_id]
            t.resource_tracking = True
            t._skip_mask = masks.get(t.task_id, b"\x01" * t.num_blocks)
        yield
    finally:
        for t, path, tracking, mask in saved:
            t._tracking_path, t.resource_tracking, t._skip_mask = path, tracking, mask


def forecast(
    tasks: Any,
    sample_blocks: int = 20,
    max_workers: int | None = None,
    *,
    memory_budget: int | None = None,
) -> Forecast:
    """Forecast a run of ``tasks`` (a Task, a list of tasks or a Pipeline;
    upstream tasks included) before committing to it.

    Args:
        tasks: what `run_blockwise` would run.
        sample_blocks: blocks of each task to run for real, spread over its
            volume (blocks already measured in its tracking store since its
            last reset count towards them). 0: forecast from the store's
            history alone.
        max_workers: workers per task to forecast with (None: each task's
            own ``max_workers``; ``"auto"`` resolves as a run would).
        memory_budget: bytes the workers may use (None: the budget a run
            on this machine would find: cgroup, SLURM job, available
            memory).

    Returns:
        A `Forecast`: ``fc.wall_seconds`` (and ``_low``/``_high``),
        ``fc.cpu_seconds``, ``fc.node_hours``, ``fc[task_id]`` with block
        time and peak memory percentiles and ``recommended_workers``,
        ``print(fc)``, ``fc.to_dict()``, ``fc.slurm``.

    The sample's blocks are marked done in a task's tracking store and the
    run skips them; a task without a store samples into a temporary one,
    and the run does those blocks again.
    """
    sample_blocks = _check_count(sample_blocks, "sample_blocks", 0)
    if max_workers is not None:
        max_workers = _check_count(max_workers, "max_workers", 1)
    pipeline = Pipeline.of(tasks)
    task_list = list(pipeline.tasks)
    specs = pipeline.specs()
    scratch = None
    stores: dict[str, Path] = {}
    notes: list[str] = []
    temporary = set()
    for t in task_list:
        path = t.tracking_path
        if path is None:
            if scratch is None:
                scratch = Path(tempfile.mkdtemp(prefix="daisy-forecast-"))
            path = scratch / t.task_id.replace("/", "_")
            temporary.add(t.task_id)
        stores[t.task_id] = Path(path)
    try:
        sampled: dict[str, int] = {}
        if sample_blocks > 0:
            chosen = _daisy.forecast_sample(
                specs, {k: str(v) for k, v in stores.items()}, sample_blocks
            )
            sampled = {k: len(v) for k, v in chosen.items() if v}
            notes.extend(
                f"task {tid!r} has no tracking store: the sample ran in a temporary one, and "
                "the run will do those blocks again"
                for tid in sorted(temporary & sampled.keys())
            )
            if sampled:
                masks = {}
                for t in task_list:
                    mask = bytearray(b"\x01" * t.num_blocks)
                    for i in chosen.get(t.task_id, []):
                        mask[i] = 0
                    masks[t.task_id] = bytes(mask)
                logger.info(
                    "daisy.forecast: running a sample of %s",
                    ", ".join(f"{n} blocks of {k!r}" for k, n in sampled.items()),
                )
                from daisy.server import Server

                runner = Server(memory_budget=memory_budget)
                runner._forecast_sample = True  # its report lines say so
                runner._summary_follows = True  # the forecast says what ran
                with _sample_run(task_list, stores, masks):
                    states = runner.run_blockwise(task_list, progress=False)
                for tid, state in states.items():
                    if not state.all_completed:
                        notes.append(
                            f"task {tid!r}: {state.failed_count} of the sample's blocks failed; "
                            "the forecast uses those that completed"
                        )
        workers = {}
        for t in task_list:
            w = max_workers if max_workers is not None else t.max_workers
            workers[t.task_id] = w if isinstance(w, int) else 0
        from daisy.block_function import code_sha256

        functions = {}
        for t in task_list:
            code = code_sha256(t.process_function)
            if code is not None:
                functions[t.task_id] = code
        figures = json.loads(
            _daisy.forecast(
                specs,
                {k: str(v) for k, v in stores.items()},
                workers,
                memory_budget,
                functions,
            )
        )
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    figures["notes"] = notes + figures["notes"]
    if sample_blocks == 0 and not any(t["measured"] for t in figures["tasks"]):
        figures["notes"].append("sample_blocks=0 and no history: nothing measured to forecast from")
    return Forecast(figures, sampled)
