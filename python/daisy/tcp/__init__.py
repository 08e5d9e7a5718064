"""daisy 1.x's message transport: pickled :class:`TCPMessage` objects
between a :class:`TCPServer` and its :class:`TCPClient`\\ s over tornado.

Kept, with its 1.x meaning and module paths, for code written against it
(custom servers and clients, ``IOLooper.clear()`` before running a server
in a thread). daisy's own server and workers do not use it: they speak the
Rust protocol of ``daisy._daisy`` (token-checked, length-delimited frames).
Like in 1.x, this transport has no authentication and unpickles what it
receives, so only use it between processes you trust.
"""

from .exceptions import NoFreePort, NotConnected, StreamClosedError
from .io_looper import IOLooper
from .tcp_client import TCPClient
from .tcp_message import TCPMessage
from .tcp_server import TCPServer
from .tcp_stream import TCPStream

__all__ = [
    "IOLooper",
    "NoFreePort",
    "NotConnected",
    "StreamClosedError",
    "TCPClient",
    "TCPMessage",
    "TCPServer",
    "TCPStream",
]
