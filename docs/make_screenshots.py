"""Make the tutorial's screenshots from the tutorial's own code.

    .venv/bin/python docs/make_screenshots.py

runs every code cell of ``docs/tutorial.md`` in order, in one namespace and
an empty scratch directory (as the site's build executes the page), then
takes two pictures in headless Chromium (Debian's ``chromium`` and
``chromium-driver``, through selenium, the network off):

- ``docs/html_report.png``: the ``report.html`` the tutorial's HTML report
  cell wrote, 1400 px wide (the report's rows of figures need about 1320),
  as tall as the page;
- ``docs/dashboard.png``: the live dashboard of the tutorial's pipeline
  (``tasks()``: smooth, then threshold) run once more into fresh tracking
  stores, caught while it runs: each block sleeps ``SLOW`` seconds first,
  or the 32 blocks would be done before the page's first update.

Each picture's task ids are read off the page itself (the report's task
headings, the dashboard's task table) and written, with the image's
SHA-256, to ``docs/screenshots.json``: tests/test_docs.py checks that every
image the tutorial shows is described there, unchanged since, and shows
task ids that the tutorial's code defines.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
TUTORIAL = DOCS / "tutorial.md"
SIDECAR = DOCS / "screenshots.json"
#: the browser window's width: the report's widest row of figures fits
WIDTH = 1400
#: seconds each block of the dashboard's run sleeps before its work
SLOW = 0.4
#: the dashboard's token for this script's run
TOKEN = "make-screenshots-token"


def code_cells(markdown: str) -> list[str]:
    """The code of each ```{code-cell} python block of a MyST notebook page."""
    return re.findall(r"^```\{code-cell\} python\n(.*?)^```", markdown, re.S | re.M)


def run_tutorial(workdir: Path) -> dict[str, Any]:
    """Every code cell of the tutorial, in order, in ``workdir``; the
    namespace they leave (their printed output is dropped)."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    os.chdir(workdir)
    for i, code in enumerate(code_cells(TUTORIAL.read_text(encoding="utf-8"))):
        print(f"make_screenshots: tutorial cell {i}", file=sys.stderr)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"<tutorial cell {i}>", "exec"), namespace)
    return namespace


def chrome() -> Any:
    """Headless Chromium with every host but 127.0.0.1 unreachable."""
    from selenium import webdriver

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        sys.exit("make_screenshots: needs chromium and chromedriver in PATH")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={WIDTH},1000",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=driver))


def wait_for(driver: Any, script: str, what: str, timeout: float = 60.0) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"make_screenshots: {what} within {timeout} s")


BOKEH_READY = (
    "return !!(window.Bokeh && Bokeh.documents.length && Object.keys(Bokeh.index || {}).length > 0)"
)


def shoot_report(driver: Any, report: Path, out: Path) -> list[str]:
    """A picture of the whole report page; the task ids it shows."""
    driver.set_window_size(WIDTH, 1000)
    driver.get(report.absolute().as_uri())
    wait_for(driver, BOKEH_READY, "the report did not render")
    time.sleep(1.0)  # the canvases' last paint
    # the task ids of the page: the heading of each task's section, from
    # the text of the page's rendered Divs
    texts = driver.execute_script(
        "return Bokeh.documents.flatMap(d => [...d.all_models])"
        ".filter(m => m.type === 'Div').map(m => m.text)"
    )
    tasks = [html.unescape(t) for text in texts for t in re.findall(r"<h2>([^<]+)</h2>", text)]
    # as tall as the page's content (the bottom of its lowest element)
    bottom = (
        "return Math.ceil(Math.max(...[...document.body.children]"
        ".map(e => e.getBoundingClientRect().bottom + window.scrollY)))"
    )
    height = 0
    for _ in range(10):
        now = int(driver.execute_script(bottom))
        if now == height:
            break
        height = now
        outer = driver.get_window_size()["height"] - driver.execute_script(
            "return window.innerHeight"
        )
        driver.set_window_size(WIDTH, min(height + 16 + outer, 6000))
        time.sleep(1.0)
    driver.save_screenshot(str(out))
    return sorted(set(tasks))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slowed:
    """A block function that sleeps ``SLOW`` seconds before ``function``."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def __call__(self, block: Any) -> None:
        time.sleep(SLOW)
        self.function(block)


DASHBOARD_STATE = """
const d = window.daisyDashboard;
if (!d || !d.last || !d.last.tasks.length) return null;
return {finished: d.last.finished,
        tasks: d.last.tasks.map(t => ({task_id: t.task_id, done: t.done, total: t.total})),
        shown: [...document.querySelectorAll('#tasks tr')].map(r => r.cells[0].textContent)};
"""


def shoot_dashboard(driver: Any, namespace: dict[str, Any], out: Path) -> list[str]:
    """The tutorial's pipeline run once more, slowed, with its dashboard;
    a picture of the page while both tasks are going; the task ids it shows."""
    daisy = namespace["daisy"]
    daisy.set_tracking_basedir("tracking_dashboard")  # fresh stores: every block runs
    namespace["smooth"] = Slowed(namespace["smooth"])  # tasks() reads these names
    namespace["threshold"] = Slowed(namespace["threshold"])
    smooth_task, threshold_task = namespace["tasks"]()
    port = free_port()
    os.environ["DAISY_DASHBOARD_TOKEN"] = TOKEN
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["ok"] = daisy.run_blockwise(
                smooth_task + threshold_task, progress=False, summary=False, dashboard_port=port
            )
        except BaseException as e:  # reported below
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.time() + 120
    while time.time() < deadline:  # until the dashboard listens
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if not thread.is_alive():
            raise RuntimeError(f"make_screenshots: the run ended at once: {result}")
        time.sleep(0.05)
    driver.set_window_size(WIDTH, 1000)
    driver.get(f"http://127.0.0.1:{port}/?token={TOKEN}")
    wait_for(driver, BOKEH_READY, "the dashboard did not render")
    # both tasks going: threshold has blocks done, smooth is not finished
    shown: dict[str, Any] = {}
    while time.time() < deadline:
        state = driver.execute_script(DASHBOARD_STATE)
        if state:
            if state["finished"]:
                raise RuntimeError("make_screenshots: the run ended before the picture")
            done = {t["task_id"]: (t["done"], t["total"]) for t in state["tasks"]}
            if done.get("threshold", (0, 1))[0] >= 3 and done["smooth"][0] < done["smooth"][1]:
                shown = state
                break
        time.sleep(0.05)
    if not shown:
        raise RuntimeError("make_screenshots: never saw both tasks going")
    time.sleep(0.3)  # the timeline's last paint
    driver.save_screenshot(str(out))
    thread.join(120)
    if "error" in result:
        raise result["error"]
    if not result.get("ok"):
        raise RuntimeError("make_screenshots: the dashboard's run did not complete")
    return sorted(set(shown["shown"]))


def main() -> None:
    here = Path.cwd()
    pictures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="daisy-screenshots-") as scratch:
        namespace = run_tutorial(Path(scratch))
        driver = chrome()
        try:
            for name, shoot in (
                ("html_report.png", lambda out: shoot_report(driver, Path("report.html"), out)),
                ("dashboard.png", lambda out: shoot_dashboard(driver, namespace, out)),
            ):
                out = DOCS / name
                tasks = shoot(out)
                pictures[name] = {
                    "page": TUTORIAL.name,
                    "made_by": Path(__file__).name,
                    "task_ids": tasks,
                    "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
                }
                print(f"make_screenshots: {out} shows tasks {tasks}", file=sys.stderr)
        finally:
            driver.quit()
            os.chdir(here)
    SIDECAR.write_text(json.dumps(pictures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"make_screenshots: wrote {SIDECAR}", file=sys.stderr)


if __name__ == "__main__":
    main()
