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
             processing, held_back, workers, failed_attempts, restarts,
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
orphaned + pending + processing == total``. ``held_back`` counts the times
the memory guard stopped a block's worker before the kernel's OOM killer
would and held the block back to run again (see "Memory and workers" in the
docs; those blocks are pending again, not failed). A bar's ``outcome`` is
``done``, ``failed``, ``timed out`` or ``lost`` (its worker died).
``blocks_per_second`` is over the last 30 s, ``eta_seconds`` the blocks
left at that pace (null while nothing completes), ``utilisation`` the
seconds the task's workers spent on blocks over the seconds they lived so
far (null without workers).
"""

from daisy.dashboard.guarded_server import (
    ANSWER_SECONDS,
    CLOSE_GRACE_SECONDS,
    HOST_ENV,
    LINGER_SECONDS,
    LOOPBACK,
    MAX_CONNECTIONS,
    MAX_VIEWERS,
    PROMETHEUS_TEXT,
    REQUEST_SECONDS,
    TOKEN_ENV,
    WATCHING_SECONDS,
    Answer,
    GuardedServer,
    Route,
    Watchers,
    view_host,
    view_token,
    view_url,
)
from daisy.dashboard.page import MAX_BARS, POLL_MS, page_html
from daisy.dashboard.status import MAX_WORKERS_LISTED, SCHEMA, WINDOW_SECONDS, Dashboard

__all__ = [
    "ANSWER_SECONDS",
    "CLOSE_GRACE_SECONDS",
    "HOST_ENV",
    "LINGER_SECONDS",
    "LOOPBACK",
    "MAX_BARS",
    "MAX_CONNECTIONS",
    "MAX_VIEWERS",
    "MAX_WORKERS_LISTED",
    "POLL_MS",
    "PROMETHEUS_TEXT",
    "REQUEST_SECONDS",
    "SCHEMA",
    "TOKEN_ENV",
    "WATCHING_SECONDS",
    "WINDOW_SECONDS",
    "Answer",
    "Dashboard",
    "GuardedServer",
    "Route",
    "Watchers",
    "page_html",
    "view_host",
    "view_token",
    "view_url",
]
