"""How long the HTML performance report of a 10^5-block run takes to open
(this package only).

A serial run of 10^5 one-voxel blocks with resource tracking; its report
(``daisy.html_report.write_html_report``) is opened in headless Chromium
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

import shutil
import time
from pathlib import Path

import pytest

import daisy

RENDER_TIMEOUT = 60.0


def chrome():
    """Headless Chromium through chromedriver, with every host unreachable."""
    from selenium import webdriver

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, (
        "this benchmark needs Debian's chromium and chromium-driver "
        "(make test installs them: apt-get install chromium chromium-driver)"
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,2400",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: everything must be inline
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))


def open_report(driver, uri: str) -> int:
    """Load the report and wait until bokeh has rendered it; the number of
    bars on its timeline."""
    deadline = time.monotonic() + RENDER_TIMEOUT
    driver.get(uri)
    while time.monotonic() < deadline:
        ready = driver.execute_script(
            "return !!(window.Bokeh && Bokeh.documents.length"
            " && Object.keys(Bokeh.index || {}).length > 0)"
        )
        if ready:
            return driver.execute_script(
                "return Bokeh.documents.flatMap(d => [...d.all_models])"
                ".filter(m => m.name === 'timeline_source')"
                ".reduce((n, m) => n + m.data.left.length, 0)"
            )
        time.sleep(0.01)
    raise AssertionError(f"the report did not render within {RENDER_TIMEOUT} s")


@pytest.fixture(scope="module")
def report_of_1e5_blocks(tmp_path_factory) -> Path:
    from daisy.html_report import write_html_report

    base = tmp_path_factory.mktemp("report-bench")
    daisy.set_tracking_basedir(base / "tracking")
    try:
        task = daisy.Task(
            "big",
            daisy.Roi((0, 0), (100, 1000)),
            daisy.Roi((0, 0), (1, 1)),
            daisy.Roi((0, 0), (1, 1)),
            process_function=lambda b: None,
            read_write_conflict=False,
            resource_tracking=True,
        )
        assert daisy.run_blockwise([task], multiprocessing=False, summary=False)
    finally:
        daisy.set_tracking_basedir(None)
    return write_html_report(base / "tracking", base / "big.html")


def test_html_report_open_1e5_blocks(benchmark, report_of_1e5_blocks):
    uri = report_of_1e5_blocks.absolute().as_uri()
    driver = chrome()
    try:
        bars = benchmark.pedantic(open_report, args=(driver, uri), rounds=3, iterations=1)
    finally:
        driver.quit()
    assert bars == 100_000
    benchmark.extra_info["bytes"] = report_of_1e5_blocks.stat().st_size
