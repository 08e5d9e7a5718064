"""daisy 2.0.0's 1.x-compatibility namespace: ``import daisy.v1_compat``.

`daisy.v2` with the shims daisy 2.0.0 kept for code coming from daisy 1.x,
each warning with a `DeprecationWarning` that names the v2 way:

- `Task` takes ``num_workers=N`` (for ``max_workers=N``) and
  ``upstream_tasks=[...]``; the upstream tasks run first, whether the task
  is run alone, in a list or in a `Pipeline`. It also takes 1.x's
  ``init_callback_fn`` and integer task ids. Its positional order is
  `daisy.v2.Task`'s.
- `Scheduler` and `run_blockwise` take a list of tasks as well as a
  `Pipeline` or a `Task`.
- `SerialServer` runs a pipeline in this process and prints its
  Execution Summary (prefer ``run_blockwise(..., multiprocessing=False)``).

The top level, ``import daisy``, keeps daisy 1.2.2's behaviour where the
two releases disagree; this namespace is 2.0.0's.
"""

import warnings
from typing import Any as _Any

from daisy import serial_server as _serial_server
from daisy import task as _task
from daisy import task_arguments as _arguments
from daisy import v2 as _v2
from daisy.v2 import (
    Block,
    BlockStatus,
    BlockwiseDependencyGraph,
    Client,
    Context,
    Coordinate,
    DependencyGraph,
    JsonProgressObserver,
    Pipeline,
    Roi,
    Server,
    TaskState,
    __version__,
    get_done_marker_basedir,
    get_tracking_basedir,
    profile_block,
    run_blockwise,
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
    "SerialServer",
    "Server",
    "Task",
    "TaskState",
    "__version__",
    "profile_block",
    "get_done_marker_basedir",
    "get_tracking_basedir",
    "run_blockwise",
    "set_done_marker_basedir",
    "set_tracking_basedir",
]


class Task(_v2.Task):
    """`daisy.v2.Task` that also takes daisy 1.x's keywords:
    ``num_workers=N`` (for ``max_workers=N``), ``upstream_tasks=[...]``
    (tasks whose output this one reads: each block waits for the upstream
    blocks its read ROI overlaps) and ``init_callback_fn``. The first two
    warn with a `DeprecationWarning` (v2 puts dependencies on a
    `Pipeline`: ``upstream + downstream``)."""

    #: not v2's: introspection shows this class's own __init__, as 2.0.0's
    __signature__ = None

    def __init__(
        self,
        *args: _Any,
        num_workers: int | None = None,
        max_workers: int | None = None,
        upstream_tasks: _Any = None,
        **kwargs: _Any,
    ) -> None:
        if num_workers is not None or max_workers is not None:
            kwargs["max_workers"], _ = _arguments.parse_workers(num_workers, max_workers)
        upstream = _arguments.parse_upstream(upstream_tasks, _task.Task)
        init_callback_fn = kwargs.pop("init_callback_fn", None)
        _v2._init_task(
            self, args, kwargs, strict=False, stacklevel=3, init_callback_fn=init_callback_fn
        )
        # set here rather than passed on: the top level's Task would warn
        # again, from this file instead of the caller's
        self.upstream_tasks = upstream


def Scheduler(tasks_or_pipeline: _Any) -> _v2.Scheduler:
    """A `daisy.v2.Scheduler` of a `Pipeline`, a `Task` or a list of tasks
    (with the upstream tasks they declare)."""
    _v2._check_runnable(tasks_or_pipeline)
    return _v2.Scheduler(Pipeline.of(tasks_or_pipeline))


class SerialServer(_serial_server.SerialServer):
    """Runs a pipeline in this process, one block at a time, and prints its
    Execution Summary. Deprecated in daisy 2.0.0: use
    ``run_blockwise(pipeline, multiprocessing=False)``."""

    def __init__(self) -> None:
        warnings.warn(
            "daisy.SerialServer is a v1.x compat shim. daisy v2 unified serial and parallel "
            "execution; prefer `daisy.run_blockwise(pipeline, multiprocessing=False)`, or "
            "`import daisy.v2 as daisy`.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__()

    def run_blockwise(  # type: ignore[override]
        self, tasks: _Any, block_tracking: bool = True
    ) -> dict[str, TaskState]:
        """Run every block of ``tasks`` (a Task, a list or a Pipeline) and
        return the task states by task id. An exception from a block
        function stops the run and propagates."""
        states = super().run_blockwise(tasks, block_tracking=block_tracking)
        _v2._print_summary(states, {}, self.last_report)
        return states
