"""No worker churn on a busy node (issue 40, item 6).

Three chained tasks share a resource budget, as a segmentation pipeline's
do: ``edges`` (3 workers, a cpu each), ``segment`` (4 workers, a gpu each,
one gpu in all) and ``recolor`` (4 workers, a cpu each), under
``resources={"cpu": 4, "gpu": 1}``, 64 blocks each of 4-5 ms. On a quiet
machine recolor started its 4 workers; with two busy loops beside the run,
8 to 12, every one dismissed by the server: a waiting worker of a task was
retired to make room whenever another task wanted one more worker, and
started again a moment later. A task now yields a worker to another only
when that other task would otherwise starve (it has no live worker at
all), so each task starts at most its ``max_workers``.

The condition is made for real: two ``while True: pass`` processes run
beside every round."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import line_task

import daisy

ROUNDS = 5


def short_block(block):
    time.sleep(0.004 + 0.001 * (block.block_id[1] % 2))


@pytest.fixture
def busy_node():
    """Two busy loops beside the test, on this 2-core machine (or any)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


def pipeline(k: int):
    edges = line_task(
        f"edges{k}", 64, process_function=short_block, max_workers=3, requires={"cpu": 1}
    )
    segment = line_task(
        f"segment{k}",
        64,
        process_function=short_block,
        max_workers=4,
        requires={"gpu": 1},
        upstream_tasks=[edges],
    )
    recolor = line_task(
        f"recolor{k}",
        64,
        process_function=short_block,
        max_workers=4,
        requires={"cpu": 1},
        upstream_tasks=[segment],
    )
    return [edges, segment, recolor]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_each_task_starts_at_most_its_max_workers_on_a_busy_node(busy_node):
    started = []
    for k in range(ROUNDS):
        tasks = pipeline(k)
        server = daisy.Server()
        states = server.run_blockwise(tasks, progress=False, resources={"cpu": 4, "gpu": 1})
        assert all(s.completed_count == 64 for s in states.values()), states
        per_task = {t: states[t].worker_start_count for t in states}
        started.append(per_task)
        exits = {t: server.last_report[t].workers.exits for t in states}
        assert per_task[f"edges{k}"] <= 3, (per_task, exits)
        assert per_task[f"segment{k}"] <= 4, (per_task, exits)
        assert per_task[f"recolor{k}"] <= 4, (per_task, exits)
    assert len(started) == ROUNDS
