"""`Server`: runs a pipeline with worker processes (``daisy.server`` in
daisy 1.x).

The server itself is Rust (``daisy._daisy.run_distributed``): it listens
on TCP in this process with the GIL released, starts up to ``max_workers``
worker processes per task (``python -m daisy._worker``, the task's
function sent over by cloudpickle), retries failed blocks, replaces dead
workers and reclaims blocks past their ``timeout``. This module only
gathers the settings, shows progress and keeps what the run reported.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import logging
import os
import pickle
import secrets
import signal
import sys
import tempfile
import types
from collections import ChainMap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cloudpickle

from daisy import _v1_names
from daisy import logging as daisy_logging
from daisy._daisy import (
    LiveDetail,
    RunConfig,
    TaskConfig,
    TaskState,
    check_run,
    pipeline_order,
    run_distributed,
    validated_liveness_timeout,
    write_payload,
)
from daisy.context import Context
from daisy.pipeline import Pipeline
from daisy.progress import ProgressObserver, default_observers
from daisy.run_report import RunReport
from daisy.scheduler import Scheduler
from daisy.server_observer import ServerObservee, StateEvents
from daisy.spawners import advertised_host, warm_starts_enabled
from daisy.task_outputs import describe_outputs
from daisy.tracking_store import check_block_tracking, log_skips

logger = logging.getLogger(__name__)

#: the most failed attempts listed per task in the Execution Summary
MAX_LISTED_FAILURES = 10


#: payloads above this many bytes are logged: the data a function captures
#: travels to every worker (and a cluster job's payload file)
LARGE_PAYLOAD_BYTES = 10 * 2**20


class _SourcePathPickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle, but functions pickled by value (those of a script's
    ``__main__``, of a notebook cell) keep their file name: cloudpickle
    names their code ``<dynamic-code>``, so a worker's traceback could not
    say where the failing line is. The file name is not part of what the
    code does; only the payload's bytes differ per place of definition.
    ``filenames`` collects those names."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        self.filenames: set[str] = set()
        # before the pickler's own __init__, which reads its dispatch table
        self.dispatch_table = ChainMap(
            {types.CodeType: self._code_keeping_path}, cloudpickle.Pickler.dispatch_table
        )
        super().__init__(file, protocol=protocol)

    def _code_keeping_path(self, code: types.CodeType) -> Any:
        self.filenames.add(code.co_filename)
        rebuild, args = cloudpickle.Pickler.dispatch_table[types.CodeType](code)
        return rebuild, tuple(
            code.co_filename if isinstance(a, str) and a == "<dynamic-code>" else a for a in args
        )


def _dumps_keeping_source_paths(obj: object) -> tuple[bytes, dict[str, list[str]]]:
    """``obj`` cloudpickled, and the source lines of its by-value code whose
    file a worker cannot read: a notebook cell's code names a file that
    exists only in the kernel's ``linecache`` (IPython keeps cells there),
    so without the lines a worker's traceback would show no source."""
    buffer = io.BytesIO()
    pickler = _SourcePathPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL)
    pickler.dump(obj)
    sources = {
        name: lines
        for name in pickler.filenames
        if not os.path.exists(name) and (lines := linecache.getlines(name))
    }
    return buffer.getvalue(), sources


class UnpicklableFunction(TypeError, RuntimeError):
    """A task's function cannot be sent to worker processes (it captured a
    lock, an open file, a connection). A ``TypeError`` and a
    ``RuntimeError`` both: daisy 2.0.0 raised the latter, and code written
    for either keeps catching it."""


def worker_payload(function: object, post_check: object = None, task_id: str = "?") -> bytes:
    """What a worker process reads from stdin (see `daisy._worker`): this
    process's ``sys.path`` with the source lines the worker cannot read
    (see `_dumps_keeping_source_paths`), then the cloudpickled
    ``(function, post_check)``.
    A function that cannot be pickled is an `UnpicklableFunction` naming
    the task."""
    try:
        pickled, sources = _dumps_keeping_source_paths((function, post_check))
    except Exception as e:
        raise UnpicklableFunction(
            f"process_function: the function of task {task_id!r} cannot be sent to worker "
            "processes: "
            f"{type(e).__name__}: {e}. Something it uses (a lock, an open file, a connection) "
            "cannot be pickled: create it inside the function instead, or run with "
            "multiprocessing=False"
        ) from e
    if len(pickled) > LARGE_PAYLOAD_BYTES:
        logger.warning(
            "daisy: the function of task %r carries %.0f MB of captured data to every worker "
            "(with warm starts, to the task's launcher, once); load large data inside the "
            "function instead",
            task_id,
            len(pickled) / 2**20,
        )
    return pickle.dumps((list(sys.path), sources)) + pickled


class Terminated(SystemExit):
    """SIGTERM stopped a run: a `SystemExit` with status 143 (128 + 15),
    what a batch system expects of a job it terminated (SLURM's time
    limit, ``scancel``), raised once the run has stopped its workers and
    kept its stores. ``daisy.run_blockwise`` prints, before it goes on, the
    same account as for Ctrl-C: the counts at shutdown and what a rerun
    resumes from. Catch it (or `SystemExit`) to do something else."""


@contextlib.contextmanager
def _sigterm_stops_the_run() -> Iterator[None]:
    """While a run goes, SIGTERM (``kill``, a batch system's time limit)
    stops it like Ctrl-C: the server kills every worker and `Terminated`
    (exit status 143) is raised. A handler the program installed itself
    is left alone."""

    def stop(signum: int, frame: object) -> None:
        raise Terminated(128 + signum)

    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_DFL:
            yield
            return
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def check_port(port: Any, name: str) -> int | None:
    """``port`` if it is None or a port number (0: any free port); else
    a ValueError naming the parameter."""
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535
    ):
        raise ValueError(
            f"{name}: expected a port number from 0 (any free port) to 65535, got {port!r}"
        )
    return port


class _StopRequested(Exception):
    """Raised from a tick to end a run whose ``stop_event`` was set."""


class Server(ServerObservee):
    """Runs the blocks of a pipeline on worker processes.

    Args:
        stop_event: a ``threading.Event`` (or anything with ``is_set()``);
            once it is set, the run stops within a tick, its workers are
            stopped, and ``run_blockwise`` returns the task states so far
            (daisy 1.x's first argument; the blocks not done count as
            unfinished).
        host: address to listen on; loopback by default. Use ``"0.0.0.0"``
            (or this machine's address) for workers on other machines.
        port: port to listen on; 0 picks a free one.
        liveness_timeout: seconds a worker on another machine that stopped
            answering (its node died, the network is cut) is waited for
            before its connection is given up and its block retried; its
            workers give up on this server after as long (default 60).
        idle_timeout: seconds a worker may wait for a block before it is
            handed back, for tasks that set no ``Task(idle_timeout=...)``
            of their own (None: each task's spawner's; see `Task`).
    """

    def __init__(
        self,
        stop_event: Any = None,
        host: str | None = None,
        port: int | None = None,
        *,
        liveness_timeout: float | None = None,
        idle_timeout: float | None = None,
    ) -> None:
        super().__init__()
        if stop_event is not None and not callable(getattr(stop_event, "is_set", None)):
            raise TypeError(
                f"stop_event: expected a threading.Event (something with is_set()), got "
                f"{type(stop_event).__name__}"
            )
        self.stop_event = stop_event
        self._host_given = host is not None
        self.host = host or "127.0.0.1"
        self.port = int(check_port(port, "port") or 0)
        self.liveness_timeout = (
            None if liveness_timeout is None else validated_liveness_timeout(liveness_timeout)
        )
        if idle_timeout is not None and (
            isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float)
        ):
            raise TypeError(
                f"idle_timeout: expected seconds as a number, or None, got {idle_timeout!r}"
            )
        #: the run's idle timeout (its value's rule is the core's)
        self.idle_timeout = None if idle_timeout is None else float(idle_timeout)
        #: the last run's failed attempts, ``(task_id, spatial_id, worker_id,
        #: reason)``: the first 10,000 (the core's ``MAX_FAILURE_NOTES``)
        self.failures: list[tuple[str, int, int | None, str]] = []
        #: failed attempts of the last run past those: counted, not listed
        self.failures_unnoted = 0
        #: the `daisy.RunReport` of this server's last run
        self.last_report: RunReport | None = None
        #: the task states when the last run stopped before its end (Ctrl-C,
        #: an exception), by task id; None after a run that went to its end
        self.stopped_states: dict[str, TaskState] | None = None
        self.abandoned: list[tuple[str, str]] = []
        self.unmanaged_clients = 0
        # what failure_notes() explains, from the last run
        self._failed_blocks: list[tuple[str, int, str, int, bool, str]] = []
        self._states: dict[str, TaskState] = {}
        self._task_map: dict[str, Any] = {}
        self._block_tracking = True

    def run_blockwise(
        self,
        tasks: Any,
        scheduler: Scheduler | None = None,
        *,
        progress: Any = True,
        resources: dict[str, int] | None = None,
        metrics_port: int | None = None,
        block_tracking: bool = True,
        progress_interval: float | None = None,
        dashboard_port: int | None = None,
        strict: bool = False,
    ) -> dict[str, TaskState]:
        """Run every block of ``tasks`` and return the task states by id,
        in pipeline order. ``progress`` is True (bars, or lines on stderr
        every ``progress_interval`` seconds), False, or observers (see
        `daisy.progress`); ``resources`` caps what the
        workers of all tasks hold at once (see ``Task(requires=...)``);
        ``metrics_port`` serves live Prometheus metrics while the run goes
        (see `daisy.metrics`); ``dashboard_port`` serves a live page of
        the run at ``http://127.0.0.1:port/?token=...`` (the URL printed
        when the run starts: loopback and the run's secret token, for its
        owner only) and its data at ``/status.json`` (see
        `daisy.dashboard`; the same server as ``metrics_port`` where both
        are equal); ``block_tracking=False``
        runs without the tasks' tracking stores (nothing skipped, nothing
        marked); ``strict=True`` refuses, before any block runs, a pipeline
        whose downstream blocks read where no upstream block writes (a
        warning otherwise: see ``daisy.run_blockwise``)."""
        check_port(dashboard_port, "dashboard_port")
        pipeline = scheduler._pipeline if scheduler is not None else Pipeline.of(tasks)
        task_map = {t.task_id: t for t in pipeline.tasks}
        check_block_tracking(block_tracking)
        configs: list[TaskConfig] = []
        run_tag = secrets.token_hex(4)
        log_dir = daisy_logging.get_log_basedir()
        payload_base = (
            Path(log_dir).absolute()
            if log_dir is not None
            else Path(tempfile.mkdtemp(prefix="daisy-payloads-"))
        )
        remote = [t.spawner for t in task_map.values() if not t.spawner.is_local]
        warm = warm_starts_enabled()
        for tid, t in task_map.items():
            if t.process_function is None:
                raise ValueError(
                    f"process_function: task {tid!r} has none; give it a function that takes a "
                    "block (or a worker function that takes nothing)"
                )
            payload = worker_payload(t.process_function, t._post_check, tid)
            payload_file = payload_base / tid / "payload.pkl"
            payload_sha256 = None
            if not t.spawner.is_local:
                # private, and checked by the worker against this digest
                payload_sha256 = write_payload(str(payload_file), payload)
            cmds = t.spawner.commands(run_tag, payload, payload_file)
            job = t.spawner.job_commands(run_tag, payload_file) if payload_sha256 else None
            configs.append(
                TaskConfig(
                    tid,
                    t._options(),
                    program=cmds.program,
                    args=cmds.args,
                    stdin=cmds.stdin,
                    stop=cmds.stop,
                    spawner=t.spawner.name,
                    check_function=t._pre_check,
                    tracking_path=None if t.tracking_path is None else str(t.tracking_path),
                    skip_mask=t._skip_mask,
                    launcher_args=(t.spawner.launcher_args() if warm and t.warm_start else None),
                    payload_sha256=payload_sha256,
                    spawner_idle_timeout=t.spawner.idle_timeout,
                    job_program=None if job is None else job.program,
                    job_args=[] if job is None else job.args,
                    job_stop=[] if job is None else job.stop,
                    workers_per_job=t.spawner.workers_per_job if job is not None else 1,
                    polls=cmds.polls,
                    outputs=describe_outputs(t.outputs, len(t.total_roi.shape)),
                )
            )
        resources = dict(resources or {})
        for k, v in resources.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(
                    f"resources: expected resource names mapped to non-negative integers, "
                    f"got {k!r}: {v!r}"
                )  # (the amounts' range is the core's to check)
        # remote workers need an address they can reach
        listen_host, advertise = self.host, None
        if remote and not self._host_given:
            listen_host, advertise = "0.0.0.0", advertised_host()
        elif listen_host in ("0.0.0.0", "::", ""):
            # every interface: workers get an address of this host they
            # can reach, not the wildcard
            advertise = advertised_host()
        stop_all: list[str] = next((c for c in (s.stop_all(run_tag) for s in remote) if c), [])
        wait_all: list[str] = next((c for c in (s.wait_all(run_tag) for s in remote) if c), [])
        run = RunConfig(
            host=listen_host,
            port=self.port,
            resources=resources,
            log_dir=None if log_dir is None else str(Path(log_dir).absolute()),
            log_mode=daisy_logging.get_log_mode(),
            advertise_host=advertise,
            stop_all=stop_all,
            wait_all=wait_all,
            liveness_timeout=self.liveness_timeout,
            block_tracking=block_tracking,
            idle_timeout=self.idle_timeout,
            strict=strict,
        )
        # the core's order (upstream first), which every view lists
        given = pipeline.specs()
        order = pipeline_order(given)
        by_id = {s.task_id: s for s in given}
        specs = [by_id[tid] for tid in order]
        check_run(specs, configs, run)  # the run plan's rules, before anything starts
        observers: list[ProgressObserver] = default_observers(order, progress, progress_interval)

        def on_listening(host: str, port: int, token: str) -> None:
            for tid, t in task_map.items():
                if t.init_callback_fn is not None:
                    where = {"hostname": host, "port": port, "task_id": tid, "token": token}
                    if self.liveness_timeout is not None:
                        where["liveness_timeout"] = self.liveness_timeout
                    t.init_callback_fn(Context(**where))

        events = StateEvents(self)
        metrics = None
        shared_port = metrics_port is not None and metrics_port == dashboard_port
        view_addr = view_secret = ""
        if metrics_port is not None or dashboard_port is not None:
            from daisy.dashboard import view_host, view_token

            # for the run's owner only: on loopback whatever the run's own
            # host (DAISY_DASHBOARD_HOST names another), behind one secret
            # token of this run (see daisy.dashboard)
            view_addr, view_secret = view_host(), view_token()
        if metrics_port is not None:
            from daisy.metrics import PrometheusMetrics

            metrics = PrometheusMetrics(
                metrics_port, order, addr=view_addr, serve=not shared_port, token=view_secret
            )
        dashboard = None
        if dashboard_port is not None:
            from daisy.dashboard import Dashboard

            try:
                dashboard = Dashboard(
                    dashboard_port,
                    order,
                    addr=view_addr,
                    registry=metrics.registry if shared_port and metrics is not None else None,
                    token=view_secret,
                )
            except BaseException:
                if metrics is not None:
                    metrics.close()
                raise
        # the only lines that show the token: on the owner's own stderr
        if metrics is not None and not shared_port:
            print(f"daisy: metrics at {metrics.url}", file=sys.stderr, flush=True)
        if dashboard is not None:
            print(f"daisy: dashboard at {dashboard.url}", file=sys.stderr, flush=True)
        try:
            return self._run(
                task_map,
                specs,
                order,
                configs,
                observers,
                events,
                metrics,
                dashboard,
                on_listening,
                run,
                block_tracking,
            )
        finally:
            if dashboard is not None:
                dashboard.close()

    def _run(
        self,
        task_map: dict[str, Any],
        specs: Any,
        order: list[str],
        configs: list[TaskConfig],
        observers: list[ProgressObserver],
        events: StateEvents,
        metrics: Any,
        dashboard: Any,
        on_listening: Any,
        run: RunConfig,
        block_tracking: bool,
    ) -> dict[str, TaskState]:

        def on_tick(
            states: list[TaskState],
            workers: list[int],
            restarts: list[int],
            round_trips: list[tuple[str, float]],
            live: LiveDetail,
        ) -> None:
            pace = live.pace()
            for obs in observers:
                paced = getattr(obs, "pace", None)
                for i, (tid, state, n) in enumerate(zip(order, states, workers, strict=True)):
                    obs.update(tid, state, n)
                    if paced is not None and i < len(pace):
                        paced(tid, pace[i][0], pace[i][1])
            for tid, state in zip(order, states, strict=True):
                events.update(tid, state)
            if metrics is not None:
                metrics.update(states, workers, restarts, round_trips)
            if dashboard is not None:
                dashboard.update(states, workers, restarts, live)
            if self.stop_event is not None and self.stop_event.is_set():
                raise _StopRequested()

        try:
            with _sigterm_stops_the_run():
                result = run_distributed(specs, configs, run, on_tick, on_listening)
        except BaseException:
            # the run could not start
            if dashboard is not None:
                dashboard.finish(None, None, "interrupted")
            for obs in observers:
                obs.close()
            raise
        finally:
            if metrics is not None:
                metrics.close()
        # the last lines and bars show the core's final counts (a stopped
        # run's "done" is what its store records, not the last tick's)
        late: BaseException | None = None  # a Ctrl-C as the run ends
        for obs in observers:
            for tid in order:
                state = result.states.get(tid)
                if state is None or late is not None:
                    continue
                try:
                    obs.update(tid, state, 0)
                except Exception:
                    logger.exception("daisy: a progress observer failed on the final counts")
                except BaseException as e:
                    late = e  # raised once the run's results are kept
            obs.close()
        self.last_report = RunReport.from_json(result.report_json)
        self.last_report.attach(list(task_map.values()))
        stopped = result.stopped
        if stopped is not None:
            # the run stopped on this exception (Ctrl-C, SIGTERM, a hook's
            # error, a broken rule): its partial report rides on it
            stopped.daisy_run_report = self.last_report  # type: ignore[attr-defined]
            self.stopped_states = dict(result.states)
            if dashboard is not None:
                dashboard.finish(result.states, self.last_report, "interrupted")
            if isinstance(stopped, _StopRequested):
                # asked for: the states so far are the result, as in 1.x
                logger.info("daisy: the run stopped: its stop_event was set")
                return dict(result.states)
            raise stopped
        if late is not None:
            late.daisy_run_report = self.last_report  # type: ignore[attr-defined]
            self.stopped_states = dict(result.states)
            raise late
        self.failures = list(result.failures)
        self.failures_unnoted = result.failures_unnoted
        self._failed_blocks = list(result.failed_blocks)
        self._task_map = task_map
        self._block_tracking = block_tracking
        self.abandoned = list(result.abandoned)
        self.unmanaged_clients = result.unmanaged_clients
        for tid, reason in self.abandoned:
            logger.error("daisy: task %r was abandoned: %s", tid, reason)
        states = dict(result.states)
        self._states = states
        for tid, state in states.items():
            events.update(tid, state)
        for tid, spatial_id, worker_id, reason in self.failures:
            block = SimpleNamespace(task_id=tid, block_id=(tid, spatial_id))
            self.notify_block_failure(block, RuntimeError(reason), {"worker_id": worker_id})
        self.notify_server_exit()
        log_skips(task_map.values(), states)
        if dashboard is not None:
            ok = all(st.all_completed for st in states.values())
            dashboard.finish(states, self.last_report, "completed" if ok else "failed")
        return states

    def _rerun_note(self, task: Any) -> str:
        """What a rerun of ``task`` skips: how its done blocks are known."""
        if task is not None and task.tracking_path is not None and self._block_tracking:
            return f"done blocks are skipped: tracking store at {task.tracking_path}"
        if task is not None and task._pre_check is not None:
            return "done blocks are skipped: the task's check_function finds them"
        return (
            "without a tracking store every block runs again; give the task a tracking_path "
            "to skip the done ones"
        )

    def failure_notes(self) -> dict[str, list[str]]:
        """Per task, the lines the Execution Summary shows under it: each
        failed block once with its write ROI and attempts (at most
        `MAX_LISTED_FAILURES`), why blocks were orphaned, why a task was
        abandoned, the run's first traceback (once, under its task), and
        what to do next: rerun, and which worker logs to read."""
        notes: dict[str, list[str]] = {}
        log_dir = daisy_logging.get_log_basedir()
        for tid, reason in self.abandoned:
            notes.setdefault(tid, []).append(f"abandoned: {reason}")
        blocks: dict[str, list[tuple[int, str, int, bool, str]]] = {}
        for tid, spatial_id, roi, attempts, failed, message in self._failed_blocks:
            blocks.setdefault(tid, []).append((spatial_id, roi, attempts, failed, message))
        first = self.failures[0] if self.failures else None
        for tid, state in self._states.items():
            lines: list[str] = []
            rows = sorted(blocks.get(tid, []), key=lambda r: not r[3])  # failed ones first
            task = self._task_map.get(tid)
            allowed = None if task is None else int(task.max_retries) + 1
            if rows:
                lines.append("Failed Blocks:")
            for spatial_id, roi, attempts, failed, message in rows[:MAX_LISTED_FAILURES]:
                if failed and allowed is not None and attempts <= allowed:
                    what = f"failed {attempts} of {allowed} attempts"
                else:
                    plural = "s" if attempts != 1 else ""
                    what = f"failed {attempts} attempt{plural}" + ("" if failed else ", retried")
                lines.append(f"  block {spatial_id} {roi}: {what}: {message}")
            if len(rows) > MAX_LISTED_FAILURES:
                lines.append(f"  ... and {len(rows) - MAX_LISTED_FAILURES} more blocks")
            if (rows or state.failed_count) and self.failures_unnoted:
                lines.append(
                    f"  (the run noted its first {len(self.failures)} failed attempts one by one; "
                    f"{self.failures_unnoted} more, in all tasks, were counted in the figures "
                    "above but not listed)"
                )
            if state.orphaned_by_neighbour_count:
                lines.append(
                    f"{state.orphaned_by_neighbour_count} orphaned: a conflicting block of this "
                    "task failed, and they may not run before it"
                )
            if state.orphaned_by_upstream_count:
                lines.append(
                    f"{state.orphaned_by_upstream_count} orphaned: a block of an upstream task "
                    "failed, and they read its output"
                )
            if first is not None and first[0] == tid:
                _, spatial_id, worker_id, reason = first
                where = "" if worker_id is None else f", worker {worker_id}"
                lines.append(f"First failure (block {spatial_id}{where}):")
                lines += [f"  {line}" for line in reason.rstrip().splitlines()]
            unfinished = (
                any(failed for *_, failed, _ in rows) or state.failed_count or state.orphaned_count
            )
            if unfinished:
                # (every attempt that failed and was retried succeeded: nothing to rerun)
                lines.append(
                    "Next: rerun to retry the failed blocks (" + self._rerun_note(task) + ")"
                )
            workers = sorted({w for t, _, w, _ in self.failures if t == tid and w is not None})
            if log_dir is not None and workers:
                logs = [str(Path(log_dir) / tid / f"worker_{w}.err") for w in workers]
                shown = ", ".join(logs[:MAX_LISTED_FAILURES])
                more = len(logs) - MAX_LISTED_FAILURES
                lines.append(f"worker logs: {shown}" + (f" and {more} more" if more > 0 else ""))
            if lines:
                notes.setdefault(tid, []).extend(lines)
        return notes


# names daisy 1.x exported from this module, imported on first use
__getattr__ = _v1_names.lazy_names(
    __name__,
    {
        "AcquireBlock": "daisy.messages:AcquireBlock",
        "BlockFailed": "daisy.messages:BlockFailed",
        "ClientException": "daisy.messages:ClientException",
        "ReleaseBlock": "daisy.messages:ReleaseBlock",
        "RequestShutdown": "daisy.messages:RequestShutdown",
        "SendBlock": "daisy.messages:SendBlock",
        "UnexpectedMessage": "daisy.messages:UnexpectedMessage",
        "BlockStatus": "daisy.block:BlockStatus",
        "StreamClosedError": "daisy.tcp:StreamClosedError",
        "TCPServer": "daisy.tcp:TCPServer",
    },
)
