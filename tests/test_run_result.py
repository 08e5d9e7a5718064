"""The run's typed boundary: both runners hand Python a
``daisy._daisy.RunResult`` (states, failures, report, and the exception
that stopped the run), not a dict unpacked by position and not ad-hoc
attributes on an exception. What users see is unchanged: a stopped run
raises its own exception with ``daisy_run_report`` on it."""

from __future__ import annotations

import json

import pytest
from conftest import line_task

import daisy
from daisy._daisy import RunResult
from daisy.scheduler import Scheduler


def _ok(block):
    pass


def _fails_on_two(block):
    if block.block_id[1] == 2:
        raise ValueError("block two is broken")


def test_a_serial_run_returns_a_typed_result():
    task = line_task("typed", 4, process_function=_ok)
    scheduler = Scheduler([task])
    result = scheduler._native.run_serial({"typed": _ok})
    assert isinstance(result, RunResult)
    assert result.stopped is None
    assert result.states["typed"].completed_count == 4
    assert json.loads(result.report_json)["typed"]["blocks"]["count"] == 4
    assert result.failures == [] and result.abandoned == []


@pytest.mark.parametrize("mp", [False, True])
def test_a_stopped_run_raises_its_own_exception_with_its_partial_report(mp):
    task = line_task("stops", 4, process_function=_fails_on_two, max_retries=0)
    if mp:
        # a worker's exception fails its block; a hook's stops the run
        with pytest.raises(KeyboardInterrupt) as stopped:
            daisy.run_blockwise([task], progress=[_Stopper()], summary=False)
    else:
        with pytest.raises(ValueError, match="block two is broken") as stopped:
            daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    e = stopped.value
    assert isinstance(e.daisy_run_report, daisy.RunReport)
    assert "stops" in e.daisy_run_report.tasks
    assert e.daisy_run_report["stops"].outcome == "interrupted"
    # nothing else rides on the exception
    assert not hasattr(e, "daisy_run_report_json")
    assert not hasattr(e, "daisy_run_states")


class _Stopper:
    """A progress observer that presses Ctrl-C on its first update."""

    def __init__(self) -> None:
        self.pressed = False

    def update(self, task_id, state, workers) -> None:
        if not self.pressed:
            self.pressed = True
            raise KeyboardInterrupt

    def close(self) -> None:
        pass


def test_failures_and_failed_blocks_are_records_read_by_name():
    """``Server.failures`` and ``RunFailed.failures`` are ``Failure``
    records (``task_id``, ``spatial_id``, ``worker_id``, ``reason``) and
    the failed blocks ``FailedBlock`` records, typed in the stub; each
    still unpacks as, and equals, the tuple earlier releases handed out."""
    from daisy._daisy import FailedBlock, Failure

    task = line_task("records", 4, process_function=_fails_on_two, max_retries=1)
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    assert states["records"].failed_count == 1
    assert len(server.failures) == 2  # the attempt and its retry
    first = server.failures[0]
    assert isinstance(first, Failure)
    assert first.task_id == "records" and first.spatial_id == 2
    assert first.worker_id is not None and "block two is broken" in first.reason
    tid, spatial_id, worker_id, reason = first
    assert (tid, spatial_id, worker_id, reason) == (
        first.task_id,
        first.spatial_id,
        first.worker_id,
        first.reason,
    )
    assert first == (tid, spatial_id, worker_id, reason) and first[-1] == reason
    assert len(first) == 4 and "Failure(task_id='records'" in repr(first)
    (block,) = server._last_failures.failed_blocks
    assert isinstance(block, FailedBlock)
    assert (block.task_id, block.spatial_id, block.attempts, block.failed) == (
        "records",
        2,
        2,
        True,
    )
    assert block.write_roi == "[20:30]" and "block two is broken" in block.message
    assert tuple(block) == ("records", 2, "[20:30]", 2, True, block.message)
    with pytest.raises(daisy.RunFailed) as failed:
        daisy.run_blockwise(
            [line_task("raised", 4, process_function=_fails_on_two, max_retries=0)],
            progress=False,
            summary=False,
            raise_on_failure=True,
        )
    assert [f.spatial_id for f in failed.value.failures] == [2]
