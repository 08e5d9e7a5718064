"""Names and helpers that code written for daisy 1.x imports from daisy.

Expected values below were recorded by running daisy 1.2.2."""

from __future__ import annotations

import inspect

import pytest

import daisy
from daisy.blocks import expand_request_roi_to_grid, expand_roi_to_grid, expand_write_roi_to_grid
from daisy.freezable import Freezable

R = daisy.Roi

TOP_LEVEL_1X = [
    "Worker",
    "WorkerPool",
    "cl_monitor",
    "server_observer",
    "worker",
    "worker_pool",
    "Block",
    "BlockStatus",
    "BlockwiseDependencyGraph",
    "Client",
    "Context",
    "Coordinate",
    "DependencyGraph",
    "Roi",
    "Scheduler",
    "SerialServer",
    "Server",
    "Task",
    "TaskState",
    "block",
    "blocks",
    "client",
    "context",
    "convenience",
    "coordinate",
    "dependency_graph",
    "expand_roi_to_grid",
    "expand_write_roi_to_grid",
    "freezable",
    "get_worker_log_basename",
    "logging",
    "redirect_stdouterr",
    "roi",
    "run_blockwise",
    "scheduler",
    "serial_server",
    "server",
    "task",
    "task_state",
    "messages",
    "tcp",
]

# Names that daisy 1.2.2's modules export besides their own definitions
# (what they imported), recorded from its dir(). Left out: the standard
# library and typing names they happened to import (logging, copy, Dict,
# getfullargspec, ...), and 1.x's scheduler internals, which daisy does
# not reimplement in Python (the Rust core owns scheduling):
# daisy.processing_queue.ProcessingQueue, daisy.ready_surface.ReadySurface,
# daisy.block_bookkeeper.BlockBookkeeper, daisy.task_worker_pools
# .TaskWorkerPools, and daisy.blocks.SingleTaskDependencyGraph (whose 1.2.2
# constructor raises AttributeError, so no working code uses it).
MODULE_NAMES_1X = {
    "block": ["Block", "BlockStatus", "Freezable", "cantor_number"],
    "cl_monitor": ["CLMonitor", "daisy_logging", "tqdm", "tqdm_auto"],
    "client": [
        "AcquireBlock",
        "BlockFailed",
        "Client",
        "Context",
        "ReleaseBlock",
        "RequestShutdown",
        "SendBlock",
        "StreamClosedError",
        "TCPClient",
        "UnexpectedMessage",
        "set_log_basedir",
    ],
    "context": ["Context", "get_log_basedir"],
    "convenience": ["CLMonitor", "Event", "IOLooper", "ThreadPool", "run_blockwise"],
    "dependency_graph": ["BlockwiseDependencyGraph", "Coordinate", "DependencyGraph"],
    "scheduler": ["BlockStatus", "DependencyGraph", "Scheduler"],
    "serial_server": ["BlockStatus", "SerialServer", "Task"],
    "server": [
        "AcquireBlock",
        "BlockFailed",
        "BlockStatus",
        "ClientException",
        "ReleaseBlock",
        "RequestShutdown",
        "SendBlock",
        "Server",
        "StreamClosedError",
        "TCPServer",
        "UnexpectedMessage",
    ],
    "task": ["Client", "Task"],
    "worker": ["Worker", "daisy_logging", "dill"],
}
MODULE_NAMES = [(m, n) for m, names in MODULE_NAMES_1X.items() for n in names]


@pytest.mark.parametrize("module, name", MODULE_NAMES, ids=[f"{m}.{n}" for m, n in MODULE_NAMES])
def test_names_daisy_1x_modules_exported_are_there(module, name):
    import importlib

    assert hasattr(importlib.import_module(f"daisy.{module}"), name)


def test_names_1x_modules_exported_keep_their_meaning():
    import multiprocessing.pool

    import dill
    import funlib.math
    import tqdm

    from daisy import cl_monitor, client, convenience, server, task, worker
    from daisy.block import Freezable, cantor_number

    assert Freezable is daisy.freezable.Freezable
    assert cantor_number is funlib.math.cantor_number
    assert cantor_number((1, 2)) == 7  # as daisy 1.2.2 gives
    assert client.TCPClient is daisy.tcp.TCPClient and server.TCPServer is daisy.tcp.TCPServer
    assert client.AcquireBlock is server.AcquireBlock is daisy.messages.AcquireBlock
    assert client.StreamClosedError is daisy.tcp.exceptions.StreamClosedError
    assert client.set_log_basedir is daisy.logging.set_log_basedir
    assert server.BlockStatus is daisy.scheduler.BlockStatus is daisy.BlockStatus
    assert convenience.CLMonitor is cl_monitor.CLMonitor
    assert convenience.ThreadPool is multiprocessing.pool.ThreadPool
    assert task.Client is daisy.Client
    assert worker.dill is dill and cl_monitor.tqdm is tqdm
    assert cl_monitor.daisy_logging is worker.daisy_logging is daisy.logging
    with pytest.raises(AttributeError, match="daisy.client.*no_such_name"):
        client.no_such_name  # noqa: B018


def test_importing_daisy_leaves_the_1x_transport_unimported():
    """tornado, dill and funlib.math load only when a 1.x name needs them:
    ``import daisy`` is on every worker's start-up path."""
    import subprocess
    import sys

    code = (
        "import sys, daisy; "
        "print(sorted(m for m in ('tornado', 'dill', 'funlib.math', 'daisy.tcp') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("name", TOP_LEVEL_1X)
def test_top_level_name_of_daisy_1x_exists(name):
    assert hasattr(daisy, name)


def test_roi_and_coordinate_are_funlib_geometry():
    import funlib.geometry

    assert daisy.Roi is funlib.geometry.Roi
    assert daisy.Coordinate is funlib.geometry.Coordinate
    assert daisy.roi.Roi is funlib.geometry.Roi
    assert daisy.coordinate.Coordinate is funlib.geometry.Coordinate


@pytest.mark.parametrize(
    "roi, write, expected",
    [
        (R((3, 5), (10, 10)), R((0, 0), (4, 4)), R((0, 4), (16, 12))),
        (R((-3, 5), (1, 1)), R((2, 2), (4, 4)), R((-4, 4), (4, 4))),
    ],
)
def test_expand_write_roi_to_grid_matches_1x(roi, write, expected):
    assert expand_write_roi_to_grid(roi, write) == expected


@pytest.mark.parametrize(
    "sub, total, read, write, grid, requested",
    [
        (
            R((3, 5), (10, 10)),
            R((0, 0), (100, 100)),
            R((-2, -2), (8, 8)),
            R((0, 0), (4, 4)),
            R((2, 2), (12, 16)),
            R((0, 0), (16, 20)),
        ),
        (
            R((13, 25), (1, 1)),
            R((-7, 1), (100, 100)),
            R((-2, -1), (8, 7)),
            R((0, 0), (4, 4)),
            R((11, 22), (4, 4)),
            R((9, 21), (8, 7)),
        ),
    ],
)
def test_expand_roi_to_grid_matches_1x(sub, total, read, write, grid, requested):
    assert expand_roi_to_grid(sub, total, read, write) == grid
    assert expand_request_roi_to_grid(sub, total, read, write) == requested


def test_freezable_refuses_new_attributes_once_frozen():
    f = Freezable()
    f.a = 1
    f.freeze()
    f.a = 2
    assert f.a == 2
    with pytest.raises(TypeError, match="frozen"):
        f.b = 3
    f.thaw()
    f.b = 3
    assert f.b == 3


def test_worker_log_basename(tmp_path):
    daisy.logging.set_log_basedir(tmp_path)
    assert daisy.get_worker_log_basename(3, "seg") == tmp_path / "seg" / "worker_3"
    daisy.logging.set_log_basedir(None)
    assert daisy.get_worker_log_basename(3, "seg") is None


class Recorder(daisy.server_observer.ServerObserver):
    def __init__(self, server):
        super().__init__(server)
        self.events = []

    def on_task_start(self, task_id, task_state):
        self.events.append(("start", task_id))

    def on_acquire_block(self, task_id, task_state):
        self.events.append(("acquire", task_id))

    def on_release_block(self, task_id, task_state):
        self.events.append(("release", task_id))

    def on_task_done(self, task_id, task_state):
        self.events.append(("done", task_id, task_state.completed_count))

    def on_block_failure(self, block, exception, context):
        self.events.append(("failure", block.block_id))

    def on_server_exit(self):
        self.events.append(("exit",))


@pytest.mark.parametrize("server_class", [daisy.Server, daisy.SerialServer])
def test_server_observers_hear_the_run(server_class, tmp_path):
    from conftest import line_task

    def work(block):
        marker = tmp_path / "failed"
        if block.block_id[1] == 1 and not marker.exists():
            marker.touch()
            block.status = daisy.BlockStatus.FAILED

    server = server_class()
    rec = Recorder(server)
    kwargs = {"progress": False} if server_class is daisy.Server else {}
    server.run_blockwise([line_task("t", 4, process_function=work)], **kwargs)
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "start" and kinds[-1] == "exit"
    assert ("done", "t", 4) in rec.events
    assert "release" in kinds
    if server_class is daisy.Server:
        assert ("failure", ("t", 1)) in rec.events
    server.unregister_observer(rec)
    server.run_blockwise([line_task("u", 2, process_function=lambda b: None)], **kwargs)
    assert not any(e[1:2] == ("u",) for e in rec.events)


def test_cl_monitor_follows_a_run():
    from conftest import line_task

    from daisy.cl_monitor import BlockFailure, CLMonitor, TaskSummary

    server = daisy.Server()
    monitor = CLMonitor(server)
    server.run_blockwise([line_task("t", 3, process_function=lambda b: None)], progress=False)
    assert isinstance(monitor.summaries["t"], TaskSummary)
    assert monitor.summaries["t"].state.completed_count == 3
    assert "in worker 2" in repr(BlockFailure("b", ValueError("x"), 2))


@pytest.mark.parametrize("server_class", ["SerialServer", "Server"])
def test_cl_monitor_prints_the_execution_summary_when_the_server_exits(server_class, capsys):
    # what volara's multiprocessing=False path relies on: a SerialServer with
    # a CLMonitor attached prints the summary, as 1.2.2's and 2.0.0's did
    from conftest import line_task

    from daisy.cl_monitor import CLMonitor

    server = getattr(daisy, server_class)()
    CLMonitor(server)
    task = line_task("mon", 4, process_function=lambda b: None)
    kwargs = {} if server_class == "SerialServer" else {"progress": False}
    server.run_blockwise([task], **kwargs)
    out = capsys.readouterr().out
    assert out.count("Execution Summary") == 1, out
    assert "Task mon: ✔" in out and "completed ✔: 4 (skipped 0)" in out, out


def _write_worker_id(path):
    def run():
        ctx = daisy.Context.from_env()
        with open(path, "w") as f:
            f.write(str(ctx["worker_id"]))

    return run


def _fail():
    raise ValueError("worker failure")


def test_worker_runs_its_function_in_a_process_with_the_context(tmp_path):
    import time

    out = tmp_path / "id.txt"
    w = daisy.Worker(_write_worker_id(str(out)), context=daisy.Context(hostname="h", port=1))
    w.process.join(30)
    assert out.read_text() == str(w.worker_id)
    # a property, as in 1.2.2
    assert isinstance(inspect.getattr_static(daisy.Worker, "spawn_function"), property)
    assert w.spawn_function is not None
    w.stop()
    assert w.process is None

    pool = daisy.WorkerPool(_fail)
    pool.set_num_workers(2)
    assert len(pool.workers) == 2
    deadline = time.time() + 30
    with pytest.raises(RuntimeError, match="worker failure"):
        while time.time() < deadline:
            pool.check_for_errors()
            time.sleep(0.1)
    pool.stop()
    assert pool.workers == {}
