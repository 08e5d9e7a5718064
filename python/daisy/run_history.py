"""Runs recorded on disk, as ``daisy report``, ``daisy compare`` and the
HTML report find and read them.

Every run appends one `daisy.TaskReport` per task to the task's
``runs.jsonl`` (see `daisy.run_report`), in its tracking store or next to
its worker logs; a task with ``resource_tracking=True`` also leaves its
per-block statistics as arrays of its tracking store. This module locates
those files under a path, reads the store's arrays, and derives the
figures that need both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from daisy.run_report import RUNS_FILE, TaskReport


def find_runs_files(path: Path) -> list[Path]:
    """The ``runs.jsonl`` files at ``path``: the file itself, the one in a
    store, or those of every store (or log directory) one level below."""
    if path.is_file():
        return [path]
    if (path / RUNS_FILE).is_file():
        return [path / RUNS_FILE]
    if path.is_dir():
        return sorted(p for p in path.glob(f"*/{RUNS_FILE}") if p.is_file())
    return []


def store_of(runs_file: Path) -> Path | None:
    """The tracking store a ``runs.jsonl`` lies in, or None when it lies in
    a log directory."""
    return runs_file.parent if (runs_file.parent / "zarr.json").is_file() else None


def stat_array(store: Path, name: str) -> np.ndarray | None:
    """A store's stats array as a flat numpy array (the single chunk is the
    raw little-endian array), or None when the store has none."""
    meta_path = store / name / "zarr.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    dtype = np.dtype(meta["data_type"]).newbyteorder("<")
    chunk = store / name / "c"
    for _ in meta["shape"]:
        chunk = chunk / "0"
    if not chunk.is_file():
        return None
    return np.fromfile(chunk, dtype=dtype)


def utilisation(report: TaskReport) -> float | None:
    """Block compute seconds over the worker-seconds that were available:
    how much of the workers' lives went into blocks. None without workers."""
    w = report.workers
    if not w.count:
        return None
    available = 0.0
    for r in w.by_id.values():
        available += (r.startup or 0.0) + r.idle.total + r.compute.total
        available += (r.final_wait or 0.0) + (r.teardown or 0.0)
    if available <= 0:
        return None
    busy = report.blocks.wall.total if report.blocks.has_stats else w.compute.total
    return busy / available
