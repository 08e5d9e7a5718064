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
    for name in (
        "raw",
        "smooth",
        "mask",
        "cc_raw",
        "cc_mask",
        "cc_labels",
        "readme_raw",
        "readme_smooth",
    )
}


def point_paths_at(base: str) -> None:
    """Put every dataset of `PIPELINE_PATHS` in directory ``base`` (in the
    driver; workers read ``DAISY_BENCH_PIPELINE_DIR``, which the benchmark
    sets to the same directory)."""
    for name in PIPELINE_PATHS:
        PIPELINE_PATHS[name] = _os.path.join(base, f"{name}.zarr")


# -- the real pipelines of test_real_pipelines_bench.py ----------------------
#: the foreground threshold of the connected-components pipeline
CC_THRESHOLD = 0.5


def foreground(block):
    """Connected components, task 1: the raw volume (float32) above
    ``CC_THRESHOLD``, as a uint8 mask."""
    import numpy as np
    from funlib.persistence import open_ds

    raw = open_ds(PIPELINE_PATHS["cc_raw"], mode="r")
    out = open_ds(PIPELINE_PATHS["cc_mask"], mode="r+")
    out[block.write_roi] = (raw[block.write_roi] > CC_THRESHOLD).astype(np.uint8)


def label_components(block):
    """Connected components, task 2: ``scipy.ndimage.label`` of the block's
    mask, as uint64 ids made unique across blocks by an offset of the
    block's index times its voxel count (the first step of a blockwise
    connected components, before the ids are merged across blocks)."""
    import numpy as np
    import scipy.ndimage
    from funlib.persistence import open_ds

    mask = open_ds(PIPELINE_PATHS["cc_mask"], mode="r")
    out = open_ds(PIPELINE_PATHS["cc_labels"], mode="r+")
    data = mask[block.write_roi]
    labels, _ = scipy.ndimage.label(data)
    labels = labels.astype(np.uint64)
    offset = np.uint64(block.block_id[1]) * np.uint64(data.size)
    labels[labels > 0] += offset
    out[block.write_roi] = labels


def readme_box_mean(data, k):
    """The README's filter: the mean over each voxel's (2k+1)^3
    neighbourhood, for the voxels that have one."""
    import numpy as np

    for axis in range(data.ndim):
        c = np.cumsum(data, axis=axis, dtype=np.float64)
        c = np.concatenate([np.zeros_like(c.take([0], axis=axis)), c], axis=axis)
        n = data.shape[axis]
        data = c.take(range(2 * k + 1, n + 1), axis=axis) - c.take(range(n - 2 * k), axis=axis)
        data /= 2 * k + 1
    return data


def readme_smooth(block):
    """The README's block function, as written there."""
    from funlib.persistence import open_ds

    data = open_ds(PIPELINE_PATHS["readme_raw"])[block.read_roi]
    open_ds(PIPELINE_PATHS["readme_smooth"], mode="r+")[block.write_roi] = readme_box_mean(data, 8)


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
