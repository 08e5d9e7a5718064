"""The notebook view of run reports (IPython's ``_repr_html_``) and the
short reprs a user sees when a report is the last expression of a cell or
printed in a REPL."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

import daisy
from daisy.run_report import BlockSummary, Stat, WorkerRecord, WorkerSummary


def _fails_at_30(block):
    if block.write_roi.begin[0] == 30:
        raise ValueError("corrupt section at 30")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    task = daisy.Task(
        "extract",
        daisy.Roi((0,), (100,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_fails_at_30,
        max_workers=2,
        max_retries=0,
        resource_tracking=True,
        tracking_path=tmp / "trk",
    )
    assert daisy.run_blockwise(task, progress=False, summary=False) is False
    return task, daisy.last_report()


def _parse(html: str) -> ET.Element:
    """The HTML is well-formed (XHTML-style), so a notebook and a browser
    render it the same way: parse it as XML."""
    return ET.fromstring(f"<root>{html}</root>")


def _check_self_contained(html: str) -> None:
    lowered = html.lower()
    for forbidden in ("<script", "<link", "src=", "href=", "<style"):
        assert forbidden not in lowered, forbidden


def test_the_run_report_shows_the_panel_as_tables_and_a_timeline(run):
    task, report = run
    html = report._repr_html_()
    root = _parse(html)
    _check_self_contained(html)
    assert "Resource Utilization" in html
    text = "".join(root.itertext())
    assert "extract" in text
    assert "round trip" in text and "peak RSS" in text and "wall" in text
    assert "ValueError: corrupt section at 30" in text
    assert root.findall(".//table"), html
    # one timeline row per worker, one segment per measured phase
    svg = root.find(".//{http://www.w3.org/2000/svg}svg")
    assert svg is not None, html
    rows = svg.findall("{http://www.w3.org/2000/svg}g")
    assert len(rows) == report["extract"].workers.count == 2
    started = computed = 0
    for row in rows:
        titles = ["".join(t.itertext()) for t in row.iter("{http://www.w3.org/2000/svg}title")]
        started += any(" startup: " in t for t in titles)
        computed += any(" compute: " in t for t in titles)
    # a segment for each phase that happened: a worker stopped before it
    # connected has no startup, one that took no block (the other may have
    # taken them all) no compute
    records = report["extract"].workers.by_id.values()
    assert started == sum(1 for r in records if r.startup is not None) >= 1
    assert computed == sum(1 for r in records if r.blocks) >= 1


def test_a_task_report_read_from_disk_has_the_same_view(run):
    task, report = run
    from_disk = task.report()
    assert from_disk is not None
    html = from_disk._repr_html_()
    _parse(html)
    _check_self_contained(html)
    assert "extract" in html and "<table" in html and "<svg" in html


def test_summaries_have_their_own_view(run):
    _, report = run
    t = report["extract"]
    for part in (t.blocks, t.workers):
        html = part._repr_html_()
        _parse(html)
        assert "<table" in html


def test_names_in_the_view_are_escaped():
    t = daisy.TaskReport(
        "<b>a&b</b>",
        BlockSummary(count=1),
        WorkerSummary(),
    )
    html = t._repr_html_()
    _parse(html)
    assert "&lt;b&gt;a&amp;b&lt;/b&gt;" in html


def test_stat_repr_says_its_unit():
    seconds = Stat(n=3, mean=0.0481, std=0.002, min=0.045, max=0.05, total=0.1443)
    assert repr(seconds) == (
        "Stat(n=3, mean=48.1 ms, std=2.0 ms, min=45.0 ms, max=50.0 ms, total=144.3 ms)"
    )
    bytes_stat = Stat(
        n=2, mean=50 * 2**20, std=0.0, min=50 * 2**20, max=50 * 2**20, total=100 * 2**20, unit="B"
    )
    assert "mean=50.0 MB" in repr(bytes_stat) and "total=100.0 MB" in repr(bytes_stat)
    assert repr(Stat()) == "Stat(n=0)"


def test_summaries_repr_stays_short_with_many_workers():
    records = {i: WorkerRecord(i, startup=0.1, blocks_ok=10, exit="clean") for i in range(500)}
    w = WorkerSummary(
        count=500, exits={"clean": 500}, by_id=records, startup=Stat(n=500, mean=0.1, total=50.0)
    )
    assert len(repr(w)) < 200, repr(w)
    assert "count=500" in repr(w)
    b = BlockSummary(count=10, round_trip=Stat(n=10, mean=5e-5, total=5e-4))
    assert repr(b) == "BlockSummary(count=10, skipped=0, failures=0, round_trip=50.0 µs ± 0.0 µs)"
    # a notebook cell of 500 workers draws a bounded timeline
    html = w._repr_html_()
    _parse(html)
    assert html.count("<g>") <= 32 and "468 more workers" in html


def test_the_view_renders_offline_in_a_browser(run, tmp_path):
    """What a notebook shows, in headless Chromium with the network off:
    the tables and the timeline take space on the page. The screenshot is
    the README's picture of the notebook view."""
    from pathlib import Path

    from browser import chrome

    _, report = run
    page = tmp_path / "view.html"
    page.write_text(f"<!doctype html><html><body>{report._repr_html_()}</body></html>")
    driver = chrome()
    try:
        driver.get(page.absolute().as_uri())
        sizes = driver.execute_script(
            "return [...document.querySelectorAll('table, svg')]"
            ".map(e => [e.tagName.toLowerCase(), e.getBoundingClientRect().width,"
            " e.getBoundingClientRect().height])"
        )
        artifacts = Path(__file__).parent.parent / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        driver.set_window_size(900, 700)
        driver.save_screenshot(str(artifacts / "notebook_view.png"))
    finally:
        driver.quit()
    kinds = [k for k, w, h in sizes if w > 50 and h > 10]
    assert kinds.count("svg") == 1 and kinds.count("table") >= 3, sizes


def test_the_jobs_line_counts_in_words_that_agree():
    from daisy.run_report import JobRecord

    one = WorkerSummary(count=2, jobs=(JobRecord("7", workers=(0, 1)),))
    assert one.jobs_line() == "2 workers in 1 job"
    two = WorkerSummary(count=5, jobs=(JobRecord("7", workers=(0,)), JobRecord("8", (1, 2, 3, 4))))
    assert two.jobs_line() == "5 workers in 2 jobs"
    lone = WorkerSummary(count=1, jobs=(JobRecord("9", workers=(0,)),))
    assert lone.jobs_line() == "1 worker in 1 job"
    assert WorkerSummary().jobs_line() is None
