"""Split a no-op run's time into a fixed cost and a cost per block.

Runs 1 block and 10^4 blocks, five times each, for block functions and
worker functions with 1, 2 and 4 workers, and prints the medians: the
1-block run is the fixed cost (launcher, worker start, run end), the
difference divided by 10^4 - 1 the cost per block. Usage::

    python benchmarks/fixed_cost.py
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_functions import client_loop, noop  # noqa: E402
from test_runtime_bench import make_task  # noqa: E402

import daisy  # noqa: E402

N_BLOCKS = 10_000
ROUNDS = 5
_ids = itertools.count()


def timed_run(n_blocks: int, workers: int, function: Callable[..., None]) -> float:
    """Seconds one run of ``n_blocks`` no-op blocks takes."""
    task = make_task(f"fixed_cost_{next(_ids)}", function, workers, n_blocks)
    start = time.perf_counter()
    assert daisy.run_blockwise([task], progress=False, summary=False)
    return time.perf_counter() - start


def main() -> None:
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-fixed-cost-"))
    for function in (noop, client_loop):
        for workers in (1, 2, 4):
            fixed = statistics.median(timed_run(1, workers, function) for _ in range(ROUNDS))
            full = statistics.median(timed_run(N_BLOCKS, workers, function) for _ in range(ROUNDS))
            per_block = (full - fixed) / (N_BLOCKS - 1)
            print(
                f"{function.__name__:12} {workers} workers: fixed {fixed:.3f} s, "
                f"{N_BLOCKS} blocks {full:.3f} s, {per_block * 1e6:.1f} µs per block",
                flush=True,
            )


if __name__ == "__main__":
    main()
