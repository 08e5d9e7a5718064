"""Workers that wait for blocks (issue 31): a downstream task's workers
wait for their upstream's blocks without leaving and being started again
(no churn), and with an ``idle_timeout`` they are handed back when they
waited that long and started again, up to ``max_workers``, when blocks are
ready; nothing is lost either way."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import daisy
from daisy.run_report import RunReport

UPSTREAM_BLOCKS = 24


def _slow(block):
    time.sleep(0.2)


def _fast(block):
    # one file per worker process that ran a block of this task
    Path(os.environ["IDLE_TEST_DIR"], f"down_{os.getpid()}").touch()
    time.sleep(0.005)


def _pipeline(idle_timeout: float | None) -> daisy.Task:
    total = daisy.Roi((0,), (10 * UPSTREAM_BLOCKS,))
    up = daisy.Task(
        "segment",
        total_roi=total,
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=_slow,
        max_workers=2,
        max_retries=0,
    )
    # each recolour block reads its upstream neighbours: it waits for three
    # upstream blocks, which come two at a time every 0.2 s
    return daisy.Task(
        "recolour",
        total_roi=total,
        read_roi=daisy.Roi((-10,), (30,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=_fast,
        max_workers=4,
        max_retries=0,
        fit="shrink",
        upstream_tasks=[up],
        idle_timeout=idle_timeout,
    )


def _run(tmp_path: Path, monkeypatch, idle_timeout: float | None) -> tuple[RunReport, dict]:
    marks = tmp_path / f"marks_{idle_timeout}"
    marks.mkdir()
    monkeypatch.setenv("IDLE_TEST_DIR", str(marks))
    monkeypatch.chdir(tmp_path)
    server = daisy.Server()
    states = server.run_blockwise([_pipeline(idle_timeout)], progress=False)
    assert server.last_report is not None
    return server.last_report, states


def test_a_downstream_task_waiting_on_a_slow_upstream_starts_no_more_than_max_workers(
    tmp_path, monkeypatch
):
    report, states = _run(tmp_path, monkeypatch, None)
    assert all(s.all_completed for s in states.values()), states
    down = report["recolour"].workers
    assert 1 <= down.count <= 4, f"{down.count} recolour workers started: {down.exits}"
    assert down.exits.get("clean") == down.count, down.exits
    assert down.handed_back == 0 and down.idle_timeout is None
    assert states["recolour"].worker_restart_count == 0
    # the workers that ran blocks are among those started
    ran = list((tmp_path / "marks_None").iterdir())
    assert 1 <= len(ran) <= down.count
    # they waited for the upstream: that is idle worker-seconds, counted
    assert down.idle_seconds > 0.5, down.idle_seconds


def test_an_idle_timeout_hands_waiting_workers_back_and_finishes_every_block(tmp_path, monkeypatch):
    waited, _ = _run(tmp_path, monkeypatch, None)
    report, states = _run(tmp_path, monkeypatch, 0.1)
    assert all(s.all_completed for s in states.values()), states
    assert states["recolour"].completed_count == states["recolour"].total_block_count > 20
    down = report["recolour"].workers
    assert down.idle_timeout == pytest.approx(0.1)
    assert down.handed_back >= 1, down.exits
    # handed back is neither a crash nor a restart
    assert states["recolour"].worker_restart_count == 0
    assert states["recolour"].worker_failure_count == 0
    assert set(down.exits) <= {"clean", "idle"}, down.exits
    # fewer idle worker-seconds than the same pipeline without it
    assert down.idle_seconds < waited["recolour"].workers.idle_seconds, (
        down.idle_seconds,
        waited["recolour"].workers.idle_seconds,
    )
    # the panel says it
    panel = report.render()
    assert f"{down.handed_back} handed back (idle_timeout 100.0 ms)" in panel, panel


def test_the_runs_idle_timeout_applies_to_tasks_without_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("IDLE_TEST_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    server = daisy.Server(idle_timeout=0.1)
    states = server.run_blockwise([_pipeline(None)], progress=False)
    assert all(s.all_completed for s in states.values())
    assert server.last_report is not None
    assert server.last_report["recolour"].workers.idle_timeout == pytest.approx(0.1)
    assert server.last_report["recolour"].workers.handed_back >= 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_an_idle_timeout_that_is_not_a_positive_number_of_seconds_is_refused(bad):
    with pytest.raises(ValueError, match="idle_timeout: must be a positive, finite"):
        _pipeline(bad)
    with pytest.raises(TypeError, match="idle_timeout: expected seconds"):
        _pipeline("5")  # type: ignore[arg-type]


def test_remote_spawners_hand_idle_workers_back_by_default_and_local_ones_do_not():
    assert daisy.LocalSpawner().idle_timeout is None
    assert daisy.SlurmSpawner().idle_timeout == 300.0
    assert daisy.SlurmSpawner(idle_timeout=None).idle_timeout is None


class _ClusterLike(daisy.LocalSpawner):
    """Local processes the report counts as a cluster's (not "local")."""

    name = "cluster"


def test_workers_that_held_nodes_idle_without_an_idle_timeout_are_pointed_out(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("IDLE_TEST_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    down = _pipeline(None)
    down.spawner = _ClusterLike()
    down.max_workers = 1
    # a single worker that waits about 2 s of its 2.5 s for the upstream
    server = daisy.Server()
    server.run_blockwise([down], progress=False)
    assert server.last_report is not None
    hints = [n for n in server.last_report["recolour"].notices if "idle_timeout" in n]
    assert len(hints) == 1, server.last_report["recolour"].notices
    assert "worker-seconds for blocks" in hints[0]
    assert hints[0] in server.last_report.render()
    # the upstream's busy workers get no such hint, nor local ones
    assert not [n for n in server.last_report["segment"].notices if "idle_timeout" in n]
