"""The server hands out a block."""

from typing import Any

from .message import Message


class SendBlock(Message):
    """The server sends ``block`` to a client.

    Args:
        block: the :class:`daisy.Block`.
    """

    def __init__(self, block: Any) -> None:
        super().__init__()
        self.block = block
