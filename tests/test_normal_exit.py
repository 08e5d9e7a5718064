"""A worker that leaves on its own is not a death (issue 40, item 5).

A worker function that processes some blocks and returns (to cap its
memory, or because it was written to take a fixed number) exits 0 while its
task still has work. daisy 1.2.2 hung once every worker had left; daisy
2.0.0 started a replacement at once, as for a crash. Here a normal exit is
counted as what it is ("left" in the report, no restart), and a worker is
replaced only when blocks are ready and no live worker of its task is left:
the 1.x line's own test (of two workers, one leaves after one block while
the other serves the task slowly) starts no third worker, and a run whose
every worker leaves after one block still finishes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import line_task

import daisy


def one_then_slow(base: str):
    """A worker function: the first worker to claim ``first`` leaves after
    one block; any other serves blocks slowly until there are none."""

    def worker() -> None:
        with open(os.path.join(base, "starts", str(os.getpid())), "w"):
            pass
        try:
            fd = os.open(os.path.join(base, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
            leaves = True
        except FileExistsError:
            leaves = False
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    return
                if not leaves:
                    time.sleep(0.2)
            if leaves:
                return

    return worker


def one_block_each(base: str):
    """A worker function that takes one block and leaves."""

    def worker() -> None:
        with open(os.path.join(base, "starts", str(os.getpid())), "w"):
            pass
        client = daisy.Client()
        with client.acquire_block():
            pass

    return worker


@pytest.fixture
def base(tmp_path: Path) -> str:
    (tmp_path / "starts").mkdir()
    return str(tmp_path)


def test_a_worker_that_leaves_while_another_serves_is_not_replaced(base):
    task = line_task("leaver", 10, process_function=one_then_slow(base), max_workers=2)
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    state = states["leaver"]
    assert state.completed_count == 10 and state.failed_count == 0
    started = len(os.listdir(os.path.join(base, "starts")))
    assert started <= 2, f"{started} workers started for a task of max_workers=2"
    assert state.worker_restart_count == 0
    exits = server.last_report["leaver"].workers.exits
    assert exits.get("left") == 1, exits
    assert exits.get("error", 0) == 0, exits


def test_a_run_whose_every_worker_leaves_after_one_block_still_finishes(base):
    task = line_task("each_one", 6, process_function=one_block_each(base), max_workers=2)
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    state = states["each_one"]
    assert state.completed_count == 6 and state.failed_count == 0
    assert state.worker_restart_count == 0
    exits = server.last_report["each_one"].workers.exits
    assert exits.get("error", 0) == 0, exits
    # each worker took its block and left; the last may hear "no more"
    assert exits.get("left", 0) >= 4, exits
