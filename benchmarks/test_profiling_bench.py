"""The block profiler's cost per block (this package only).

Resource tracking measures every block in the worker (two ``getrusage``,
two reads of ``/proc/self/io``, one ``clear_refs`` write). Targets: under
30 µs per block, and under 10% of the round trip of a block without
tracking. Measured three ways, each side by side with the same work
without measurement:

- ``profile_block``: the bare start/stop of the profiler, 10^5 times in one
  process, against an empty ``with`` block;
- ``client``: a worker's own acquire + release loop over 10^4 blocks of a
  task with ``resource_tracking=True`` (the client measures every block,
  the server records it) against the same loop on a task without it (the
  difference is what tracking adds to each round trip);
- ``run``: a whole no-op run of 10^4 blocks on one worker with
  ``resource_tracking=True`` (measurement, and its recording in the
  tracking store) against the same run without it.

Run with ``python -m pytest benchmarks/test_profiling_bench.py --benchmark-only``;
``extra_info`` of each benchmark holds the per-block figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

import daisy

pytestmark = pytest.mark.skipif(
    not hasattr(getattr(daisy, "_daisy", None), "profile_block"),
    reason="measures this package's own profiler",
)

N_PROFILE = 100_000
N_BLOCKS = 10_000


@pytest.mark.parametrize("measure", [False, True], ids=["empty", "profiled"])
def test_profile_block_start_stop(benchmark, measure):
    block = daisy.Block(daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)))

    def once():
        start = time.perf_counter()
        for _ in range(N_PROFILE):
            with daisy.profile_block(block) if measure else contextlib.nullcontext():
                pass
        return (time.perf_counter() - start) / N_PROFILE

    per_block = benchmark.pedantic(once, rounds=3, iterations=1)
    benchmark.extra_info["per_block_us"] = per_block * 1e6
    assert per_block > 0


def _task(task_id, function, tracking_path=None, resource_tracking=False):
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (N_BLOCKS,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=function,
        read_write_conflict=False,
        max_workers=1,
        tracking_path=tracking_path,
        resource_tracking=resource_tracking,
    )


@pytest.mark.parametrize("measure", [False, True], ids=["unmeasured", "measured"])
def test_client_round_trip(benchmark, measure):
    out = Path(tempfile.mkdtemp(prefix="daisy-bench-prof-"))
    daisy.logging.set_log_basedir(out / "logs")

    def loop():
        ctx = daisy.Context.from_env()
        client = daisy._daisy.Client(
            ctx["hostname"], ctx["port"], ctx["token"], ctx["task_id"], ctx["worker_id"], measure
        )
        n, start = 0, time.perf_counter()
        while (block := client.acquire_block()) is not None:
            block.status = daisy.BlockStatus.SUCCESS
            client.release_block(block)
            n += 1
        elapsed = time.perf_counter() - start
        client.disconnect()
        (out / "result.json").write_text(json.dumps({"n": n, "seconds": elapsed}))

    counter = iter(range(1000))

    def once():
        i = next(counter)
        task = _task(
            f"client_{measure}_{i}",
            loop,
            tracking_path=str(out / f"store_{i}"),
            resource_tracking=measure,
        )
        assert daisy.run_blockwise([task], progress=False, summary=False)
        result = json.loads((out / "result.json").read_text())
        assert result["n"] == N_BLOCKS
        return result["seconds"] / result["n"]

    per_block = benchmark.pedantic(once, rounds=3, iterations=1)
    benchmark.extra_info["round_trip_us"] = per_block * 1e6


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "resource_tracking"])
def test_noop_run(benchmark, tracked):
    out = Path(tempfile.mkdtemp(prefix="daisy-bench-prof-run-"))
    daisy.logging.set_log_basedir(out / "logs")
    counter = iter(range(1000))

    def once():
        i = next(counter)
        task = _task(
            f"run_{tracked}_{i}",
            lambda b: None,
            tracking_path=str(out / f"store_{i}"),
            resource_tracking=tracked,
        )
        assert daisy.run_blockwise([task], progress=False, summary=False)
        report = task.report()
        assert report.blocks.count == N_BLOCKS
        assert report.blocks.has_stats == tracked
        return report.blocks.round_trip.mean

    round_trip = benchmark.pedantic(once, rounds=3, iterations=1)
    benchmark.extra_info["round_trip_us"] = round_trip * 1e6
    os.environ.pop("DAISY_CONTEXT", None)
