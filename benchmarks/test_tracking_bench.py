"""Tracking store benchmarks (pytest-benchmark).

- A fully resumed rerun of a 10^6-block task: every block already marked
  done, so the run only reads markers. Serial and with worker processes.
- The per-block cost of marking: a 10^5-block serial no-op run with a
  tracking store against the same run without one.
- A fully resumed rerun of a 10^7-block task (ours only: the store is made
  by writing its done chunk directly, which is this package's format;
  issue 44 asks for under 0.3 s, serial and with workers).

Only API that this package shares with the published daisy 2.0.0 is used
(``Task(tracking_path=...)``, ``run_blockwise(..., multiprocessing=...,
progress=False, summary=False)``), so the same file runs under either
installation (see ``compare_with_daisy200.py``). Every benchmark checks
that the run succeeded and that the markers were there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

import daisy

OURS = hasattr(getattr(daisy, "_daisy", None), "TaskSpec")

MILLION = (100, 100, 100)
HUNDRED_K = (10, 100, 100)
TEN_MILLION = (100, 100, 1000)


def noop(block):
    pass


def make_task(task_id, shape, tracking_path):
    dims = len(shape)
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,) * dims, shape),
        read_roi=daisy.Roi((0,) * dims, (1,) * dims),
        write_roi=daisy.Roi((0,) * dims, (1,) * dims),
        process_function=noop,
        read_write_conflict=False,
        tracking_path=tracking_path,
    )


def run(task, multiprocessing):
    return daisy.run_blockwise(
        [task], multiprocessing=multiprocessing, progress=False, summary=False
    )


@pytest.fixture(scope="module")
def million_done_store():
    """A store with every block of the 10^6-block task marked done."""
    path = Path(tempfile.mkdtemp(prefix="daisy-bench-track-")) / "store"
    assert run(make_task("resume", MILLION, str(path)), multiprocessing=False)
    return path


@pytest.mark.parametrize("multiprocessing", [False, True], ids=["serial", "workers"])
def test_resume_1e6_all_done(benchmark, million_done_store, multiprocessing):
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-bench-logs-"))

    def once():
        return run(make_task("resume", MILLION, str(million_done_store)), multiprocessing)

    assert benchmark.pedantic(once, rounds=3, iterations=1) is True


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "tracked"])
def test_serial_1e5_marking(benchmark, tracked):
    counter = iter(range(1000))

    def once():
        path = None
        if tracked:
            path = str(Path(tempfile.mkdtemp(prefix="daisy-bench-mark-")) / "store")
        return run(make_task(f"mark_{next(counter)}", HUNDRED_K, path), False)

    assert benchmark.pedantic(once, rounds=5, iterations=1) is True


def stop_at_once(block):
    raise KeyboardInterrupt


@pytest.fixture(scope="module")
def ten_million_done_store():
    """A store with every block of the 10^7-block task marked done: a run
    stopped at its first block makes the store, then its done chunk (one
    byte per block, no header) is filled with ones."""
    path = Path(tempfile.mkdtemp(prefix="daisy-bench-track-")) / "store"
    task = make_task("resume", TEN_MILLION, str(path))
    task.process_function = stop_at_once
    with pytest.raises(KeyboardInterrupt):
        run(task, multiprocessing=False)
    chunk = path / "done" / "c" / "0" / "0" / "0"
    done = np.memmap(chunk, dtype=np.uint8, mode="r+")
    assert done.size == int(np.prod(TEN_MILLION))
    done[:] = 1
    done.flush()
    del done
    return path


@pytest.mark.skipif(not OURS, reason="the store is made in this package's format")
@pytest.mark.parametrize("multiprocessing", [False, True], ids=["serial", "workers"])
def test_resume_1e7_all_done(benchmark, ten_million_done_store, multiprocessing):
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-bench-logs-"))

    def once():
        task = make_task("resume", TEN_MILLION, str(ten_million_done_store))
        states = daisy.run_blockwise(
            [task],
            multiprocessing=multiprocessing,
            progress=False,
            summary=False,
            return_states=True,
        )
        return states["resume"]

    state = benchmark.pedantic(once, rounds=3, iterations=1)
    assert state.skipped_count == 10**7 and state.completed_count == 10**7
    assert state.worker_start_count == 0
