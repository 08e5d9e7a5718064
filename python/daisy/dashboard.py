"""A live view of a running run in the browser.

``run_blockwise(..., dashboard_port=8787)`` serves, while the run goes,
a page at ``http://127.0.0.1:8787/?token=SECRET`` and its data at
``/status.json``, and prints that address once. The page is self-contained
(bokeh's inline resources, no network) and polls ``/status.json`` every
second: per task the blocks done, failed, orphaned and pending with the
throughput, an ETA and the utilisation so far; a timeline of the blocks
returned in the last `WINDOW_SECONDS` per worker, filled in its task's
colour, a failed, timed-out or lost attempt outlined in red, orange or
black and never thinner than 1/250 of the time shown (with a legend);
every live worker's current block, its age and the worker's last peak RSS;
the last failed attempts. When the run ends, the page says so and shows the
final summary, and the server stops.

Every figure comes from the core's snapshot of each server tick (the one
that feeds the progress bars and the Prometheus metrics, see
`daisy._daisy.LiveDetail`); this module keeps only the latest ticks that
hold the last `MAX_BARS` block bars, and serialises them when asked. With ``metrics_port`` equal
to ``dashboard_port``, the same server answers ``/metrics`` too. Other
paths get 404, malformed or oversized requests 400.

For the run's owner only (a run's failures can hold anything its blocks
raised), and never at the run's expense:

- It listens on loopback (``127.0.0.1``) whatever ``host`` the run's own
  server has (``host="0.0.0.0"`` for remote workers opens that one, not
  this); the environment variable ``DAISY_DASHBOARD_HOST`` (`HOST_ENV`)
  names another address, ``0.0.0.0`` for every interface. From another
  machine, an SSH tunnel is the safer way:
  ``ssh -L 8787:127.0.0.1:8787 driver-host``.
- Every request needs the run's secret token, a fresh one per run
  (``secrets.token_urlsafe(16)``) unless ``DAISY_DASHBOARD_TOKEN``
  (`TOKEN_ENV`) fixes one (16 to 256 characters of ``A-Z a-z 0-9 . _ ~ -``;
  a Prometheus scrape configuration needs to know it in advance): as
  ``?token=SECRET`` (the printed address has it) or as a header
  ``Authorization: Bearer SECRET`` (the page sends its polls so, and so
  does Prometheus with ``authorization: {credentials: SECRET}``, or
  ``bearer_token`` in older versions). Without it, whatever the path: a 403
  and one line, nothing else. Tokens are compared in constant time, never
  logged (only the printed address line holds one), and never set as a
  cookie (cookies are per host, not per port: every other server on
  127.0.0.1 would get it).
- At most `MAX_CONNECTIONS` connections are served at once, by a pool of
  as many threads; one past the cap is answered 503 and closed at once. A
  client has `REQUEST_SECONDS` to send a whole request (its line and
  headers; from its connection, or from the previous answer) and an answer
  `ANSWER_SECONDS` to be sent; past either, the connection is dropped,
  however slowly the client trickles bytes. So however many connections
  another user opens, the dashboard holds at most `MAX_CONNECTIONS`
  descriptors and threads, and the run's workers and sockets get theirs.

``/status.json`` (``"schema": 1``; a key removed or renamed increments it)::

    schema, running, finished, started_at, now     (times: seconds since the epoch)
    tasks: [{task_id, total, done, skipped, failed, orphaned, pending,
             processing, workers, failed_attempts, restarts,
             blocks_per_second, eta_seconds, utilisation}]
    timeline: {window_seconds, shown, dropped,
               bars: {task_id, worker_id, block, start, end, outcome}}
    workers: [{worker_id, task_id, block, age_seconds,
               last_peak_rss_bytes, blocks_done, blocks_failed}]
    failures: {total, last: [{task_id, block, worker_id, message}]}
    summary: null while running; then {outcome, finished_at,
             tasks: [{task_id, outcome, done, failed, orphaned,
                      utilisation, seconds}]}

``tasks`` is empty until the run's first tick (a few milliseconds after its
start). ``done`` counts skipped blocks too; ``pending`` is every block not yet
handed out (waiting for upstream blocks, or ready); ``done + failed +
orphaned + pending + processing == total``. A bar's ``outcome`` is
``done``, ``failed``, ``timed out`` or ``lost`` (its worker died).
``blocks_per_second`` is over the last 30 s, ``eta_seconds`` the blocks
left at that pace (null while nothing completes), ``utilisation`` the
seconds the task's workers spent on blocks over the seconds they lived so
far (null without workers).
"""

from __future__ import annotations

import collections
import concurrent.futures
import errno
import functools
import hmac
import html
import http.server
import json
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
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Any

from daisy._daisy import LiveDetail, TaskState
from daisy.run_report import RunReport

logger = logging.getLogger(__name__)

#: version of the ``/status.json`` schema (RUN_STATS.md); a change that
#: removes or renames a key increments it
SCHEMA = 1
#: the span of the timeline, seconds back from now
WINDOW_SECONDS = 300.0
#: the most block bars kept (and shipped) for the timeline: the latest ones
MAX_BARS = 5000
#: the most live workers listed
MAX_WORKERS_LISTED = 200
#: milliseconds between the page's polls
POLL_MS = 1000
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


#: a timeline bar: task id, worker id, block, start, end, outcome
_Bar = tuple[str, int | None, int, float, float, str]


def _recent_bars(ticks: list[Any], cutoff: float) -> list[_Bar]:
    """The last `MAX_BARS` bars of the ticks that ended after ``cutoff``,
    oldest first."""
    bars: list[_Bar] = []
    for tick in reversed(ticks):
        bars.extend(b for b in reversed(tick.bars()) if b[4] >= cutoff)
        if len(bars) >= MAX_BARS:
            break
    return bars[:MAX_BARS][::-1]


def _timeline_json(bars: list[_Bar], dropped: int) -> dict[str, Any]:
    """The status's ``timeline``: the bars as columns."""
    return {
        "window_seconds": WINDOW_SECONDS,
        "shown": len(bars),
        "dropped": dropped,
        "bars": {
            "task_id": [b[0] for b in bars],
            "worker_id": [b[1] for b in bars],
            "block": [b[2] for b in bars],
            "start": [b[3] for b in bars],
            "end": [b[4] for b in bars],
            "outcome": [b[5] for b in bars],
        },
    }


def _task_row(
    task_id: str,
    s: Any,
    pace: tuple[float, float | None, float | None],
    finished: bool,
    workers: int,
    restarts: int,
) -> dict[str, Any]:
    """One task's row of the status: its counts, its pace (``rate, eta,
    utilisation``), its live workers and their restarts. Once the run is
    over nothing is processing any more (blocks cut short by an interrupt
    wait for the next run), and a task that did not finish has no ETA."""
    rate, eta, util = pace
    held = s.processing_count
    if finished:
        held = 0
        eta = 0.0 if s.is_done() else None
    return {
        "task_id": task_id,
        "total": s.total_block_count,
        "done": s.completed_count,
        "skipped": s.skipped_count,
        "failed": s.failed_count,
        "orphaned": s.orphaned_count,
        "pending": s.pending_count + s.ready_count + s.processing_count - held,
        "processing": held,
        "workers": workers,
        "failed_attempts": s.failed_attempts,
        "restarts": restarts,
        "blocks_per_second": rate,
        "eta_seconds": eta,
        "utilisation": util,
    }


def _worker_json(row: tuple[Any, ...], now: float) -> dict[str, Any]:
    """One listed worker of the status."""
    wid, tid, block, since, rss, ok, failed = row
    return {
        "worker_id": wid,
        "task_id": tid,
        "block": block,
        "age_seconds": None if since is None else max(0.0, now - since),
        "last_peak_rss_bytes": rss,
        "blocks_done": ok,
        "blocks_failed": failed,
    }


def _pace(live: LiveDetail | None, n: int) -> list[tuple[float, float | None, float | None]]:
    pace = live.pace() if live is not None else []
    return pace if len(pace) == n else [(0.0, None, None)] * n


class Dashboard:
    """Serves the live page and ``/status.json`` of one run on ``addr``:
    ``port`` (0: a free port) from a daemon thread, until `close`, to
    requests with ``token`` (None: `view_token`'s), as `GuardedServer`
    does; `url` is the page's address with it.

    ``registry`` (a prometheus-client registry) is served at ``/metrics``
    too. Fed by `update` on every server tick and by `finish` once the run
    ended.
    """

    def __init__(
        self,
        port: int,
        task_ids: Sequence[str],
        addr: str = LOOPBACK,
        registry: Any = None,
        token: str | None = None,
    ) -> None:
        self._order = list(task_ids)
        self._lock = threading.Lock()
        # the ticks with block bars, newest last, holding `_kept` bars: the
        # fewest ticks that hold the latest MAX_BARS bars of the window
        self._ticks: collections.deque[LiveDetail] = collections.deque()
        self._kept = 0
        self._dropped = 0
        self._states: list[TaskState] = []
        self._workers: list[int] = [0] * len(self._order)
        self._restarts: list[int] = [0] * len(self._order)
        self._live: LiveDetail | None = None
        self._started_at = time.time()
        self._summary: dict[str, Any] | None = None
        self._watchers = Watchers()
        self._registry = registry
        self._page = page_html().encode()
        #: the secret every request must carry (the module's help)
        self.token: str = view_token() if token is None else token
        routes: dict[str, Route] = {
            "/": self._route_page,
            "/index.html": self._route_page,
            "/status.json": self._route_status,
        }
        if registry is not None:
            routes["/metrics"] = self._route_metrics
        self._server = GuardedServer(
            "dashboard_port: cannot serve the dashboard",
            addr,
            port,
            self.token,
            routes,
            "not found: the dashboard serves / and /status.json",
        )
        self.port: int = self._server.port
        #: the page's address with the token, as the run prints it
        self.url: str = view_url(addr, self.port, "/", self.token)

    def _route_page(self, client: str, query: dict[str, list[str]]) -> Answer:
        return "text/html; charset=utf-8", self.page()

    def _route_status(self, client: str, query: dict[str, list[str]]) -> Answer:
        # a page's own id, else the client's address
        viewer = query.get("viewer", [""])[0][:64] or f"@{client}"
        return "application/json", json.dumps(self.status(viewer), allow_nan=False).encode()

    def _route_metrics(self, client: str, query: dict[str, list[str]]) -> Answer:
        metrics = self.metrics(f"metrics@{client}")
        return None if metrics is None else (PROMETHEUS_TEXT, metrics)

    def update(
        self,
        states: Sequence[TaskState],
        workers: Sequence[int],
        restarts: Sequence[int],
        live: LiveDetail,
    ) -> None:
        """Fold one server tick in: its counts, and its block bars into the
        ring."""
        with self._lock:
            self._states = list(states)
            self._workers = list(workers)
            self._restarts = list(restarts)
            self._live = live
            self._dropped += live.bars_dropped
            n = len(live)
            if n:
                # the tick's bars stay in the core's object, converted only
                # when a page asks: a tick costs an append
                self._ticks.append(live)
                self._kept += n
            while self._ticks and (
                self._kept - len(self._ticks[0]) >= MAX_BARS
                or self._ticks[0].now < live.now - WINDOW_SECONDS
            ):
                self._kept -= len(self._ticks.popleft())

    def finish(
        self,
        states: dict[str, TaskState] | None,
        report: RunReport | None,
        outcome: str,
    ) -> None:
        """The run ended (``outcome``: ``"completed"``, ``"failed"``,
        ``"interrupted"``): the final counts and the run report's summary."""
        tasks = []
        for tid in self._order:
            r = report.tasks.get(tid) if report is not None else None
            s = states.get(tid) if states is not None else None
            tasks.append(
                {
                    "task_id": tid,
                    "outcome": r.outcome if r is not None else outcome,
                    "done": s.completed_count if s is not None else None,
                    "failed": s.failed_count if s is not None else None,
                    "orphaned": s.orphaned_count if s is not None else None,
                    "utilisation": r.utilisation if r is not None else None,
                    "seconds": (r.finished_at - r.started_at) if r is not None else None,
                }
            )
        with self._lock:
            if states is not None:
                self._states = [states[t] for t in self._order if t in states]
            self._workers = [0] * len(self._order)
            self._summary = {"outcome": outcome, "finished_at": time.time(), "tasks": tasks}

    def close(self) -> None:
        """Stop serving. Every viewer that polled in the last
        `WATCHING_SECONDS` (each page, each other poller) gets up to
        `LINGER_SECONDS` in all to fetch the final state first."""
        with self._lock:
            finished = self._summary is not None
        if finished:
            self._watchers.wait_for_final()
        self._server.close()

    def status(self, viewer: str = "") -> dict[str, Any]:
        """What ``/status.json`` serves (its schema: the module's help), to
        ``viewer`` (a page's own id, or the client's address)."""
        with self._lock:
            states, live, summary = self._states, self._live, self._summary
            workers, restarts = self._workers, self._restarts
            now = live.now if live is not None and summary is None else time.time()
            ticks = list(self._ticks)
            dropped = self._dropped
        self._watchers.seen(viewer, final=summary is not None)
        pace = _pace(live, len(self._order))
        if summary is not None:
            # once finished, the run report's utilisation: the final word
            pace = [(0.0, 0.0, t["utilisation"]) for t in summary["tasks"]]
        tasks = [
            _task_row(
                self._order[i],
                s,
                pace[i],
                summary is not None,
                workers[i] if i < len(workers) else 0,
                restarts[i] if i < len(restarts) else 0,
            )
            for i, s in enumerate(states)
        ]
        listed = [] if live is None or summary is not None else live.workers()
        return {
            "schema": SCHEMA,
            "running": summary is None,
            "finished": summary is not None,
            "started_at": self._started_at,
            "now": now,
            "tasks": tasks,
            "timeline": _timeline_json(_recent_bars(ticks, now - WINDOW_SECONDS), dropped),
            "workers": [_worker_json(row, now) for row in listed[:MAX_WORKERS_LISTED]],
            "failures": {
                "total": 0 if live is None else live.failures_total,
                "last": [
                    {"task_id": tid, "block": sid, "worker_id": wid, "message": msg}
                    for tid, sid, wid, msg in ([] if live is None else live.failures())
                ],
            },
            "summary": summary,
        }

    def page(self) -> bytes:
        """The page (HTML, every script inline)."""
        return self._page

    def metrics(self, viewer: str = "") -> bytes | None:
        """The Prometheus exposition of ``registry``, if one was given, to
        ``viewer`` (a scraper: the run's end waits for it as for a page)."""
        if self._registry is None:
            return None
        from prometheus_client import generate_latest

        with self._lock:
            # the metrics are final before the summary is (the last tick
            # comes first): read the flag before the figures
            final = self._summary is not None
        data: bytes = generate_latest(self._registry)
        self._watchers.seen(viewer, final)
        return data


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


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 0.3em 0; }
h2 { font-size: 1.05em; margin: 1.2em 0 0.3em 0; }
#run-state { font-weight: 600; }
#timeline-legend .key { margin-right: 1.2em; white-space: nowrap; }
#timeline-legend .swatch { display: inline-block; width: 0.9em; height: 0.9em;
  margin-right: 0.3em; vertical-align: -0.1em; border: 2px solid transparent; }
#run-state.finished { color: #1a7f37; } #run-state.lost { color: #b42318; }
#run-state.finished.failed, #run-state.finished.abandoned { color: #b42318; }
#run-state.finished.interrupted { color: #b54708; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
#failures li { font-family: monospace; font-size: 0.9em; }
#summary { white-space: pre-wrap; font-family: monospace; }
"""

_SCRIPT = """
(function () {
  const POLL_MS = %(poll)d;
  // this page's own id: the run's end waits for every page watching it
  const VIEWER = Math.random().toString(36).slice(2, 12);
  // the run's token, from the address this page was opened with: sent with
  // every poll as a header (not in the URL, and never a cookie)
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const AUTH = TOKEN ? {"Authorization": `Bearer ${TOKEN}`} : {};
  // a bar is filled in its task's colour; an attempt that did not end done
  // is outlined in its outcome's colour and drawn at least MIN_BAR of the
  // window wide, so a failure that took a millisecond is still seen
  const TASK_COLOURS = ["#4c78a8", "#f2a541", "#54a24b", "#b279a2", "#9d755d", "#79706e",
                        "#72b7b2", "#ff9da6"];
  const COLOURS = {"failed": "#d62728", "timed out": "#ff7f0e", "lost": "#111111"};
  const MIN_BAR = 1 / 250;
  const taskColour = (i) => TASK_COLOURS[i %% TASK_COLOURS.length];
  const d = window.daisyDashboard = {updates: 0, last: null, misses: 0};
  const $ = (id) => document.getElementById(id);
  const num = (x) => x == null ? "\\u2014" : Number(x).toLocaleString("en-US");
  const secs = (s) => {
    if (s == null) return "\\u2014";
    if (s < 10) return s.toFixed(1) + "s";
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s %% 3600) / 60), r = s %% 60;
    const two = (x) => String(x).padStart(2, "0");
    return h ? `${h}h${two(m)}m` : m ? `${m}m${two(r)}s` : `${r}s`;
  };
  const pct = (u) => u == null ? "\\u2014" : (100 * u).toFixed(0) + "%%";
  const bytes = (b) => b == null ? "\\u2014" : (b / 2 ** 20).toFixed(1) + " MiB";
  function cell(row, text, id) {
    const td = document.createElement("td");
    td.textContent = text;
    if (id) td.id = id;
    row.appendChild(td);
  }
  function fill(tbody, rows) {
    tbody.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const [text, id] of cells) cell(tr, text, id);
      return tr;
    }));
  }
  function source() {
    for (const doc of (window.Bokeh ? Bokeh.documents : [])) {
      const m = doc.get_model_by_name("dashboard_bars");
      if (m) return m;
    }
    return null;
  }
  function render(st) {
    const state = $("run-state");
    const updated = new Date(st.now * 1000).toLocaleTimeString();
    if (st.finished) {
      state.textContent = `finished (${st.summary.outcome}) at ${updated}`;
      // coloured by how it ended: only a completed run is green
      state.className = "finished " + st.summary.outcome;
    } else {
      state.textContent = `running \\u2014 updated ${updated}`;
      state.className = "";
    }
    fill($("tasks"), st.tasks.map((t) => [
      [t.task_id], [num(t.done), "done-" + t.task_id], [num(t.failed), "failed-" + t.task_id],
      [num(t.orphaned), "orphaned-" + t.task_id], [num(t.pending), "pending-" + t.task_id],
      [num(t.processing)], [num(t.total)], [num(t.workers)],
      [t.blocks_per_second.toFixed(1)], [st.finished ? "done" : secs(t.eta_seconds)],
      [pct(t.utilisation)],
    ]));
    fill($("workers"), st.workers.map((w) => [
      [String(w.worker_id)], [w.task_id], [w.block == null ? "waiting" : String(w.block)],
      [secs(w.age_seconds)], [bytes(w.last_peak_rss_bytes)], [num(w.blocks_done)],
      [num(w.blocks_failed)],
    ]));
    $("workers-note").textContent = st.workers.length ? "" : "no live workers";
    const fl = $("failures");
    fl.replaceChildren(...st.failures.last.slice().reverse().map((f) => {
      const li = document.createElement("li");
      const who = f.worker_id == null ? "" : `, worker ${f.worker_id}`;
      li.textContent = `${f.task_id} block ${f.block}${who}: ${f.message}`;
      return li;
    }));
    $("failures-total").textContent = `${num(st.failures.total)} failed attempts so far`;
    const tl = st.timeline, b = tl.bars, t0 = st.started_at;
    const order = st.tasks.map((t) => t.task_id);
    const colourOf = (tid) => taskColour(Math.max(0, order.indexOf(tid)));
    const src = source();
    if (src) {
      const left = b.start.map((x) => x - t0);
      // of the time the bars shown span (a run's first seconds are not the
      // whole window)
      const span = b.end.length ? Math.max(...b.end) - Math.min(...b.start) : 0;
      const minWidth = MIN_BAR * Math.min(span, tl.window_seconds);
      src.data = {
        left: left,
        right: b.end.map((x, i) => {
          const r = x - t0;
          return b.outcome[i] === "done" ? r : Math.max(r, left[i] + minWidth);
        }),
        bottom: b.worker_id.map((w) => (w == null ? -1 : w) - 0.4),
        top: b.worker_id.map((w) => (w == null ? -1 : w) + 0.4),
        color: b.task_id.map(colourOf),
        line: b.outcome.map((o) => COLOURS[o] || "rgba(0,0,0,0)"),
        line_width: b.outcome.map((o) => (o === "done" ? 0 : 2.5)),
        task: b.task_id, block: b.block, outcome: b.outcome,
        worker: b.worker_id.map((w) => w == null ? "client" : String(w)),
      };
    }
    const legend = $("timeline-legend");
    const keys = order.map((tid, i) => [taskColour(i), tid, false]).concat(
      Object.entries(COLOURS).map(([o, c]) => [c, o, true]));
    legend.replaceChildren(...keys.map(([c, label, outline]) => {
      const item = document.createElement("span");
      item.className = "key";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style[outline ? "borderColor" : "background"] = c;
      item.append(swatch, label);
      return item;
    }));
    $("timeline-note").textContent =
      `${num(tl.shown)} blocks returned in the last ${secs(tl.window_seconds)} (the latest ` +
      `${num(%(max_bars)d)} at most)` + (tl.dropped ? `; ${num(tl.dropped)} not drawn` : "");
    if (st.finished) {
      $("summary").textContent = st.summary.tasks.map((t) =>
        `${t.task_id}: ${t.outcome}, ${num(t.done)} done, ${num(t.failed)} failed, ` +
        `${num(t.orphaned)} orphaned in ${secs(t.seconds)}; utilisation ${pct(t.utilisation)}`
      ).join("\\n");
    }
  }
  async function poll() {
    let st = null;
    try {
      const r = await fetch(`status.json?viewer=${VIEWER}`, {cache: "no-store", headers: AUTH});
      if (r.ok) st = await r.json();
    } catch (e) {
      st = null;
    }
    if (st == null) {
      d.misses += 1;
      if (d.misses >= 3) {
        const state = $("run-state");
        state.textContent = "the run's server no longer answers (the run ended or stopped)";
        state.className = "lost";
        return;
      }
    } else {
      d.misses = 0;
      render(st);
      d.last = st;
      d.updates += 1;
      if (st.finished) return;
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
"""


@functools.cache
def _timeline_figure(bokeh: Any) -> Any:
    """The live timeline: an empty bokeh figure whose bars (one row per
    worker) the page's script fills from ``status.json``."""
    src = bokeh.models.ColumnDataSource(
        name="dashboard_bars",
        data={
            k: []
            for k in (
                "left",
                "right",
                "bottom",
                "top",
                "color",
                "line",
                "line_width",
                "task",
                "block",
                "outcome",
                "worker",
            )
        },
    )
    fig = bokeh.plotting.figure(
        height=320,
        sizing_mode="stretch_width",
        x_axis_label="seconds since the run started",
        y_axis_label="worker",
        tools="xpan,xwheel_zoom,reset,save",
        toolbar_location="above",
    )
    fig.quad(
        source=src,
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        fill_color="color",
        line_color="line",
        line_width="line_width",
    )
    # one row per worker id: integer ticks only
    fig.yaxis.ticker = bokeh.models.AdaptiveTicker(min_interval=1.0)
    fig.yaxis.minor_tick_line_color = None
    fig.add_tools(
        bokeh.models.HoverTool(
            tooltips=[
                ("task", "@task"),
                ("block", "@block"),
                ("worker", "@worker"),
                ("outcome", "@outcome"),
            ]
        )
    )
    return fig


def page_html() -> str:
    """The dashboard page: the tables and the timeline, bokeh inline, and
    the script that polls ``status.json`` (built once per process: it is
    the same for every run)."""
    try:
        import bokeh.embed
        import bokeh.models
        import bokeh.plotting
        import bokeh.resources
    except ImportError:
        raise ImportError(
            "dashboard_port: the dashboard needs bokeh; pip install bokeh (or daisy[report])"
        ) from None
    script, div = bokeh.embed.components(_timeline_figure(bokeh))
    # bokeh's own bundle only (a figure needs no widgets, tables or GL):
    # a third of the size of every bundle inline
    resources = bokeh.resources.Resources(mode="inline", components=["bokeh"]).render()
    head = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in (
            "task",
            "done",
            "failed",
            "orphaned",
            "pending",
            "processing",
            "total",
            "workers",
            "blocks/s",
            "ETA",
            "utilisation",
        )
    )
    whead = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in ("worker", "task", "block", "age", "last peak RSS", "done", "failed")
    )
    code = _SCRIPT % {"poll": POLL_MS, "max_bars": MAX_BARS}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>daisy: live run</title>
<link rel="icon" href="data:,">
<style>{_STYLE}</style>
{resources}
{script}
</head><body>
<h1>daisy: live run</h1>
<div id="run-state">connecting</div>
<h2>Tasks</h2>
<table><thead><tr>{head}</tr></thead><tbody id="tasks"></tbody></table>
<h2>Timeline</h2>
<div id="timeline-legend"></div>
<div id="timeline-note"></div>
{div}
<h2>Workers</h2>
<table><thead><tr>{whead}</tr></thead><tbody id="workers"></tbody></table>
<div id="workers-note"></div>
<h2>Last failures</h2>
<div id="failures-total"></div>
<ul id="failures"></ul>
<h2>Summary</h2>
<div id="summary">the run is going; its summary shows here when it ends</div>
<script>{code}</script>
</body></html>
"""
