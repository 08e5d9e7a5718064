"""The client end of daisy 1.x's transport."""

from __future__ import annotations

import logging
import queue
import threading

import tornado.iostream
import tornado.tcpclient

from .exceptions import NotConnected, StreamClosedError
from .internal_messages import AckClientDisconnect, NotifyClientDisconnect
from .io_looper import IOLooper
from .tcp_message import TCPMessage
from .tcp_stream import TCPStream

logger = logging.getLogger(__name__)

#: how long :meth:`TCPClient.disconnect` waits for the server's answer
DISCONNECT_TIMEOUT = 5.0

#: put in the queue when the connection ends, to wake a waiting reader
_CLOSED = object()


class TCPClient(IOLooper):
    """A connection to a :class:`~daisy.tcp.TCPServer` that sends and
    receives :class:`~daisy.tcp.TCPMessage` objects; connects at
    construction.

    Args:
        host: the server's host.
        port: the server's port.
    """

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self.client = tornado.tcpclient.TCPClient()
        self.stream: TCPStream | None = None
        self.message_queue: queue.Queue[object] = queue.Queue()
        self._acknowledged = threading.Event()
        self.connect()

    def connect(self) -> None:
        """Connect to the server and start receiving its messages. Raises
        :class:`~daisy.tcp.StreamClosedError` when nothing answers at
        ``host:port``."""
        try:
            self._run(self._connect())
        except (OSError, tornado.iostream.StreamClosedError) as e:
            raise StreamClosedError(self.host, self.port) from e

    async def _connect(self) -> None:
        stream = await self.client.connect(self.host, self.port)
        self._acknowledged.clear()
        self.stream = TCPStream(stream, (self.host, self.port))
        self.ioloop.add_callback(self._receive, self.stream)

    async def _receive(self, stream: TCPStream) -> None:
        """Read the server's messages into the queue until the stream ends."""
        try:
            while True:
                message = await stream._get_message()
                if isinstance(message, AckClientDisconnect):
                    self._acknowledged.set()
                    return
                self.message_queue.put(message)
        except tornado.iostream.StreamClosedError:
            if stream.stream is not None:  # closed by the server, not by us
                self.message_queue.put(StreamClosedError(self.host, self.port))
        except Exception as e:  # a server that sends something unreadable
            logger.error("dropping the connection to %s: %s", stream, e)
            stream.close()
        finally:
            self.message_queue.put(_CLOSED)

    def disconnect(self) -> None:
        """Close the connection gracefully: tell the server, wait for its
        answer (at most ``DISCONNECT_TIMEOUT`` seconds), then close."""
        stream = self.stream
        if stream is None:
            return
        if not stream.closed():
            stream.send_message(NotifyClientDisconnect())
            if not self._acknowledged.wait(DISCONNECT_TIMEOUT):
                logger.warning("%s did not acknowledge the disconnect; closing anyway", stream)
        stream.close()
        self.stream = None

    def connected(self) -> bool:
        """Whether this client has a connection to the server."""
        return self.stream is not None and not self.stream.closed()

    def send_message(self, message: TCPMessage) -> None:
        """Send ``message`` to the server. Raises
        :class:`~daisy.tcp.exceptions.NotConnected` after `disconnect` (as
        1.2.2 does), and :class:`~daisy.tcp.StreamClosedError` when the
        server closed the connection."""
        stream = self.stream
        if stream is None:
            raise NotConnected(
                f"TCPClient is not connected to {self.host}:{self.port}; call connect() first"
            )
        if stream.closed():
            raise StreamClosedError(self.host, self.port)
        stream.send_message(message)

    def get_message(self, timeout: float | None = None) -> TCPMessage | None:
        """The next message from the server; None if none arrives within
        ``timeout`` seconds (None: wait for one). Messages that arrived
        before the connection ended are still returned; after them, raises
        :class:`~daisy.tcp.StreamClosedError` once if the server closed the
        connection, then :class:`~daisy.tcp.exceptions.NotConnected`."""
        while True:
            try:
                if self.connected():
                    item = self.message_queue.get(timeout=timeout)
                else:
                    item = self.message_queue.get_nowait()
            except queue.Empty:
                if not self.connected():
                    raise NotConnected(
                        f"TCPClient is not connected to {self.host}:{self.port}; "
                        "call connect() first"
                    ) from None
                return None
            if isinstance(item, StreamClosedError):
                raise item
            if item is not _CLOSED:
                return item  # type: ignore[return-value]
