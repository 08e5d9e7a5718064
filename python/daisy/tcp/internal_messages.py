"""Messages the transport sends itself, for a graceful disconnect."""

from .tcp_message import TCPMessage


class InternalTCPMessage(TCPMessage):
    """A message used only between :class:`~daisy.tcp.TCPServer` and
    :class:`~daisy.tcp.TCPClient` themselves; never handed to user code."""


class NotifyClientDisconnect(InternalTCPMessage):
    """Sent by a client to its server to start a disconnect."""


class AckClientDisconnect(InternalTCPMessage):
    """The server's answer to :class:`NotifyClientDisconnect`: it no longer
    listens to that client, so the stream can be closed."""
