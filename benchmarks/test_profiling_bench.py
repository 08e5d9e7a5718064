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
  the server records it) against the same loop on a task without it,
  alternated round by round (the median difference is what tracking adds
  to each round trip; ``extra_info`` holds it in µs and in %);
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
import statistics
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
ROUNDS = 10


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


BATCH = 200


def _interleaved_loop(out: Path, combined: bool):
    """The worker function of the tracked task: it connects to it and to
    its untracked twin alike (two unmanaged clients, so the only difference
    is tracking), then alternates batches of ``BATCH`` blocks between the
    two (ABBA order), timing each batch: both modes run in the same
    process, against the same server, at the same moment. Leaves the
    per-block seconds of every batch in ``out/result.json``."""

    def loop():
        ctx = daisy.Context.from_env()
        host, port, token = ctx["hostname"], int(ctx["port"]), ctx["token"]
        clients = {
            True: daisy._daisy.Client(host, port, token, "tracked"),
            False: daisy._daisy.Client(host, port, token, "plain"),
        }
        held = {m: c.acquire_block() for m, c in clients.items()}
        times: dict[bool, list[float]] = {True: [], False: []}
        order = [False, True]
        while any(b is not None for b in held.values()):
            for measure in order:
                client, block = clients[measure], held[measure]
                n, start = 0, time.perf_counter()
                while block is not None and n < BATCH:
                    block.status = daisy.BlockStatus.SUCCESS
                    if combined:
                        block = client.release_and_acquire(block)
                    else:
                        client.release_block(block)
                        block = client.acquire_block()
                    n += 1
                if n == BATCH:
                    times[measure].append((time.perf_counter() - start) / n)
                held[measure] = block
            order.reverse()
        # written before the clients leave: once no connection is open the
        # run ends, and this process, which never connected as the task's
        # worker, is stopped at once as a worker not needed
        result = {"tracked": times[True], "plain": times[False]}
        (out / "result.json").write_text(json.dumps(result))
        for client in clients.values():
            client.disconnect()

    return loop


def _wait_for(path: Path):
    """The untracked twin's own worker: its blocks go to the tracked task's
    worker, so it only waits for that loop to finish."""

    def wait():
        deadline = time.monotonic() + 600
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    return wait


@pytest.mark.parametrize("combined", [False, True], ids=["acquire_release", "release_and_acquire"])
def test_client_round_trip_overhead(benchmark, combined):
    """Tracking on vs off in a worker's own loop, side by side: one worker
    process alternates batches of blocks between a task with
    ``resource_tracking=True`` (measured by the client, recorded by the
    server) and an identical task without it. The overhead is the median
    of the per-batch-pair differences. ``acquire_release`` is a worker
    function's or external client's loop; ``release_and_acquire`` is the
    loop daisy's own worker runs around a block function."""
    out = Path(tempfile.mkdtemp(prefix="daisy-bench-prof-"))
    daisy.logging.set_log_basedir(out / "logs")
    counter = iter(range(10_000))
    results: list[dict[str, list[float]]] = []

    def once():
        i = next(counter)
        (out / "result.json").unlink(missing_ok=True)
        tracked = _task(
            "tracked",
            _interleaved_loop(out, combined),
            tracking_path=str(out / f"tracked_{i}"),
            resource_tracking=True,
        )
        plain = _task(
            "plain", _wait_for(out / "result.json"), tracking_path=str(out / f"plain_{i}")
        )
        assert daisy.run_blockwise([tracked, plain], progress=False, summary=False)
        result = json.loads((out / "result.json").read_text())
        assert len(result["tracked"]) == len(result["plain"]) == N_BLOCKS // BATCH
        assert tracked.report().blocks.has_stats and not plain.report().blocks.has_stats
        assert tracked.report().blocks.count == plain.report().blocks.count == N_BLOCKS
        results.append(result)

    benchmark.pedantic(once, rounds=ROUNDS, iterations=1)
    plain_us = [t * 1e6 for r in results for t in r["plain"]]
    tracked_us = [t * 1e6 for r in results for t in r["tracked"]]
    diffs = [t - p for t, p in zip(tracked_us, plain_us, strict=True)]
    base, overhead = statistics.median(plain_us), statistics.median(diffs)
    q1, _, q3 = statistics.quantiles(diffs, n=4)
    benchmark.extra_info.update(
        untracked_us=base,
        tracked_us=statistics.median(tracked_us),
        overhead_us=overhead,
        overhead_us_iqr=[q1, q3],
        overhead_pct=100 * overhead / base,
        batch_pairs=len(diffs),
    )


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
