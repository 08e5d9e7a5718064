"""The message that daisy 1.x's transport carries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tcp_stream import TCPStream


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
        self.stream: TCPStream | None = None
