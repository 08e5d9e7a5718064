"""Live Prometheus metrics: scraped over loopback while a run goes, closed
when it ends. Every scrape carries the run's token (fixed here by
``DAISY_DASHBOARD_TOKEN``, as a scrape configuration would; without it:
tests/test_dashboard_access.py)."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from conftest import line_task

import daisy

#: the runs' token (``DAISY_DASHBOARD_TOKEN``, set for every test here)
TOKEN = "test-metrics-token-0123456789"


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAISY_DASHBOARD_TOKEN", TOKEN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> str:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()


def value(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    raise AssertionError(f"no metric line starting with {line_start!r} in:\n{text}")


def test_metrics_are_served_during_the_run_and_closed_after(tmp_path):
    port = free_port()
    go = tmp_path / "go"

    def block(b):
        # hold the run open until the test has scraped once
        deadline = time.time() + 20
        while not os.path.exists(str(go)) and time.time() < deadline:
            time.sleep(0.01)
        if b.block_id[1] == 2 and not os.path.exists(str(tmp_path / "failed")):
            open(str(tmp_path / "failed"), "x").close()
            raise RuntimeError("one failed attempt")

    task = line_task("metrics_task", 6, process_function=block, max_workers=2)
    scraped: dict[str, str] = {}

    def scraper():
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                text = scrape(port)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
                continue
            if 'daisy_workers_alive{task="metrics_task"}' in text:
                scraped["during"] = text
                break
            time.sleep(0.05)
        go.touch()

    t = threading.Thread(target=scraper)
    t.start()
    ok = daisy.run_blockwise([task], progress=False, summary=False, metrics_port=port)
    t.join()
    assert ok
    during = scraped["during"]
    assert value(during, 'daisy_blocks{state="completed",task="metrics_task"}') == 0
    assert value(during, 'daisy_workers_alive{task="metrics_task"}') >= 1
    assert "# TYPE daisy_block_seconds histogram" in during
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        scrape(port)


def test_metrics_count_blocks_failures_and_round_trips(tmp_path):
    from daisy.metrics import PrometheusMetrics

    port = free_port()
    metrics = PrometheusMetrics(port, ["a"])
    try:
        daisy.set_tracking_basedir(None)
        state = daisy.Scheduler([line_task("a", 4)]).task_states["a"]
        metrics.update([state], [3], [1], [("a", 0.02), ("a", 0.2)])
        text = scrape(port)
        assert value(text, 'daisy_blocks{state="ready",task="a"}') == 4
        assert value(text, 'daisy_workers_alive{task="a"}') == 3
        assert value(text, 'daisy_worker_restarts_total{task="a"}') == 1
        assert value(text, 'daisy_block_seconds_count{task="a"}') == 2
        assert value(text, 'daisy_block_seconds_bucket{le="0.05",task="a"}') == 1
    finally:
        metrics.close()


def test_metrics_port_in_a_serial_run_is_refused():
    with pytest.raises(ValueError, match="metrics_port"):
        daisy.run_blockwise([line_task("s", 2)], multiprocessing=False, metrics_port=free_port())


def _last_fails(b):
    time.sleep(0.05)
    if b.block_id[1] == 9:
        raise RuntimeError("the last block fails")


def test_a_scraper_that_was_watching_gets_the_final_figures():
    """The run's last block fails for good at its very end: a scraper that
    was scraping gets those figures before the server stops (it used to
    stop on the last tick, and the final counts never showed)."""
    port = free_port()
    task = line_task("metrics_end", 10, process_function=_last_fails, max_workers=1)
    scrapes: list[str] = []

    def scraper():
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                scrapes.append(scrape(port))
            except (urllib.error.URLError, ConnectionError):
                if scrapes:
                    return  # scraped, then stopped
            time.sleep(0.2)

    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    states = daisy.run_blockwise(
        [task], progress=False, summary=False, metrics_port=port, return_states=True
    )
    t.join(120)
    final = states["metrics_end"]
    assert (final.completed_count, final.failed_count) == (9, 1)
    last = scrapes[-1]
    assert value(last, 'daisy_blocks{state="completed",task="metrics_end"}') == 9, last
    assert value(last, 'daisy_blocks{state="failed",task="metrics_end"}') == 1, last
    attempts = value(last, 'daisy_block_failures_total{task="metrics_end"}')
    assert attempts == final.failed_attempts == 3, last  # max_retries=2: three attempts
