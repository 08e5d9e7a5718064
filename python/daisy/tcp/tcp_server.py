"""The server end of daisy 1.x's transport."""

from __future__ import annotations

import logging
import queue
import socket
from typing import Any

import tornado.iostream
import tornado.netutil
import tornado.tcpserver

from daisy.spawners import advertised_host

from .exceptions import NoFreePort, StreamClosedError
from .internal_messages import AckClientDisconnect, NotifyClientDisconnect
from .io_looper import IOLooper
from .tcp_message import TCPMessage
from .tcp_stream import TCPStream

logger = logging.getLogger(__name__)


class TCPServer(tornado.tcpserver.TCPServer, IOLooper):
    """A TCP server that receives :class:`~daisy.tcp.TCPMessage` objects
    from any number of :class:`~daisy.tcp.TCPClient`\\ s; it listens on
    all interfaces, on a free port chosen at construction.

    Args:
        max_port_tries: how many times to try binding a free port before
            giving up with :class:`~daisy.tcp.exceptions.NoFreePort`.

    Attributes:
        address: ``(host, port)`` for clients to connect to.
    """

    def __init__(self, max_port_tries: int = 1000) -> None:
        if not isinstance(max_port_tries, int) or max_port_tries < 1:
            raise ValueError(
                f"TCPServer: max_port_tries must be a positive int, got {max_port_tries!r}"
            )
        tornado.tcpserver.TCPServer.__init__(self)
        IOLooper.__init__(self)
        self.message_queue: queue.Queue[TCPMessage | StreamClosedError] = queue.Queue()
        self.client_streams: set[TCPStream] = set()
        port = self._listen(max_port_tries)
        self.address = (advertised_host(), port)

    def _listen(self, tries: int) -> int:
        error: OSError | None = None
        for _ in range(tries):
            try:
                sockets = tornado.netutil.bind_sockets(0, address="")
            except OSError as e:
                error = e
                continue
            self._run(self._add_sockets(sockets))
            return int(sockets[0].getsockname()[1])
        raise NoFreePort(f"no free port to listen on after {tries} tries: {error}")

    async def _add_sockets(self, sockets: list[socket.socket]) -> None:
        """Start accepting on ``sockets`` (on the loop, as tornado wants)."""
        self.add_sockets(sockets)

    async def handle_stream(
        self, stream: tornado.iostream.IOStream, address: tuple[Any, ...]
    ) -> None:
        """Called by tornado for each new connection: reads its messages
        into the queue until the client disconnects (gracefully, or not:
        then :meth:`get_message` raises for it)."""
        tcp_stream = TCPStream(stream, (address[0], address[1]))
        self.client_streams.add(tcp_stream)
        try:
            while True:
                message = await tcp_stream._get_message()
                if isinstance(message, NotifyClientDisconnect):
                    self.client_streams.discard(tcp_stream)
                    await tcp_stream._send_and_close(AckClientDisconnect())
                    return
                self.message_queue.put(message)
        except tornado.iostream.StreamClosedError:
            if tcp_stream in self.client_streams:
                self.client_streams.discard(tcp_stream)
                self.message_queue.put(StreamClosedError(*tcp_stream.address))
        except Exception as e:  # a client that sends something unreadable
            logger.error("dropping the connection from %s: %s", tcp_stream, e)
            self.client_streams.discard(tcp_stream)
            self.message_queue.put(StreamClosedError(*tcp_stream.address))
            tcp_stream.close()

    def get_message(self, timeout: float | None = None) -> TCPMessage | None:
        """The next message sent by any client, in arrival order; None if
        none arrives within ``timeout`` seconds (None: wait for one).

        Raises :class:`~daisy.tcp.StreamClosedError`, with the client's
        address, where a client's connection ended without a disconnect.
        """
        try:
            item = self.message_queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, StreamClosedError):
            raise item
        return item

    def disconnect(self) -> None:
        """Close all open streams to clients."""
        for stream in list(self.client_streams):
            self.client_streams.discard(stream)
            stream.close()
