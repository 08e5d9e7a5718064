"""Live metrics of a running pipeline in the Prometheus text format.

``run_blockwise(..., metrics_port=9100)`` serves them over HTTP while the
run goes (``http://127.0.0.1:9100/metrics``, printed once with its token
at the start) and stops when it ends. Built by the official
``prometheus-client`` package (``pip install prometheus-client``, or the
``daisy[report]`` extra), from its own registry, so nothing else in the
process is exported, and served by the dashboard's guarded server: on
loopback unless ``DAISY_DASHBOARD_HOST`` names another address, only to
requests with the run's token (``?token=`` or ``Authorization: Bearer``;
``DAISY_DASHBOARD_TOKEN`` fixes it for a scrape configuration), with a cap
on connections and a deadline on each request (see `daisy.dashboard`). A
Prometheus scrape job::

    - job_name: daisy
      authorization: {credentials: "<the token>"}   # older versions: bearer_token
      static_configs: [{targets: ["127.0.0.1:9100"]}]

Updated on every server tick (about 20 times a second):

- ``daisy_blocks{task, state}``: blocks per state (pending, ready,
  processing, completed, skipped, failed, orphaned);
- ``daisy_workers_alive{task}``: live worker processes;
- ``daisy_block_seconds{task}``: histogram of the round trips of the
  blocks that completed (dispatch to return, as the server times them);
- ``daisy_block_failures_total{task}``: failed attempts;
- ``daisy_worker_restarts_total{task}``: workers that died unexpectedly.

At the run's end, a scraper that scraped in the last few seconds gets a
moment to scrape the final figures before the server stops (as a page of
the dashboard does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daisy._daisy import TaskState
from daisy.dashboard.guarded_server import (
    LOOPBACK,
    PROMETHEUS_TEXT,
    Answer,
    GuardedServer,
    Watchers,
    view_token,
    view_url,
)

#: histogram buckets of block round trips, seconds: a millisecond to an hour
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0)


class PrometheusMetrics:
    """Serves the metrics of one run on ``port`` (at ``addr``) at
    ``/metrics`` until `close`, to requests with ``token`` (None:
    `daisy.dashboard.view_token`'s; `url` has it); with ``serve=False`` it
    only keeps them in `registry`, for another server to serve (the
    dashboard's, on the same port)."""

    def __init__(
        self,
        port: int,
        task_ids: Sequence[str],
        addr: str = LOOPBACK,
        serve: bool = True,
        token: str | None = None,
    ) -> None:
        try:
            import prometheus_client as prom
        except ImportError:
            raise ImportError(
                "metrics_port: live metrics need the prometheus-client package; "
                "pip install prometheus-client (or daisy[report])"
            ) from None
        self.registry = prom.CollectorRegistry()
        self.blocks = prom.Gauge(
            "daisy_blocks", "Blocks per state", ["task", "state"], registry=self.registry
        )
        self.workers = prom.Gauge(
            "daisy_workers_alive", "Live worker processes", ["task"], registry=self.registry
        )
        self.block_seconds = prom.Histogram(
            "daisy_block_seconds",
            "Block round trips (dispatch to return), seconds",
            ["task"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.failures = prom.Counter(
            "daisy_block_failures", "Failed block attempts", ["task"], registry=self.registry
        )
        self.restarts = prom.Counter(
            "daisy_worker_restarts",
            "Workers that died unexpectedly",
            ["task"],
            registry=self.registry,
        )
        self._seen_failures = dict.fromkeys(task_ids, 0)
        self._seen_restarts = dict.fromkeys(task_ids, 0)
        self._order = list(task_ids)
        self._server: GuardedServer | None = None
        self._watchers = Watchers()
        # final once `close` has begun: the figures were final before it
        self._final = False
        #: the secret every request must carry
        self.token: str = view_token() if token is None else token
        self.port = port
        #: the address of the metrics with the token
        self.url = view_url(addr, port, "/metrics", self.token)
        if not serve:
            return  # the dashboard's server serves them, and watches its scrapers
        self._server = GuardedServer(
            "metrics_port: cannot serve metrics",
            addr,
            port,
            self.token,
            {"/metrics": self._scrape},
            "not found: the metrics are at /metrics",
        )
        self.port = self._server.port
        self.url = view_url(addr, self.port, "/metrics", self.token)

    def _scrape(self, client: str, query: dict[str, list[str]]) -> Answer:
        """A scrape, noted in the watchers (final once `close` began)."""
        from prometheus_client import generate_latest

        final = self._final  # before the figures: they were final before it
        data: bytes = generate_latest(self.registry)
        self._watchers.seen(f"metrics@{client}", final)
        return PROMETHEUS_TEXT, data

    def update(
        self,
        states: Sequence[TaskState],
        workers: Sequence[int],
        restarts: Sequence[int],
        round_trips: Sequence[tuple[str, float]],
    ) -> None:
        """Fold one server tick into the metrics."""
        for task, s, alive, died in zip(self._order, states, workers, restarts, strict=True):
            counts: dict[str, Any] = {
                "pending": s.pending_count,
                "ready": s.ready_count,
                "processing": s.processing_count,
                "completed": s.completed_count,
                "skipped": s.skipped_count,
                "failed": s.failed_count,
                "orphaned": s.orphaned_count,
            }
            for state, n in counts.items():
                self.blocks.labels(task=task, state=state).set(n)
            self.workers.labels(task=task).set(alive)
            new_failures = s.failed_attempts - self._seen_failures[task]
            if new_failures > 0:
                self.failures.labels(task=task).inc(new_failures)
                self._seen_failures[task] = s.failed_attempts
            new_restarts = died - self._seen_restarts[task]
            if new_restarts > 0:
                self.restarts.labels(task=task).inc(new_restarts)
                self._seen_restarts[task] = died
        for task, seconds in round_trips:
            self.block_seconds.labels(task=task).observe(seconds)

    def close(self) -> None:
        """Stop serving, once a scraper still watching has scraped the final
        figures (`daisy.dashboard.Watchers`): a run's last blocks would
        otherwise never show."""
        if self._server is None:
            return
        self._final = True
        self._watchers.wait_for_final()
        self._server.close()
