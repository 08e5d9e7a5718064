"""Process functions of the runtime benchmarks, in a module of their own.

Worker processes import the module a function was defined in to unpickle
it; defined in the benchmark file, that would import pytest into every
worker and time pytest's start-up instead of daisy's. Only daisy's shared
(1.x) API is used, as in the benchmark file."""

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


def smooth(block):
    """Mean over a (2 * CONTEXT + 1)^3 box of the raw volume (integer
    sums, so a block's result is exactly the whole volume's), written as
    uint8: a block of ``raw`` with its context in, the write ROI out."""
    import numpy as np
    from funlib.persistence import open_ds

    raw = open_ds(PIPELINE_PATHS["raw"], mode="r")
    out = open_ds(PIPELINE_PATHS["smooth"], mode="r+")
    data = raw.to_ndarray(block.read_roi, fill_value=0).astype(np.int64)
    k = 2 * CONTEXT + 1
    for axis in range(3):
        c = np.cumsum(data, axis=axis)
        zero = np.zeros_like(np.take(c, [0], axis=axis))
        c = np.concatenate([zero, c], axis=axis)
        n = data.shape[axis] - k + 1
        data = np.take(c, range(k, k + n), axis=axis) - np.take(c, range(n), axis=axis)
    out[block.write_roi] = (data // k**3).astype(np.uint8)


def threshold(block):
    """The smoothed volume above 127, as uint8 0/1."""
    import numpy as np
    from funlib.persistence import open_ds

    smoothed = open_ds(PIPELINE_PATHS["smooth"], mode="r")
    out = open_ds(PIPELINE_PATHS["mask"], mode="r+")
    out[block.write_roi] = (smoothed[block.write_roi] > 127).astype(np.uint8)


#: where the pipeline's datasets are: set by the benchmark before pickling
#: (the workers import this module and read the paths from the environment)
import os as _os  # noqa: E402

PIPELINE_PATHS = {
    name: _os.path.join(_os.environ.get("DAISY_BENCH_PIPELINE_DIR", "/nonexistent"), f"{name}.zarr")
    for name in ("raw", "smooth", "mask")
}
