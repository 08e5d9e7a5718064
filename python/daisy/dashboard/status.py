"""The dashboard's model: `Dashboard` keeps the latest ticks of a run (the
core's snapshots, holding the last `MAX_BARS` block bars) and turns them
into ``/status.json`` when asked; it serves that and the page through a
`GuardedServer`. `daisy.dashboard` says what each key means.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from daisy._daisy import LiveDetail, TaskState
from daisy.dashboard.guarded_server import (
    LOOPBACK,
    PROMETHEUS_TEXT,
    Answer,
    GuardedServer,
    Route,
    Watchers,
    view_token,
    view_url,
)
from daisy.dashboard.page import MAX_BARS, page_html
from daisy.report.task_report import RunReport

logger = logging.getLogger(__name__)

#: version of the ``/status.json`` schema (RUN_STATS.md); a change that
#: removes or renames a key increments it
SCHEMA = 1
#: the span of the timeline, seconds back from now
WINDOW_SECONDS = 300.0
#: the most live workers listed
MAX_WORKERS_LISTED = 200

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
        "held_back": s.held_back_count,
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
