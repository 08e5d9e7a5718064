"""The errors of daisy 1.x's message transport."""


class StreamClosedError(Exception):
    """A stream is closed; ``args`` are the ``(host, port)`` of its other
    end."""

    def __str__(self) -> str:
        if len(self.args) == 2:
            host, port = self.args
            return f"the stream to {host}:{port} is closed"
        return super().__str__()


class NotConnected(Exception):
    """A :class:`~daisy.tcp.TCPClient` was used while not connected to its
    server (never connected, disconnected, or the connection was lost)."""


class NoFreePort(Exception):
    """A :class:`~daisy.tcp.TCPServer` found no port to listen on."""
