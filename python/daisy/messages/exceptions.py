"""The error for a message that arrives where it was not expected."""

from typing import Any


class UnexpectedMessage(Exception):
    """A message arrived that its receiver does not handle there.

    Args:
        message: the message.
    """

    def __init__(self, message: Any) -> None:
        super().__init__(message)
        self.message = message
