"""How a task's function travels to its workers: the payload a worker
process reads (see `daisy._worker`), made by cloudpickle.

cloudpickle sends a function of an importable module by reference (its
module's name and the function's), and the worker imports that module;
anything else (a script's ``__main__``, a notebook cell, a closure) by
value. A module that frameworks load from a file path
(``importlib.util.spec_from_file_location``, ``SourceFileLoader``: a
user's config or model script, dacapo-ml's worker files) is in
``sys.modules`` under a name that a fresh interpreter cannot import, or
would import from another file. daisy 1.2.2 forked its workers, so they
had the module; 2.0.0 starts fresh interpreters, and every one of them
failed with ``ModuleNotFoundError`` until the task was abandoned. Here
such a module is sent by value: the pickler asks the import system, as
a fresh worker with the driver's ``sys.path`` would, whether the name
finds the same file, and registers the module with cloudpickle's
``register_pickle_by_value`` for this one payload when it does not.

By value rather than re-loading the file in the worker, because by value
needs nothing of the worker's host (a Dask or SLURM node may not see the
file, or see another version of it; a framework may load from a
temporary file it deletes), runs none of the module's top-level code
again, and carries the module's state as the driver had it, as 1.2.2's
fork did.
"""

from __future__ import annotations

import io
import linecache
import logging
import os
import pickle
import sys
import threading
import types
from collections import ChainMap
from typing import Any

import cloudpickle

logger = logging.getLogger(__name__)

#: payloads above this many bytes are logged: the data a function captures
#: travels to every worker (and a cluster job's payload file)
LARGE_PAYLOAD_BYTES = 10 * 2**20

#: cloudpickle's registry of by-value modules is process-wide: payloads
#: made at once on two threads must not unregister each other's modules
_by_value_lock = threading.Lock()


def _origin(spec: Any) -> str | None:
    """Where a module spec loads from, resolved (None: nowhere on disk)."""
    origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or not getattr(spec, "has_location", False):
        return None
    return os.path.realpath(origin)


def importable_by_name(module: types.ModuleType) -> bool:
    """Whether a fresh interpreter with this process's ``sys.path`` would
    import ``module`` by its name and get the same file: the import
    system's finders (``sys.meta_path``) asked as an ``import`` would ask
    them, without this process's ``sys.modules``. A module with no file
    (built in, frozen) counts if a finder finds it by name."""
    name = module.__name__
    parent_name, _, _ = name.rpartition(".")
    path = None
    if parent_name:
        parent = sys.modules.get(parent_name)
        if parent is None or not importable_by_name(parent):
            return False
        path = getattr(parent, "__path__", None)
        if path is None:
            return False
    spec = getattr(module, "__spec__", None)
    own = _origin(spec)
    file = getattr(module, "__file__", None)
    if spec is None and isinstance(file, str):
        # made by hand (``types.ModuleType`` given a ``__file__``)
        own = os.path.realpath(file)
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            found_spec = find_spec(name, path)
        except Exception:  # a finder that fails finds nothing, as for import
            continue
        if found_spec is None:
            continue
        found = _origin(found_spec)
        # no file of its own (built in, frozen, a namespace package): the
        # same only if the name finds no file either
        return found == own
    return False


class _PayloadPickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle, with two changes for worker payloads:

    - a module a fresh worker could not import by name
      (`importable_by_name`) goes by value, registered for this pickler's
      dump only (`by_value` lists them, for the caller to unregister);
    - functions pickled by value (those of a script's ``__main__``, of a
      notebook cell, of a module loaded from a file) keep their file name:
      cloudpickle names their code ``<dynamic-code>``, so a worker's
      traceback could not say where the failing line is. ``filenames``
      collects those names."""

    def __init__(self, file: io.BytesIO, protocol: int) -> None:
        self.filenames: set[str] = set()
        self.by_value: list[types.ModuleType] = []
        self._judged: set[str] = set()
        # before the pickler's own __init__, which reads its dispatch table
        self.dispatch_table = ChainMap(
            {types.CodeType: self._code_keeping_path}, cloudpickle.Pickler.dispatch_table
        )
        super().__init__(file, protocol=protocol)

    def _code_keeping_path(self, code: types.CodeType) -> Any:
        self.filenames.add(code.co_filename)
        rebuild, args = cloudpickle.Pickler.dispatch_table[types.CodeType](code)
        return rebuild, tuple(
            code.co_filename if isinstance(a, str) and a == "<dynamic-code>" else a for a in args
        )

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.ModuleType):
            self._judge(obj.__name__)
        elif isinstance(obj, (types.FunctionType, type)):
            self._judge(getattr(obj, "__module__", None))
        return super().reducer_override(obj)

    def _judge(self, name: str | None) -> None:
        """Send module ``name`` by value when a worker could not import it."""
        if name is None or name in self._judged:
            return
        self._judged.add(name)
        module = sys.modules.get(name)
        if module is None or name == "__main__":
            return  # cloudpickle sends these by value already
        if name in cloudpickle.list_registry_pickle_by_value():
            return
        if importable_by_name(module):
            return
        cloudpickle.register_pickle_by_value(module)
        self.by_value.append(module)


def dumps(obj: object) -> tuple[bytes, dict[str, list[str]]]:
    """``obj`` pickled for a worker (see `_PayloadPickler`), and the source
    lines of its by-value code whose file a worker cannot read: a notebook
    cell's code names a file that exists only in the kernel's
    ``linecache`` (IPython keeps cells there), so without the lines a
    worker's traceback would show no source."""
    buffer = io.BytesIO()
    with _by_value_lock:
        pickler = _PayloadPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL)
        try:
            pickler.dump(obj)
        finally:
            for module in pickler.by_value:
                cloudpickle.unregister_pickle_by_value(module)
    if pickler.by_value:
        logger.debug(
            "daisy: sent by value (not importable by name in a worker): %s",
            ", ".join(m.__name__ for m in pickler.by_value),
        )
    sources = {
        name: lines
        for name in pickler.filenames
        if not os.path.exists(name) and (lines := linecache.getlines(name))
    }
    return buffer.getvalue(), sources


class UnpicklableFunction(TypeError, RuntimeError):
    """A task's function cannot be sent to worker processes (it captured a
    lock, an open file, a connection). A ``TypeError`` and a
    ``RuntimeError`` both: daisy 2.0.0 raised the latter, and code written
    for either keeps catching it."""


def worker_payload(function: object, post_check: object = None, task_id: str = "?") -> bytes:
    """What a worker process reads from stdin (see `daisy._worker`): this
    process's ``sys.path`` with the source lines the worker cannot read
    (see `dumps`), then the pickled ``(function, post_check)``.
    A function that cannot be pickled is an `UnpicklableFunction` naming
    the task."""
    try:
        pickled, sources = dumps((function, post_check))
    except Exception as e:
        raise UnpicklableFunction(
            f"process_function: the function of task {task_id!r} cannot be sent to worker "
            "processes: "
            f"{type(e).__name__}: {e}. Something it uses (a lock, an open file, a connection) "
            "cannot be pickled: create it inside the function instead, or run with "
            "multiprocessing=False"
        ) from e
    if len(pickled) > LARGE_PAYLOAD_BYTES:
        logger.warning(
            "daisy: the function of task %r carries %.0f MB of captured data to every worker "
            "(with warm starts, to the task's launcher, once); load large data inside the "
            "function instead",
            task_id,
            len(pickled) / 2**20,
        )
    return pickle.dumps((list(sys.path), sources)) + pickled
