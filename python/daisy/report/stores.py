"""Runs recorded on disk, as ``daisy report``, ``daisy compare`` and the
HTML report find and read them.

Every run appends one `daisy.TaskReport` per task to the task's
``runs.jsonl`` (see `daisy.run_report`), in its tracking store or next to
its worker logs; a task with ``resource_tracking=True`` also leaves its
per-block statistics as arrays of its tracking store. This module locates
those files under a path and reads the store's arrays (through the core's
tracking-store binding). Every figure is the core's: nothing is computed
here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daisy._daisy import find_tracking, read_tracking_array


def find_runs_files(path: Path) -> list[Path]:
    """The ``runs.jsonl`` files at ``path``: the file itself, the one in a
    store, or those of every store and log directory below it, as task ids
    nest (``predict/0/val``), never inside a user's array (the core's
    ``placement::find``)."""
    if path.is_file():
        return [path]
    return find_tracking(path)[1]


def find_stores(path: Path) -> list[Path]:
    """The tracking stores at ``path``: the store itself, or every store
    below a directory (a tracking base directory) as task ids nest, in path
    order; a store's own directories and a user's arrays are not searched
    (the core's ``placement::find``). A path holding a ``zarr.json`` is
    given back as it is, for `daisy.cli` to say whether it is a store."""
    if (path / "zarr.json").is_file():
        return [path]
    return find_tracking(path)[0]


def store_of(runs_file: Path) -> Path | None:
    """The tracking store a ``runs.jsonl`` lies in, or None when it lies in
    a log directory."""
    return runs_file.parent if (runs_file.parent / "zarr.json").is_file() else None


def stat_array(store: Path, name: str) -> np.ndarray | None:
    """A store's array as a flat numpy array, read whole through the
    tracking-store binding (the core owns the layout), or None when the
    store has no such array."""
    read = read_tracking_array(str(store), name)
    if read is None:
        return None
    dtype, _shape, data = read
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))


def grid_shape(store: Path) -> tuple[int, ...] | None:
    """The shape of a store's arrays (its block grid), or None without one."""
    read = read_tracking_array(str(store), "done")
    return None if read is None else tuple(read[1])
