"""What GPU tracking costs per block (this package only).

A task with ``resource_tracking=True`` measures every block; with
``gpu_tracking=True`` its profiler also asks NVML for the process's GPU
memory at the block's start and end, runs a sampler thread while the block
runs, and asks for the process's utilisation samples at the end. This
benchmark runs 2000 no-op blocks serially (in this process: no worker or
scheduler noise) three ways, alternated round by round:

- ``off``: resource tracking without GPU figures;
- ``absent``: GPU tracking where NVML cannot be loaded (the cost of asking
  once per run, then nothing per block);
- ``stand-in``: GPU tracking against ``tests/fake_nvml/fake_nvml.c``, a
  stand-in library that answers from small files (each call opens and
  reads one, a few µs, the same order as a real NVML call's ioctl). The
  thread start and join and daisy's own bookkeeping are real; the driver's
  own time per call is not, and is what the on-GPU check measures.

``extra_info`` holds the per-block medians in µs and the difference to
``off``. Run with ``python -m pytest benchmarks/test_gpu_tracking_bench.py
--benchmark-only``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytest

import daisy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fake_nvml.build import build_fake_nvml  # noqa: E402

pytestmark = pytest.mark.skipif(
    "gpu_tracking" not in daisy.Task.__init__.__code__.co_varnames,
    reason="measures this package's GPU tracking",
)

N_BLOCKS = 2000
ROUNDS = 5


def _noop(block: daisy.Block) -> None:
    pass


def _run(mode: str, library: Path, base: Path, k: int) -> float:
    """Seconds per block of one serial run in ``mode``."""
    os.environ["DAISY_NVML_LIBRARY"] = str(library if mode == "stand-in" else base / "absent.so")
    task = daisy.Task(
        f"gpu_{mode.replace('-', '_')}_{k}",
        total_roi=daisy.Roi((0,), (N_BLOCKS,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=_noop,
        resource_tracking=True,
        gpu_tracking=mode != "off",
        tracking_path=base / f"store_{mode}_{k}",
    )
    start = time.perf_counter()
    daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    return (time.perf_counter() - start) / N_BLOCKS


def test_gpu_tracking_cost_per_block(benchmark):
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        library = build_fake_nvml(base)
        state = base / "state"
        state.mkdir()
        # this process holds 1 GiB on the one stand-in device
        (state / "procs").write_text(f"0 {os.getpid()} {1 << 30}\n")
        os.environ["FAKE_NVML_STATE"] = str(state)
        per_block: dict[str, list[float]] = {"off": [], "absent": [], "stand-in": []}

        def rounds() -> None:
            for k in range(ROUNDS):
                for mode in per_block:
                    per_block[mode].append(_run(mode, library, base, k))

        try:
            benchmark.pedantic(rounds, rounds=1, iterations=1)
        finally:
            os.environ.pop("DAISY_NVML_LIBRARY", None)
            os.environ.pop("FAKE_NVML_STATE", None)
    med = {m: statistics.median(v) * 1e6 for m, v in per_block.items()}
    benchmark.extra_info.update({f"{m}_us_per_block": round(v, 1) for m, v in med.items()})
    benchmark.extra_info["absent_extra_us"] = round(med["absent"] - med["off"], 1)
    benchmark.extra_info["stand_in_extra_us"] = round(med["stand-in"] - med["off"], 1)
    print(benchmark.extra_info)
    assert all(v > 0 for v in med.values())
