"""`run_blockwise`: run a pipeline and print its Execution Summary
(``daisy.convenience`` in daisy 1.x)."""

from __future__ import annotations

import contextlib
import logging
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daisy import _v1_names
from daisy._daisy import Failure, uncovered_reads
from daisy.pipeline import Pipeline
from daisy.progress import check_interval
from daisy.report.execution_summary import format_interrupted, print_execution_summary
from daisy.report.task_report import RunReport
from daisy.scheduler import Scheduler
from daisy.serial_server import SerialServer
from daisy.server import Server, Terminated
from daisy.task_arguments import parse_flag

logger = logging.getLogger(__name__)


class RunFailed(RuntimeError):
    """``run_blockwise(..., raise_on_failure=True)`` found blocks failed,
    orphaned or left unprocessed, or any `run_blockwise` found a task
    abandoned (its workers kept dying: daisy 2.0.0 raises a RuntimeError
    there too). Carries ``states`` (task id to `TaskState`), ``report``
    (the run's `RunReport`, whose task reports hold ``failure_causes``) and
    ``failures`` (``Failure`` records of the failed attempts a distributed
    run noted, the first 10,000: ``task_id``, ``spatial_id``,
    ``worker_id``, ``reason``; each unpacks as that tuple)."""

    def __init__(
        self,
        states: dict[str, Any],
        report: RunReport | None,
        failures: list[Failure],
    ) -> None:
        self.states, self.report, self.failures = states, report, failures
        bad = {
            tid: (s.failed_count, s.orphaned_count, s.total_block_count - s.completed_count)
            for tid, s in states.items()
            if not s.all_completed
        }
        parts = [
            f"{tid}: abandoned, {left} of {states[tid].total_block_count} not completed"
            if states[tid].abandoned
            else f"{tid}: {failed} failed, {orphaned} orphaned, {left} not completed"
            for tid, (failed, orphaned, left) in bad.items()
        ]
        first = None
        if report is not None:
            for task in report:
                causes = report[task].failure_causes
                if causes.messages:
                    first = f"{task}: {causes.messages[0][0]}"
                    break
        message = "the run did not complete: " + "; ".join(parts)
        if first is not None:
            message += f" (first failure: {first})"
        abandoned = [
            f"task {tid!r} was abandoned: {s.abandon_reason}"
            for tid, s in states.items()
            if s.abandoned
        ]
        changes = [
            f"Next for task {tid!r}: {s.abandon_next}, then rerun."
            for tid, s in states.items()
            if s.abandoned and s.abandoned_by is None and s.abandon_next
        ]
        if abandoned:
            message = "\n".join(
                [
                    message,
                    *abandoned,
                    *changes,
                    "Task(max_worker_restarts=...) caps a task's worker restarts; "
                    "daisy.Server().run_blockwise(...) returns the task states instead of "
                    "raising.",
                ]
            )
        super().__init__(message)


@contextlib.contextmanager
def _says_where_an_interrupted_run_stands(
    runner: Server | SerialServer, tasks: Any, block_tracking: bool, summary: bool
) -> Iterator[None]:
    """On Ctrl-C or SIGTERM, print the counts at shutdown and what a rerun
    resumes from (the summary's place), then let the exception go on
    (`KeyboardInterrupt`, or `Terminated`: exit status 143)."""
    try:
        yield
    except (KeyboardInterrupt, Terminated) as e:
        states = runner.stopped_states
        if summary and states is not None:
            how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
            text = format_interrupted(states, Pipeline.of(tasks).tasks, block_tracking, how)
            print(text, flush=True)
        raise


def run_blockwise(
    tasks: Any = None,
    multiprocessing: bool = True,
    resources: dict[str, int] | None = None,
    progress: Any = True,
    block_tracking: bool = True,
    return_states: bool = False,
    host: str | None = None,
    summary: bool = True,
    *,
    port: int | None = None,
    metrics_port: int | None = None,
    dashboard_port: int | None = None,
    report_html: str | os.PathLike[str] | None = None,
    pipeline: Any = None,
    raise_on_failure: bool = False,
    progress_interval: float | None = None,
    liveness_timeout: float | None = None,
    idle_timeout: float | None = None,
    strict: bool = False,
    memory_budget: int | None = None,
    memory_guard: bool = True,
) -> Any:
    """Run every block of ``tasks`` (a Task, a list of tasks or a
    Pipeline; upstream tasks are included) in dependency order.

    The positional order is daisy 2.0.0's (``tasks``, ``multiprocessing``,
    ``resources``, ``progress``, ``block_tracking``, ``return_states``,
    ``host``, ``summary``), and its first parameter's 2.0.0 name,
    ``pipeline=``, works as a keyword too.

    Args:
        tasks: what to run (``pipeline=`` in daisy 2.0.0).
        multiprocessing: True (the default) runs blocks on worker
            processes, up to ``max_workers`` per task; an exception fails
            its block, which is retried. False runs every block in this
            process, one at a time, and lets the first exception propagate
            (for debugging).
        host: address the server listens on (loopback by default; use a
            routable one for workers on other machines).
        port: port the server listens on (a free one by default).
        liveness_timeout: seconds a worker on another machine that stopped
            answering (a dead node, a cut network) is waited for before its
            block is retried elsewhere; its workers give up on a server
            that stopped answering after as long. Default 60; at least 2.
        idle_timeout: seconds a worker may wait for a block before it is
            handed back (it leaves, and workers start again, up to
            ``max_workers``, when blocks are ready), for the tasks that set
            no ``Task(idle_timeout=...)``. None: each task's spawner's
            (off for local workers; 300 s for `SlurmSpawner` and
            `DaskSpawner`, whose idle workers hold a node).
        memory_budget: bytes the local workers may use together (None:
            the memory cgroup's limit, a SLURM job's allocation, or the
            machine's available memory; the report says which).
        memory_guard: let blocks of local tasks in by their measured
            memory, and stop a worker before the kernel's OOM killer would,
            holding its block back to run again when it fits (no failed
            attempt, no worker restart). On by default; see "Memory and
            workers" in the docs.
        resources: caps on what all workers hold at once, e.g.
            ``{"gpu": 2}`` with ``Task(requires={"gpu": 1})``.
        progress: True (a bar per task in a Jupyter notebook or on a
            terminal; elsewhere, as in a batch job's log, a line per task on
            stderr at its start, every 30 s and at its end), False (no
            progress at all), or progress observers such as
            ``daisy.JsonProgressObserver(path)``.
        progress_interval: seconds between those lines (default: the
            ``DAISY_PROGRESS_INTERVAL`` environment variable, else 30).
        summary: print the Execution Summary and the Resource Utilization
            panel to stdout when the run ends.
        metrics_port: serve live Prometheus metrics on this port while the
            run goes, at ``http://127.0.0.1:port/metrics`` with the run's
            token (worker processes only; see `daisy.metrics`).
        dashboard_port: serve a live page of the run at
            ``http://127.0.0.1:port/?token=SECRET``, printed at the start
            (its data at ``/status.json``), while it goes, and stop with it
            (worker processes only; see `daisy.dashboard`). Equal to
            ``metrics_port``, one server serves both. Both listen on
            loopback whatever ``host`` is (``DAISY_DASHBOARD_HOST`` names
            another address) and answer only with the run's token.
        report_html: write the run's self-contained HTML performance
            report to this file (see `daisy.report.html`; tasks with a
            tracking store or file logging).
        block_tracking: False runs without the tasks' tracking stores:
            no block is skipped for a done marker and none is marked
            (daisy 2.0.0's option).
        return_states: return the ``task_id -> TaskState`` dict instead
            of the bool (daisy 2.0.0's option): per-task counts with
            ``abandoned``, ``abandon_reason`` and the worker errors.
        raise_on_failure: raise `RunFailed` (carrying the states, the run
            report and the failed attempts) instead of returning False
            when a block failed, was orphaned or was left unprocessed.
        strict: raise ``ValueError`` before any block runs when a
            downstream task's blocks read part of an upstream task's
            output that no upstream block writes (an upstream ``fit=
            "valid"`` that drops its last partial blocks, under a
            downstream task that reads the whole volume). By default the
            run warns of it before it starts and says it again in its
            summary and report. Context that reaches past the upstream's
            total write ROI is never counted.

    Returns:
        True if every block of every task completed; False if any block
        failed, was orphaned or was left unprocessed. With
        ``return_states=True``, the task states by task id.

    Raises:
        RunFailed: a task was abandoned (its workers kept dying, past its
            ``max_worker_restarts``), with or without ``return_states``, as
            daisy 2.0.0 raises a RuntimeError there; and with
            ``raise_on_failure=True``, when any block did not complete.
            ``daisy.Server().run_blockwise`` returns the states instead.
    """
    tasks = _what_to_run(tasks, pipeline)
    _check_options(raise_on_failure, return_states, strict, multiprocessing, progress_interval)
    _check_report_html(report_html)
    if isinstance(tasks, list | tuple | Pipeline) and len(tasks) == 0:
        # daisy 1.x ran an empty list as an empty success
        logger.warning("daisy: run_blockwise was given no tasks; nothing to run")
        return {} if return_states else True
    runner: Server | SerialServer
    if multiprocessing:
        runner = Server(
            host=host,
            port=port,
            liveness_timeout=liveness_timeout,
            idle_timeout=idle_timeout,
            memory_budget=memory_budget,
            memory_guard=memory_guard,
        )
        runner._summary_follows = summary
        with _says_where_an_interrupted_run_stands(runner, tasks, block_tracking, summary):
            states = runner.run_blockwise(
                tasks,
                progress=progress,
                resources=resources,
                metrics_port=metrics_port,
                dashboard_port=dashboard_port,
                block_tracking=block_tracking,
                progress_interval=progress_interval,
                strict=strict,
            )
        notes, failures = runner.failure_notes(), list(runner.failures)
    else:
        _check_serial(metrics_port, dashboard_port)
        runner = SerialServer()
        with _says_where_an_interrupted_run_stands(runner, tasks, block_tracking, summary):
            scheduler = Scheduler(tasks, block_tracking=block_tracking, strict=strict)
            states = runner.run_blockwise(tasks, scheduler=scheduler)
        notes, failures = {}, []
    report = runner.last_report
    if summary:
        _print_summary(tasks, states, notes, report)
    if report_html is not None:
        _write_html_report(tasks, report_html)
    ok = all(s.all_completed for s in states.values())
    abandoned = any(s.abandoned for s in states.values())
    if (raise_on_failure and not ok) or abandoned:
        raise RunFailed(dict(states), report, failures)
    return states if return_states else ok


def _what_to_run(tasks: Any, pipeline: Any) -> Any:
    """``tasks``, or daisy 2.0.0's name of it, ``pipeline=``: one of them."""
    if pipeline is not None:
        if tasks is not None:
            raise TypeError("run_blockwise: tasks and pipeline name the same thing; pass one")
        return pipeline
    if tasks is None:
        raise TypeError("run_blockwise: missing what to run: a Task, a list of tasks or a Pipeline")
    return tasks


def _check_options(
    raise_on_failure: Any,
    return_states: Any,
    strict: Any,
    multiprocessing: Any,
    progress_interval: Any,
) -> None:
    """A TypeError naming the first option that is not what it must be."""
    for name, value in (
        ("raise_on_failure", raise_on_failure),
        ("return_states", return_states),
        ("strict", strict),
        ("multiprocessing", multiprocessing),
    ):
        parse_flag(value, name)
    if progress_interval is not None:
        check_interval(progress_interval, "progress_interval")


def _check_report_html(report_html: Any) -> None:
    """That the HTML report can be written where asked: found out now,
    not after the work is done."""
    if report_html is None:
        return
    folder = Path(report_html).absolute().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(
            f"report_html: cannot write {report_html} (its folder {folder} does not exist "
            "or is not writable); give a path in a writable folder"
        )


def _check_serial(metrics_port: Any, dashboard_port: Any) -> None:
    """What a run in this process cannot serve: both read the server of a
    distributed run."""
    if metrics_port is not None:
        raise ValueError(
            "metrics_port: live metrics come from the server of a distributed run; use "
            "multiprocessing=True"
        )
    if dashboard_port is not None:
        raise ValueError(
            "dashboard_port: the live dashboard reads the server of a distributed run; use "
            "multiprocessing=True"
        )


def _print_summary(
    tasks: Any, states: dict[str, Any], notes: dict[str, list[str]], report: RunReport | None
) -> None:
    """The Execution Summary and the Resource Utilization panel. A fit
    that left part of the volume out, and a downstream task that reads
    what no upstream block writes, are said again where the run says it
    processed everything."""
    planned = Pipeline.of(tasks)
    said = [(t.task_id, t.coverage_note) for t in planned.tasks]
    said += uncovered_reads(planned.specs())
    for task_id, text in said:
        if text is not None and task_id in states:
            lines = textwrap.wrap(text, 88, subsequent_indent="  ")
            notes = {**notes, task_id: [*notes.get(task_id, []), *lines]}
    print_execution_summary(states, notes)
    if report is not None:
        panel = report.render(task_order=list(states))
        if panel:
            print(panel)


def _write_html_report(tasks: Any, report_html: str | os.PathLike[str]) -> None:
    """The run's HTML report, from the run histories of its tasks."""
    from daisy.report.history import runs_file_for
    from daisy.report.html import write_html_report

    files = [f for f in (runs_file_for(t) for t in Pipeline.of(tasks).tasks) if f is not None]
    written = write_html_report(files, Path(report_html))
    print(f"daisy: the HTML report is at {written.absolute()}", flush=True)


__getattr__ = _v1_names.lazy_names(__name__)
