"""A task's arguments as the user gives them, one ``parse_*`` function each.

Each function takes what the user passed and returns what the task keeps:
types are checked (a ``TypeError`` naming the parameter and what it
takes), daisy 1.x's aliases are resolved with the `DeprecationWarning`
daisy 2.0.0 gave, and nothing else. The values' rules (a positive
``max_workers``, a known ``fit``, a timeout above zero) are the core's
(``daisy._daisy.TaskOptions`` and ``TaskSpec``), checked where the task
builds them. So `daisy.Task.__init__` reads as a list of decisions, one
per argument, as zarr-python's array constructors do.

This module is the one home of daisy 1.x's ``Task`` keywords
(``num_workers``, ``upstream_tasks``, ``done_marker_path``): the top
level's `daisy.Task` and `daisy.v1_compat.Task` both parse them here, with
one rule and one error each.

``stacklevel`` arguments count from the caller of the function that calls
these (the user's line that made the task): the parse function's own frame
and the constructor's are added here.
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from daisy._daisy import validated_task_id
from daisy._worker import _count_required_args
from daisy.block_function import refuse_generator

#: daisy 2.0.0's warning for ``Task(num_workers=N)``, word for word
NUM_WORKERS_WARNING = (
    "Task(num_workers=N) is the daisy 1.x kwarg; daisy v2 uses max_workers=N. This compat alias "
    "keeps your code working but for the v2-native API use `import daisy.v2 as daisy`."
)

#: daisy 2.0.0's warning for ``Task(upstream_tasks=[...])``, word for word
UPSTREAM_TASKS_WARNING = (
    "Task(upstream_tasks=[...]) is the daisy 1.x way to declare block-level dependencies. "
    "daisy v2 expresses this via `Pipeline` composition: `upstream_task + downstream_task`. "
    "This compat alias keeps your code working — `run_blockwise` will build a Pipeline from the "
    "upstream list automatically."
)


def parse_task_id(task_id: Any) -> str:
    """A non-empty string (daisy 1.x's integer ids become strings); which
    characters it may hold is the core's rule."""
    if isinstance(task_id, numbers.Integral) and not isinstance(task_id, bool):
        task_id = str(task_id)
    if not isinstance(task_id, str) or not task_id:
        raise TypeError(f"task_id: expected a non-empty string naming the task, got {task_id!r}")
    return validated_task_id(task_id)


def parse_process_function(
    function: Any,
) -> tuple[Callable[..., Any] | None, Callable[[], Any] | None]:
    """The block function, and the same function when it is a worker
    function (it takes no argument, and asks a ``daisy.Client`` for
    blocks), else None."""
    if function is None:
        return None, None
    if not callable(function):
        raise TypeError(
            f"process_function: expected a callable taking a block (or nothing, for a worker "
            f"function), got {type(function).__name__}"
        )
    refuse_generator(function)
    n_args = _count_required_args(function)
    if n_args is not None and n_args > 1:
        raise TypeError(
            f"process_function: {function!r} requires {n_args} arguments; give a function of one "
            "argument (the block) or of none (a worker function)"
        )
    return function, function if n_args == 0 else None


def check_runnable(task: Any, in_process: bool) -> None:
    """Refuse to run `task` without a function (the one place this rule
    lives): a run needs a block function, and a run in this process
    (``multiprocessing=False``) a function that takes a block, not a worker
    function (that one asks a ``daisy.Client`` for blocks, which needs
    worker processes)."""
    if task.process_function is None:
        raise ValueError(
            f"process_function: task {task.task_id!r} has none; give it a function that takes "
            "a block" + ("" if in_process else " (or a worker function that takes nothing)")
        )
    if in_process and task.spawn_worker_function is not None:
        raise ValueError(
            f"process_function: task {task.task_id!r} has a worker function (no "
            "arguments), which needs worker processes; run it with "
            "multiprocessing=True or give it a function that takes a block"
        )


def parse_check_function(
    check: Any,
) -> tuple[Callable[[Any], bool] | None, Callable[[Any], bool] | None]:
    """The pre-check (asked before a block is handed out: done blocks are
    skipped) and the post-check (asked after a block ran: False fails
    it), from a callable (a pre-check) or a ``(pre, post)`` pair."""
    if check is None:
        return None, None
    if isinstance(check, tuple):
        if len(check) != 2 or not all(callable(f) for f in check):
            raise TypeError(
                "check_function: a tuple must hold two callables, (pre_check, post_check)"
            )
        return check[0], check[1]
    if callable(check):
        return check, None
    raise TypeError(
        f"check_function: expected a callable returning True for done blocks, "
        f"got {type(check).__name__}"
    )


def parse_init_callback(callback: Any) -> Callable[[Any], Any] | None:
    """daisy 1.x's ``init_callback_fn``: a callable taking the context."""
    if callback is None:
        return None
    if not callable(callback):
        raise TypeError("init_callback_fn: expected a callable taking the context")
    return callback  # type: ignore[no-any-return]


def parse_flag(value: Any, name: str, what: str = "True or False") -> bool:
    """True or False, nothing else (a truthy string is a mistake); `what`
    says what each means, for the message."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected {what}, got {value!r}")
    return value


def parse_count(value: Any, name: str) -> int:
    """An integer (its range is the core's to check)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    return int(value)


def parse_memory_budget(value: Any) -> int | None:
    """A run's memory budget in bytes, or None (found by the core); its
    range is the core's to check."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"memory_budget: expected bytes as an integer (e.g. 3 * 2**30 for 3 GiB) or None, "
            f"got {value!r}"
        )
    return int(value)


def parse_seconds(value: Any, name: str) -> Any:
    """Seconds as a number (kept as given: an int stays an int), or None;
    its range is the core's to check."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise TypeError(f"{name}: expected seconds as a number, or None, got {value!r}")
    return value


AUTO = "auto"


def parse_workers(num_workers: Any, max_workers: Any, stacklevel: int = 1) -> tuple[int | str, str]:
    """The task's worker count (1 when neither is given), or ``"auto"``,
    and the name it was given under, for the core's messages.
    ``num_workers`` is daisy 1.x's name of ``max_workers``: it warns as
    daisy 2.0.0 warned, and giving both is 2.0.0's ``TypeError``, in every
    namespace."""
    if num_workers is not None and max_workers is not None:
        raise TypeError("pass either max_workers (v2) or num_workers (v1.x), not both")
    if num_workers is not None:
        warnings.warn(NUM_WORKERS_WARNING, DeprecationWarning, stacklevel=stacklevel + 2)
        return parse_count(num_workers, "num_workers"), "num_workers"
    if max_workers is not None:
        if max_workers == AUTO:
            return AUTO, "max_workers"
        if isinstance(max_workers, str):
            raise TypeError(
                f"max_workers: expected a count of workers or 'auto', got {max_workers!r}"
            )
        return parse_count(max_workers, "max_workers"), "max_workers"
    return 1, "max_workers"


def parse_upstream(upstream_tasks: Any, task_class: type, stacklevel: int = 1) -> list[Any]:
    """daisy 1.x's ``upstream_tasks`` as a list of tasks (one task is taken
    too). Anything but None or an empty list warns as daisy 2.0.0 warned
    (before it is checked: the warning is 2.0.0's, the check ours)."""
    empty = upstream_tasks is None or (
        isinstance(upstream_tasks, list | tuple) and not upstream_tasks
    )
    if not empty:
        warnings.warn(UPSTREAM_TASKS_WARNING, DeprecationWarning, stacklevel=stacklevel + 2)
    if upstream_tasks is None:
        return []
    if isinstance(upstream_tasks, task_class):
        return [upstream_tasks]
    if isinstance(upstream_tasks, str | bytes) or not isinstance(upstream_tasks, Iterable):
        raise TypeError(
            f"upstream_tasks: expected a list of daisy.Task objects, "
            f"got {type(upstream_tasks).__name__}"
        )
    upstream = list(upstream_tasks)
    for u in upstream:
        if not isinstance(u, task_class):
            raise TypeError(f"upstream_tasks: expected daisy.Task objects, got {type(u).__name__}")
    return upstream


def parse_requires(requires: Any) -> dict[str, int]:
    """Resource amounts by name (``{"gpu": 1}``); None is none."""
    if requires is None:
        return {}
    if not isinstance(requires, dict):
        raise TypeError(
            f'requires: expected a dict of resource amounts such as {{"gpu": 1}}, '
            f"got {type(requires).__name__}"
        )
    for k in requires:
        if not isinstance(k, str):
            raise TypeError(f"requires: resource names must be strings, got {k!r}")
    return {k: parse_count(v, f"requires[{k!r}]") for k, v in requires.items()}


def parse_gpu_tracking(value: Any) -> bool | None:
    """True, False, or None (on when the task measures its blocks and
    requires a gpu: the core decides)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(
            f"gpu_tracking: expected True, False or None (on when requires names a gpu), "
            f"got {value!r}"
        )
    return value


def parse_fit(fit: Any) -> str:
    """The name of a fit (which names exist is the core's rule)."""
    if not isinstance(fit, str):
        raise TypeError(f"fit: expected the name of a fit, got {type(fit).__name__}")
    return fit


def parse_tracking_path(
    tracking_path: Any, done_marker_path: Any, stacklevel: int = 1
) -> str | os.PathLike[str] | bool | None:
    """The task's tracking store: a directory, None (under the tracking
    basedir) or False (none). ``done_marker_path`` is its old name: it
    warns, and disagreeing with ``tracking_path`` is an error."""
    if done_marker_path is not None:
        warnings.warn(
            "done_marker_path is deprecated; use tracking_path",
            DeprecationWarning,
            stacklevel=stacklevel + 2,
        )
        if tracking_path is not None and tracking_path != done_marker_path:
            raise ValueError(
                "tracking_path and done_marker_path disagree; done_marker_path is the old name "
                "of tracking_path: pass only one"
            )
        tracking_path = done_marker_path
    if tracking_path is True:
        raise TypeError(
            "tracking_path: expected a directory, None (use the tracking basedir) or False "
            "(no store), got True"
        )
    if not (
        tracking_path is None
        or tracking_path is False
        or isinstance(tracking_path, str | os.PathLike)
    ):
        raise TypeError(
            f"tracking_path: expected a directory path, None or False, "
            f"got {type(tracking_path).__name__}"
        )
    return tracking_path


def parse_spawner(spawner: Any) -> Any:
    """Where the task's workers run (a local process by default)."""
    from daisy.spawners import LocalSpawner, Spawner

    if spawner is None:
        return LocalSpawner()
    if not isinstance(spawner, Spawner):
        raise TypeError(
            "spawner: expected daisy.LocalSpawner(), daisy.SlurmSpawner(...) or "
            f"daisy.DaskSpawner(...), got {type(spawner).__name__}"
        )
    return spawner
