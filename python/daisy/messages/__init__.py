"""daisy 1.x's scheduler messages, as :class:`~daisy.tcp.TCPMessage`
subclasses for its transport (:mod:`daisy.tcp`).

Kept, with their 1.x meaning and module paths, for code written against
them. daisy's own server and workers exchange the Rust protocol's messages
of ``daisy._daisy`` instead, so these classes never reach a daisy server.
"""

from .acquire_block import AcquireBlock
from .block_failed import BlockFailed
from .client_exception import ClientException
from .exceptions import UnexpectedMessage
from .message import ExceptionMessage, Message
from .release_block import ReleaseBlock
from .request_shutdown import RequestShutdown
from .send_block import SendBlock

__all__ = [
    "AcquireBlock",
    "BlockFailed",
    "ClientException",
    "ExceptionMessage",
    "Message",
    "ReleaseBlock",
    "RequestShutdown",
    "SendBlock",
    "UnexpectedMessage",
]
