"""A block that failed in a client."""

from typing import Any

from .client_exception import ClientException


class BlockFailed(ClientException):
    """A client reports that ``block`` failed with ``exception``.

    Args:
        exception: why it failed.
        block: the :class:`daisy.Block`.
        context: the client's :class:`daisy.Context`.
    """

    def __init__(self, exception: BaseException, block: Any, context: Any) -> None:
        super().__init__(exception, context)
        self.block = block
