"""A slow ``check_function`` slows its own task only (issue 43).

A check that looks for a block's output on a slow shared filesystem (the
shared workloads' ``slow_check``: a marker file, after a pause) is the
common case. It runs for every ready block of its task; while it runs, an
unrelated task's workers must go on getting blocks. Measured before the
fix: a task with a 0.2 s check stretched another task's 300 fast blocks
from 0.36 s to 4.2 s, because the check ran on the server's own thread.

The behaviour asserted is an order, not a time: the fast task's last block
comes back before the slow task's checks are done, though the fast task
has fifteen times the blocks (before the fix it came back long after).
The figure is in ``benchmarks/check_function.py``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import daisy

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"
SLOW_BLOCKS, FAST_BLOCKS, SLOW = 20, 300, 0.3


@pytest.fixture
def workloads(tmp_path, monkeypatch):
    """The shared workloads on the path, their evidence in tmp_path."""
    monkeypatch.syspath_prepend(str(WORKLOADS))
    monkeypatch.setenv("DAISY_WL_DIR", str(tmp_path))
    monkeypatch.setenv("DAISY_WL_SLOW", str(SLOW))
    (tmp_path / "fast").mkdir()
    return tmp_path


def note_time(block):
    """A fast block function: one line with the time each block ended,
    appended to a file of its worker process."""
    path = Path(os.environ["DAISY_WL_DIR"]) / "fast" / str(os.getpid())
    with open(path, "a") as f:
        f.write(f"{time.time()!r}\n")


def line(task_id, blocks, process, **kwargs):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (blocks,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=process,
        **kwargs,
    )


def test_a_slow_check_function_does_not_stretch_another_tasks_run(workloads):
    import blockfns

    check_starts: list[float] = []

    def slow_check(block):
        check_starts.append(time.time())
        return blockfns.slow_check(block)

    slow = line("slow", SLOW_BLOCKS, blockfns.mark_done, check_function=slow_check, num_workers=1)
    fast = line("fast", FAST_BLOCKS, note_time, num_workers=2)
    assert daisy.run_blockwise([slow, fast])

    fast_ends = [float(t) for f in (workloads / "fast").iterdir() for t in f.read_text().split()]
    assert len(fast_ends) == FAST_BLOCKS
    assert len(list(workloads.glob("done-*"))) == SLOW_BLOCKS
    # every block of the slow task was checked, one at a time (the checks
    # of one task never overlap: user code need not be thread-safe)
    assert len(check_starts) == SLOW_BLOCKS
    gaps = [b - a for a, b in zip(check_starts, check_starts[1:], strict=False)]
    assert min(gaps) >= SLOW * 0.9, gaps
    # the fast task ran beside the checks, not between them: its last
    # block came back while the slow task still had checks to run
    # (SLOW_BLOCKS * SLOW = 6 s of checks against well under a second of
    # fast blocks on a quiet machine; before the fix, 2 blocks per check)
    assert max(fast_ends) < check_starts[-1], (
        f"the fast task ended {max(fast_ends) - check_starts[0]:.1f} s after the first check, "
        f"after the last check began ({check_starts[-1] - check_starts[0]:.1f} s)"
    )


def test_a_slow_check_says_done_without_a_worker_and_without_stalling(workloads):
    """A resumed task whose slow check finds every block done gets no
    worker (its checks run before its first worker, as they did on the
    server's thread), while a fast task beside it runs to the end."""
    import blockfns

    resumed = 8
    for i in range(resumed):
        (workloads / f"done-{i}").touch()
    started = workloads / "started"

    def never(block):
        started.touch()

    slow = line("resumed", resumed, never, check_function=blockfns.slow_check, num_workers=2)
    fast = line("fast", FAST_BLOCKS, note_time, num_workers=2)
    states = daisy.Server().run_blockwise([slow, fast], progress=False)
    assert not started.exists()
    assert states["resumed"].skipped_count == states["resumed"].completed_count == resumed
    assert states["resumed"].worker_start_count == 0
    assert states["fast"].completed_count == FAST_BLOCKS


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


HUNG_CHECK = """
import os, sys, time
import daisy

def hung_check(block):
    open(os.path.join(sys.argv[1], "checking"), "w").close()
    time.sleep(600)  # a check stuck on a hung shared filesystem
    return False

task = daisy.Task(
    "hung",
    total_roi=daisy.Roi((0,), (4,)),
    read_roi=daisy.Roi((0,), (1,)),
    write_roi=daisy.Roi((0,), (1,)),
    process_function=lambda b: None,
    check_function=hung_check,
    max_workers=1,
)
daisy.run_blockwise([task], progress=False)
"""


def test_ctrl_c_stops_a_run_whose_check_function_hangs(tmp_path):
    """A guard for the check's new home: inline, a check ran in the
    driver's main thread, where Ctrl-C interrupted it; on the blocking pool
    it is not, so the tick must see Ctrl-C and stop the run while the
    check still hangs (it is waited for a moment, `CHECK_GRACE`, then left
    behind)."""
    import signal
    import subprocess

    script = tmp_path / "hung.py"
    script.write_text(HUNG_CHECK)
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "checking").exists():
            assert driver.poll() is None, driver.communicate()
            assert time.monotonic() < deadline, "the check was never asked"
            time.sleep(0.02)
        driver.send_signal(signal.SIGINT)
        try:
            _, err = driver.communicate(timeout=60)  # generous: only a hang misses it
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop a run whose check function hangs")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode != 0
    assert "KeyboardInterrupt" in err, err[-3000:]
