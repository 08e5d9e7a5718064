"""`Task`: what to process, block by block (``daisy.task`` in daisy 1.x).

The Python object keeps what only Python can hold (the user's functions)
and the ROIs as the user gave them; the geometry is validated by the Rust
core when the task is built, so a bad task fails at construction with a
message that names the parameter.
"""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from funlib.geometry import Roi

from daisy import _v1_names
from daisy._daisy import (
    Block,
    DependencyGraph,
    TaskOptions,
    TaskSpec,
    TrackingStore,
    adopt_tracking,
    validated_roi,
)
from daisy.convenience import run_blockwise
from daisy.pipeline import Composable
from daisy.report.figures import BlockRecord
from daisy.report.history import read_last_run, runs_file_for
from daisy.report.task_report import TaskReport
from daisy.task_arguments import (
    AUTO,
    parse_check_function,
    parse_count,
    parse_fit,
    parse_flag,
    parse_gpu_tracking,
    parse_init_callback,
    parse_process_function,
    parse_requires,
    parse_seconds,
    parse_spawner,
    parse_task_id,
    parse_tracking_path,
    parse_upstream,
    parse_workers,
)
from daisy.task_outputs import parse_outputs
from daisy.tracking_store import resolve_tracking_path

logger = logging.getLogger(__name__)


class Task(Composable):
    """A task: a total ROI tiled into blocks, and what to do with each.

    Args:
        task_id: unique name of the task.
        total_roi: the region to process, context included (a ``daisy.Roi``
            or an ``(offset, shape)`` pair).
        read_roi: what one block reads, relative to ``write_roi``.
        write_roi: what one block writes; blocks tile ``total_roi`` at the
            stride of its shape.
        process_function: ``f(block)`` (a block function, run for every
            block) or ``f()`` (a worker function that runs its own loop with
            ``daisy.Client``).
        check_function: ``f(block) -> bool``, True if the block is already
            done (it is then skipped); or a pair ``(pre, post)`` where
            ``post(block)`` checks a block after it ran.
        init_callback_fn: ``f(context)``, called once when the task starts.
        read_write_conflict: whether blocks whose read and write regions
            overlap must not run at the same time.
        num_workers: daisy 1.x name of ``max_workers`` (giving both is a
            ``TypeError``, as in daisy 2.0.0).
        max_retries: how often a failed block is retried.
        fit: ``"valid"``, ``"overhang"`` or ``"shrink"``: what to do with
            blocks that stick out of ``total_roi``.
        timeout: seconds a block may take before it is reclaimed and retried.
        idle_timeout: seconds a worker may wait for a block before it is
            handed back (it leaves; workers start again, up to
            ``max_workers``, when blocks are ready). None: the run's
            ``idle_timeout``, else the spawner's (off for local workers,
            `SlurmSpawner` and `DaskSpawner` hand idle workers back after
            300 s). Without one, a worker waits as long as its task can
            still get blocks.
        upstream_tasks: tasks whose output this task reads; a block waits
            for exactly the upstream blocks whose write ROI overlaps its
            read ROI.
        max_workers: how many workers may process this task at once (1 by
            default, as in daisy 1.2.2 and 2.0.0), or ``"auto"``: the run
            chooses from the cores and its memory budget, and says what it
            chose and why (see "Memory and workers" in the docs). Whatever
            the count, the memory guard lets blocks in by their measured
            memory.
        max_worker_restarts: how many times a worker may die unexpectedly
            (crash, kill) before the task is abandoned.
        requires: resources one worker of this task holds, e.g.
            ``{"gpu": 1}``; ``run_blockwise(resources=...)`` caps the total.
        tracking_path: directory of the task's tracking store, a Zarr v3
            group with a done marker and a failure count per block (and,
            with ``resource_tracking``, each block's measurements), plus
            ``runs.jsonl``, one report line per run. ``None`` (the default)
            uses ``<basedir>/<task_id>`` when `daisy.set_tracking_basedir`
            was called, else no store; ``False`` opts out. Blocks marked
            done are skipped by the next run (the run's summary says how
            many); ``Task.reset()`` clears the markers after a code change
            and keeps the run history.
        done_marker_path: deprecated name of ``tracking_path``.
        skip_mask: an array of shape `block_grid_shape`, nonzero for blocks
            to skip in this run only (never recorded as done).
        resource_tracking: measure every block inside its worker (wall
            and CPU seconds, peak resident memory of that block alone,
            bytes read and written) and record it in the tracking store
            (which it requires); ``task.report()`` and the Resource
            Utilization panel summarise them, ``task.report().block(...)``
            reads one block's figures. It costs about 10 µs per block.
        spawner: where the task's workers run: ``daisy.LocalSpawner()``
            (the default), ``daisy.SlurmSpawner(...)``,
            ``daisy.DaskSpawner(...)``; see `daisy.spawners`.
        warm_start: start local workers warm (the default): one launcher
            process per task loads the function once (its imports, the
            data it captured) and forks each worker from it, so a worker
            starts in milliseconds instead of paying for a fresh
            interpreter's imports. ``False`` starts every worker as a
            fresh ``python -m daisy._worker`` (so does
            ``DAISY_WARM_START=0`` for every task of every run). Remote
            spawners always start cold. Where forking would be unsafe (the
            function's imports started a Python thread) or the launcher
            fails, workers start cold and the log and the report say why;
            the report records each worker's start (``warm``/``cold``).
        gpu_tracking: add GPU figures to each block's measurements (needs
            ``resource_tracking=True``): the peak GPU memory of the worker
            process during the block and its mean GPU utilisation, read
            through NVML (loaded at run time; without it the figures stay
            NaN / 0 and the report says once why). ``None`` (the default)
            turns it on for tasks that ``requires`` a ``"gpu"`` resource
            and measure their blocks. Memory is sampled every 100 ms while
            a block runs; utilisation comes from NVML's per-process samples
            (the whole device's where the driver has none); each block costs
            a few NVML calls per device.
        outputs: the arrays the task writes (zarr arrays, funlib.persistence
            ``Array`` objects, or paths to zarr arrays), optional. With
            them, before any block runs, daisy refuses an output whose
            chunks two blocks that may run at once would both write (each
            would read, change and write back the whole chunk, and one
            block's writes would be lost), saying which chunk shape fits;
            and the tracking store records which array each output is, so
            that a rerun over an output deleted or re-created since its
            blocks were marked done is refused (`daisy.LayoutMismatch`,
            offering ``task.reset()``) instead of skipping every block.
    """

    def __init__(
        self,
        task_id: str,
        total_roi: Roi | tuple[Any, Any],
        read_roi: Roi | tuple[Any, Any],
        write_roi: Roi | tuple[Any, Any],
        process_function: Callable[..., Any] | None = None,
        check_function: Callable[[Any], bool]
        | tuple[Callable[[Any], bool], Callable[[Any], bool]]
        | None = None,
        init_callback_fn: Callable[[Any], Any] | None = None,
        read_write_conflict: bool = True,
        num_workers: int | None = None,
        max_retries: int = 2,
        fit: str = "valid",
        timeout: float | None = None,
        upstream_tasks: Iterable[Task] | None = None,
        *,
        max_workers: int | str | None = None,
        max_worker_restarts: int = 10,
        requires: dict[str, int] | None = None,
        tracking_path: str | os.PathLike[str] | bool | None = None,
        done_marker_path: str | os.PathLike[str] | bool | None = None,
        skip_mask: Any = None,
        resource_tracking: bool = False,
        spawner: Any = None,
        warm_start: bool = True,
        gpu_tracking: bool | None = None,
        idle_timeout: float | None = None,
        outputs: Any = None,
    ) -> None:
        self.task_id = parse_task_id(task_id)
        self.outputs = parse_outputs(outputs)
        self.total_roi = validated_roi(total_roi, "total_roi")
        self.orig_total_roi = self.total_roi
        self.read_roi = validated_roi(read_roi, "read_roi")
        self.write_roi = validated_roi(write_roi, "write_roi")
        self.process_function, self.spawn_worker_function = parse_process_function(process_function)
        self.check_function = check_function
        self._pre_check, self._post_check = parse_check_function(check_function)
        self.init_callback_fn = parse_init_callback(init_callback_fn)
        self.read_write_conflict = parse_flag(read_write_conflict, "read_write_conflict")
        self.max_workers, workers_name = parse_workers(num_workers, max_workers)
        self.max_retries = parse_count(max_retries, "max_retries")
        self.max_worker_restarts = parse_count(max_worker_restarts, "max_worker_restarts")
        self.required_resources = parse_requires(requires)
        self.timeout = parse_seconds(timeout, "timeout")
        self.idle_timeout = parse_seconds(idle_timeout, "idle_timeout")
        self.resource_tracking = parse_flag(resource_tracking, "resource_tracking")
        self._gpu_tracking = parse_gpu_tracking(gpu_tracking)
        self._options(workers_name)  # the values' rules are the core's
        self.fit = parse_fit(fit)  # its value is the core's to check, with the spec
        self.upstream_tasks = parse_upstream(upstream_tasks, Task)
        _ = self._spec  # validate the geometry now, not when the task first runs
        tracking_path = parse_tracking_path(tracking_path, done_marker_path)
        self._tracking_path = tracking_path
        self._skip_mask = self._check_skip_mask(skip_mask)
        self.skip_mask = skip_mask
        self.spawner = parse_spawner(spawner)
        self.warm_start = parse_flag(
            warm_start,
            "warm_start",
            "True (fork local workers from a warm launcher) or False (a fresh interpreter per "
            "worker)",
        )
        self._last_report: TaskReport | None = None
        if self.num_blocks == 0:
            logger.warning("daisy: task %r has no blocks: %s", task_id, self._why_no_blocks())
        else:
            uncovered = self.coverage_note
            if uncovered is not None:
                logger.warning("daisy: %s", uncovered)

    @property
    def gpu_tracking(self) -> bool:
        """Whether this task's block measurements include GPU figures: as
        given, or (``gpu_tracking=None``) when the task measures its blocks
        and ``requires`` a ``"gpu"`` resource."""
        return self._options().gpu_tracking

    def _options(self, workers_name: str = "max_workers") -> TaskOptions:
        """The task's run options as the core checks them, from its current
        attributes (``ValueError`` naming the parameter)."""
        auto = self.max_workers == AUTO
        return TaskOptions(
            self.task_id,
            max_workers=1 if isinstance(self.max_workers, str) else self.max_workers,
            auto_workers=auto,
            max_retries=self.max_retries,
            max_worker_restarts=self.max_worker_restarts,
            timeout=None if self.timeout is None else float(self.timeout),
            idle_timeout=None if self.idle_timeout is None else float(self.idle_timeout),
            requires=self.required_resources,
            resource_tracking=self.resource_tracking,
            gpu_tracking=self._gpu_tracking,
            max_workers_name=workers_name,
        )

    @property
    def coverage_note(self) -> str | None:
        """What of the volume no block of this task writes, with the fix
        (the default ``fit="valid"`` drops the last partial block of every
        axis), or None when its blocks cover the whole total write ROI.
        Warned when the task is made, and repeated in the Execution
        Summary."""
        return self._spec.coverage_note()

    def _why_no_blocks(self) -> str:
        """Why a task has no blocks, in words (the core's)."""
        return self._spec.why_no_blocks()

    @property
    def _spec(self) -> TaskSpec:
        """The core's view of the task, built from its current attributes
        (so a changed ``max_retries`` or ROI is what runs)."""
        return TaskSpec(
            self.task_id,
            self.total_roi,
            self.read_roi,
            self.write_roi,
            fit=self.fit,
            read_write_conflict=self.read_write_conflict,
            max_retries=self.max_retries,
            upstream=[u.task_id for u in self.upstream_tasks],
        )

    def _check_skip_mask(self, mask: Any) -> bytes | None:
        """The mask as one byte per block in C order, or an error naming
        the expected shape."""
        if mask is None:
            return None
        import numpy as np

        array = np.asarray(mask)
        if array.dtype.kind not in "biu":
            raise TypeError(
                f"skip_mask: expected a boolean or integer array, got dtype {array.dtype}"
            )
        shape = self.block_grid_shape
        if array.shape != shape:
            raise ValueError(
                f"skip_mask: has shape {array.shape} but task {self.task_id!r} has a block grid of "
                f"shape {shape} (Task.block_grid_shape); give one cell per block"
            )
        return np.ascontiguousarray(array != 0, dtype=np.uint8).tobytes()

    @property
    def tracking_path(self) -> Path | None:
        """The task's tracking store directory, or None if it has none."""
        return resolve_tracking_path(self.task_id, self._tracking_path)

    @property
    def done_marker_path(self) -> str | os.PathLike[str] | bool | None:
        """What was given as ``tracking_path`` (or ``done_marker_path``) at
        construction: a path, False (no store) or None (the tracking base
        directory's), as daisy 2.0.0 reports it."""
        return self._tracking_path

    @property
    def timeout_secs(self) -> float | None:
        """The per-block timeout in seconds, or None without one (daisy
        2.0.0 defaulted to 600 s; this package has no default timeout)."""
        return None if self.timeout is None else float(self.timeout)

    def failed_blocks(self) -> list[Block]:
        """The blocks the tracking store records as failed and not done
        (daisy 2.0.0), level by level as they are handed out. Empty without
        a store."""
        failed = {r.block_id[1] for r in self.block_records() if r.failures and not r.done}
        if not failed:
            return []
        graph = DependencyGraph([self._spec])
        return [b for b in graph.walk(self.task_id) if b.block_id[1] in failed]

    def report(self) -> TaskReport | None:
        """The report of this task's last run: the last line of its
        ``runs.jsonl`` (in its tracking store, else next to its worker
        logs), so it works in a later process too; else the copy a run in
        this process kept; None before any run."""
        path = runs_file_for(self)
        report = read_last_run(path) if path is not None else None
        if report is None:
            report = self._last_report
        if report is not None:
            report._task = self
        return report

    def run_blockwise(self, *args: Any, **kwargs: Any) -> Any:
        """Run this task and its upstream tasks: the same as
        ``daisy.run_blockwise([task], ...)``, with the same arguments and
        return value."""
        return run_blockwise([self], *args, **kwargs)

    def reset(self, history: bool = False) -> None:
        """Forget which blocks are done (see `Composable.reset`);
        ``history=True`` also forgets the run history, including the report
        this process kept of the last run."""
        super().reset(history=history)
        if history:
            self._last_report = None

    def adopt_tracking_store(self) -> None:
        """Make the tracking store at this task's ``tracking_path`` this
        task's own, keeping every done mark: for a store that lost metadata
        files (a scratch purge deletes small old files first; the next run
        refuses such a store with an ``OSError`` naming the missing file)
        or the store of a task that was renamed (refused as another task's
        with `daisy.LayoutMismatch`). It writes the missing metadata for
        this task's ``total_roi``, ``read_roi``, ``write_roi`` and ``fit``,
        which must be those of the runs that wrote the store (a chunk of
        another size is refused), and records this task's id.
        ``ValueError`` without a ``tracking_path``."""
        path = self.tracking_path
        if path is None:
            raise ValueError(
                f"tracking_path: task {self.task_id!r} has no tracking store to adopt; give it "
                "tracking_path= (or daisy.set_tracking_basedir)"
            )
        adopt_tracking(str(path), self._spec)

    def _store(self) -> TrackingStore | None:
        path = self.tracking_path
        if path is None or not (Path(path) / "zarr.json").is_file():
            return None
        return TrackingStore(self._spec, str(path))

    def block_record(self, block: Any) -> BlockRecord | None:
        """What the tracking store holds for one block: a `daisy.Block`, a
        grid cell (tuple, anchored at ``total_roi``) or a spatial id (int,
        found by a scan). None without a store or outside the grid."""
        store = self._store()
        if store is None:
            return None
        if isinstance(block, bool):
            raise TypeError("block: expected a daisy.Block, a grid coordinate tuple or an int")
        if isinstance(block, numbers.Integral):
            for row in store.records():
                if row["spatial_id"] == int(block):
                    return BlockRecord.from_native(self.task_id, row)
            return None
        if isinstance(block, tuple):
            if len(block) != self.total_roi.dims:
                raise ValueError(
                    f"block: grid coordinate {block} has {len(block)} entries; task "
                    f"{self.task_id!r} has {self.total_roi.dims} axes"
                )
            record = store.record_at(block)
        elif isinstance(block, Block):
            record = store.record(block)
        else:
            raise TypeError(
                "block: expected a daisy.Block, a grid coordinate tuple or an int spatial id, "
                f"not {type(block).__name__}"
            )
        return None if record is None else BlockRecord.from_native(self.task_id, record)

    def block_records(self) -> list[BlockRecord]:
        """Every block the store has a record of, in grid order (row-major
        over the block grid, as the store holds them)."""
        store = self._store()
        if store is None:
            return []
        return [BlockRecord.from_native(self.task_id, r) for r in store.records()]

    @property
    def total_write_roi(self) -> Roi:
        """The region blocks write: ``total_roi`` without the read context."""
        lower = self.write_roi.begin - self.read_roi.begin
        upper = self.read_roi.end - self.write_roi.end
        return self.total_roi.grow(-lower, -upper)

    @property
    def num_workers(self) -> int | str:
        """daisy 1.x name of `max_workers`."""
        return self.max_workers

    @num_workers.setter
    def num_workers(self, value: int) -> None:
        parse_count(value, "num_workers")
        previous, self.max_workers = self.max_workers, int(value)
        try:
            self._options("num_workers")
        except ValueError:
            self.max_workers = previous
            raise

    @property
    def num_blocks(self) -> int:
        """How many blocks the task has."""
        return self._spec.num_blocks

    @property
    def block_grid_shape(self) -> tuple[int, ...]:
        """Blocks per axis (anchored at the total write ROI, per fit mode)."""
        return tuple(self._spec.block_grid_shape)

    def requires(self) -> list[Task]:
        """The upstream tasks (daisy 1.x)."""
        return list(self.upstream_tasks)

    @property
    def upstream(self) -> list[Task]:
        """The upstream tasks, as a pipeline brings them along."""
        return list(self.upstream_tasks)

    def __repr__(self) -> str:
        return (
            f"Task({self.task_id!r}, total_roi={self.total_roi}, read_roi={self.read_roi}, "
            f"write_roi={self.write_roi}, fit={self.fit!r}, blocks={self.num_blocks})"
        )


__getattr__ = _v1_names.lazy_names(__name__)
