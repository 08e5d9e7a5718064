"""One connection of daisy 1.x's transport, framed and pickled."""

from __future__ import annotations

import logging
import pickle
import struct

import tornado.iostream

from .exceptions import StreamClosedError
from .io_looper import IOLooper
from .tcp_message import TCPMessage

logger = logging.getLogger(__name__)

#: every message is an 8-byte big-endian length, then its pickle
_HEADER = struct.Struct("!Q")


def _frame(message: TCPMessage) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class TCPStream(IOLooper):
    """Wraps a :class:`tornado.iostream.IOStream` to send and receive
    :class:`~daisy.tcp.TCPMessage` objects.

    Args:
        stream: the tornado stream.
        address: ``(host, port)`` of the other end.
    """

    def __init__(self, stream: tornado.iostream.IOStream | None, address: tuple[str, int]) -> None:
        super().__init__()
        self.stream = stream
        self.address = tuple(address)

    def send_message(self, message: TCPMessage) -> None:
        """Send ``message`` asynchronously: it is pickled here (a payload
        that cannot be pickled raises here), then written by the loop.
        Raises :class:`~daisy.tcp.StreamClosedError` if the stream is
        closed; a write that fails later is logged, not raised."""
        if self.closed():
            raise StreamClosedError(*self.address)
        self.ioloop.add_callback(self._write, _frame(message))

    async def _write(self, data: bytes) -> None:
        stream = self.stream
        if stream is None:
            logger.error("message to %s not sent: the stream is closed", self)
            return
        try:
            await stream.write(data)
        except tornado.iostream.StreamClosedError:
            logger.error("message to %s not sent: the stream is closed", self)

    async def _send_and_close(self, message: TCPMessage) -> None:
        """Write ``message``, then close (on the loop)."""
        await self._write(_frame(message))
        self.close()

    async def _get_message(self) -> TCPMessage:
        """The next message (on the loop); raises tornado's
        ``StreamClosedError`` when the stream ends."""
        stream = self.stream
        if stream is None:
            raise tornado.iostream.StreamClosedError()
        (size,) = _HEADER.unpack(await stream.read_bytes(_HEADER.size))
        message = pickle.loads(await stream.read_bytes(size))
        if not isinstance(message, TCPMessage):
            raise TypeError(f"{self} sent {type(message).__name__}, not a daisy TCPMessage")
        message.stream = self
        return message

    def close(self) -> None:
        """Close this stream."""
        stream, self.stream = self.stream, None
        if stream is not None:
            self.ioloop.add_callback(stream.close)

    def closed(self) -> bool:
        """True if this stream was closed (by either end)."""
        return self.stream is None or self.stream.closed()

    def __repr__(self) -> str:
        host, port = self.address
        return f"{host}:{port}"
