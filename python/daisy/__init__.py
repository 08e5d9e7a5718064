"""daisy: blockwise task scheduling for huge n-dimensional volumes.

A `Task` tiles a total ROI into blocks (a read ROI around a write ROI);
`run_blockwise` processes them in an order that never runs two
conflicting blocks at once, chaining tasks block by block. Scheduling is
done by a Rust core (``daisy._daisy``); this package is its Python face.
``daisy.Roi`` and ``daisy.Coordinate`` are funlib.geometry's.
"""

from funlib.geometry import Coordinate, Roi

from daisy import (
    _v1_names,
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
from daisy._daisy import BlockStats, LayoutMismatch, __version__, profile_block
from daisy.block import Block, BlockStatus
from daisy.blocks import expand_roi_to_grid, expand_write_roi_to_grid
from daisy.client import Client
from daisy.context import Context
from daisy.convenience import RunFailed, run_blockwise
from daisy.dependency_graph import BlockwiseDependencyGraph, DependencyGraph
from daisy.logging import get_worker_log_basename, redirect_stdouterr
from daisy.pipeline import Pipeline
from daisy.progress import JsonProgressObserver
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
from daisy.server import Server
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

# daisy 1.x's transport modules, imported on first use (tornado is slow to
# import, and daisy itself does not use them)
__getattr__ = _v1_names.lazy_names(
    __name__,
    {
        "messages": "daisy.messages",
        "tcp": "daisy.tcp",
        # daisy 2.0.0's namespaces: `import daisy.v2 as daisy` for its strict
        # API, `daisy.v1_compat` for its 1.x layer
        "v2": "daisy.v2",
        "v1_compat": "daisy.v1_compat",
    },
)
