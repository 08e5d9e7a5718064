"""The tornado IOLoop that every transport object of a process shares."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, ClassVar, TypeVar

from tornado.ioloop import IOLoop

T = TypeVar("T")


class IOLooper:
    """Base class for everything that needs tornado's IOLoop running in a
    background thread: one loop, in one daemon thread, per process.

    Attributes:
        ioloop: the process's loop (created by the first instance).
    """

    threads: ClassVar[dict[int, threading.Thread]] = {}
    ioloops: ClassVar[dict[int, IOLoop]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        pid = os.getpid()
        with IOLooper._lock:
            if pid not in IOLooper.ioloops:
                started = threading.Event()
                loops: list[IOLoop] = []

                def run() -> None:
                    asyncio.set_event_loop(asyncio.new_event_loop())
                    loop = IOLoop.current()
                    loops.append(loop)
                    started.set()
                    loop.start()

                thread = threading.Thread(target=run, name="daisy-tcp-ioloop", daemon=True)
                thread.start()
                started.wait()
                IOLooper.threads[pid] = thread
                IOLooper.ioloops[pid] = loops[0]
            self.ioloop = IOLooper.ioloops[pid]

    @staticmethod
    def clear() -> None:
        """Forget the loops made so far (the next instance starts a new
        one): for a process that inherited them from its parent, or code
        that runs servers in fresh threads."""
        with IOLooper._lock:
            IOLooper.threads.clear()
            IOLooper.ioloops.clear()

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result."""
        loop = self.ioloop.asyncio_loop  # type: ignore[attr-defined]
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)
