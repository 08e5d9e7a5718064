"""Where tasks keep their tracking stores, and what a run skipped.

A task's tracking store is a Zarr v3 group of memory-mapped arrays
written by the Rust core: which blocks are done, how often each failed
(and, with resource tracking, what each block cost), next to
``runs.jsonl``, the task's run history. A task is tracked when it has an explicit
``Task(tracking_path=...)`` or when a base directory is set with
`set_tracking_basedir`, which gives every task without an explicit path
the store ``<basedir>/<task_id>``. Nothing is tracked otherwise, and
nothing is ever skipped: a rerun executes every block, as in daisy 1.x.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from daisy._daisy import TaskState

#: the files of a store that are not Zarr's: its run history and its lock.
#: zarr warns about every such file when it lists a group's members
#: (``ZarrUserWarning: Object at runs.jsonl is not recognized as a
#: component of a Zarr hierarchy``); daisy's own two are expected there, so
#: those two warnings are silenced and no other
STORE_FILES = ("runs.jsonl", "daisy.lock")
warnings.filterwarnings(
    "ignore",
    message=rf"Object at (.*/)?({'|'.join(map(re.escape, STORE_FILES))}) is not recognized as a "
    r"component of a Zarr hierarchy",
    category=UserWarning,
)


class TrackedTask(Protocol):
    """What this module reads of a task (a `daisy.Task` is one); a protocol,
    so the module that defines tasks can import this one and not the other
    way round."""

    @property
    def task_id(self) -> str: ...
    @property
    def tracking_path(self) -> Path | None: ...
    @property
    def resource_tracking(self) -> bool: ...
    @property
    def _skip_mask(self) -> bytes | None: ...
    @property
    def _pre_check(self) -> Any: ...


logger = logging.getLogger("daisy.tracking_store")

_basedir: Path | None = None


def set_tracking_basedir(path: str | os.PathLike[str] | None) -> None:
    """Track every task without an explicit ``tracking_path`` in
    ``<path>/<task_id>``; ``None`` stops that. Prefer an absolute path
    that belongs to the run: markers are keyed by task id and geometry, not
    by your code, so a changed pipeline wants new task ids or
    ``Task.reset()``."""
    global _basedir
    _basedir = None if path is None else Path(path).absolute()


def get_tracking_basedir() -> Path | None:
    """The tracking base directory, or None."""
    return _basedir


def set_done_marker_basedir(path: str | os.PathLike[str] | None) -> None:
    """Deprecated name of `set_tracking_basedir`."""
    warnings.warn(
        # daisy 2.0.0's words
        "set_done_marker_basedir() is deprecated; use set_tracking_basedir(). The directory "
        "now holds failure counts and resource measurements alongside the done markers.",
        DeprecationWarning,
        stacklevel=2,
    )
    set_tracking_basedir(path)


def get_done_marker_basedir() -> Path | None:
    """Deprecated name of `get_tracking_basedir` (daisy 2.0.0's)."""
    warnings.warn(
        "get_done_marker_basedir() is deprecated; use get_tracking_basedir().",
        DeprecationWarning,
        stacklevel=2,
    )
    return get_tracking_basedir()


def resolve_tracking_path(task_id: str, explicit: Any) -> Path | None:
    """A task's store: its explicit path, ``<basedir>/<task_id>``, or None
    (``explicit=False`` opts out even when a base directory is set)."""
    if explicit is False:
        return None
    if explicit is not None:
        return Path(explicit).absolute()
    if _basedir is not None:
        return _basedir / task_id
    return None


def tracking_paths(tasks: Iterable[TrackedTask]) -> dict[str, str]:
    """Task id to store directory, for the tracked tasks among ``tasks``."""
    out = {}
    for t in tasks:
        path = t.tracking_path
        if path is not None:
            out[t.task_id] = str(path)
    return out


def resource_tracking_task_ids(tasks: Iterable[TrackedTask]) -> list[str]:
    """Ids of the tasks with ``resource_tracking=True`` (that such a task
    needs a store the run uses is the core's rule, checked when the run is
    planned)."""
    return [t.task_id for t in tasks if t.resource_tracking]


def check_block_tracking(block_tracking: Any) -> None:
    """``block_tracking`` (daisy 2.0.0's run option) must be True or False;
    what it rules out (a measuring task) is the core's run plan's to check."""
    if not isinstance(block_tracking, bool):
        raise TypeError(f"block_tracking: expected True or False, got {block_tracking!r}")


def skip_masks(tasks: Iterable[TrackedTask]) -> dict[str, bytes]:
    """Task id to skip mask (one byte per block, C order), for the tasks
    that have one."""
    return {t.task_id: t._skip_mask for t in tasks if t._skip_mask is not None}


#: the resume notice's logger, named in the DONE_MARKERS spec
progress_logger = logging.getLogger("daisy._progress")


def log_skips(tasks: Iterable[TrackedTask], states: Mapping[str, TaskState]) -> None:
    """One INFO record on the ``daisy._progress`` logger per task that
    skipped blocks, in the DONE_MARKERS spec's words: how many, why, and
    how to reprocess them."""
    for t in tasks:
        s = states.get(t.task_id)
        if s is None or not s.skipped_count:
            continue
        via, how = [], []
        if t.tracking_path is not None:
            via.append("done markers")
            how.append("Task.reset() or tracking_path=False")
        if t._skip_mask is not None:
            via.append("the skip mask")
            how.append("a narrower skip_mask")
        if t._pre_check is not None:
            via.append("check_function")
            how.append("a check_function that returns False")
        progress_logger.info(
            "task %r: resumed — %d/%d blocks skipped via %s (%s reprocesses them)",
            t.task_id,
            s.skipped_count,
            s.total_block_count,
            " or ".join(via),
            " or ".join(how),
        )
