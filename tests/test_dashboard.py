"""The live dashboard: ``run_blockwise(..., dashboard_port=...)`` serves a
page and ``/status.json`` while the run goes, from the core's snapshots;
bad requests never disturb the run; the page, opened in headless Chromium
with every other host unreachable, updates and ends with the final state.

Every request carries the run's token (fixed here by ``DAISY_DASHBOARD_TOKEN``;
what happens without it is tests/test_dashboard_access.py's).
"""

from __future__ import annotations

import functools
import http.client
import json
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import line_task

import daisy

#: where the browser test leaves its screenshots
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

#: generous: only to catch hangs
DEADLINE = 120.0

TASK_KEYS = {
    "task_id",
    "total",
    "done",
    "skipped",
    "failed",
    "orphaned",
    "pending",
    "processing",
    "held_back",
    "workers",
    "failed_attempts",
    "restarts",
    "blocks_per_second",
    "eta_seconds",
    "utilisation",
}


#: the runs' token (``DAISY_DASHBOARD_TOKEN``, set for every test here)
TOKEN = "test-dashboard-token-0123456789"
#: the header that carries it
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAISY_DASHBOARD_TOKEN", TOKEN)


def get(url: str) -> Any:
    """``urlopen`` of ``url`` with the token."""
    return urllib.request.urlopen(urllib.request.Request(url, headers=AUTH), timeout=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port: int) -> dict[str, Any]:
    with get(f"http://127.0.0.1:{port}/status.json") as r:
        assert r.headers["Content-Type"].startswith("application/json")
        return json.loads(r.read())


def wait_for_status(port: int, run: Run) -> dict[str, Any]:
    deadline = time.time() + DEADLINE
    while time.time() < deadline and run.thread.is_alive():
        try:
            st = status(port)
            if st["tasks"]:  # the first tick came
                return st
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.05)
    run.join()
    raise AssertionError("the dashboard never answered while the run went")


def slow_block(b: daisy.Block) -> None:
    """A few milliseconds per block, and block 7 fails every attempt: a run
    of a few thousand blocks lasts seconds and has a failure to show."""
    time.sleep(0.003)
    if b.block_id[1] == 7:
        raise RuntimeError("block seven always fails")


def gated_block(b: daisy.Block, gates: tuple[tuple[int, str], ...]) -> None:
    """``slow_block``, except that a block at or past a gate's index waits
    until that gate's file exists: the test decides when the run may go on,
    so what it sees between two updates does not depend on this machine's
    speed."""
    for first, path in gates:
        if b.block_id[1] >= first:
            deadline = time.time() + DEADLINE
            while not Path(path).exists() and time.time() < deadline:
                time.sleep(0.01)
    slow_block(b)


class Gates:
    """Files that hold back the blocks from given indices on (see
    ``gated_block``); ``open(i)`` lets the ``i``-th stage go."""

    def __init__(self, directory: Path, firsts: list[int]) -> None:
        self.paths = [directory / f"gate{i}" for i in range(len(firsts))]
        self.function = functools.partial(
            gated_block, gates=tuple((f, str(p)) for f, p in zip(firsts, self.paths, strict=True))
        )

    def open(self, i: int) -> None:
        self.paths[i].touch()

    def open_all(self) -> None:
        for p in self.paths:
            p.touch()


class Run:
    """``run_blockwise`` on a thread; ``result`` once it returned."""

    def __init__(self, **kwargs: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._go, kwargs=kwargs, daemon=True)
        self.thread.start()

    def call(self, **kwargs: Any) -> Any:
        """The run itself."""
        return daisy.run_blockwise(progress=False, summary=False, **kwargs)

    def _go(self, **kwargs: Any) -> None:
        try:
            self.result = self.call(**kwargs)
        except BaseException as e:  # handed to the test
            self.error = e

    def join(self) -> Any:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the run did not end"
        if self.error is not None:
            raise self.error
        return self.result


def test_status_json_has_the_versioned_schema_and_grows(tmp_path, capsys):
    port = free_port()
    gates = Gates(tmp_path, [750])
    task = line_task(
        "dash_schema",
        1500,
        process_function=gates.function,
        max_workers=2,
        resource_tracking=True,
        tracking_path=tmp_path / "store",
    )
    run = Run(tasks=[task], dashboard_port=port)
    try:
        check_schema_while_gated(port, run)
    finally:
        gates.open_all()
    assert not run.join(), "block 7 failed"
    out = capsys.readouterr()
    assert out.err.count(f"daisy: dashboard at http://127.0.0.1:{port}/?token={TOKEN}\n") == 1
    # the server stopped with the run
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        status(port)


def check_schema_while_gated(port: int, run: Run) -> None:
    """The schema checks of the test above, while the gate holds the run."""
    first = wait_for_status(port, run)
    assert first["schema"] == 1
    assert set(first) >= {
        "schema",
        "running",
        "finished",
        "now",
        "started_at",
        "tasks",
        "timeline",
        "workers",
        "failures",
        "summary",
    }
    assert [t["task_id"] for t in first["tasks"]] == ["dash_schema"]
    assert set(first["tasks"][0]) == TASK_KEYS
    assert first["tasks"][0]["total"] == 1500
    # wait for a later snapshot with more blocks done and a live worker
    deadline = time.time() + DEADLINE
    later = first
    while time.time() < deadline and later["running"]:
        later = status(port)
        rss = [w["last_peak_rss_bytes"] for w in later["workers"]]
        grew = later["tasks"][0]["done"] > first["tasks"][0]["done"]
        if grew and any(rss) and later["failures"]["total"] >= 1:  # block 7 failed
            break
        time.sleep(0.1)
    assert later["tasks"][0]["done"] > first["tasks"][0]["done"], "the counts grow"
    t = later["tasks"][0]
    assert t["done"] + t["failed"] + t["orphaned"] + t["pending"] + t["processing"] == t["total"]
    assert t["blocks_per_second"] > 0
    assert t["eta_seconds"] is None or t["eta_seconds"] >= 0
    assert set(later["timeline"]) >= {"window_seconds", "bars", "shown", "dropped"}
    bars = later["timeline"]["bars"]
    assert set(bars) == {"task_id", "worker_id", "block", "start", "end", "outcome"}
    assert len(bars["start"]) == later["timeline"]["shown"] > 0
    assert all(e >= s for s, e in zip(bars["start"], bars["end"], strict=True))
    assert set(bars["outcome"]) <= {"done", "failed", "timed out", "lost"}
    assert later["workers"], "live workers are listed"
    w = later["workers"][0]
    assert set(w) == {
        "worker_id",
        "task_id",
        "block",
        "age_seconds",
        "last_peak_rss_bytes",
        "blocks_done",
        "blocks_failed",
    }
    assert any(w["last_peak_rss_bytes"] for w in later["workers"]), "resource tracking: RSS"
    assert any(w["block"] is not None for w in later["workers"]), "a worker holds a block"
    assert later["failures"]["total"] >= 1
    assert later["failures"]["last"][0]["message"] == "RuntimeError: block seven always fails"
    assert later["failures"]["last"][0]["block"] == 7


def raw(port: int, data: bytes) -> bytes:
    """Send ``data`` as it is; what came back before the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
    return b"".join(chunks)


def test_bad_requests_get_404_or_400_and_never_disturb_the_run():
    port = free_port()
    # the same port for both: one server serves the page and the metrics
    task = line_task("dash_bad", 600, process_function=slow_block, max_workers=2)
    run = Run(tasks=[task], dashboard_port=port, metrics_port=port, return_states=True)
    wait_for_status(port, run)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/no/such/page", headers=AUTH)
    assert conn.getresponse().status == 404
    conn.close()
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    assert raw(port, huge).split(b" ", 2)[1:2] in ([b"400"], [])
    many = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(500)) + b"\r\n"
    assert raw(port, many).split(b" ", 2)[1:2] in ([b"400"], [])
    assert raw(port, b"\x00\xff garbage FOO/1.1\r\n\r\n").split(b" ", 2)[1] == b"400"
    assert raw(port, b"\x00\xff garbage\r\n\r\n").split(b" ", 2)[1] == b"400"
    assert raw(port, b"GET / HTTP/1.1 extra\r\n\r\n").split(b" ", 2)[1] == b"400"
    assert raw(port, b"GET /" + b"x" * 100_000 + b" HTTP/1.1\r\n\r\n").split(b" ", 2)[1:2] in (
        [b"400"],
        [],
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass  # connect and hang up at once
    with get(f"http://127.0.0.1:{port}/metrics") as r:
        assert b"daisy_blocks" in r.read()
    assert status(port)["schema"] == 1, "still serving"
    states = run.join()
    s = states["dash_bad"]
    assert s.completed_count == 599 and s.failed_count == 1, "the run went on undisturbed"


def test_a_dashboard_needs_worker_processes():
    task = line_task("dash_serial", 3)
    with pytest.raises(ValueError, match="dashboard_port"):
        daisy.run_blockwise([task], multiprocessing=False, dashboard_port=free_port())


def test_the_dashboard_port_is_checked_before_the_run():
    task = line_task("dash_port", 3)
    with pytest.raises(ValueError, match="dashboard_port"):
        daisy.run_blockwise([task], dashboard_port=70000)


PAGE_STATE_JS = """
const d = window.daisyDashboard;
if (!d) return null;
const cell = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
const tasks = (d.last ? d.last.tasks : []).map(t => ({
  task_id: t.task_id,
  done: cell('done-' + t.task_id),
  failed: cell('failed-' + t.task_id),
  orphaned: cell('orphaned-' + t.task_id),
  pending: cell('pending-' + t.task_id),
}));
const bars = Bokeh.documents.flatMap(doc => [...doc.all_models])
  .filter(m => m.name === 'dashboard_bars').map(m => m.data.left.length);
return {updates: d.updates, last: d.last, tasks: tasks, bars: bars,
        state: cell('run-state'), summary: cell('summary'), failures: cell('failures')};
"""


def page_state(driver: Any) -> dict[str, Any] | None:
    return driver.execute_script(PAGE_STATE_JS)


def shown_counts(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: int(t[k].replace(",", "")) for k in ("done", "failed", "orphaned", "pending")}
        for t in state["tasks"]
    ]


def json_counts(st: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: t[k] for k in ("done", "failed", "orphaned", "pending")} for t in st["tasks"]]


TIMELINE_JS = """
const src = Bokeh.documents.flatMap(doc => [...doc.all_models])
  .find(m => m.name === 'dashboard_bars');
if (!src || !src.data.left.length) return null;
const d = src.data;
return {task: [...d.task], color: [...d.color], line: [...d.line], outcome: [...d.outcome],
        width: d.right.map((r, i) => r - d.left[i]), line_width: [...d.line_width],
        legend: document.getElementById('timeline-legend').textContent};
"""


def test_the_timeline_tells_tasks_apart_and_shows_every_failed_attempt(tmp_path):
    """Two tasks side by side: the timeline fills each task's bars in its
    own colour (with a legend), and outlines the failed attempts (block 7
    of each fails in a few milliseconds) so that they show at any zoom.
    Blocks from 100 on wait for a gate, so the page sees the run going (and
    block 7's retries wait behind them)."""
    from browser import chrome

    if shutil.which("chromium") is None:
        pytest.fail("the browser test needs chromium and chromedriver in PATH")
    port = free_port()
    gates = Gates(tmp_path, [100])  # blocks 100.. wait: the page sees the run going
    tasks = [
        line_task(tid, 150, process_function=gates.function, max_workers=1, max_retries=1)
        for tid in ("smooth", "label")
    ]
    run = Run(tasks=tasks, dashboard_port=port)
    wait_for_status(port, run)
    driver = chrome(local=True)
    driver.set_window_size(1400, 1000)
    try:
        driver.get(f"http://127.0.0.1:{port}/?token={TOKEN}")
        shown: dict[str, Any] | None = None
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            shown = driver.execute_script(
                "return window.Bokeh && Bokeh.documents.length ? (function(){"
                + TIMELINE_JS
                + "})() : null"
            )
            if shown and set(shown["task"]) == {"smooth", "label"}:
                failed_tasks = {
                    t for t, o in zip(shown["task"], shown["outcome"], strict=True) if o == "failed"
                }
                if failed_tasks == {"smooth", "label"}:  # block 7's first attempt, each
                    break
            time.sleep(0.1)
        assert shown is not None, "no bars were drawn"
        colour_of = {
            t: {c for c, u in zip(shown["color"], shown["task"], strict=True) if u == t}
            for t in ("smooth", "label")
        }
        assert all(len(c) == 1 for c in colour_of.values()), colour_of
        assert colour_of["smooth"] != colour_of["label"], "the two tasks look alike"
        failed = [i for i, o in enumerate(shown["outcome"]) if o == "failed"]
        done = [i for i, o in enumerate(shown["outcome"]) if o == "done"]
        assert len(failed) >= 2, shown["outcome"]
        assert {shown["line"][i] for i in failed} == {"#d62728"}, "failed attempts outlined red"
        assert all(shown["line_width"][i] > 0 for i in failed)
        assert all(shown["line_width"][i] == 0 for i in done)
        longest = max(shown["width"])
        assert all(shown["width"][i] >= longest / 250 for i in failed), "no failed sliver"
        assert "smooth" in shown["legend"] and "label" in shown["legend"], shown["legend"]
        assert "failed" in shown["legend"]
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "dashboard_two_tasks.png"))
        gates.open_all()
        assert not run.join(), "block 7 of each task failed"
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        gates.open_all()
        driver.quit()


def test_the_page_updates_in_headless_chromium_and_ends_with_the_final_state(tmp_path):
    from browser import chrome

    if shutil.which("chromium") is None:
        pytest.fail("the browser test needs chromium and chromedriver in PATH")
    port = free_port()
    # blocks 1000.. wait for the first gate, 2000.. for the second: the page
    # sees the run in two stages however fast this machine is
    gates = Gates(tmp_path, [1000, 2000])
    tasks = [
        line_task(
            "segment",
            3000,
            process_function=gates.function,
            max_workers=2,
            resource_tracking=True,
            tracking_path=tmp_path / "store",
        ),
    ]
    run = Run(tasks=tasks, dashboard_port=port)
    wait_for_status(port, run)
    driver = chrome(local=True)
    driver.set_window_size(1400, 1000)  # the page's height: no blank screenshot
    try:
        driver.get(f"http://127.0.0.1:{port}/?token={TOKEN}")  # the address the run prints
        load_deadline = time.time() + DEADLINE
        while time.time() < load_deadline and not driver.execute_script(
            "return !!(window.Bokeh && Bokeh.documents.length)"
        ):
            time.sleep(0.05)
        # an update with blocks done, then (the first gate open) a later
        # update with more done, while the second gate holds the run
        seen: list[dict[str, Any]] = []
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            state = page_state(driver)
            if state and state["last"] and (not seen or state["updates"] > seen[-1]["updates"]):
                if state["last"]["finished"]:
                    break
                if not seen:
                    if shown_counts(state)[0]["done"] > 0:
                        seen.append(state)
                        gates.open(0)
                elif shown_counts(state)[0]["done"] > shown_counts(seen[0])[0]["done"]:
                    seen.append(state)
                    break
            time.sleep(0.05)
        assert len(seen) >= 2, "two updates while the run went"
        live = seen[-1]
        assert shown_counts(live) == json_counts(live["last"]), "the page shows what it got"
        assert shown_counts(live)[0]["done"] > shown_counts(seen[0])[0]["done"], "counts grow"
        fresh = status(port)
        assert fresh["tasks"][0]["done"] >= shown_counts(live)[0]["done"], "the same counts"
        assert set(fresh) == set(live["last"]), "the page reads /status.json"
        assert max(live["bars"]) > 0, "the timeline has bars"
        assert "running" in live["state"]
        assert "MiB" in driver.find_element("id", "workers").text, "the workers' last peak RSS"
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "dashboard.png"))
        gates.open_all()
        assert not run.join(), "block 7 failed"
        final: dict[str, Any] | None = None
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            final = page_state(driver)
            if final and final["last"] and final["last"]["finished"]:
                break
            time.sleep(0.05)
        assert final and final["last"]["finished"], "the page learned that the run ended"
        assert "finished (failed)" in final["state"]
        # a run that failed is not shown in green (#1a7f37) but red (#b42318)
        colour = driver.execute_script(
            "return getComputedStyle(document.getElementById('run-state')).color"
        )
        assert colour == "rgb(180, 35, 24)", colour
        counts = shown_counts(final)[0]
        assert counts == {"done": 2999, "failed": 1, "orphaned": 0, "pending": 0}
        assert final["last"]["summary"] is not None
        assert "utilisation" in final["summary"]
        summary = final["last"]["summary"]["tasks"][0]
        assert summary["utilisation"] is not None
        assert final["last"]["tasks"][0]["utilisation"] == summary["utilisation"], "the report's"
        assert "block seven always fails" in final["failures"]
        driver.save_screenshot(str(ARTIFACTS / "dashboard_final.png"))
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        gates.open_all()
        driver.quit()
        run.thread.join(DEADLINE)


class FakeTick:
    """What `Dashboard.update` reads of a tick's `daisy._daisy.LiveDetail`."""

    def __init__(self, now: float, first: int, n: int) -> None:
        self.now = now
        self._bars = [("t", 0, first + i, now - 0.01, now, "done") for i in range(n)]
        self.bars_dropped = 1
        self.failures_total = 0

    def __len__(self) -> int:
        return len(self._bars)

    def bars(self) -> list[tuple[str, int, int, float, float, str]]:
        return list(self._bars)

    def workers(self) -> list[Any]:
        return []

    def failures(self) -> list[Any]:
        return []

    def pace(self) -> list[tuple[float, float | None, float | None]]:
        return [(1.0, None, None)]


def test_the_timeline_ships_a_bounded_window_of_the_latest_bars():
    from types import SimpleNamespace

    from daisy.dashboard import MAX_BARS, WINDOW_SECONDS, Dashboard

    state = SimpleNamespace(
        total_block_count=10**6,
        completed_count=0,
        skipped_count=0,
        failed_count=0,
        orphaned_count=0,
        held_back_count=0,
        pending_count=10**6,
        ready_count=0,
        processing_count=0,
        failed_attempts=0,
    )
    dash = Dashboard(0, ["t"])
    try:
        t0 = time.time()
        per_tick = 700
        ticks = 3 * MAX_BARS // per_tick
        for i in range(ticks):
            dash.update([state], [1], [0], FakeTick(t0 + i * 0.05, i * per_tick, per_tick))  # type: ignore[list-item, arg-type]
        st = dash.status()
        blocks = st["timeline"]["bars"]["block"]
        assert st["timeline"]["shown"] == len(blocks) == MAX_BARS
        assert blocks == list(range(ticks * per_tick - MAX_BARS, ticks * per_tick)), "the latest"
        assert st["timeline"]["dropped"] == ticks
        assert len(dash._ticks) <= MAX_BARS // per_tick + 2, "old ticks are let go"
        # a tick past the window lets every older one go
        dash.update([state], [1], [0], FakeTick(t0 + WINDOW_SECONDS + 60, 10**6, 1))  # type: ignore[list-item, arg-type]
        assert dash.status()["timeline"]["bars"]["block"] == [10**6]
    finally:
        dash.close()


def test_a_stopped_run_ends_the_page_as_interrupted():
    port = free_port()
    stop = threading.Event()
    task = line_task("dash_stop", 5000, process_function=slow_block, max_workers=2)
    server = daisy.Server(stop_event=stop)
    seen: list[dict[str, Any]] = []

    def watch() -> None:
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            try:
                seen.append(status(port))
            except (urllib.error.URLError, ConnectionError):
                if seen:
                    return  # served, then stopped
            if seen and seen[-1]["tasks"] and seen[-1]["tasks"][0]["done"] > 20:
                stop.set()
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    states = server.run_blockwise([task], progress=False, dashboard_port=port)
    watcher.join(DEADLINE)
    assert states["dash_stop"].completed_count < 5000, "stopped early"
    last = seen[-1]
    assert last["finished"] and not last["running"], "the watcher got the final state"
    assert last["summary"]["outcome"] == "interrupted"
    assert last["tasks"][0]["done"] == states["dash_stop"].completed_count
    assert last["workers"] == []
    # nothing processes after the run, and a task cut short has no ETA
    # (the page used to say "done" with thousands of blocks left)
    assert last["tasks"][0]["processing"] == 0, last["tasks"]
    assert last["tasks"][0]["eta_seconds"] is None, last["tasks"]
    t = last["tasks"][0]
    assert t["done"] + t["failed"] + t["orphaned"] + t["pending"] + t["processing"] == t["total"]


def steady_block(b: daisy.Block) -> None:
    """50 ms per block: 60 blocks on two workers last long enough to be
    watched."""
    time.sleep(0.05)


def test_every_page_watching_the_run_gets_its_final_state():
    """Two pages (each polls with its own viewer id) and a plain poller:
    the run's end waits until each has fetched the final state, not just
    the first one (the other pages were left showing a running run)."""
    port = free_port()
    task = line_task("dash_viewers", 60, process_function=steady_block, max_workers=2)
    last: dict[str, dict[str, Any]] = {}

    def watch(viewer: str | None) -> None:
        query = "" if viewer is None else f"?viewer={viewer}"
        deadline = time.time() + DEADLINE
        while time.time() < deadline:
            try:
                with get(f"http://127.0.0.1:{port}/status.json{query}") as r:
                    last[viewer or "plain"] = json.loads(r.read())
            except (urllib.error.URLError, ConnectionError):
                if last.get(viewer or "plain"):
                    return  # served, then closed
            time.sleep(0.5)

    watchers = [threading.Thread(target=watch, args=(v,), daemon=True) for v in ("a", "b", None)]
    for w in watchers:
        w.start()
    assert daisy.run_blockwise([task], progress=False, dashboard_port=port)
    for w in watchers:
        w.join(DEADLINE)
    assert sorted(last) == ["a", "b", "plain"]
    for viewer, st in last.items():
        assert st["finished"], f"viewer {viewer} never got the final state"
        assert st["tasks"][0]["done"] == 60, (viewer, st["tasks"])
