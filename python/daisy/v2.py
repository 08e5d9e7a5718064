"""daisy 2.0.0's strict namespace: ``import daisy.v2 as daisy``.

The names of daisy 2.0.0's ``daisy.v2``, with its stricter behaviour where
it differs from the top level (which keeps daisy 1.2.2's):

- `Task` takes 2.0.0's arguments only: no ``num_workers``,
  ``upstream_tasks`` or ``init_callback_fn`` (dependencies go on a
  `Pipeline`: ``upstream + downstream``), and after the four ROIs its
  positional order is 2.0.0's (``process_function, check_function,
  read_write_conflict, fit, max_workers, max_retries, timeout,
  tracking_path, resource_tracking, requires, max_worker_restarts,
  skip_mask``). ``requires`` reads back as the resource dict.
- `Block` is ``Block(total_roi, read_roi, write_roi, task_id=None,
  block_id=None)`` (1.2.2 had ``block_id`` first).
- `Scheduler` takes a `Pipeline` or a `Task`, not a list.
- `run_blockwise` and ``Server.run_blockwise`` take 2.0.0's parameters in
  2.0.0's order (``pipeline, multiprocessing, resources, progress,
  block_tracking, return_states, host, summary``).

Everything else is the top level's own object. These are thin wrappers:
the work is done by the classes of the package (and its Rust core).
"""

import inspect as _inspect
import os as _os
import warnings as _warnings
from collections.abc import Iterable as _Iterable
from collections.abc import Mapping as _Mapping
from collections.abc import Sequence as _Sequence
from importlib.metadata import PackageNotFoundError as PackageNotFoundError
from typing import Any as _Any
from typing import cast as _cast

from funlib.geometry import Coordinate, Roi

from daisy import convenience as _convenience
from daisy import scheduler as _scheduler
from daisy import server as _server
from daisy import task as _task
from daisy._daisy import BlockStats, profile_block
from daisy._daisy import __version__ as __version__
from daisy.block import Block as _Block
from daisy.block import BlockStatus
from daisy.client import Client
from daisy.context import Context
from daisy.dependency_graph import BlockwiseDependencyGraph, DependencyGraph
from daisy.pipeline import Composable as _Composable
from daisy.pipeline import Pipeline
from daisy.progress import JsonProgressObserver
from daisy.report.execution_summary import print_execution_summary as _print_execution_summary
from daisy.report.task_report import RunReport as _RunReport
from daisy.task_state import TaskState
from daisy.tracking_store import (
    get_done_marker_basedir,
    get_tracking_basedir,
    set_done_marker_basedir,
    set_tracking_basedir,
)

__all__ = [
    "Block",
    "BlockStatus",
    "BlockwiseDependencyGraph",
    "Client",
    "Context",
    "Coordinate",
    "DependencyGraph",
    "JsonProgressObserver",
    "Pipeline",
    "Roi",
    "Scheduler",
    "Server",
    "Task",
    "TaskState",
    "__version__",
    "BlockStats",
    "get_done_marker_basedir",
    "get_tracking_basedir",
    "run_blockwise",
    "profile_block",
    "set_done_marker_basedir",
    "set_tracking_basedir",
]


# ------------------------------------------------------------------ Task


def _task_arguments(
    task_id: _Any,
    total_roi: _Any,
    read_roi: _Any,
    write_roi: _Any,
    process_function: _Any = None,
    check_function: _Any = None,
    read_write_conflict: _Any = True,
    fit: _Any = "valid",
    max_workers: _Any = None,
    max_retries: _Any = 2,
    timeout: _Any = None,
    tracking_path: _Any = None,
    resource_tracking: _Any = False,
    requires: _Any = None,
    max_worker_restarts: _Any = 10,
    skip_mask: _Any = None,
    *,
    done_marker_path: _Any = None,
    spawner: _Any = None,
    idle_timeout: _Any = None,
) -> dict[str, _Any]:
    """2.0.0's Task parameters, in its positional order (``spawner`` and
    ``idle_timeout`` are ours). Python's own errors for a bad call name ``Task.__new__``, as
    2.0.0's do."""
    return {
        "task_id": task_id,
        "total_roi": total_roi,
        "read_roi": read_roi,
        "write_roi": write_roi,
        "process_function": process_function,
        "check_function": check_function,
        "read_write_conflict": read_write_conflict,
        "fit": fit,
        "max_workers": max_workers,
        "max_retries": max_retries,
        "timeout": timeout,
        "tracking_path": tracking_path,
        "resource_tracking": resource_tracking,
        "requires": requires,
        "max_worker_restarts": max_worker_restarts,
        "skip_mask": skip_mask,
        "done_marker_path": done_marker_path,
        "spawner": spawner,
        "idle_timeout": idle_timeout,
    }


_task_arguments.__qualname__ = "Task.__new__"


def _init_task(
    task: "Task",
    args: tuple[_Any, ...],
    kwargs: dict[str, _Any],
    *,
    strict: bool,
    stacklevel: int,
    **extra: _Any,
) -> None:
    """Build ``task`` from 2.0.0's arguments (``extra`` goes to the top
    level's `daisy.task.Task` as is). ``strict``: task ids must be str, as
    in 2.0.0. ``stacklevel`` is that of a warning raised here."""
    opts = _task_arguments(*args, **kwargs)
    if strict and not isinstance(opts["task_id"], str):
        raise TypeError(
            f"argument 'task_id': '{type(opts['task_id']).__name__}' object is not an "
            "instance of 'str'"
        )
    done_marker_path = opts.pop("done_marker_path")
    if done_marker_path is not None:
        if opts["tracking_path"] is not None:
            raise TypeError(
                "pass either tracking_path or done_marker_path, not both (done_marker_path "
                "is the deprecated alias)"
            )
        _warnings.warn(
            "Task(done_marker_path=...) is deprecated; use Task(tracking_path=...). The "
            "directory now holds failure counts and resource measurements alongside the done "
            "markers.",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        if done_marker_path is True:
            raise TypeError(
                "done_marker_path=True is not a valid value; use None (auto), False "
                "(disabled), or a str/Path"
            )
        opts["tracking_path"] = done_marker_path
    _task.Task.__init__(task, **opts, **extra)


class Task(_task.Task):
    """A task as daisy 2.0.0's ``daisy.v2`` takes it:
    ``Task(task_id, total_roi, read_roi, write_roi, process_function=None,
    check_function=None, read_write_conflict=True, fit="valid",
    max_workers=1, max_retries=2, timeout=None, tracking_path=None,
    resource_tracking=False, requires=None, max_worker_restarts=10,
    skip_mask=None, *, done_marker_path=None, spawner=None,
    idle_timeout=None)``.

    daisy 1.x's ``num_workers``, ``upstream_tasks`` and
    ``init_callback_fn`` are refused (``daisy.v1_compat.Task`` takes
    them); dependencies between tasks go on a `Pipeline`. See
    `daisy.Task` for what each argument means.
    """

    def __init__(self, *args: _Any, **kwargs: _Any) -> None:
        _init_task(self, args, kwargs, strict=True, stacklevel=3)

    @property
    def requires(self) -> dict[str, int]:  # type: ignore[override]
        """The resources one worker holds (``Task(requires=...)``); daisy
        1.x's ``requires()`` listed the upstream tasks instead."""
        return dict(self.required_resources)


def _parameter(name: str, default: _Any = _inspect.Parameter.empty) -> _inspect.Parameter:
    return _inspect.Parameter(name, _inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)


# what `Task` takes, for introspection (help(), inspect.signature): its
# __init__ parses 2.0.0's order itself, so its own signature says nothing.
# The twelfth place is 2.0.0's done_marker_path, tracking_path's old name.
Task.__signature__ = _inspect.Signature(  # type: ignore[attr-defined]
    [
        *(_parameter(n) for n in ("task_id", "total_roi", "read_roi", "write_roi")),
        _parameter("process_function", None),
        _parameter("check_function", None),
        _parameter("read_write_conflict", True),
        _parameter("fit", "valid"),
        _parameter("max_workers", 1),
        _parameter("max_retries", 2),
        _parameter("timeout", None),
        _parameter("done_marker_path", None),
        _parameter("resource_tracking", False),
        _parameter("requires", None),
        _parameter("max_worker_restarts", 10),
        _parameter("skip_mask", None),
        _inspect.Parameter("tracking_path", _inspect.Parameter.KEYWORD_ONLY, default=None),
        _inspect.Parameter("spawner", _inspect.Parameter.KEYWORD_ONLY, default=None),
        _inspect.Parameter("idle_timeout", _inspect.Parameter.KEYWORD_ONLY, default=None),
    ]
)


# ----------------------------------------------------------------- Block


class _BlockType(type):
    """Every `daisy.Block` is a ``daisy.v2.Block``: the blocks the
    scheduler hands out are the top level's."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _Block)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _Block)


class Block(_Block, metaclass=_BlockType):
    """``Block(total_roi, read_roi, write_roi, task_id=None,
    block_id=None)``: daisy 2.0.0's argument order (1.2.2, and the top
    level, take ``block_id`` before ``task_id``). ``task_id`` is a str
    (``""`` when not given); ``block_id`` the spatial id, derived from the
    ROIs when not given. Makes a `daisy.Block`."""

    def __new__(
        cls,
        total_roi: _Any,
        read_roi: _Any,
        write_roi: _Any,
        task_id: str | None = None,
        block_id: int | None = None,
    ) -> "Block":
        if task_id is None:
            task_id = ""
        elif not isinstance(task_id, str):
            raise TypeError(
                f"argument 'task_id': '{type(task_id).__name__}' object is not an instance of 'str'"
            )
        return _cast("Block", _Block(total_roi, read_roi, write_roi, block_id, task_id))


# ------------------------------------------------------- running a pipeline


def _check_runnable(pipeline: object) -> None:
    """A Pipeline, a Task or a list of tasks; anything else is 2.0.0's
    TypeError."""
    if isinstance(pipeline, Pipeline | _Composable):
        return
    if isinstance(pipeline, str | bytes) or not isinstance(pipeline, _Iterable):
        raise TypeError(
            f"expected a Pipeline, a Task, or a list of tasks; got {type(pipeline).__name__}"
        )


def _print_summary(
    states: _Mapping[str, TaskState],
    notes: _Mapping[str, _Sequence[str]],
    report: _RunReport | None,
) -> None:
    """The Execution Summary and the resource panel, as
    `daisy.run_blockwise` prints them."""
    _print_execution_summary(states, notes)
    if report is not None:
        panel = report.render(task_order=list(states))
        if panel:
            print(panel)


class Scheduler(_scheduler.Scheduler):
    """Hands out the blocks of a `Pipeline` or a `Task` in dependency
    order (`daisy.Scheduler`, without its list form)."""

    def __init__(self, pipeline_or_task: _Any) -> None:
        if not isinstance(pipeline_or_task, Pipeline | _Composable):
            raise TypeError(
                f"Scheduler expects a Pipeline or a Task; got {type(pipeline_or_task).__name__}"
            )
        super().__init__(pipeline_or_task)


def run_blockwise(
    pipeline: _Any,
    multiprocessing: bool = True,
    resources: dict[str, int] | None = None,
    progress: _Any = True,
    block_tracking: bool = True,
    return_states: bool = False,
    host: str | None = None,
    summary: bool = True,
    *,
    port: int | None = None,
    metrics_port: int | None = None,
    report_html: str | _os.PathLike[str] | None = None,
    idle_timeout: float | None = None,
) -> _Any:
    """Run ``pipeline`` (a `Pipeline`, a `Task` or a list of them) to the
    end: `daisy.run_blockwise` with daisy 2.0.0's parameters in its order.
    ``host`` is the address the server listens on; ``port``,
    ``metrics_port``, ``report_html`` and ``idle_timeout`` are ours (see
    `daisy.run_blockwise`).

    Returns True if every block completed, else False; with
    ``return_states=True`` the task states by task id."""
    _check_runnable(pipeline)
    return _convenience.run_blockwise(
        pipeline,
        multiprocessing,
        host=host,
        port=port,
        resources=resources,
        progress=progress,
        summary=summary,
        metrics_port=metrics_port,
        report_html=report_html,
        block_tracking=block_tracking,
        return_states=return_states,
        idle_timeout=idle_timeout,
    )


class Server(_server.Server):
    """Runs a pipeline on worker processes (`daisy.Server`), with daisy
    2.0.0's ``run_blockwise(pipeline, resources=None, progress=True,
    block_tracking=True, host=None, summary=True)``. ``host`` and ``port``
    may also be given here, as keywords."""

    def __init__(
        self, stop_event: _Any = None, *, host: str | None = None, port: int | None = None
    ) -> None:
        super().__init__(stop_event, host=host, port=port)

    def run_blockwise(  # type: ignore[override]
        self,
        pipeline: _Any,
        resources: dict[str, int] | None = None,
        progress: _Any = True,
        block_tracking: bool = True,
        host: str | None = None,
        summary: bool = True,
        *,
        metrics_port: int | None = None,
    ) -> dict[str, TaskState]:
        """Run every block of ``pipeline`` and return the task states by
        task id; ``summary`` prints the Execution Summary. ``host`` is the
        address to listen on for this run."""
        _check_runnable(pipeline)
        if host is not None:
            self.host, self._host_given = host, True
        states = super().run_blockwise(
            pipeline,
            progress=progress,
            resources=resources,
            metrics_port=metrics_port,
            block_tracking=block_tracking,
        )
        if summary:
            _print_summary(states, self.failure_notes(), self.last_report)
        return states
