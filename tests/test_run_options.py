"""``run_blockwise``'s daisy 2.0.0 options: ``return_states`` and
``block_tracking``."""

from __future__ import annotations

import pytest
from conftest import line_task

import daisy

MODES = pytest.mark.parametrize("mp", [False, True], ids=["serial", "workers"])


def noop(block):
    pass


@MODES
def test_return_states_returns_the_task_states(tmp_path, mp):
    a = line_task("a", 3, process_function=noop)
    b = line_task("b", 2, process_function=noop, upstream_tasks=[a])
    states = daisy.run_blockwise(
        [b], multiprocessing=mp, return_states=True, progress=False, summary=False
    )
    assert isinstance(states, dict) and list(states) == ["a", "b"]
    assert isinstance(states["a"], daisy.TaskState)
    assert [s.completed_count for s in states.values()] == [3, 2]
    assert not any(s.abandoned for s in states.values())
    with pytest.raises(TypeError, match="return_states"):
        daisy.run_blockwise([b], return_states="yes")


@MODES
def test_block_tracking_false_neither_skips_nor_marks(tmp_path, mp):
    daisy.set_tracking_basedir(tmp_path)
    calls = tmp_path / "calls"
    calls.mkdir()

    def count(block):
        (calls / f"{block.block_id[1]}-{len(list(calls.iterdir()))}").touch()

    task = line_task("t", 4, process_function=count)
    assert daisy.run_blockwise([task], multiprocessing=mp, progress=False, summary=False)
    assert len(list(calls.iterdir())) == 4
    # markers exist, but block_tracking=False runs every block anyway
    states = daisy.run_blockwise(
        [task],
        multiprocessing=mp,
        block_tracking=False,
        return_states=True,
        progress=False,
        summary=False,
    )
    assert states["t"].skipped_count == 0 and len(list(calls.iterdir())) == 8
    # and with tracking again, the first run's markers still skip everything
    states = daisy.run_blockwise(
        [task], multiprocessing=mp, return_states=True, progress=False, summary=False
    )
    assert states["t"].skipped_count == 4 and len(list(calls.iterdir())) == 8


def test_block_tracking_false_with_resource_tracking_is_refused(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("t", 2, process_function=noop, resource_tracking=True)
    with pytest.raises(ValueError, match="block_tracking"):
        daisy.run_blockwise([task], block_tracking=False, progress=False)
    with pytest.raises(TypeError, match="block_tracking"):
        daisy.run_blockwise([task], block_tracking=None, progress=False)


def test_a_set_stop_event_ends_the_run_with_the_states_so_far(tmp_path):
    """daisy 1.2.2's ``Server(stop_event)``: setting the event stops the run
    and ``run_blockwise`` returns the states (recorded: 14 of 40 slow blocks
    done when the event was set after 2 s)."""
    import threading
    import time

    def slow(block):
        time.sleep(0.1)

    task = line_task("t", 200, process_function=slow, max_workers=2)
    event = threading.Event()
    timer = threading.Timer(1.5, event.set)
    timer.start()
    server = daisy.Server(event)
    started = time.monotonic()
    states = server.run_blockwise([task], progress=False)
    timer.join()
    assert time.monotonic() - started < 60
    s = states["t"]
    assert 0 < s.completed_count < 200
    assert server.last_report is not None
    assert server.last_report["t"].outcome == "interrupted"
    with pytest.raises(TypeError, match="stop_event"):
        daisy.Server(stop_event=5)


def fail_block_1(block):
    if block.block_id[1] == 1:
        raise ValueError("block 1 is bad")


def test_task_knows_its_failed_blocks_timeout_and_marker_path(tmp_path):
    """daisy 2.0.0's ``Task.failed_blocks()``, ``timeout_secs`` and
    ``done_marker_path`` (observed: ``failed_blocks()`` lists the failed
    block as a Block; ``done_marker_path`` is what was passed)."""
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("t", 3, process_function=fail_block_1, max_retries=0, timeout=5)
    assert task.failed_blocks() == []
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    failed = task.failed_blocks()
    assert [b.block_id for b in failed] == [("t", 1)]
    assert failed[0].write_roi == daisy.Roi((10,), (10,))
    assert task.timeout_secs == 5.0
    assert line_task("u", 1, process_function=noop).timeout_secs is None
    assert task.done_marker_path is None
    assert line_task("u", 1, process_function=noop, tracking_path=False).done_marker_path is False


def test_run_blockwise_takes_2_0_0s_positional_order_and_pipeline_keyword():
    task = line_task("t", 2, process_function=noop)
    # (pipeline, multiprocessing, resources, progress, block_tracking,
    #  return_states, host, summary), as 2.0.0's signature reads
    states = daisy.run_blockwise(task, False, None, False, True, True, None, False)
    assert states["t"].completed_count == 2
    assert daisy.run_blockwise(pipeline=task, multiprocessing=False, progress=False, summary=False)
    with pytest.raises(TypeError, match="pass one"):
        daisy.run_blockwise(task, pipeline=task)


def test_an_empty_list_is_an_empty_success_as_in_1x(caplog):
    assert daisy.run_blockwise([]) is True
    assert daisy.run_blockwise([], return_states=True) == {}
    assert "no tasks" in caplog.text


ONE_BLOCK = """
import daisy
client = daisy.Client()
with client.acquire_block() as block:
    pass
"""


def test_a_worker_that_leaves_cleanly_after_its_work_is_not_a_crash(tmp_path):
    """A worker function that hands one block to a program it starts and
    then returns (exit status 0) while blocks are pending: not a crash, so
    even ``max_worker_restarts=0`` does not abandon the task, and it is
    replaced while work remains. Recorded with daisy 2.0.0
    (``/tmp/exit0/run.py``): 4 blocks, 2 workers, 4 workers started, all
    blocks done; ours the same."""
    import subprocess
    import sys

    def worker():
        subprocess.run([sys.executable, "-c", ONE_BLOCK], check=True, timeout=120)

    task = line_task("t", 4, process_function=worker, max_workers=2, max_worker_restarts=0)
    states = daisy.run_blockwise([task], return_states=True, progress=False, summary=False)
    s = states["t"]
    assert s.completed_count == 4 and not s.abandoned
    assert s.worker_restart_count == 0
    assert 2 <= s.worker_start_count <= 4


def test_a_fully_resumed_run_starts_no_workers(tmp_path):
    """Issue 15 ("no workers for nothing"): a task whose blocks are all
    marked done starts no worker process; a downstream task whose blocks
    are all done neither. Before, each started one that found nothing."""
    daisy.set_tracking_basedir(tmp_path)
    a = line_task("a", 4, process_function=noop, max_workers=2)
    b = line_task("b", 4, process_function=noop, upstream_tasks=[a])
    assert daisy.run_blockwise([b], progress=False, summary=False)
    states = daisy.run_blockwise([b], return_states=True, progress=False, summary=False)
    assert [s.skipped_count for s in states.values()] == [4, 4]
    assert [s.worker_start_count for s in states.values()] == [0, 0]
    report = daisy.last_report()
    assert report is not None and [report[t].workers.count for t in "ab"] == [0, 0]
    # half done: workers start for the other half only
    b.reset()
    states = daisy.run_blockwise([b], return_states=True, progress=False, summary=False)
    assert states["a"].worker_start_count == 0 and states["b"].worker_start_count >= 1
    assert states["b"].skipped_count == 0 and states["b"].completed_count == 4
