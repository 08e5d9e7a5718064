"""Live metrics of a running pipeline in the Prometheus text format.

``run_blockwise(..., metrics_port=9100)`` serves them over HTTP while the
run goes (``http://<host>:9100/metrics``) and stops when it ends. Served
by the official ``prometheus-client`` package (``pip install
prometheus-client``, or the ``daisy[report]`` extra), from its own
registry, so nothing else in the process is exported. Updated on every
server tick (about 20 times a second):

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

from collections.abc import Iterator, Sequence
from typing import Any

from daisy._daisy import TaskState
from daisy.dashboard import Watchers

#: histogram buckets of block round trips, seconds: a millisecond to an hour
BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0)


class _Scrapes:
    """A collector that exports nothing: each collection of its registry
    is a scrape, noted in ``watchers`` (final once `close` has begun: the
    figures were final before it)."""

    def __init__(self, watchers: Watchers) -> None:
        self.watchers = watchers
        self.final = False

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        self.watchers.seen("scraper", self.final)
        return iter(())


class PrometheusMetrics:
    """Serves the metrics of one run on ``port`` (at ``addr``) until
    `close`; with ``serve=False`` it only keeps them in `registry`, for
    another server to serve (the dashboard's, on the same port)."""

    def __init__(
        self, port: int, task_ids: Sequence[str], addr: str = "127.0.0.1", serve: bool = True
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
        self._server: Any = None
        self._watchers = Watchers()
        self._scrapes = _Scrapes(self._watchers)
        if not serve:
            return  # the dashboard's server watches its own scrapers
        self.registry.register(self._scrapes)
        try:
            self._server, self._thread = prom.start_http_server(
                port, addr=addr, registry=self.registry
            )
        except OSError as e:
            raise OSError(f"metrics_port: cannot serve metrics on {addr}:{port}: {e}") from None

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
        self._scrapes.final = True
        self._watchers.wait_for_final()
        self._server.shutdown()
        self._server.server_close()
