"""`Worker`: run a function in its own process (``daisy.worker`` in daisy
1.x). The function reaches the process by cloudpickle (closures and
lambdas work) and finds the server through the context it is given,
which is put in its ``DAISY_CONTEXT``. daisy's own runs start workers from
the Rust server; this class is for code that manages worker processes
itself."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle

from daisy import _v1_names, function_payload
from daisy.context import Context

_ids = itertools.count()
_ids_lock = threading.Lock()

#: what `at_worker_exit` registered in this process, in order
_exit_hooks: list[Callable[[], Any]] = []


def at_worker_exit(function: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``function()`` when this worker process leaves, after its last
    block (or its worker function) and before the interpreter's ordinary
    exit, which then runs ``atexit`` handlers, joins non-daemon threads
    and closes the files module globals kept open, as in any script.
    Use it for what must happen before that finalisation begins (while
    every module is still whole), or to say in the worker's log what the
    worker did. Each function runs
    once per registration; one that raises is logged and the others still
    run. Outside a daisy worker it is never called. Returns ``function``,
    so it works as a decorator."""
    if not callable(function):
        raise TypeError(
            f"at_worker_exit: expected a function to call when the worker leaves, got "
            f"{type(function).__name__}"
        )
    _exit_hooks.append(function)
    return function


def run_exit_hooks() -> None:
    """Call what `at_worker_exit` registered, each once, logging failures."""
    import logging

    while _exit_hooks:
        hook = _exit_hooks.pop(0)
        try:
            hook()
        except Exception:
            logging.getLogger("daisy.worker").exception("daisy: an at_worker_exit hook raised")


def _run(payload: bytes, context_env: str | None, errors: Any) -> None:
    if context_env is not None:
        os.environ[Context.ENV_VARIABLE] = context_env
    try:
        cloudpickle.loads(payload)()
    except Exception as e:
        if errors is not None:
            errors.put((repr(e), traceback.format_exc()))
        raise


class Worker:
    """Starts ``spawn_function()`` in a new process (at once).

    Args:
        spawn_function: what the process runs.
        context: a `daisy.Context` given to it as ``DAISY_CONTEXT`` (its
            ``worker_id`` is set to this worker's id).
        error_queue: a multiprocessing queue that receives ``(repr,
            traceback)`` of an exception the function raises.
    """

    def __init__(
        self,
        spawn_function: Callable[[], Any],
        context: Context | None = None,
        error_queue: Any = None,
    ) -> None:
        self.worker_id = Worker.get_next_id()
        self._spawn_function = spawn_function
        self.context = context.copy() if context is not None else None
        if self.context is not None:
            self.context["worker_id"] = self.worker_id
        self.error_queue = error_queue
        self.process: Any = None
        self.start()

    @property
    def spawn_function(self) -> Callable[[], Any]:
        """The function the worker process runs (a property, as in daisy
        1.x)."""
        return self._spawn_function

    @spawn_function.setter
    def spawn_function(self, function: Callable[[], Any]) -> None:
        self._spawn_function = function

    @staticmethod
    def get_next_id() -> int:
        """A new worker id, unique in this process."""
        with _ids_lock:
            return next(_ids)

    def start(self) -> None:
        """Start the process (again, after `stop`)."""
        if self.process is not None and self.process.is_alive():
            return
        ctx = multiprocessing.get_context("spawn")
        env = self.context.to_env() if self.context is not None else None
        self.process = ctx.Process(
            target=_run,
            args=(function_payload.dumps(self.spawn_function)[0], env, self.error_queue),
            daemon=True,
        )
        self.process.start()

    def stop(self) -> None:
        """Terminate the process and wait for it."""
        if self.process is None:
            return
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.process = None

    def __repr__(self) -> str:
        return f"worker {self.worker_id}"


__getattr__ = _v1_names.lazy_names(__name__)
