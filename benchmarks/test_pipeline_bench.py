"""A real pipeline, end to end (pytest-benchmark): what a new user's first
pipeline costs, worker start-up and teardown included.

A 256^3 uint8 Zarr volume is smoothed with 2 voxels of context (a box
mean), and the result thresholded by a downstream task: 64 blocks of 64^3
per task, one worker per task, both functions opening their datasets with
``funlib.persistence.open_ds`` (which imports zarr and dask.array). Only
API this package shares with daisy 2.0.0 is used, so the same file runs
under either (see ``compare_with_daisy200.py``). The datasets are made
once per benchmark (outside the timing); every round processes every
block, and checks the result against numpy.

``test_smoothing_alone_in_one_process`` is that pipeline's floor: the
upstream task's 64 blocks run one after another by a plain loop in the
benchmark's own process, its imports already done and no scheduler at all.
With one worker per task those blocks run in series under any scheduler,
so no run of the pipeline can take less than this.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

pytest.importorskip("funlib.persistence")

import daisy  # noqa: E402

SIZE = 256
BLOCK = 64
CONTEXT = 2


def _prepare(base: str, size: int = SIZE) -> np.ndarray:
    from funlib.persistence import prepare_ds

    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(size,) * 3, dtype=np.uint8)
    for name in ("raw", "smooth", "mask"):
        ds = prepare_ds(
            os.path.join(base, f"{name}.zarr"),
            shape=(size,) * 3,
            dtype=np.uint8,
            chunk_shape=(BLOCK,) * 3,
            mode="w",
        )
        if name == "raw":
            ds[ds.roi] = raw
    return raw


def _tasks(size: int = SIZE) -> list[daisy.Task]:
    from bench_functions import smooth, threshold

    total = daisy.Roi((0, 0, 0), (size,) * 3)
    write = daisy.Roi((0, 0, 0), (BLOCK,) * 3)
    read = write.grow((CONTEXT,) * 3, (CONTEXT,) * 3)
    smoothing = daisy.Task(
        "smooth",
        total_roi=total.grow((CONTEXT,) * 3, (CONTEXT,) * 3),
        read_roi=read,
        write_roi=write,
        process_function=smooth,
        read_write_conflict=False,
        num_workers=1,
        max_retries=0,
    )
    thresholding = daisy.Task(
        "threshold",
        total_roi=total,
        read_roi=write,
        write_roi=write,
        process_function=threshold,
        read_write_conflict=False,
        num_workers=1,
        max_retries=0,
        upstream_tasks=[smoothing],
    )
    return [smoothing, thresholding]


def _expected_smooth(raw: np.ndarray) -> np.ndarray:
    from bench_functions import box_sum

    k = 2 * CONTEXT + 1
    return (box_sum(np.pad(raw, CONTEXT).astype(np.int32), k) // k**3).astype(np.uint8)


def _expected_mask(raw: np.ndarray) -> np.ndarray:
    return (_expected_smooth(raw) > 127).astype(np.uint8)


def _datasets(monkeypatch, size: int = SIZE) -> tuple[str, np.ndarray]:
    """A fresh directory with the pipeline's datasets, its path set where the
    functions (in this process and in workers) look for it; and the raw data."""
    base = tempfile.mkdtemp(prefix="daisy-bench-pipeline-")
    # the workers (and their launchers) read the dataset paths from here
    monkeypatch.setenv("DAISY_BENCH_PIPELINE_DIR", base)
    from bench_functions import point_paths_at

    point_paths_at(base)
    return base, _prepare(base, size)


@pytest.mark.parametrize("size", [128, SIZE])
def test_smooth_then_threshold_pipeline(benchmark, monkeypatch, size):
    """At two sizes (8 and 64 blocks a task), so the run's fixed cost and
    its cost per block separate."""
    base, raw = _datasets(monkeypatch, size)
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-bench-logs-"))

    def once():
        return daisy.run_blockwise(_tasks(size), progress=False, summary=False)

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    from funlib.persistence import open_ds

    mask = open_ds(os.path.join(base, "mask.zarr"), mode="r")
    assert np.array_equal(mask[mask.roi], _expected_mask(raw))
    benchmark.extra_info["blocks"] = 2 * (size // BLOCK) ** 3
    report = getattr(daisy, "last_report", None)
    if report is not None and hasattr(daisy, "_daisy"):
        for task_id, task_report in report().tasks.items():
            w = task_report.workers
            benchmark.extra_info[f"{task_id}_startup_s"] = w.startup.mean
            benchmark.extra_info[f"{task_id}_teardown_s"] = w.teardown.mean
            benchmark.extra_info[f"{task_id}_launcher_s"] = getattr(w, "launcher_startup", None)


class _Block:
    """What ``smooth`` reads of a block: its read and write ROIs."""

    def __init__(self, write_roi: daisy.Roi) -> None:
        self.write_roi = write_roi
        self.read_roi = write_roi.grow((CONTEXT,) * 3, (CONTEXT,) * 3)


def test_smoothing_alone_in_one_process(benchmark, monkeypatch):
    base, raw = _datasets(monkeypatch)
    from bench_functions import smooth

    corners = range(0, SIZE, BLOCK)
    blocks = [
        _Block(daisy.Roi((z, y, x), (BLOCK,) * 3))
        for z in corners
        for y in corners
        for x in corners
    ]
    smooth(blocks[0])  # imports done before the timing, as a warm worker has them

    def once():
        for block in blocks:
            smooth(block)

    benchmark.pedantic(once, rounds=3, iterations=1)
    from funlib.persistence import open_ds

    smoothed = open_ds(os.path.join(base, "smooth.zarr"), mode="r")
    assert np.array_equal(smoothed[smoothed.roi], _expected_smooth(raw))
    benchmark.extra_info["blocks"] = len(blocks)
