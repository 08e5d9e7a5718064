"""An exception raised in a client, sent to the server."""

from typing import Any

from .message import ExceptionMessage


class ClientException(ExceptionMessage):
    """An exception raised in a client, with the client's context.

    Args:
        exception: the exception.
        context: the client's :class:`daisy.Context` (or anything that
            says which client it was).
    """

    def __init__(self, exception: BaseException, context: Any) -> None:
        super().__init__(exception)
        self.context = context
