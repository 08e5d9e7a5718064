"""daisy: blockwise task scheduling for huge n-dimensional volumes.

A `Task` tiles a total ROI into blocks (a read ROI around a write ROI);
`run_blockwise` processes them in an order that never runs two
conflicting blocks at once, chaining tasks block by block. Scheduling is
done by a Rust core (``daisy._daisy``); this package is its Python face.
``daisy.Roi`` and ``daisy.Coordinate`` are funlib.geometry's.
"""

from __future__ import annotations

import atexit as _atexit
from typing import TYPE_CHECKING

from funlib.geometry import Coordinate, Roi

from daisy import _v1_names
from daisy._daisy import BlockStats, LayoutMismatch, __version__, profile_block
from daisy._daisy import at_interpreter_exit as _at_interpreter_exit

# A run in a daemon thread must stop before the interpreter finalises, or
# its next entry into Python aborts the process: see the bindings'
# ``interpreter.rs``.
_atexit.register(_at_interpreter_exit)

# Every other public name is imported on first use (PEP 562): a worker or
# a launcher that needs only the client does not pay for the driver's
# modules (the run report, spawners, the progress bars: about half of
# ``import daisy``, which every warm launcher and cold worker pays before
# its first block). Values are "package.module" (the module itself) or
# "package.module:attribute". daisy 1.x's transport modules (tornado is
# slow to import) and daisy 2.0.0's namespaces (`import daisy.v2 as
# daisy` for its strict API, `daisy.v1_compat` for its 1.x layer) are
# among them.
_LAZY: dict[str, str] = {
    "block": "daisy.block",
    "blocks": "daisy.blocks",
    "cl_monitor": "daisy.cl_monitor",
    "client": "daisy.client",
    "context": "daisy.context",
    "convenience": "daisy.convenience",
    "coordinate": "daisy.coordinate",
    "dependency_graph": "daisy.dependency_graph",
    "execution_summary": "daisy.execution_summary",
    "freezable": "daisy.freezable",
    "logging": "daisy.logging",
    "metrics": "daisy.metrics",
    "pipeline": "daisy.pipeline",
    "progress": "daisy.progress",
    "roi": "daisy.roi",
    "run_forecast": "daisy.run_forecast",
    "run_report": "daisy.run_report",
    "scheduler": "daisy.scheduler",
    "serial_server": "daisy.serial_server",
    "server": "daisy.server",
    "server_observer": "daisy.server_observer",
    "spawners": "daisy.spawners",
    "task": "daisy.task",
    "task_state": "daisy.task_state",
    "tracking_store": "daisy.tracking_store",
    "worker": "daisy.worker",
    "worker_pool": "daisy.worker_pool",
    "Block": "daisy.block:Block",
    "BlockStatus": "daisy.block:BlockStatus",
    "expand_roi_to_grid": "daisy.blocks:expand_roi_to_grid",
    "expand_write_roi_to_grid": "daisy.blocks:expand_write_roi_to_grid",
    "Client": "daisy.client:Client",
    "Context": "daisy.context:Context",
    "RunFailed": "daisy.convenience:RunFailed",
    "run_blockwise": "daisy.convenience:run_blockwise",
    "BlockwiseDependencyGraph": "daisy.dependency_graph:BlockwiseDependencyGraph",
    "DependencyGraph": "daisy.dependency_graph:DependencyGraph",
    "get_worker_log_basename": "daisy.logging:get_worker_log_basename",
    "redirect_stdouterr": "daisy.logging:redirect_stdouterr",
    "Pipeline": "daisy.pipeline:Pipeline",
    "JsonProgressObserver": "daisy.progress:JsonProgressObserver",
    "Forecast": "daisy.run_forecast:Forecast",
    "TaskForecast": "daisy.run_forecast:TaskForecast",
    "forecast": "daisy.run_forecast:forecast",
    "BlockRecord": "daisy.run_report:BlockRecord",
    "BlockSummary": "daisy.run_report:BlockSummary",
    "RunReport": "daisy.run_report:RunReport",
    "Stat": "daisy.run_report:Stat",
    "TaskReport": "daisy.run_report:TaskReport",
    "WorkerRecord": "daisy.run_report:WorkerRecord",
    "WorkerSummary": "daisy.run_report:WorkerSummary",
    "last_report": "daisy.run_report:last_report",
    "Scheduler": "daisy.scheduler:Scheduler",
    "SerialServer": "daisy.serial_server:SerialServer",
    "Server": "daisy.server:Server",
    "DaskSpawner": "daisy.spawners:DaskSpawner",
    "LocalSpawner": "daisy.spawners:LocalSpawner",
    "SlurmSpawner": "daisy.spawners:SlurmSpawner",
    "Spawner": "daisy.spawners:Spawner",
    "Task": "daisy.task:Task",
    "Terminated": "daisy.server:Terminated",
    "TaskState": "daisy.task_state:TaskState",
    "get_done_marker_basedir": "daisy.tracking_store:get_done_marker_basedir",
    "get_tracking_basedir": "daisy.tracking_store:get_tracking_basedir",
    "set_done_marker_basedir": "daisy.tracking_store:set_done_marker_basedir",
    "set_tracking_basedir": "daisy.tracking_store:set_tracking_basedir",
    "Worker": "daisy.worker:Worker",
    "at_worker_exit": "daisy.worker:at_worker_exit",
    "WorkerPool": "daisy.worker_pool:WorkerPool",
    "messages": "daisy.messages",
    "tcp": "daisy.tcp",
    "v2": "daisy.v2",
    "v1_compat": "daisy.v1_compat",
}


__getattr__ = _v1_names.lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    """The package's names, those not imported yet included."""
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:
    from daisy import (
        block,
        blocks,
        cl_monitor,
        client,
        context,
        convenience,
        coordinate,
        dependency_graph,
        execution_summary,
        freezable,
        logging,
        metrics,
        pipeline,
        progress,
        roi,
        run_forecast,
        run_report,
        scheduler,
        serial_server,
        server,
        server_observer,
        spawners,
        task,
        task_state,
        tracking_store,
        worker,
        worker_pool,
    )
    from daisy.block import Block, BlockStatus
    from daisy.blocks import expand_roi_to_grid, expand_write_roi_to_grid
    from daisy.client import Client
    from daisy.context import Context
    from daisy.convenience import RunFailed, run_blockwise
    from daisy.dependency_graph import BlockwiseDependencyGraph, DependencyGraph
    from daisy.logging import get_worker_log_basename, redirect_stdouterr
    from daisy.pipeline import Pipeline
    from daisy.progress import JsonProgressObserver
    from daisy.run_forecast import Forecast, TaskForecast, forecast
    from daisy.run_report import (
        BlockRecord,
        BlockSummary,
        RunReport,
        Stat,
        TaskReport,
        WorkerRecord,
        WorkerSummary,
        last_report,
    )
    from daisy.scheduler import Scheduler
    from daisy.serial_server import SerialServer
    from daisy.server import Server, Terminated
    from daisy.spawners import DaskSpawner, LocalSpawner, SlurmSpawner, Spawner
    from daisy.task import Task
    from daisy.task_state import TaskState
    from daisy.tracking_store import (
        get_done_marker_basedir,
        get_tracking_basedir,
        set_done_marker_basedir,
        set_tracking_basedir,
    )
    from daisy.worker import Worker, at_worker_exit
    from daisy.worker_pool import WorkerPool

__all__ = [
    "Forecast",
    "TaskForecast",
    "forecast",
    "run_forecast",
    "Block",
    "BlockRecord",
    "BlockStats",
    "BlockSummary",
    "BlockStatus",
    "BlockwiseDependencyGraph",
    "Client",
    "Context",
    "DaskSpawner",
    "Coordinate",
    "DependencyGraph",
    "JsonProgressObserver",
    "LocalSpawner",
    "LayoutMismatch",
    "Pipeline",
    "Roi",
    "RunReport",
    "Scheduler",
    "SerialServer",
    "Server",
    "SlurmSpawner",
    "Spawner",
    "Stat",
    "TaskReport",
    "Task",
    "TaskState",
    "Terminated",
    "WorkerRecord",
    "Worker",
    "WorkerPool",
    "WorkerSummary",
    "__version__",
    "at_worker_exit",
    "last_report",
    "RunFailed",
    "block",
    "cl_monitor",
    "blocks",
    "client",
    "context",
    "convenience",
    "coordinate",
    "dependency_graph",
    "execution_summary",
    "expand_roi_to_grid",
    "expand_write_roi_to_grid",
    "freezable",
    "get_worker_log_basename",
    "get_done_marker_basedir",
    "get_tracking_basedir",
    "logging",
    "metrics",
    "pipeline",
    "profile_block",
    "redirect_stdouterr",
    "progress",
    "roi",
    "run_report",
    "run_blockwise",
    "scheduler",
    "serial_server",
    "set_done_marker_basedir",
    "set_tracking_basedir",
    "spawners",
    "server",
    "server_observer",
    "task",
    "task_state",
    "tracking_store",
    "worker",
    "worker_pool",
]

# the module's own helpers are not daisy's names (neither release has them)
del annotations, TYPE_CHECKING
