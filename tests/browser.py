"""Headless Chromium for the HTML report's checks: the browser test in
``tests/test_html_report.py`` and the open-time benchmark in
``benchmarks/test_report_bench.py`` drive it the same way (network off,
wait until bokeh has rendered), on the same largest report
(`report_of_100k_blocks`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import daisy


def chrome() -> Any:
    """Headless Chromium through chromedriver, with every host unreachable."""
    from selenium import webdriver

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, (
        "the browser checks need Debian's chromium and chromium-driver "
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
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))


def load(driver: Any, path: Path, timeout: float = 30.0) -> float:
    """Open the report and wait until bokeh has rendered it; seconds taken."""
    start = time.perf_counter()
    driver.get(path.absolute().as_uri())
    while time.perf_counter() - start < timeout:
        ready = driver.execute_script(
            "return !!(window.Bokeh && Bokeh.documents.length"
            " && Object.keys(Bokeh.index || {}).length > 0)"
        )
        if ready:
            return time.perf_counter() - start
        time.sleep(0.05)
    raise AssertionError(f"the report did not render within {timeout} s")


def timeline_bars(driver: Any) -> list[int]:
    return driver.execute_script(
        "return Bokeh.documents.flatMap(d => [...d.all_models])"
        ".filter(m => m.name === 'timeline_source').map(m => m.data.left.length)"
    )


def report_of_100k_blocks(base: Path) -> Path:
    """Run 10^5 one-voxel blocks serially with resource tracking (stores under
    ``base/tracking``) and write their HTML report to ``base/big.html``: the
    largest report daisy draws in full (every block on the timeline)."""
    from daisy.html_report import write_html_report

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
