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
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from daisy._daisy import Block
from daisy._daisy import Client as _NativeClient
from daisy.block import BlockStatus
from daisy.context import Context

logger = logging.getLogger(__name__)


class Client:
    """A connection to the daisy server, for one task.

    Args:
        context: where the server is; by default read from the
            ``DAISY_CONTEXT`` environment variable that daisy sets for its
            workers (a hand-started worker can copy it from a driver).
        reraise: re-raise a block's exception after reporting it failed.
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
        self._native = _NativeClient(
            self.context["hostname"],
            int(self.context["port"]),
            self.context["token"],
            self.task_id,
            self.worker_id,
        )

    @contextmanager
    def acquire_block(self) -> Iterator[Block | None]:
        """Yield the next block (None when there are no more) and report
        it when the ``with`` block ends."""
        block = self._native.acquire_block()
        if block is None:
            yield None
            return
        try:
            yield block
        except Exception as e:
            text = "".join(traceback.format_exception(e))
            logger.error(
                "block %s of task %r failed in worker %s:\n%s",
                block.block_id[1],
                self.task_id,
                self.worker_id,
                text,
            )
            self._native.block_failed(block, text)
            if self.reraise:
                raise
        else:
            if block.status == BlockStatus.FAILED:
                self._native.block_failed(block, "the block function set status FAILED")
            else:
                block.status = BlockStatus.SUCCESS
                self._native.release_block(block)

    def release_block(self, block: Block) -> None:
        """Report a block by hand (done, or failed if its status says so)."""
        if block.status == BlockStatus.FAILED:
            self._native.block_failed(block, "the block function set status FAILED")
        else:
            block.status = BlockStatus.SUCCESS
            self._native.release_block(block)

    def close(self) -> None:
        """Close the connection (also done when the process exits)."""
        self._native.disconnect()
