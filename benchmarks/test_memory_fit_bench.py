"""Workers that fit the node (issue 53), under pytest-benchmark: the issue's
workload (120 blocks of 150 MiB, two of every 20 at 1,200 MiB) with eight
workers in a fresh 3 GiB memory cgroup, timed, with what must hold asserted
every time (also in the untimed `make bench-check` pass): no kernel OOM kill,
every block done once and counted. The side-by-side table with daisy 2.0.0
and the hand-picked count is `memory_fit.py`'s (see RESULTS.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_fit  # noqa: E402


def test_eight_workers_in_a_3_gib_cgroup(benchmark):
    why_not = memory_fit.can_make_cgroup()
    if why_not is not None:
        pytest.skip(f"no memory cgroup can be made here: {why_not}")

    def run() -> dict:
        return memory_fit.run_one(sys.executable, "ours", "8", 2, 3 << 30, timeout=300)

    row = benchmark.pedantic(run, rounds=1, iterations=1)
    assert row["kills"] == 0, row
    assert row["done"] == memory_fit.BLOCKS and row["marked"] == memory_fit.BLOCKS, row
    assert row["twice"] == 0, row
