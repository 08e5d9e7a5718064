"""Peak RSS is the block's own, whatever the driver holds.

A worker is forked from the driver and exec'd; Linux keeps the largest RSS
a process had before its exec in ``ru_maxrss`` for good, so a figure read
from there reports the driver's size for every block. These tests hold a
big driver (400 MB, touched) and check that every block's peak is its own:
at least the 50 MB it allocates, far below the driver's size. They failed
against the profiler that read ``ru_maxrss``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import line_task, run_tasks

MB = 2**20


def allocate_50_mb(block: object) -> None:
    chunk = np.ones(50 * MB // 8)
    chunk.sum()


def test_a_big_driver_does_not_inflate_its_workers_peaks(tracking: Path) -> None:
    ballast = np.ones(400 * MB // 8)  # held, and touched, while workers start
    assert ballast.sum() > 0
    task = line_task(
        "peaks", 4, process_function=allocate_50_mb, resource_tracking=True, max_workers=2
    )
    run_tasks([task], mp=True)
    peaks = [r.stats.peak_rss_bytes for r in task.block_records() if r.stats is not None]
    assert len(peaks) == 4
    for peak in peaks:
        assert 50 * MB <= peak < 200 * MB, [p // MB for p in peaks]
    report = task.report()
    assert report is not None and report.blocks.peak_rss_source == "high_water_mark"
    del ballast


def allocate_600_mb_in_block_2(block: object) -> None:
    size = 600 if block.block_id[1] == 2 else 50  # type: ignore[attr-defined]
    chunk = np.ones(size * MB // 8)
    chunk.sum()


def test_a_block_above_the_drivers_size_reports_its_own_peak(tracking: Path) -> None:
    """The profiler reads the peak from ``ru_maxrss`` where that is exact
    (the block rose above what the process inherited from its driver) and
    from ``VmHWM`` otherwise: both kinds of block in one worker."""
    ballast = np.ones(400 * MB // 8)
    assert ballast.sum() > 0
    task = line_task(
        "mixed", 5, process_function=allocate_600_mb_in_block_2, resource_tracking=True
    )
    run_tasks([task], mp=True)
    peaks = {
        r.block_id[1]: r.stats.peak_rss_bytes for r in task.block_records() if r.stats is not None
    }
    assert sorted(peaks) == [0, 1, 2, 3, 4]
    assert 600 * MB <= peaks[2] < 800 * MB, {k: v // MB for k, v in peaks.items()}
    for i in (0, 1, 3, 4):
        assert 50 * MB <= peaks[i] < 200 * MB, {k: v // MB for k, v in peaks.items()}
    del ballast


SERIAL = """
import json, sys
import numpy as np
import daisy
MB = 2**20
daisy.set_tracking_basedir(sys.argv[1])
ballast = np.ones(400 * MB // 8)
ballast.sum()
del ballast  # the driver's peak so far is 400 MB; it must not reach the blocks
def block_fn(block):
    chunk = np.ones(50 * MB // 8)
    chunk.sum()
roi, b = daisy.Roi((0,), (30,)), daisy.Roi((0,), (10,))
task = daisy.Task("serial", roi, b, b, process_function=block_fn, resource_tracking=True)
daisy.run_blockwise([task], multiprocessing=False)
peaks = [r.stats.peak_rss_bytes for r in task.block_records()]
big = np.ones(400 * MB // 8)
big.sum()
del big
block = daisy.Block(roi, b, b)
with daisy.profile_block(block):
    chunk = np.ones(50 * MB // 8)
    chunk.sum()
print(json.dumps({"serial": peaks, "profile_block": block.stats.peak_rss_bytes}))
"""


def test_the_drivers_earlier_peak_does_not_reach_serial_blocks_or_profile_block(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SERIAL, str(tmp_path / "tracking")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    for peak in peaks["serial"] + [peaks["profile_block"]]:
        assert 50 * MB <= peak < 200 * MB, {k: v for k, v in peaks.items()}
