"""Distributed runtime throughput benchmarks (pytest-benchmark).

No-op blocks on worker processes: 10^4 blocks with 1, 2 and 4 workers, as
block functions and as worker functions (a ``daisy.Client`` loop); a 3-D
grid of 20^3 blocks whose read ROIs overlap their neighbours' write ROIs
(so the scheduler holds back conflicting blocks) on 2 workers; a two-task
pipeline of 2 x 5000 blocks, each downstream block waiting for its
upstream one, on 2 workers per task; plus the per-block round trip a
worker sees (acquire + release, measured inside the worker, so worker
start-up is excluded). Only API that this package
shares with the published daisy 2.0.0 is used, so the same file runs under
either installation (see ``compare_with_daisy200.py``).

Every benchmark checks its result (all blocks completed), so a run is a
correctness check as well as a timing.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import pytest
from bench_functions import client_loop, never_done, noop, note_end, slow_check

import daisy

N_BLOCKS = 10_000


def make_task(task_id, process_function, workers, n_blocks=N_BLOCKS, **kwargs):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (n_blocks,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=process_function,
        read_write_conflict=False,
        num_workers=workers,
        max_retries=0,
        **kwargs,
    )


def run(task, *more):
    logdir = tempfile.mkdtemp(prefix="daisy-bench-logs-")
    daisy.logging.set_log_basedir(logdir)
    return daisy.run_blockwise([task, *more], progress=False, summary=False)


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("mode", ["block_function", "worker_function"])
def test_noop_throughput(benchmark, mode, workers):
    function = noop if mode == "block_function" else client_loop
    counter = iter(range(1000))

    def once():
        return run(make_task(f"noop_{mode}_{workers}_{next(counter)}", function, workers))

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    benchmark.extra_info["blocks"] = N_BLOCKS
    if benchmark.stats is not None:  # None with --benchmark-disable: nothing was timed
        benchmark.extra_info["blocks_per_second"] = N_BLOCKS / benchmark.stats.stats.median


@pytest.mark.parametrize("workers", [1, 2])
def test_noop_throughput_with_a_check_function(benchmark, workers):
    """10^4 no-op blocks whose check function finds nothing done: what
    asking the check costs per block (issue 43 moved it off the server's
    thread)."""
    counter = iter(range(1000))

    def once():
        task_id = f"checked_{workers}_{next(counter)}"
        return run(make_task(task_id, noop, workers, check_function=never_done))

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    if benchmark.stats is not None:
        benchmark.extra_info["blocks_per_second"] = N_BLOCKS / benchmark.stats.stats.median


FAST_BLOCKS, SLOW_BLOCKS = 300, 10


def test_fast_task_beside_a_slow_check(benchmark):
    """Two unrelated tasks: ``slow`` (10 blocks, a check function taking
    0.2 s a call, one worker) and ``fast`` (300 no-op blocks, two workers).
    The time measured is the whole run (at least the slow task's 2 s of
    checks); the figure that matters is ``fast_span_s`` in extra_info: from
    the run's start to the fast task's last block (issue 43: 4.2 s where the
    check ran on the server's thread, against 0.36 s without the slow task)."""
    counter = iter(range(1000))
    spans = []

    def once():
        k = next(counter)
        ends = tempfile.mkdtemp(prefix="daisy-bench-ends-")
        os.environ["DAISY_BENCH_ENDS_DIR"] = ends
        slow = make_task(f"slow_{k}", noop, 1, SLOW_BLOCKS, check_function=slow_check)
        fast = make_task(f"fast_{k}", note_end, 2, FAST_BLOCKS)
        start = time.time()
        ok = run(slow, fast)
        last = max(
            float(t)
            for name in os.listdir(ends)
            for t in open(os.path.join(ends, name)).read().split()
        )
        spans.append(last - start)
        return ok

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    benchmark.extra_info["fast_span_s"] = sorted(spans)[len(spans) // 2]
    benchmark.extra_info["fast_spans_s"] = spans


def test_noop_conflict_grid_20cubed(benchmark):
    """8000 blocks of 10^3 with one voxel of context: every block conflicts
    with its neighbours, 2 workers."""
    counter = iter(range(1000))
    n = 20 * 20 * 20

    def once():
        task = daisy.Task(
            f"grid_{next(counter)}",
            total_roi=daisy.Roi((-1, -1, -1), (202, 202, 202)),
            read_roi=daisy.Roi((-1, -1, -1), (12, 12, 12)),
            write_roi=daisy.Roi((0, 0, 0), (10, 10, 10)),
            process_function=noop,
            read_write_conflict=True,
            num_workers=2,
            max_retries=0,
        )
        return run(task)

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    benchmark.extra_info["blocks"] = n
    if benchmark.stats is not None:
        benchmark.extra_info["blocks_per_second"] = n / benchmark.stats.stats.median


def test_noop_two_task_pipeline_2x5000(benchmark):
    """Two tasks of 5000 blocks, the second depending on the first, 2
    workers each."""
    counter = iter(range(1000))
    n = 5000

    def once():
        k = next(counter)
        up = make_task(f"up_{k}", noop, 2, n_blocks=n)
        down = daisy.Task(
            f"down_{k}",
            total_roi=daisy.Roi((0,), (n,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=noop,
            read_write_conflict=False,
            num_workers=2,
            max_retries=0,
            upstream_tasks=[up],
        )
        logdir = tempfile.mkdtemp(prefix="daisy-bench-logs-")
        daisy.logging.set_log_basedir(logdir)
        return daisy.run_blockwise([up, down], progress=False, summary=False)

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    benchmark.extra_info["blocks"] = 2 * n
    if benchmark.stats is not None:
        benchmark.extra_info["blocks_per_second"] = 2 * n / benchmark.stats.stats.median


def test_round_trip_per_block(benchmark):
    """Mean acquire + release time per block, timed inside one worker."""
    out_dir = tempfile.mkdtemp(prefix="daisy-bench-rt-")

    def timed_loop():
        client = daisy.Client()
        n = 0
        start = time.perf_counter()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                n += 1
        elapsed = time.perf_counter() - start
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as f:
            json.dump({"n": n, "seconds": elapsed}, f)

    counter = iter(range(1000))

    def once():
        for name in os.listdir(out_dir):
            os.remove(os.path.join(out_dir, name))
        assert run(make_task(f"round_trip_{next(counter)}", timed_loop, 1)) is True
        (result,) = [json.load(open(os.path.join(out_dir, n))) for n in os.listdir(out_dir)]
        assert result["n"] == N_BLOCKS
        return result["seconds"] / result["n"]

    per_block = benchmark.pedantic(once, rounds=3, iterations=1)
    benchmark.extra_info["round_trip_us"] = per_block * 1e6
    assert per_block > 0
