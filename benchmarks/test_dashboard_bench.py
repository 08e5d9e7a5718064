"""What the live dashboard costs the scheduler (pytest-benchmark).

10^4 no-op blocks on 2 worker processes, as ``test_noop_throughput`` in
``test_runtime_bench.py``, without a dashboard and with one served and
polled: a client thread fetches the page once and ``/status.json`` every
0.5 s while the run goes (as an open browser tab does every second), with
the run's token (fixed by ``DAISY_DASHBOARD_TOKEN``).

Two figures per mode: the benchmark's time is the whole ``run_blockwise``
call (worker start-up, and with a watched dashboard the wait, at most one
poll, for the watcher to fetch the final state before the server stops);
``extra_info["blocks_per_second"]`` is the scheduler's own throughput,
blocks over the span from the first block sent to the last returned (the
run report's ``first_block_at`` and ``last_block_at``).

Those two benchmarks run one mode after the other, and this machine's
speed drifts between them; ``test_dashboard_cost_interleaved`` alternates
the modes run by run (off, polled, off, polled, ...) and records both
figures per mode, side by side.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from bench_functions import noop

import daisy

N_BLOCKS = 10_000
WORKERS = 2
POLL_SECONDS = 0.5
#: the runs' token (``DAISY_DASHBOARD_TOKEN``, set for every benchmark here)
TOKEN = "bench-dashboard-token-0123456789"


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAISY_DASHBOARD_TOKEN", TOKEN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Poller:
    """Fetches the page once the run serves it, then ``/status.json`` every
    `POLL_SECONDS` until it says the run finished."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.polls = 0
        self.saw_final = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._go, daemon=True)
        self.thread.start()

    def _get(self, path: str) -> bytes:
        url = f"http://127.0.0.1:{self.port}{path}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            data: bytes = r.read()
            return data

    def _go(self) -> None:
        page = False
        while not self.stop.is_set():
            try:
                if not page:
                    self._get("/")
                    page = True
                st = json.loads(self._get("/status.json"))
                self.polls += 1
                if st["finished"]:
                    self.saw_final = True
                    return
            except (OSError, http.client.HTTPException):
                # not serving yet, or a poll that timed out or was dropped
                # on a loaded machine: poll again, as a browser page does
                # (URLError and ConnectionError are OSErrors too)
                self.stop.wait(0.01)
                continue
            self.stop.wait(POLL_SECONDS)


def run(task: daisy.Task, dashboard: bool) -> tuple[bool, Poller | None]:
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-bench-logs-"))
    if not dashboard:
        return daisy.run_blockwise([task], progress=False, summary=False), None
    port = free_port()
    poller = Poller(port)
    try:
        ok = daisy.run_blockwise([task], progress=False, summary=False, dashboard_port=port)
    finally:
        poller.stop.set()
        poller.thread.join(10)
    return ok, poller


def make_task(task_id: str) -> daisy.Task:
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (N_BLOCKS,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=noop,
        read_write_conflict=False,
        max_workers=WORKERS,
        max_retries=0,
    )


def block_span(task: daisy.Task) -> float:
    """First block sent to last returned, from the run report."""
    report = daisy.last_report()
    assert report is not None
    r = report.tasks[task.task_id]
    assert r.first_block_at is not None and r.last_block_at is not None
    return r.last_block_at - r.first_block_at


@pytest.mark.parametrize("dashboard", ["off", "polled"])
def test_noop_throughput_with_dashboard(benchmark: Any, dashboard: str) -> None:
    counter = iter(range(1000))
    spans: list[float] = []
    pollers: list[Poller] = []

    def once() -> bool:
        task = make_task(f"dash_bench_{dashboard}_{next(counter)}")
        ok, poller = run(task, dashboard == "polled")
        if poller is not None:
            pollers.append(poller)
        spans.append(block_span(task))
        return ok

    ok = benchmark.pedantic(once, rounds=7, iterations=1)
    assert ok is True
    if dashboard == "polled":
        assert all(p.polls >= 1 and p.saw_final for p in pollers), "the dashboard was watched"
        benchmark.extra_info["polls"] = [p.polls for p in pollers]
    spans.sort()
    benchmark.extra_info["blocks"] = N_BLOCKS
    benchmark.extra_info["block_spans_s"] = spans
    benchmark.extra_info["blocks_per_second"] = N_BLOCKS / spans[len(spans) // 2]


#: run pairs (off, polled) of the interleaved benchmark
PAIRS = 8


def test_dashboard_cost_interleaved(benchmark: Any) -> None:
    spans: dict[str, list[float]] = {"off": [], "polled": []}
    walls: dict[str, list[float]] = {"off": [], "polled": []}
    counter = iter(range(10_000))
    finals: list[bool] = []

    def pairs() -> bool:
        ok = True
        for _ in range(PAIRS):
            for mode in ("off", "polled"):
                task = make_task(f"dash_pair_{mode}_{next(counter)}")
                start = time.perf_counter()
                done, poller = run(task, mode == "polled")
                walls[mode].append(time.perf_counter() - start)
                spans[mode].append(block_span(task))
                ok = ok and done
                if poller is not None:
                    finals.append(poller.saw_final)
        return ok

    assert benchmark.pedantic(pairs, rounds=1, iterations=1) is True, "a run failed"
    assert all(finals), f"a watching page missed the final state: {finals}"
    for mode in ("off", "polled"):
        span = statistics.median(spans[mode])
        benchmark.extra_info[f"{mode}_blocks_per_second"] = N_BLOCKS / span
        benchmark.extra_info[f"{mode}_block_span_s"] = sorted(spans[mode])
        benchmark.extra_info[f"{mode}_run_s_median"] = statistics.median(walls[mode])
