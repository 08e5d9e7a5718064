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
import dataclasses
import logging
import secrets
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from daisy import _v1_names
from daisy import logging as daisy_logging
from daisy._daisy import (
    Failure,
    RunConfig,
    RunResult,
    TaskConfig,
    TaskState,
    Tick,
    check_run,
    pipeline_order,
    run_distributed,
    validated_liveness_timeout,
    write_payload,
)
from daisy.block_function import code_sha256
from daisy.context import Context
from daisy.function_payload import UnpicklableFunction as UnpicklableFunction
from daisy.function_payload import worker_payload
from daisy.pipeline import Pipeline
from daisy.progress import ProgressObserver, default_observers
from daisy.report.failure_notes import RunFailures
from daisy.report.task_report import RunReport
from daisy.scheduler import Scheduler
from daisy.server_observer import ServerObservee, StateEvents
from daisy.spawners import advertised_host, warm_starts_enabled
from daisy.task_arguments import (
    check_runnable,
    parse_flag,
    parse_memory_budget,
    parse_seconds,
)
from daisy.task_outputs import describe_outputs
from daisy.tracking_store import check_block_tracking, log_skips, tracking_paths

logger = logging.getLogger(__name__)


def _payload_base(log_dir: Any) -> Path:
    """Where the tasks' payload files go: beside the worker logs, or a
    fresh private temporary directory."""
    if log_dir is not None:
        return Path(log_dir).absolute()
    return Path(tempfile.mkdtemp(prefix="daisy-payloads-"))


def _task_configs(task_map: dict[str, Any], run_tag: str, payload_base: Path) -> list[TaskConfig]:
    """Each task's settings for the core: its options, its worker and
    launcher commands (from its spawner), its check, tracking store, skip
    mask and declared outputs."""
    warm = warm_starts_enabled()
    configs: list[TaskConfig] = []
    for tid, t in task_map.items():
        check_runnable(t, in_process=False)
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
                function_sha256=code_sha256(t.process_function),
                spawner_idle_timeout=t.spawner.idle_timeout,
                job_program=None if job is None else job.program,
                job_args=[] if job is None else job.args,
                job_stop=[] if job is None else job.stop,
                workers_per_job=t.spawner.workers_per_job if job is not None else 1,
                polls=cmds.polls,
                outputs=describe_outputs(t.outputs, len(t.total_roi.shape)),
            )
        )
    return configs


@dataclasses.dataclass
class _RunViews:
    """The live views of one run, for its owner only: Prometheus metrics
    and the dashboard (one server where their ports are equal), both on
    loopback (``DAISY_DASHBOARD_HOST`` names another address) behind one
    secret token of the run (see `daisy.dashboard`)."""

    metrics: Any = None
    dashboard: Any = None

    @classmethod
    def start(
        cls, metrics_port: int | None, dashboard_port: int | None, order: list[str]
    ) -> _RunViews:
        """Serve what was asked, and print where (the only lines that show
        the token: on the owner's own stderr)."""
        views = cls()
        if metrics_port is None and dashboard_port is None:
            return views
        from daisy.dashboard.guarded_server import view_host, view_token

        addr, secret = view_host(), view_token()
        shared = metrics_port is not None and metrics_port == dashboard_port
        if metrics_port is not None:
            from daisy.metrics import PrometheusMetrics

            views.metrics = PrometheusMetrics(
                metrics_port, order, addr=addr, serve=not shared, token=secret
            )
        if dashboard_port is not None:
            from daisy.dashboard.status import Dashboard

            try:
                views.dashboard = Dashboard(
                    dashboard_port,
                    order,
                    addr=addr,
                    registry=views.metrics.registry if shared and views.metrics else None,
                    token=secret,
                )
            except BaseException:
                views.close_metrics()
                raise
        if views.metrics is not None and not shared:
            print(f"daisy: metrics at {views.metrics.url}", file=sys.stderr, flush=True)
        if views.dashboard is not None:
            print(f"daisy: dashboard at {views.dashboard.url}", file=sys.stderr, flush=True)
        return views

    def update(self, tick: Tick) -> None:
        """A tick's figures."""
        if self.metrics is not None:
            self.metrics.update(tick.states, tick.workers, tick.restarts, tick.round_trips)
        if self.dashboard is not None:
            self.dashboard.update(tick.states, tick.workers, tick.restarts, tick.live)

    def finish(self, states: Any, report: Any, outcome: str) -> None:
        """The run's end, as the dashboard shows it until it closes."""
        if self.dashboard is not None:
            self.dashboard.finish(states, report, outcome)

    def close_metrics(self) -> None:
        """Stop serving metrics (once the run's figures are final)."""
        if self.metrics is not None:
            self.metrics.close()

    def close_dashboard(self) -> None:
        """Stop serving the dashboard."""
        if self.dashboard is not None:
            self.dashboard.close()


@dataclasses.dataclass
class _RunPlan:
    """One distributed run, as `Server.run_blockwise` planned it: what the
    core runs and what watches it."""

    task_map: dict[str, Any]
    order: list[str]
    specs: list[Any]
    configs: list[TaskConfig]
    run: RunConfig
    block_tracking: bool
    observers: list[ProgressObserver]
    events: StateEvents
    views: _RunViews
    #: the log base directory when the run began: its workers' logs are there
    log_dir: Path | None
    #: each tracked task's store when the run began: its marks are there
    stores: dict[str, str]


def _final_counts(plan: _RunPlan, result: RunResult) -> BaseException | None:
    """Show the observers the core's final counts (a stopped run's "done"
    is what its store records, not the last tick's) and close them. A
    Ctrl-C as the run ends is returned, to be raised once the run's
    results are kept."""
    late: BaseException | None = None
    for obs in plan.observers:
        for tid in plan.order:
            state = result.states.get(tid)
            if state is None or late is not None:
                continue
            try:
                obs.update(tid, state, 0)
            except Exception:
                logger.exception("daisy: a progress observer failed on the final counts")
            except BaseException as e:
                late = e
        obs.close()
    return late


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
        memory_budget: bytes the local workers of a run may use together;
            None (the default) finds it: the memory cgroup's limit (a SLURM
            job's ``--mem`` where SLURM enforces it, a container's), else a
            SLURM job's ``SLURM_MEM_PER_NODE`` / ``SLURM_MEM_PER_CPU``, else
            the machine's available memory. The report says which.
        memory_guard: let blocks of local tasks in by their measured memory
            and stop a worker before the kernel's OOM killer would, holding
            its block back to run again when it fits (not a failed
            attempt, not a worker restart). On by default; ``False`` turns
            it off. See "Memory and workers" in the docs.
    """

    def __init__(
        self,
        stop_event: Any = None,
        host: str | None = None,
        port: int | None = None,
        *,
        liveness_timeout: float | None = None,
        idle_timeout: float | None = None,
        memory_budget: int | None = None,
        memory_guard: bool = True,
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
        idle_timeout = parse_seconds(idle_timeout, "idle_timeout")
        #: the run's idle timeout (its value's rule is the core's)
        self.idle_timeout = None if idle_timeout is None else float(idle_timeout)
        #: the local workers' memory budget in bytes (None: found), and
        #: whether the memory gate and guard run (their rules are the core's)
        self.memory_budget = parse_memory_budget(memory_budget)
        self.memory_guard = parse_flag(memory_guard, "memory_guard")
        #: the last run's failed attempts, `Failure` records (each unpacks
        #: as ``(task_id, spatial_id, worker_id, reason)``): the first
        #: 10,000 (the core's ``MAX_FAILURE_NOTES``)
        self.failures: list[Failure] = []
        #: failed attempts of the last run past those: counted, not listed
        self.failures_unnoted = 0
        #: the `daisy.RunReport` of this server's last run
        self.last_report: RunReport | None = None
        #: the task states when the last run stopped before its end (Ctrl-C,
        #: an exception), by task id; None after a run that went to its end
        self.stopped_states: dict[str, TaskState] | None = None
        self.abandoned: list[tuple[str, str]] = []
        self.unmanaged_clients = 0
        # whether the caller prints the Execution Summary after the run
        # (`daisy.run_blockwise`); a Server used alone says where to look
        self._summary_follows = False
        # the run is a forecast's sample (`daisy.forecast`): its report
        # lines say so
        self._forecast_sample = False
        # what failure_notes() explains, from the last run
        self._last_failures = RunFailures()

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
        check_block_tracking(block_tracking)
        pipeline = scheduler._pipeline if scheduler is not None else Pipeline.of(tasks)
        task_map = {t.task_id: t for t in pipeline.tasks}
        log_dir = daisy_logging.writable_log_dir(daisy_logging.get_log_basedir())
        run_tag = secrets.token_hex(4)
        configs = _task_configs(task_map, run_tag, _payload_base(log_dir))
        remote = [t.spawner for t in task_map.values() if not t.spawner.is_local]
        run = self._run_config(remote, run_tag, resources, log_dir, block_tracking, strict)
        # the core's order (upstream first), which every view lists
        given = pipeline.specs()
        order = pipeline_order(given)
        by_id = {s.task_id: s for s in given}
        specs = [by_id[tid] for tid in order]
        check_run(specs, configs, run)  # the run plan's rules, before anything starts
        views = _RunViews.start(metrics_port, dashboard_port, order)
        plan = _RunPlan(
            task_map=task_map,
            order=order,
            specs=specs,
            configs=configs,
            run=run,
            block_tracking=block_tracking,
            observers=default_observers(order, progress, progress_interval),
            events=StateEvents(self),
            views=views,
            log_dir=log_dir,
            stores=tracking_paths(task_map.values()),
        )
        try:
            return self._run(plan)
        finally:
            views.close_dashboard()

    def _run_config(
        self,
        remote: list[Any],
        run_tag: str,
        resources: dict[str, int] | None,
        log_dir: Any,
        block_tracking: bool,
        strict: bool,
    ) -> RunConfig:
        """The run's settings for the core. Remote workers need an address
        they can reach: a server for them listens on every interface unless
        told where, and tells its workers an address of this host."""
        resources = dict(resources or {})
        for k, v in resources.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(
                    f"resources: expected resource names mapped to non-negative integers, "
                    f"got {k!r}: {v!r}"
                )  # (the amounts' range is the core's to check)
        listen_host, advertise = self.host, None
        if remote and not self._host_given:
            listen_host, advertise = "0.0.0.0", advertised_host()
        elif listen_host in ("0.0.0.0", "::", ""):
            # every interface: workers get an address of this host they
            # can reach, not the wildcard
            advertise = advertised_host()
        stop_all: list[str] = next((c for c in (s.stop_all(run_tag) for s in remote) if c), [])
        wait_all: list[str] = next((c for c in (s.wait_all(run_tag) for s in remote) if c), [])
        return RunConfig(
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
            memory_budget=self.memory_budget,
            memory_guard=self.memory_guard,
            forecast_sample=self._forecast_sample,
        )

    def _on_listening(self, plan: _RunPlan) -> Callable[[str, int, str], None]:
        """What the core calls once it listens: each task's daisy 1.x
        ``init_callback_fn`` with where the run listens."""

        def on_listening(host: str, port: int, token: str) -> None:
            for tid, t in plan.task_map.items():
                if t.init_callback_fn is not None:
                    where = {"hostname": host, "port": port, "task_id": tid, "token": token}
                    if self.liveness_timeout is not None:
                        where["liveness_timeout"] = self.liveness_timeout
                    t.init_callback_fn(Context(**where))

        return on_listening

    def _on_tick(self, plan: _RunPlan) -> Callable[[Tick], None]:
        """What the core calls every tick: the progress observers, the
        state events, the live views, and the stop event."""

        def on_tick(tick: Tick) -> None:
            pace = tick.live.pace()
            for obs in plan.observers:
                paced = getattr(obs, "pace", None)
                rows = zip(plan.order, tick.states, tick.workers, strict=True)
                for i, (tid, state, n) in enumerate(rows):
                    obs.update(tid, state, n)
                    if paced is not None and i < len(pace):
                        paced(tid, pace[i][0], pace[i][1])
            for tid, state in zip(plan.order, tick.states, strict=True):
                plan.events.update(tid, state)
            plan.views.update(tick)
            if self.stop_event is not None and self.stop_event.is_set():
                raise _StopRequested()

        return on_tick

    def _run(self, plan: _RunPlan) -> dict[str, TaskState]:
        """Run `plan` in the core and keep what it hands back."""
        try:
            with _sigterm_stops_the_run():
                result = run_distributed(
                    plan.specs,
                    plan.configs,
                    plan.run,
                    self._on_tick(plan),
                    self._on_listening(plan),
                )
        except BaseException:
            # the run could not start
            plan.views.finish(None, None, "interrupted")
            for obs in plan.observers:
                obs.close()
            raise
        finally:
            plan.views.close_metrics()
        late = _final_counts(plan, result)
        self.last_report = RunReport.from_json(result.report_json)
        self.last_report.attach(list(plan.task_map.values()))
        stopped = result.stopped
        if stopped is not None:
            # the run stopped on this exception (Ctrl-C, SIGTERM, a hook's
            # error, a broken rule): its partial report rides on it
            stopped.daisy_run_report = self.last_report  # type: ignore[attr-defined]
            self.stopped_states = dict(result.states)
            plan.views.finish(result.states, self.last_report, "interrupted")
            if isinstance(stopped, _StopRequested):
                # asked for: the states so far are the result, as in 1.x
                logger.info("daisy: the run stopped: its stop_event was set")
                return dict(result.states)
            raise stopped
        if late is not None:
            late.daisy_run_report = self.last_report  # type: ignore[attr-defined]
            self.stopped_states = dict(result.states)
            raise late
        return self._keep(plan, result)

    def _keep(self, plan: _RunPlan, result: RunResult) -> dict[str, TaskState]:
        """Keep a finished run's result (what `failure_notes` explains),
        tell the observers, and return the task states."""
        self.failures = list(result.failures)
        self.failures_unnoted = result.failures_unnoted
        self.abandoned = list(result.abandoned)
        self.unmanaged_clients = result.unmanaged_clients
        for tid, reason in self.abandoned:
            logger.error("daisy: task %r was abandoned: %s", tid, reason)
        states = dict(result.states)
        if not self._summary_follows:
            # no Execution Summary follows (a Server used alone, as in 2.0.0,
            # whose states say only "Failed: 2"): say where the story is
            for tid, st in states.items():
                if st.failed_count or st.orphaned_count:
                    logger.warning(
                        "daisy: %s: %d blocks failed, %d orphaned; server.last_report shows "
                        "which, their ROIs and the first traceback (print(server.last_report."
                        "render()) outside a notebook)",
                        tid,
                        st.failed_count,
                        st.orphaned_count,
                    )
        self._last_failures = RunFailures(
            states=states,
            task_map=plan.task_map,
            failures=self.failures,
            failures_unnoted=self.failures_unnoted,
            failed_blocks=list(result.failed_blocks),
            failing_alike=list(result.failing_alike),
            abandoned=self.abandoned,
            stores=plan.stores,
            block_tracking=plan.block_tracking,
            log_dir=plan.log_dir,
        )
        for tid, state in states.items():
            plan.events.update(tid, state)
        for f in self.failures:
            block = SimpleNamespace(task_id=f.task_id, block_id=(f.task_id, f.spatial_id))
            self.notify_block_failure(block, RuntimeError(f.reason), {"worker_id": f.worker_id})
        self.notify_server_exit()
        log_skips(plan.task_map.values(), states)
        ok = all(st.all_completed for st in states.values())
        if self.last_report is not None:
            self.last_report.attach_failure_notes(self.failure_notes())
        plan.views.finish(states, self.last_report, "completed" if ok else "failed")
        return states

    def failure_notes(self) -> dict[str, list[str]]:
        """Per task, the lines the Execution Summary shows under it (see
        `daisy.report.failure_notes.RunFailures.notes`) for the last run."""
        return self._last_failures.notes()


__getattr__ = _v1_names.lazy_names(__name__)
