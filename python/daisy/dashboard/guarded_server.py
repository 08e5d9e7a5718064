"""The dashboard's and the metrics' HTTP server: for a run's owner only,
and never at the run's expense. It listens on loopback unless
``DAISY_DASHBOARD_HOST`` names another address; every request needs the
run's token (``?token=`` or ``Authorization: Bearer``, compared in constant
time, never logged); at most `MAX_CONNECTIONS` connections are served at
once, each under a deadline to send its request and one to receive its
answer. `Watchers` keeps who polls, so a run's end waits briefly for them
to fetch its final state. `daisy.dashboard` says what it serves.
"""

from __future__ import annotations

import concurrent.futures
import errno
import hmac
import http.server
import logging
import math
import os
import re
import secrets
import socket
import socketserver
import threading
import time
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

logger = logging.getLogger(__name__)

#: after the run, how long a page that was polling is waited for to fetch
#: the final state before the server stops, seconds
LINGER_SECONDS = 2.5

#: when the server stops, how long answers still being written get to go
#: out before their connections are dropped, seconds
CLOSE_GRACE_SECONDS = 1.0

#: a viewer that polled this recently is watching: the run's end waits
#: (at most `LINGER_SECONDS`) for it to fetch the final state
WATCHING_SECONDS = 5.0

#: viewers remembered at once; past it, those no longer watching are
#: forgotten and a new one is not waited for
MAX_VIEWERS = 256

#: where the dashboard and a metrics server listen unless `HOST_ENV` says
LOOPBACK = "127.0.0.1"
#: the environment variable naming another address to listen on
HOST_ENV = "DAISY_DASHBOARD_HOST"
#: the environment variable fixing the token (else a fresh one per run)
TOKEN_ENV = "DAISY_DASHBOARD_TOKEN"
#: connections served at once (each by a thread of a pool of as many);
#: one more is answered 503 and closed at once
MAX_CONNECTIONS = 32
#: seconds a client has to send a whole request line and headers, from its
#: connection or from the previous answer, before it is dropped
REQUEST_SECONDS = 5.0
#: seconds an answer has to be sent before its connection is dropped
ANSWER_SECONDS = 30.0

#: what a token of `TOKEN_ENV` may be: safe in a URL and a header
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,256}")
#: a token in a request line, hidden from the logs
_TOKEN_IN_TEXT = re.compile(r"(token=)[^&\s\"']*", re.IGNORECASE)
#: the whole answer without the token, whatever was asked
_FORBIDDEN = (
    b"forbidden: this run's dashboard and metrics answer only with its token "
    b"(?token= as in the address the run printed, or Authorization: Bearer)\n"
)
#: the answer to a connection past `MAX_CONNECTIONS`
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n"
)


def view_host() -> str:
    """The address the dashboard and a metrics server listen on:
    `HOST_ENV`'s, else loopback (never the run's own ``host``)."""
    return os.environ.get(HOST_ENV, "").strip() or LOOPBACK


def view_token() -> str:
    """The token of a run's dashboard and metrics: `TOKEN_ENV`'s (checked),
    else a fresh secret."""
    given = os.environ.get(TOKEN_ENV, "")
    if not given:
        return secrets.token_urlsafe(16)
    if not _TOKEN.fullmatch(given):
        raise ValueError(
            f"{TOKEN_ENV}: a token is 16 to 256 characters of A-Z a-z 0-9 . _ ~ - "
            f"(got {len(given)} characters); unset it for a fresh token per run"
        )
    return given


def view_url(addr: str, port: int, path: str, token: str) -> str:
    """The address of ``path`` with the token, as a browser opens it (an
    address of this machine where ``addr`` is every interface's)."""
    shown = addr
    if addr in ("0.0.0.0", "::", ""):
        from daisy.spawners import advertised_host

        shown = advertised_host()
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}{path}?token={urllib.parse.quote(token, safe='')}"


#: a route's answer (its content type and body), or None: not found
Answer = tuple[str, bytes] | None
#: a route: the client's address and the query to the answer
Route = Callable[[str, dict[str, list[str]]], Answer]


class Watchers:
    """Who watches a run (each dashboard page by its own id, each other
    poller or metrics scraper by its address), and, at the run's end, the
    wait for every one that polled in the last `WATCHING_SECONDS` to fetch
    the final state: at most `LINGER_SECONDS` in all. Thread-safe."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        #: viewer to when it last polled
        self._polls: dict[str, float] = {}
        self._served_final: set[str] = set()

    def seen(self, viewer: str, final: bool) -> None:
        """``viewer`` polled now, and got the final state if ``final``."""
        with self._changed:
            polled = time.monotonic()
            if len(self._polls) >= MAX_VIEWERS:
                # forget those no longer watching (a client inventing ids
                # cannot grow this, nor hold the run's end past the linger)
                self._polls = {
                    v: t for v, t in self._polls.items() if polled - t < WATCHING_SECONDS
                }
            if viewer in self._polls or len(self._polls) < MAX_VIEWERS:
                self._polls[viewer] = polled
            if final:
                self._served_final.add(viewer)
                self._changed.notify_all()

    def wait_for_final(self) -> None:
        """Wait until every viewer watching now has the final state, or
        `LINGER_SECONDS` have passed."""
        with self._changed:
            now = time.monotonic()
            watching = {v for v, t in self._polls.items() if now - t < WATCHING_SECONDS}
            self._changed.wait_for(lambda: watching <= self._served_final, timeout=LINGER_SECONDS)


#: the content type of the Prometheus text exposition
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class GuardedServer:
    """An HTTP server for a run's owner (the module's help): ``routes``
    (paths to `Route`) on ``addr``:``port`` (0: a free port), behind
    ``token``, with at most `MAX_CONNECTIONS` connections each under its
    deadlines, from a daemon thread until `close`. ``failing`` begins the
    message of the error raised where it cannot listen; ``not_found`` is
    the 404's."""

    def __init__(
        self,
        failing: str,
        addr: str,
        port: int,
        token: str,
        routes: dict[str, Route],
        not_found: str,
    ) -> None:
        # requests are parsed by http.server's hardened parser (bounded
        # lines and header counts); no new dependency
        handler = type(
            "Handler", (_Handler,), {"routes": routes, "token": token, "not_found": not_found}
        )
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        try:
            self._server = _Server((addr, port), handler, family)
        except OSError as e:
            raise OSError(f"{failing} on {addr}:{port}: {e}") from None
        self.port: int = self._server.server_address[1]
        # a short poll interval: `close` (at the run's end) waits for the
        # serving loop to notice, and a run should not end half a second
        # late; the loop also drops the connections past their deadline
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="daisy-dashboard",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop listening and drop every connection."""
        self._server.shutdown()
        self._server.server_close()
        self._server.drop_all()
        self._thread.join(5.0)


class _Server(socketserver.TCPServer):
    """Accepts on one thread; serves each connection within the cap on a
    thread of a bounded pool; closes the others at once; drops those past
    their deadline (`arm`) from the accepting loop."""

    # a dashboard restarted on the same port right after a run binds again
    allow_reuse_address = True
    # a burst of connections waits in the kernel, not in dropped SYNs
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any, family: socket.AddressFamily):
        self.address_family = family
        self._lock = threading.Lock()
        #: each connection served to the monotonic time it is dropped at
        self._open: dict[socket.socket, float] = {}
        self._closing = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            MAX_CONNECTIONS, thread_name_prefix="daisy-dashboard"
        )
        super().__init__(address, handler)

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # the process is out of descriptors (not for us: we hold at
                # most MAX_CONNECTIONS): no busy loop on the waiting one
                time.sleep(0.05)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            admitted = not self._closing and len(self._open) < MAX_CONNECTIONS
            if admitted:
                self._open[request] = time.monotonic() + REQUEST_SECONDS
        if not admitted:
            _refuse(request)
            return
        try:
            self._pool.submit(self._serve, request, client_address)
        except RuntimeError:  # closing
            with self._lock:
                self._open.pop(request, None)
            _refuse(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            # forgotten before it is closed: `service_actions` never shuts
            # down a descriptor number that another socket took since
            with self._lock:
                self._open.pop(request, None)
            self.shutdown_request(request)

    def arm(self, request: Any, seconds: float) -> None:
        """``request``'s connection is dropped ``seconds`` from now."""
        with self._lock:
            if request in self._open:
                self._open[request] = time.monotonic() + seconds

    def service_actions(self) -> None:
        # every turn of the accepting loop: drop the connections past their
        # deadline (their thread, blocked reading or writing, then ends)
        now = time.monotonic()
        with self._lock:
            for conn, deadline in self._open.items():
                if deadline <= now:
                    self._open[conn] = math.inf
                    _hang_up(conn)

    def drop_all(self) -> None:
        # answers being written (the final state a page was just waited
        # for: `Watchers` counts it served before it is sent) get a moment
        # to go out; whatever is still open after it is dropped
        with self._lock:
            self._closing = True
        end = time.monotonic() + CLOSE_GRACE_SECONDS
        while time.monotonic() < end:
            with self._lock:
                if not self._open:
                    break
            time.sleep(0.01)
        with self._lock:
            for conn in self._open:
                _hang_up(conn)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up mid-answer is its own business: never a
        # traceback on the run's stderr
        logger.debug("daisy dashboard: a request from %s failed", client_address, exc_info=True)


def _hang_up(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _refuse(request: socket.socket) -> None:
    """503 if the socket takes it at once, and closed."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass
    finally:
        request.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    routes: dict[str, Route]
    token: str
    not_found: str
    protocol_version = "HTTP/1.1"
    server_version = "daisy"
    sys_version = ""

    def setup(self) -> None:
        # no single read or write blocks longer; the deadlines (`_Server.arm`)
        # bound a client that trickles bytes
        super().setup()
        self.connection.settimeout(REQUEST_SECONDS)

    def handle_one_request(self) -> None:
        self.server.arm(self.connection, REQUEST_SECONDS)
        super().handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        self.server.arm(self.connection, ANSWER_SECONDS)
        return True

    def _authorized(self, query: dict[str, list[str]]) -> bool:
        given = list(query.get("token", []))
        scheme, _, credentials = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given.append(credentials.strip())
        expected = self.token.encode()
        ok = False
        for g in given[:4]:
            ok |= hmac.compare_digest(g.encode("utf-8", "surrogateescape"), expected)
        return ok

    def do_GET(self) -> None:
        path, _, qs = self.path.partition("?")
        try:
            query = urllib.parse.parse_qs(qs, max_num_fields=16)
        except ValueError:
            self.send_error(HTTPStatus.BAD_REQUEST, "too many query fields")
            return
        if not self._authorized(query):
            self.close_connection = True
            self._send(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8", _FORBIDDEN)
            return
        route = self.routes.get(path)
        answer = route(self.client_address[0], query) if route is not None else None
        if answer is None:
            self.send_error(HTTPStatus.NOT_FOUND, self.not_found)
        else:
            self._send(HTTPStatus.OK, *answer)

    def do_HEAD(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED)

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # a request line or header too long, or too many headers, is a bad
        # request like any other
        if code in (HTTPStatus.REQUEST_URI_TOO_LONG, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE):
            code, message = HTTPStatus.BAD_REQUEST, message or "request too large"
            self.close_connection = True
        if self.request_version == "HTTP/0.9":
            # a request line http.server could not parse: answered with a
            # status line all the same (no browser speaks HTTP/0.9)
            self.request_version = "HTTP/1.0"
            self.close_connection = True
        super().send_error(code, message, explain)

    def log_message(self, format: str, *args: Any) -> None:
        # request lines may hold the token: never in a log
        text = _TOKEN_IN_TEXT.sub(r"\1<hidden>", format % args).replace(self.token, "<hidden>")
        logger.debug("daisy dashboard: %s", text)
