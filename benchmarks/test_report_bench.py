"""How long the HTML performance report of a 10^5-block run takes to open
(this package only).

A serial run of 10^5 one-voxel blocks with resource tracking; its report
(``daisy.report.html.write_html_report``) is opened in headless Chromium
with the network off, and the time from ``driver.get`` until bokeh has
rendered the page is measured, the browser already started. The report
shows every block on its timeline (``MAX_BARS`` is 10^5), so this is the
largest report daisy draws in full; the figure to keep is a few seconds at
most. ``tests/test_html_report.py`` checks that it renders, and what it
shows.

Needs Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs
them) and the ``report`` extra (bokeh, in the test extra too).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the browser helpers the HTML report's test uses
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from browser import chrome, load, report_of_100k_blocks, timeline_bars  # noqa: E402

RENDER_TIMEOUT = 60.0


def open_report(driver, path: Path) -> int:
    """Load the report and wait until bokeh has rendered it; the number of
    bars on its timeline."""
    load(driver, path, RENDER_TIMEOUT)
    return sum(timeline_bars(driver))


@pytest.fixture(scope="module")
def report_of_1e5_blocks(tmp_path_factory) -> Path:
    return report_of_100k_blocks(tmp_path_factory.mktemp("report-bench"))


def test_html_report_open_1e5_blocks(benchmark, report_of_1e5_blocks):
    driver = chrome()
    try:
        bars = benchmark.pedantic(
            open_report, args=(driver, report_of_1e5_blocks), rounds=3, iterations=1
        )
    finally:
        driver.quit()
    assert bars == 100_000
    benchmark.extra_info["bytes"] = report_of_1e5_blocks.stat().st_size
