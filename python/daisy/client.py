"""`Client`: how a worker talks to the daisy server of its run
(``daisy.client`` in daisy 1.x).

A worker process started by daisy, or any process given the run's
context (``DAISY_CONTEXT``, see `daisy.Context`), builds a ``Client()``
and takes blocks until there are none::

    client = daisy.Client()
    while True:
        with client.acquire_block() as block:
            if block is None:
                break
            process(block)

Leaving the ``with`` normally releases the block as done (unless the code
set ``block.status = daisy.BlockStatus.FAILED``); an exception reports it
failed with its traceback. As in daisy 1.x the exception is then logged
and swallowed, so the worker goes on with the next block; pass
``reraise=True`` to have it raised after it is reported.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from daisy import _v1_names
from daisy._daisy import Block
from daisy._daisy import Client as _NativeClient
from daisy.block import BlockStatus
from daisy.block_function import block_call
from daisy.context import Context
from daisy.import_clock import ImportClock

logger = logging.getLogger(__name__)


class Client:
    """A connection to the daisy server, for one task.

    Args:
        context: where the server is; by default read from the
            ``DAISY_CONTEXT`` environment variable that daisy sets for its
            workers (a hand-started worker can copy it from a driver).
        reraise: re-raise a block's exception after reporting it failed.

    A server that no longer listens when the client is built (the run
    ended before a straggling worker, say a queued cluster job, started)
    is not an error, as in daisy 2.0: a warning is logged, ``connected`` is
    False and ``acquire_block`` yields None at once, so the usual worker
    loop ends cleanly. A missing or malformed context still raises.
    """

    def __init__(self, context: Context | None = None, reraise: bool = False) -> None:
        self.context = context if context is not None else Context.from_env()
        for key in ("hostname", "port", "task_id", "token"):
            if self.context.get(key) is None:
                raise ValueError(
                    f"context: has no {key!r}; build the Client inside a daisy worker or pass "
                    "the run's context (daisy.Context.from_env())"
                )
        self.worker_id: int | None = self.context.get("worker_id")
        self.task_id: str = self.context["task_id"]
        self.reraise = reraise
        self._native: _NativeClient | None = None
        try:
            self._native = _NativeClient(
                self.context["hostname"],
                int(self.context["port"]),
                self.context["token"],
                self.task_id,
                self.worker_id,
                liveness_timeout=self.context.get("liveness_timeout"),
            )
        except ConnectionRefusedError as e:
            logger.warning("daisy: %s; this client gets no blocks", e)

    @property
    def connected(self) -> bool:
        """Whether the client reached its server (and is not closed)."""
        return self._native is not None

    def _connection(self) -> _NativeClient:
        if self._native is None:
            raise ConnectionError(
                "this client is not connected to a daisy server (the run had ended when it "
                "was built, or it was closed)"
            )
        return self._native

    @contextmanager
    def acquire_block(self) -> Iterator[Block | None]:
        """Yield the next block (None when there are no more) and report
        it when the ``with`` block ends."""
        if self._native is None:
            yield None
            return
        native = self._native
        block = native.acquire_block()
        if block is None:
            yield None
            return
        try:
            yield block
        except Exception as e:
            native.block_failed(block, self._failure_text(block, e))
            if self.reraise:
                raise
        else:
            error = self._outcome(block)
            if error is None:
                native.release_block(block)
            else:
                native.block_failed(block, error)

    def _failure_text(self, block: Block, e: BaseException) -> str:
        """Log a block's exception; the text reported to the server. Made
        safe to send whatever the exception holds: a lone surrogate (a file
        name `os.fsdecode` made of non-UTF-8 bytes) is escaped (``\\udcff``)
        instead of killing the worker that encodes it; an exception whose
        ``__str__`` raises reads as such (`traceback`'s own words)."""
        text = "".join(traceback.format_exception(e))
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        logger.error(
            "block %s of task %r failed in worker %s:\n%s",
            block.block_id[1],
            self.task_id,
            self.worker_id,
            text,
        )
        return text

    @staticmethod
    def _outcome(block: Block) -> str | None:
        """None for a block that finished (marked SUCCESS), else why it
        failed."""
        if block.status == BlockStatus.FAILED:
            return "the block function set status FAILED"
        block.status = BlockStatus.SUCCESS
        return None

    def process_blocks(
        self,
        function: Callable[[Block], Any],
        post_check: Callable[[Block], Any] | None = None,
    ) -> None:
        """Call ``function`` on every block of the task until there are no
        more, each reported like ``acquire_block`` reports it (a block
        fails on an exception, on ``status = FAILED`` or when
        ``post_check`` returns False). A block's report and the request
        for the next one leave in one write."""
        if self._native is None:
            return
        native = self._native
        # an async def runs on this process's loop; a function that returns
        # a generator or an unawaited coroutine fails its block
        function = block_call(function)
        block = native.acquire_block()
        # the first block's imports are timed (`daisy.import_clock`): the
        # report tells a warm-up of imports from set-up in the function
        clock: ImportClock | None = ImportClock()
        started = time.perf_counter()
        while block is not None:
            try:
                if clock is not None:
                    with clock:
                        function(block)
                else:
                    function(block)
                if post_check is not None and not post_check(block):
                    block.status = BlockStatus.FAILED
            # a BaseException raised in a block (KeyboardInterrupt, SystemExit
            # from a library, its own subclass) fails the block with its
            # traceback like any other; the worker goes on (it is stopped by
            # the server, never by a signal turned into an exception here)
            except BaseException as e:
                error: str | None = self._failure_text(block, e)
                if self.reraise:
                    native.block_failed(block, error or "")
                    raise
            else:
                error = self._outcome(block)
            if clock is not None:
                took = time.perf_counter() - started
                native.first_block(clock.seconds, took, clock.packages())
                clock = None
            block = native.release_and_acquire(block, error)

    def release_block(self, block: Block) -> None:
        """Report a block by hand (done, or failed if its status says so)."""
        native = self._connection()
        if block.status == BlockStatus.FAILED:
            native.block_failed(block, "the block function set status FAILED")
        else:
            block.status = BlockStatus.SUCCESS
            native.release_block(block)

    def close(self) -> None:
        """Close the connection (also done when the process exits)."""
        if self._native is not None:
            native, self._native = self._native, None
            native.disconnect()


__getattr__ = _v1_names.lazy_names(__name__)
