"""Process functions of the runtime benchmarks, in a module of their own.

Worker processes import the module a function was defined in to unpickle
it; defined in the benchmark file, that would import pytest into every
worker and time pytest's start-up instead of daisy's. Only daisy's shared
(1.x) API is used, as in the benchmark file."""

import os as _os
import time as _time

import daisy


def noop(block):
    """A block function that does nothing."""


def client_loop():
    """A worker function that takes blocks until there are none."""
    client = daisy.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                break


# -- the real pipeline of test_pipeline_bench.py -----------------------------
#: smoothing context, voxels on each side
CONTEXT = 2


def box_sum(data, k):
    """Sum over a k^3 box (valid part): k shifted slices added per axis."""
    for axis in range(3):
        n = data.shape[axis] - k + 1
        total = None
        for i in range(k):
            index = [slice(None)] * 3
            index[axis] = slice(i, i + n)
            part = data[tuple(index)]
            total = part.copy() if total is None else total + part
        data = total
    return data


def smooth(block):
    """Mean over a (2 * CONTEXT + 1)^3 box of the raw volume (integer
    sums, so a block's result is exactly the whole volume's), written as
    uint8: a block of ``raw`` with its context in, the write ROI out."""
    import numpy as np
    from funlib.persistence import open_ds

    raw = open_ds(PIPELINE_PATHS["raw"], mode="r")
    out = open_ds(PIPELINE_PATHS["smooth"], mode="r+")
    data = raw.to_ndarray(block.read_roi, fill_value=0).astype(np.int32)
    k = 2 * CONTEXT + 1
    out[block.write_roi] = (box_sum(data, k) // k**3).astype(np.uint8)


def threshold(block):
    """The smoothed volume above 127, as uint8 0/1."""
    import numpy as np
    from funlib.persistence import open_ds

    smoothed = open_ds(PIPELINE_PATHS["smooth"], mode="r")
    out = open_ds(PIPELINE_PATHS["mask"], mode="r+")
    out[block.write_roi] = (smoothed[block.write_roi] > 127).astype(np.uint8)


_results = None


def threshold_keeping_results(block):
    """`threshold`, plus what a scientist adds (``worker_exit.py``): a
    per-worker results file kept open until the worker exits, a line per
    block, and the time the block ended (written and closed at once)."""
    global _results
    import time

    threshold(block)
    base = _os.environ["DAISY_BENCH_EXIT_DIR"]
    if _results is None:
        _results = open(_os.path.join(base, f"results-{_os.getpid()}.csv"), "a")
    _results.write(f"{block.block_id[1]}\n")
    with open(_os.path.join(base, f"ends-{_os.getpid()}-{block.block_id[1]}"), "w") as f:
        f.write(repr(time.time()))


#: where the pipeline's datasets are: set by the benchmark before pickling
#: (the workers import this module and read the paths from the environment)
PIPELINE_PATHS = {
    name: _os.path.join(_os.environ.get("DAISY_BENCH_PIPELINE_DIR", "/nonexistent"), f"{name}.zarr")
    for name in ("raw", "smooth", "mask")
}


def never_done(block):
    """A check function that finds nothing done: what a check costs when
    every block still needs work."""
    return False


def slow_check(block):
    """A check function that looks at an output on a slow shared
    filesystem: 0.2 s a call, and nothing is done."""
    _time.sleep(0.2)
    return False


def note_end(block):
    """A fast block function that appends the time it ended to a file of
    its process under DAISY_BENCH_ENDS_DIR."""
    path = _os.path.join(_os.environ["DAISY_BENCH_ENDS_DIR"], str(_os.getpid()))
    with open(path, "a") as f:
        f.write(f"{_time.time()!r}\n")
