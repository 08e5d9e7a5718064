"""The message that daisy 1.x's transport carries."""

from __future__ import annotations

from typing import Any, Protocol


class MessageStream(Protocol):
    """What a message knows of the stream it arrived on
    (:class:`~daisy.tcp.TCPStream`, which imports this module): a reply
    goes back through it."""

    def send_message(self, message: TCPMessage) -> None:
        """Send ``message`` back to the peer."""

    def close(self) -> None:
        """Close the stream."""

    def closed(self) -> bool:
        """Whether the stream is closed."""


class TCPMessage:
    """A message, to be sent between :class:`~daisy.tcp.TCPServer` and
    :class:`~daisy.tcp.TCPClient`.

    Args:
        payload: anything picklable.

    Attributes:
        stream: the :class:`~daisy.tcp.TCPStream` the message was received
            from (set on arrival; None for a message that was not sent).
    """

    def __init__(self, payload: Any = None) -> None:
        self.payload = payload
        self.stream: MessageStream | None = None
