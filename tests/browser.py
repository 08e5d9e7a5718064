"""Headless Chromium for the HTML report's checks: the browser test in
``tests/test_html_report.py`` and the open-time benchmark in
``benchmarks/test_report_bench.py`` drive it the same way (network off,
wait until bokeh has rendered), on the same largest report
(`report_of_100k_blocks`); the histograms' axes are checked on
`report_of_10k_blocks`."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import daisy


def chrome(local: bool = False) -> Any:
    """Headless Chromium through chromedriver, with every host unreachable
    (with ``local``, every host but 127.0.0.1: a page served by the test)."""
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
        # no network: everything must be inline
        "--host-resolver-rules=MAP * ~NOTFOUND" + (", EXCLUDE 127.0.0.1" if local else ""),
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


def report_of_blocks(base: Path, rows: int, cols: int, name: str = "big") -> Path:
    """Run ``rows * cols`` one-voxel blocks serially with resource tracking
    (stores under ``base/tracking``) and write their HTML report to
    ``base/<name>.html``."""
    from daisy.report.html import write_html_report

    daisy.set_tracking_basedir(base / "tracking")
    try:
        task = daisy.Task(
            name,
            daisy.Roi((0, 0), (rows, cols)),
            daisy.Roi((0, 0), (1, 1)),
            daisy.Roi((0, 0), (1, 1)),
            process_function=lambda b: None,
            read_write_conflict=False,
            resource_tracking=True,
        )
        assert daisy.run_blockwise([task], multiprocessing=False, summary=False)
    finally:
        daisy.set_tracking_basedir(None)
    return write_html_report(base / "tracking", base / f"{name}.html")


def report_of_100k_blocks(base: Path) -> Path:
    """The report of 10^5 one-voxel blocks (`report_of_blocks`) at
    ``base/big.html``: the largest report daisy draws in full (every block
    on the timeline)."""
    return report_of_blocks(base, 100, 1000, "big")


def report_of_10k_blocks(base: Path) -> Path:
    """The report of 10^4 one-voxel blocks (`report_of_blocks`) at
    ``base/tenk.html``."""
    return report_of_blocks(base, 100, 100, "tenk")


#: the titles of the histograms of each task's section
HISTOGRAMS = ("block wall time", "block CPU", "block peak RSS")

# The x axis tick labels of every histogram as bokeh draws them: the axis
# view's major ticks, formatted by its formatter and placed as
# AxisView._draw_oriented_labels places them (text visuals, angle, standoff,
# alignment, the first and last label moved inside the canvas), each with
# its bounding box [left, right] in canvas pixels.
_TICK_LABELS_JS = """
const titles = arguments[0];
function* walk(v) {
  yield v;
  for (const k of (v.children ? [...v.children()] : [])) yield* walk(k);
}
const out = [];
for (const root of Object.values(Bokeh.index)) {
  for (const view of walk(root)) {
    if (!view.model.type.endsWith("Axis") || view.dimension != 0) continue;
    const plot = view.plot_view.model;
    const title = plot.title == null ? "" : plot.title.text;
    if (!titles.includes(title)) continue;
    const coords = view.tick_coords.major;
    const labels = view.compute_labels(coords[0]);
    const orient = view.model.major_label_orientation;
    const standoff = view.extents.tick + view.model.major_label_standoff;
    const [sxs, sys] = view.scoords(coords);
    const [nx, ny] = view.normals;
    const { vertical_align, align } = view.panel.get_label_text_heuristics(orient);
    labels.visuals = view.visuals.major_label_text.values();
    labels.angle = view.panel.get_label_angle_heuristic(orient);
    labels.base_font_size = view.plot_view.base_font_size;
    const items = labels.items;
    items.forEach((label, i) => {
      label.position = {
        sx: sxs[i] + nx * standoff, sy: sys[i] + ny * standoff,
        x_anchor: align, y_anchor: vertical_align,
      };
      if ("align" in label) label.align = align;
    });
    const width = view.canvas.bbox.width;
    const boxes = items.map((l) => { const b = l.bbox(); return [b.left, b.right]; });
    for (const k of new Set([0, boxes.length - 1])) {
      if (k < 0) continue;
      const [l, r] = boxes[k];
      const shift = l < 0 ? -l : r > width ? width - r : 0;
      boxes[k] = [l + shift, r + shift];
    }
    out.push({
      title, axis_label: String(view.model.axis_label ?? ""),
      policy: view.model.major_label_policy.type,
      labels: items.map((l) => String(l.text)), boxes,
    });
  }
}
return out;
"""


def histogram_tick_labels(driver: Any) -> list[dict[str, Any]]:
    """Per histogram x axis of the loaded report: ``title``, ``axis_label``,
    ``policy`` (the axis' major label policy), ``labels`` (the tick label
    texts) and ``boxes`` (each label's ``[left, right]`` in pixels)."""
    return driver.execute_script(_TICK_LABELS_JS, list(HISTOGRAMS))


def overlapping_tick_labels(axis: dict[str, Any], gap: float = 4.0) -> list[str]:
    """The neighbouring tick labels of ``axis`` (from `histogram_tick_labels`)
    less than ``gap`` pixels apart, as ``'a' | 'b' (-3.2 px)``. Every label
    counts, whatever the axis' label policy: a label bokeh would hide to
    avoid an overlap is a label missing."""
    out = []
    pairs = zip(axis["labels"], axis["boxes"], strict=True)
    ordered = sorted(pairs, key=lambda p: p[1][0])
    for (a, (_, a_right)), (b, (b_left, _)) in zip(ordered, ordered[1:], strict=False):
        if b_left - a_right < gap:
            out.append(f"{a!r} | {b!r} ({b_left - a_right:+.1f} px)")
    return out
