"""The server tells a client to stop."""

from .message import Message


class RequestShutdown(Message):
    """The server asks a client to shut down: there is no more work."""
