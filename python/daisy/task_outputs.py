"""What a task declares it writes: ``Task(outputs=[...])``.

Each output is a zarr array (zarr 2 or 3), a funlib.persistence ``Array``,
or the path of a zarr array's directory. This module only converts: at the
start of every run it turns each one into what the core checks
(``daisy-core``'s ``task_outputs``): the array's directory, the shape of
the unit its store writes whole (a chunk, or a shard of a sharded array) in
world units, and where its chunk grid starts. The core refuses, before any
block runs, chunks that two blocks running at once would both write, and a
rerun over an output deleted or re-created since its blocks were marked
done. Outputs are optional: a task without them runs as before.

World units: a funlib ``Array`` knows its voxel size and offset; a zarr
array written by funlib.persistence keeps them in its ``voxel_size`` (or
``resolution``) and ``offset`` attributes; any other array is taken at
voxel size 1 and offset 0. Of an array with more axes than the task (a
channel axis first), the last ones are the task's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: what the core takes for one output: (directory, chunk or None, offset)
OutputArgs = tuple[str, list[int] | None, list[int]]


def parse_outputs(outputs: Any) -> list[Any]:
    """``Task(outputs=...)``: None, or a list of zarr arrays, funlib
    ``Array`` objects or paths; kept as given, described at run time (a
    path may name an array made after the task)."""
    if outputs is None:
        return []
    if isinstance(outputs, str | os.PathLike) or _zarr_array(outputs) is not None:
        outputs = [outputs]
    if not isinstance(outputs, Sequence):
        raise TypeError(
            "outputs: expected a list of the arrays the task writes (zarr arrays, "
            f"funlib.persistence Arrays or paths to zarr arrays), got {type(outputs).__name__}"
        )
    for item in outputs:
        if not isinstance(item, str | os.PathLike) and _zarr_array(item) is None:
            raise TypeError(
                "outputs: expected zarr arrays, funlib.persistence Arrays or paths to zarr "
                f"arrays, got {type(item).__name__}"
            )
    return list(outputs)


def describe_outputs(outputs: Sequence[Any], dims: int) -> list[OutputArgs]:
    """The core's description of each output of a task of ``dims`` axes,
    read now."""
    return [_describe(item, dims) for item in outputs]


def _zarr_array(item: Any) -> Any:
    """The zarr array behind ``item`` (itself, or a funlib Array's), or
    None."""
    source = getattr(item, "_source_data", None)  # funlib.persistence's Array
    if source is not None and hasattr(item, "voxel_size"):
        item = source
    if hasattr(item, "chunks") and hasattr(item, "attrs") and hasattr(item, "shape"):
        return item
    return None


def _describe(item: Any, dims: int) -> OutputArgs:
    voxel_size = getattr(item, "voxel_size", None)
    offset = getattr(item, "offset", None)
    if isinstance(item, str | os.PathLike):
        path = Path(item).absolute()
        array = _open(path)
    else:
        array = _zarr_array(item)
        path = _directory(array)
    if array is None:
        return (str(path), None, [0] * dims)
    attrs = dict(array.attrs)
    if voxel_size is None:
        voxel_size = attrs.get("voxel_size", attrs.get("resolution"))
    if offset is None:
        offset = attrs.get("offset")
    unit = getattr(array, "shards", None) or array.chunks
    chunk = [int(c) for c in unit][-dims:]
    size = [int(v) for v in voxel_size][-dims:] if voxel_size is not None else [1] * dims
    origin = [int(o) for o in offset][-dims:] if offset is not None else [0] * dims
    if len(chunk) != dims:
        # the core names the mismatch
        return (str(path), chunk, origin if len(origin) == len(chunk) else [0] * len(chunk))
    return (str(path), [c * v for c, v in zip(chunk, size, strict=True)], origin)


def _open(path: Path) -> Any:
    """The zarr array at ``path``, None where there is none yet."""
    if not path.exists():
        return None
    import zarr

    return zarr.open_array(str(path), mode="r")


def _directory(array: Any) -> Path:
    """The directory of a zarr array on a local store."""
    store_path = getattr(array, "store_path", None)  # zarr 3
    if store_path is not None:
        root = getattr(store_path.store, "root", None)
        if root is not None:
            return (Path(root) / str(store_path.path)).absolute()
    store = getattr(array, "store", None)  # zarr 2
    root = getattr(store, "path", None) or getattr(store, "dir_path", lambda: None)()
    if root is not None:
        return (Path(root) / (getattr(array, "path", "") or "")).absolute()
    raise ValueError(
        "outputs: daisy checks outputs on a local file system only; this array's store "
        f"({type(store).__name__}) has no directory; give its path, or leave it out of outputs"
    )
