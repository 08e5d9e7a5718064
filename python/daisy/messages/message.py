"""The base of daisy 1.x's scheduler messages."""

from daisy.tcp import TCPMessage


class Message(TCPMessage):
    """A message between daisy 1.x's server and its clients."""


class ExceptionMessage(Message):
    """A message that carries an exception.

    Args:
        exception: the exception to send.
    """

    def __init__(self, exception: BaseException) -> None:
        super().__init__()
        self.exception = exception
