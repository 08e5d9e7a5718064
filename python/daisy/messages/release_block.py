"""A client returns a block it processed."""

from typing import Any

from .message import Message


class ReleaseBlock(Message):
    """A client returns ``block``, done (or failed, as its status says).

    Args:
        block: the :class:`daisy.Block`.
    """

    def __init__(self, block: Any) -> None:
        super().__init__()
        self.block = block
