"""Scheduler throughput benchmarks (pytest-benchmark).

Cases a-c use only API that this package shares with the published daisy
2.0.0 (``daisy.Task``, ``daisy.Roi``, ``daisy.Scheduler([task])`` with
``acquire_block``/``release_block``, ``daisy.BlockStatus`` and
``daisy.run_blockwise([task], multiprocessing=False, summary=False)``), so
the same file runs under either installation and the timings compare
directly (see ``compare_with_daisy200.py``). Case d measures a detail of
this package only and is skipped elsewhere.

Every benchmark also checks its result (number of blocks handed out or
processed), so a run is a correctness check as well as a timing.

Run with ``python -m pytest benchmarks --benchmark-only``.
"""

from __future__ import annotations

import pytest

import daisy

N = 100  # blocks per axis for the 10^6-block cases
TASK_ID = "bench"

# Case d needs the lazily converted block ROIs of this package's Rust core.
# Its extension module exports ``TaskSpec`` (the native task description);
# other daisy installations (e.g. the published 2.0.0 wheel) do not, and
# there case d is skipped.
OURS = hasattr(getattr(daisy, "_daisy", None), "TaskSpec")


def make_task(shape, context=0, read_write_conflict=False, process_function=None):
    """A task whose write blocks are single voxels tiling ``shape`` exactly,
    reading ``context`` extra voxels on every side."""
    dims = len(shape)
    total = daisy.Roi((-context,) * dims, tuple(s + 2 * context for s in shape))
    read = daisy.Roi((-context,) * dims, (1 + 2 * context,) * dims)
    write = daisy.Roi((0,) * dims, (1,) * dims)
    return daisy.Task(
        task_id=TASK_ID,
        total_roi=total,
        read_roi=read,
        write_roi=write,
        process_function=process_function,
        read_write_conflict=read_write_conflict,
        fit="valid",
    )


def drain(task):
    """Acquire and release (as SUCCESS) every block of ``task``, one at a
    time; the number of blocks handed out."""
    scheduler = daisy.Scheduler([task])
    success = daisy.BlockStatus.SUCCESS
    count = 0
    while (block := scheduler.acquire_block(TASK_ID)) is not None:
        block.status = success
        scheduler.release_block(block)
        count += 1
    return count


def test_a_scheduler_1e6_no_conflict(benchmark):
    """a) 10^6 blocks of (0,0,0)+(100,100,100), read = write = one voxel,
    read_write_conflict=False, through the acquire/release loop (task and
    scheduler construction included)."""
    count = benchmark.pedantic(
        lambda: drain(make_task((N, N, N))), rounds=3, iterations=1, warmup_rounds=0
    )
    benchmark.extra_info["blocks"] = count
    assert count == N**3


def test_b_scheduler_1e6_conflict_context1(benchmark):
    """b) as a, but read_write_conflict=True and a read ROI with context 1
    on every side (total (-1,-1,-1)+(102,102,102), still 10^6 write
    blocks)."""
    count = benchmark.pedantic(
        lambda: drain(make_task((N, N, N), context=1, read_write_conflict=True)),
        rounds=3,
        iterations=1,
        warmup_rounds=0,
    )
    benchmark.extra_info["blocks"] = count
    assert count == N**3


def test_c_run_blockwise_serial_1e5(benchmark, capsys):
    """c) run_blockwise over 10^5 blocks ((0,0,0)+(10,100,100)) in this
    process (multiprocessing=False) with a process function that only
    counts, summary=False (and stdout captured, in case anything prints)."""
    processed = []

    def run():
        processed.clear()
        task = make_task((10, N, N), process_function=lambda block: processed.append(None))
        return daisy.run_blockwise([task], multiprocessing=False, summary=False)

    ok = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=0)
    capsys.readouterr()
    benchmark.extra_info["blocks"] = len(processed)
    assert ok is True
    assert len(processed) == 10 * N * N


def drain_touching_rois(task):
    """As `drain`, but read ``block.read_roi`` and ``block.write_roi`` of
    every block (which converts them to funlib Rois); the count and the last
    block's ROIs."""
    scheduler = daisy.Scheduler([task])
    success = daisy.BlockStatus.SUCCESS
    count = 0
    read = write = None
    while (block := scheduler.acquire_block(TASK_ID)) is not None:
        read = block.read_roi
        write = block.write_roi
        block.status = success
        scheduler.release_block(block)
        count += 1
    return count, read, write


@pytest.mark.skipif(not OURS, reason="ROI conversion cost is specific to this package's core")
def test_d_rois_untouched_1e5(benchmark):
    """d) baseline for the ROI conversion cost: acquire/release 10^5
    blocks without reading their ROIs."""
    count = benchmark.pedantic(
        lambda: drain(make_task((10, N, N))), rounds=5, iterations=1, warmup_rounds=0
    )
    benchmark.extra_info["blocks"] = count
    assert count == 10 * N * N


@pytest.mark.skipif(not OURS, reason="ROI conversion cost is specific to this package's core")
def test_d_rois_touched_1e5(benchmark):
    """d) as the baseline, but reading block.read_roi and block.write_roi of
    every block; (touched - untouched) / 10^5 is the per-block cost of
    building the two funlib Rois."""
    count, read, write = benchmark.pedantic(
        lambda: drain_touching_rois(make_task((10, N, N))),
        rounds=5,
        iterations=1,
        warmup_rounds=0,
    )
    benchmark.extra_info["blocks"] = count
    assert count == 10 * N * N
    # The last block handed out is inside the total ROI, one voxel big.
    assert isinstance(read, daisy.Roi) and isinstance(write, daisy.Roi)
    assert read == write
    assert tuple(write.shape) == (1, 1, 1)
    assert daisy.Roi((0, 0, 0), (10, N, N)).contains(write)
