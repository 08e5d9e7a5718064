"""daisy 1.x's message transport: ``daisy.tcp`` and ``daisy.messages``.

daisy 1.x shipped a small pickle-over-tornado transport (a ``TCPServer`` that
clients connect to, and the message classes they exchanged). We keep these
modules for code written against them; the tests below check the public
behaviour observed with daisy 1.2.2 (they pass against 1.2.2 itself).

Every ``get_message`` call has a timeout, so no test can hang.
"""

from __future__ import annotations

import importlib
import inspect
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import tornado.ioloop
from tornado.iostream import StreamClosedError as TornadoStreamClosedError

import daisy
from daisy.messages import (
    AcquireBlock,
    BlockFailed,
    ClientException,
    ExceptionMessage,
    Message,
    ReleaseBlock,
    RequestShutdown,
    SendBlock,
    UnexpectedMessage,
)
from daisy.tcp import (
    IOLooper,
    StreamClosedError,
    TCPClient,
    TCPMessage,
    TCPServer,
    TCPStream,
)
from daisy.tcp.exceptions import NoFreePort, NotConnected
from daisy.tcp.internal_messages import (
    AckClientDisconnect,
    InternalTCPMessage,
    NotifyClientDisconnect,
)
from daisy.tcp.tcp_client import DISCONNECT_TIMEOUT

# Long enough for a message to cross the loopback interface on a busy machine,
# short enough to keep every test well under two seconds.
RECV_TIMEOUT = 1.0


def make_block() -> daisy.Block:
    r = daisy.Roi((0,), (10,))
    return daisy.Block(r, r, r)


def stream_address(stream: object) -> tuple[str, int]:
    """The ``(host, port)`` a ``TCPStream`` stands for (its repr is ``host:port``)."""
    host, port = repr(stream).rsplit(":", 1)
    return host, int(port)


def recv(endpoint: TCPServer | TCPClient, timeout: float = RECV_TIMEOUT) -> TCPMessage:
    """The next message of a server or client; fails the test if none comes."""
    msg = endpoint.get_message(timeout=timeout)
    assert msg is not None, f"no message within {timeout} s"
    return msg


def roundtrip(server: TCPServer, client: TCPClient, msg: TCPMessage) -> TCPMessage:
    """``msg`` sent by ``client`` as the server receives it."""
    client.send_message(msg)
    return recv(server)


def expect_server_error(server: TCPServer, within: float = RECV_TIMEOUT) -> StreamClosedError:
    """Poll the server (no message expected) until it raises a StreamClosedError."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            msg = server.get_message(timeout=0.1)
        except StreamClosedError as e:
            return e
        assert msg is None, f"unexpected message {msg!r}"
    pytest.fail(f"the server raised no StreamClosedError within {within} s")


def closed_port() -> tuple[socket.socket, int]:
    """A socket bound to a local port but not listening (connections to it are
    refused while the socket is held), and that port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock, sock.getsockname()[1]


@pytest.fixture
def server() -> Iterator[TCPServer]:
    srv = TCPServer()
    yield srv
    srv.disconnect()


@pytest.fixture
def connect(server: TCPServer) -> Iterator[Callable[[], TCPClient]]:
    """Makes clients connected to ``server``; disconnects those still connected
    at the end of the test."""
    clients: list[TCPClient] = []

    def make() -> TCPClient:
        client = TCPClient(*server.address)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            if client.connected():
                client.disconnect()
        except Exception:
            pass  # a test broke this connection on purpose


# ---------------------------------------------------------------------------
# module layout and class hierarchy


@pytest.mark.parametrize(
    "name", ["TCPServer", "TCPClient", "TCPStream", "TCPMessage", "IOLooper", "StreamClosedError"]
)
def test_daisy_tcp_exports(name: str) -> None:
    import daisy.tcp

    assert isinstance(getattr(daisy.tcp, name), type)


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("daisy.tcp.tcp_message", ["TCPMessage"]),
        ("daisy.tcp.tcp_stream", ["TCPStream"]),
        ("daisy.tcp.tcp_server", ["TCPServer"]),
        ("daisy.tcp.tcp_client", ["TCPClient"]),
        ("daisy.tcp.io_looper", ["IOLooper"]),
        ("daisy.tcp.exceptions", ["NoFreePort", "NotConnected", "StreamClosedError"]),
        (
            "daisy.tcp.internal_messages",
            ["InternalTCPMessage", "NotifyClientDisconnect", "AckClientDisconnect"],
        ),
    ],
)
def test_daisy_tcp_submodules(module: str, names: list[str]) -> None:
    import daisy.tcp

    mod = importlib.import_module(module)
    for name in names:
        cls = getattr(mod, name)
        assert isinstance(cls, type)
        if hasattr(daisy.tcp, name):
            assert cls is getattr(daisy.tcp, name)


@pytest.mark.parametrize(
    "name",
    [
        "Message",
        "ExceptionMessage",
        "ClientException",
        "BlockFailed",
        "AcquireBlock",
        "SendBlock",
        "ReleaseBlock",
        "RequestShutdown",
        "UnexpectedMessage",
    ],
)
def test_daisy_messages_exports(name: str) -> None:
    import daisy.messages

    assert isinstance(getattr(daisy.messages, name), type)


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("daisy.messages.message", ["Message", "ExceptionMessage"]),
        ("daisy.messages.exceptions", ["UnexpectedMessage"]),
        ("daisy.messages.acquire_block", ["AcquireBlock"]),
        ("daisy.messages.send_block", ["SendBlock"]),
        ("daisy.messages.release_block", ["ReleaseBlock"]),
        ("daisy.messages.block_failed", ["BlockFailed"]),
        ("daisy.messages.client_exception", ["ClientException"]),
        ("daisy.messages.request_shutdown", ["RequestShutdown"]),
    ],
)
def test_daisy_messages_submodules(module: str, names: list[str]) -> None:
    import daisy.messages

    mod = importlib.import_module(module)
    for name in names:
        assert getattr(mod, name) is getattr(daisy.messages, name)


def test_tcp_exceptions_are_exceptions() -> None:
    for cls in (NoFreePort, NotConnected, StreamClosedError):
        assert issubclass(cls, Exception)
    assert StreamClosedError("h", 1).args == ("h", 1)
    with pytest.raises(StreamClosedError):
        raise StreamClosedError("h", 1)


def test_internal_message_hierarchy() -> None:
    assert issubclass(InternalTCPMessage, TCPMessage)
    assert issubclass(NotifyClientDisconnect, InternalTCPMessage)
    assert issubclass(AckClientDisconnect, InternalTCPMessage)
    assert isinstance(NotifyClientDisconnect(), TCPMessage)
    assert isinstance(AckClientDisconnect(), InternalTCPMessage)


def test_message_class_hierarchy() -> None:
    assert issubclass(Message, TCPMessage)
    assert issubclass(ExceptionMessage, Message)
    assert issubclass(ClientException, ExceptionMessage)
    assert issubclass(BlockFailed, ClientException)
    for cls in (AcquireBlock, SendBlock, ReleaseBlock, RequestShutdown):
        assert issubclass(cls, Message)
    assert not issubclass(Message, Exception)
    assert issubclass(UnexpectedMessage, Exception)


def test_tcp_message_attributes() -> None:
    empty = TCPMessage()
    assert empty.payload is None
    assert empty.stream is None
    msg = TCPMessage(payload={"a": 1})
    assert msg.payload == {"a": 1}
    assert msg.stream is None
    assert TCPMessage(7).payload == 7


def test_message_attributes() -> None:
    block = make_block()
    error = ValueError("bad", 3)

    assert Message().payload is None
    assert Message(5).payload == 5
    assert Message(5).stream is None

    assert ExceptionMessage(error).exception is error
    assert isinstance(ExceptionMessage(error), Message)

    ce = ClientException(error, "ctx")
    assert ce.exception is error
    assert ce.context == "ctx"

    bf = BlockFailed(error, block, "ctx")
    assert bf.exception is error
    assert bf.block is block
    assert bf.context == "ctx"
    assert isinstance(bf, ClientException)
    assert isinstance(bf, ExceptionMessage)
    assert isinstance(bf, Message)

    assert AcquireBlock("task_a").task_id == "task_a"
    assert SendBlock(block).block is block
    assert ReleaseBlock(block).block is block
    assert isinstance(RequestShutdown(), Message)
    assert isinstance(RequestShutdown(), TCPMessage)


def test_message_constructor_signatures() -> None:
    def params(cls: type) -> list[str]:
        return list(inspect.signature(cls).parameters)

    assert params(TCPMessage) == ["payload"]
    assert params(Message) == ["payload"]
    assert params(ExceptionMessage) == ["exception"]
    assert params(ClientException) == ["exception", "context"]
    assert params(BlockFailed) == ["exception", "block", "context"]
    assert params(AcquireBlock) == ["task_id"]
    assert params(SendBlock) == ["block"]
    assert params(ReleaseBlock) == ["block"]
    assert params(UnexpectedMessage) == ["message"]
    assert params(TCPClient) == ["host", "port"]
    max_tries = inspect.signature(TCPServer).parameters["max_port_tries"]
    assert max_tries.default == 1000


def test_unexpected_message() -> None:
    msg = Message(1)
    e = UnexpectedMessage(msg)
    assert e.message is msg
    assert e.args == (msg,)
    with pytest.raises(UnexpectedMessage) as info:
        raise UnexpectedMessage(msg)
    assert info.value.message is msg


# ---------------------------------------------------------------------------
# IOLooper


def test_io_looper_class_attributes() -> None:
    assert isinstance(IOLooper.threads, dict)
    assert isinstance(IOLooper.ioloops, dict)
    assert isinstance(inspect.getattr_static(IOLooper, "clear"), staticmethod)
    assert issubclass(TCPServer, IOLooper)
    assert issubclass(TCPClient, IOLooper)


def test_server_and_client_share_one_running_background_ioloop(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    client = connect()
    other = TCPServer()
    try:
        assert isinstance(server.ioloop, tornado.ioloop.IOLoop)
        assert client.ioloop is server.ioloop
        assert other.ioloop is server.ioloop
        assert server.ioloop in IOLooper.ioloops.values()

        # the loop runs on a background (daemon) thread, not the caller's
        ran_on: list[threading.Thread] = []
        done = threading.Event()

        def callback() -> None:
            ran_on.append(threading.current_thread())
            done.set()

        server.ioloop.add_callback(callback)
        assert done.wait(RECV_TIMEOUT), "the ioloop did not run a callback"
        assert ran_on[0] is not threading.current_thread()
        assert ran_on[0].daemon
    finally:
        other.disconnect()


def test_io_looper_clear_then_new_pair_works() -> None:
    # what a daisy 1.x script does between runs
    first = TCPServer()
    first.disconnect()

    IOLooper.clear()
    assert isinstance(IOLooper.threads, dict)
    assert isinstance(IOLooper.ioloops, dict)

    srv = TCPServer()
    client = TCPClient(*srv.address)
    try:
        assert client.connected()
        got = roundtrip(srv, client, Message("after clear"))
        assert got.payload == "after clear"
        got.stream.send_message(Message("reply"))
        assert recv(client).payload == "reply"
    finally:
        client.disconnect()
        srv.disconnect()


# ---------------------------------------------------------------------------
# server and client


def test_server_listens_on_an_address(server: TCPServer) -> None:
    host, port = server.address
    assert isinstance(host, str) and host
    assert isinstance(port, int) and 0 < port < 65536
    other = TCPServer(max_port_tries=10)
    try:
        assert other.address != server.address
    finally:
        other.disconnect()


def test_client_attributes(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    host, port = server.address
    assert client.host == host
    assert client.port == port
    assert client.connected()
    assert isinstance(client.stream, TCPStream)
    assert repr(client.stream) == f"{host}:{port}"


def test_get_message_returns_none_on_timeout(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    # each waits for its timeout, then returns (the upper bound, ten times
    # the timeout, only catches a wait that does not end)
    client = connect()
    start = time.monotonic()
    assert server.get_message(timeout=0.2) is None
    assert 0.1 <= time.monotonic() - start < 2.0
    start = time.monotonic()
    assert client.get_message(timeout=0.2) is None
    assert 0.1 <= time.monotonic() - start < 2.0


def test_message_to_server_and_reply(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    msg = roundtrip(server, client, Message({"x": [1, 2, 3]}))
    assert type(msg) is Message
    assert msg.payload == {"x": [1, 2, 3]}

    assert isinstance(msg.stream, TCPStream)
    assert not msg.stream.closed()
    host, port = stream_address(msg.stream)
    assert host and port > 0
    assert (host, port) != tuple(server.address)

    msg.stream.send_message(Message("pong"))
    reply = recv(client)
    assert type(reply) is Message
    assert reply.payload == "pong"
    assert isinstance(reply.stream, TCPStream)
    assert repr(reply.stream) == f"{server.address[0]}:{server.address[1]}"

    assert server.get_message(timeout=0.1) is None
    assert client.get_message(timeout=0.1) is None


def test_tcp_message_goes_through(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    msg = roundtrip(server, client, TCPMessage(("raw", 1)))
    assert type(msg) is TCPMessage
    assert msg.payload == ("raw", 1)
    assert msg.stream is not None


def test_block_is_pickled_across(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    block = make_block()
    msg = roundtrip(server, client, SendBlock(block))
    assert isinstance(msg, SendBlock)
    received = msg.block
    assert isinstance(received, daisy.Block)
    assert received is not block
    assert received.block_id == block.block_id
    assert received.read_roi == block.read_roi
    assert received.write_roi == block.write_roi
    assert received.read_roi == daisy.Roi((0,), (10,))

    # and back to the client
    msg.stream.send_message(ReleaseBlock(received))
    back = recv(client)
    assert isinstance(back, ReleaseBlock)
    assert back.block.block_id == block.block_id
    assert back.block.write_roi == block.write_roi


def test_exception_is_pickled_across(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    msg = roundtrip(server, client, ExceptionMessage(ValueError("bad value", 42)))
    assert type(msg) is ExceptionMessage
    assert type(msg.exception) is ValueError
    assert msg.exception.args == ("bad value", 42)
    assert msg.stream is not None


def test_every_message_kind_crosses(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    block = make_block()

    acquire = roundtrip(server, client, AcquireBlock("task_a"))
    assert type(acquire) is AcquireBlock
    assert acquire.task_id == "task_a"

    failed = roundtrip(server, client, BlockFailed(RuntimeError("boom"), block, {"worker": 3}))
    assert type(failed) is BlockFailed
    assert type(failed.exception) is RuntimeError
    assert failed.exception.args == ("boom",)
    assert failed.block.block_id == block.block_id
    assert failed.block.write_roi == block.write_roi
    assert failed.context == {"worker": 3}

    ce = roundtrip(server, client, ClientException(KeyError("k"), "ctx"))
    assert type(ce) is ClientException
    assert type(ce.exception) is KeyError
    assert ce.exception.args == ("k",)
    assert ce.context == "ctx"

    release = roundtrip(server, client, ReleaseBlock(block))
    assert type(release) is ReleaseBlock
    assert release.block.block_id == block.block_id

    shutdown = roundtrip(server, client, RequestShutdown())
    assert type(shutdown) is RequestShutdown


def test_two_clients_messages_and_replies(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    clients = [connect(), connect()]
    n = 4
    for i in range(n):
        for c, client in enumerate(clients):
            client.send_message(Message((c, i)))

    by_stream: dict[str, list[int]] = {}
    streams: dict[int, TCPStream] = {}
    for _ in range(n * len(clients)):
        msg = recv(server)
        c, i = msg.payload
        by_stream.setdefault(repr(msg.stream), []).append(i)
        streams[c] = msg.stream
    assert server.get_message(timeout=0.1) is None

    # each client's messages came on its own stream, in the order sent
    assert len(by_stream) == 2
    assert sorted(by_stream.values()) == [list(range(n)), list(range(n))]
    assert repr(streams[0]) != repr(streams[1])

    # a reply reaches the client it was sent to, and only that one
    streams[1].send_message(Message("for client 1"))
    assert recv(clients[1]).payload == "for client 1"
    assert clients[0].get_message(timeout=0.2) is None

    streams[0].send_message(Message("for client 0"))
    assert recv(clients[0]).payload == "for client 0"
    assert clients[1].get_message(timeout=0.2) is None


def test_graceful_disconnect(
    server: TCPServer, connect: Callable[[], TCPClient], caplog: pytest.LogCaptureFixture
) -> None:
    client = connect()
    assert roundtrip(server, client, Message("hi")).payload == "hi"
    start = time.monotonic()
    client.disconnect()
    # the server's acknowledgement ended the wait, not DISCONNECT_TIMEOUT
    assert time.monotonic() - start < DISCONNECT_TIMEOUT
    assert "did not acknowledge the disconnect" not in caplog.text
    assert not client.connected()
    # the server sees neither a message nor an error
    assert server.get_message(timeout=0.5) is None


def test_graceful_disconnect_leaves_other_clients_working(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    leaving, staying = connect(), connect()
    leaving.disconnect()
    assert not leaving.connected()
    assert staying.connected()
    msg = roundtrip(server, staying, Message("still here"))
    assert msg.payload == "still here"
    msg.stream.send_message(Message("ack"))
    assert recv(staying).payload == "ack"


def test_abrupt_client_drop(server: TCPServer, connect: Callable[[], TCPClient]) -> None:
    client = connect()
    msg = roundtrip(server, client, Message("hello"))
    client_address = stream_address(msg.stream)

    client.stream.close()  # no graceful disconnect

    # the server reports which client went away
    error = expect_server_error(server)
    assert error.args == client_address

    # the client reports the server's address
    with pytest.raises(StreamClosedError) as info:
        client.send_message(Message("too late"))
    assert info.value.args == (client.host, client.port)
    assert info.value.args == tuple(server.address)


def test_client_is_not_connected_after_abrupt_drop(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    client = connect()
    roundtrip(server, client, Message("hello"))

    # Closed on the ioloop's thread: daisy 1.2.2 misses (about once in a few
    # hundred runs) a close made from another thread while its read is pending.
    client.ioloop.add_callback(client.stream.close)

    expect_server_error(server)
    with pytest.raises(StreamClosedError) as info:
        client.send_message(Message("too late"))
    assert info.value.args == (client.host, client.port)

    with pytest.raises(NotConnected):
        client.get_message(timeout=0.2)
    assert not client.connected()


def test_abrupt_drop_leaves_other_clients_working(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    dropped, staying = connect(), connect()
    roundtrip(server, dropped, Message("d"))
    dropped.stream.close()
    expect_server_error(server)

    msg = roundtrip(server, staying, Message("s"))
    assert msg.payload == "s"
    msg.stream.send_message(Message("ack"))
    assert recv(staying).payload == "ack"


def test_server_disconnect_closes_client_streams(
    server: TCPServer, connect: Callable[[], TCPClient]
) -> None:
    client = connect()
    msg = roundtrip(server, client, Message("hi"))
    assert not msg.stream.closed()
    server.disconnect()

    deadline = time.monotonic() + RECV_TIMEOUT
    while not msg.stream.closed() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert msg.stream.closed()

    # the client learns that the server is gone
    with pytest.raises(StreamClosedError) as info:
        for _ in range(5):
            assert client.get_message(timeout=0.1) is None
    assert info.value.args == tuple(server.address)


def test_connecting_where_nothing_listens_raises() -> None:
    sock, port = closed_port()
    try:
        with pytest.raises((StreamClosedError, TornadoStreamClosedError)):
            TCPClient("127.0.0.1", port)
    finally:
        sock.close()


def test_a_basic_exchange_in_one_process_as_1_2_2_does_it() -> None:
    """The 1.x tutorial exchange: a server and a client in one process,
    send, get, reply through the message's stream, a zero timeout, then
    after disconnect both ends of the client say NotConnected (1.2.2's
    error; ours said StreamClosedError on send)."""
    from daisy.tcp.exceptions import NotConnected

    srv = TCPServer()
    client = TCPClient(*srv.address)
    try:
        client.send_message(Message("hi"))
        got = srv.get_message()
        assert got is not None and got.payload == "hi"
        got.stream.send_message(Message("reply"))
        reply = client.get_message()
        assert reply is not None and reply.payload == "reply"
        assert client.get_message(timeout=0) is None
        client.disconnect()
        with pytest.raises(NotConnected):
            client.send_message(Message("after"))
        with pytest.raises(NotConnected):
            client.get_message()
    finally:
        client.disconnect()
        srv.disconnect()
