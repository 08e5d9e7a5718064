"""The HTML performance report, checked in a real browser: headless
Chromium loads the file with the network off, logs no console error, the
timeline holds one bar per block the run executed, and the tick labels of
the histograms' x axes stay apart (with a unit on the axis). Screenshots
are kept in ``test-artifacts/`` (or ``$DAISY_TEST_ARTIFACTS``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from browser import (
    HISTOGRAMS,
    chrome,
    histogram_tick_labels,
    load,
    overlapping_tick_labels,
    report_of_10k_blocks,
    report_of_100k_blocks,
    timeline_bars,
)
from conftest import line_task

import daisy
from daisy.report.html import write_html_report

ARTIFACTS = Path(os.environ.get("DAISY_TEST_ARTIFACTS", "test-artifacts"))


def severe_console_messages(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def unreadable_axes(driver, tasks: int) -> list[str]:
    """What is wrong with the histograms' x axes of the loaded report of
    ``tasks`` tasks: labels that overlap (or nearly), axes with fewer than
    three labels or no unit; empty when every axis reads well."""
    axes = histogram_tick_labels(driver)
    assert sorted(a["title"] for a in axes) == sorted(HISTOGRAMS * tasks), axes
    problems = []
    for axis in axes:
        where = f"{axis['title']} {axis['labels']}"
        if overlaps := overlapping_tick_labels(axis):
            problems.append(f"{where}: overlapping tick labels {overlaps}")
        if len(axis["labels"]) < 3:
            problems.append(f"{where}: fewer than 3 tick labels")
        if not axis["axis_label"]:
            problems.append(f"{where}: no unit on the axis")
    return problems


def pipeline(tmp_path):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    marks = tmp_path / "marks"
    marks.mkdir()

    def work(block):
        time.sleep(0.002)
        if block.block_id[1] == 2 and not (marks / "x").exists():
            (marks / "x").touch()
            raise RuntimeError("one failed attempt")

    a = line_task("a", 12, process_function=work, resource_tracking=True, max_workers=3)
    b = line_task(
        "b", 6, size=20, process_function=work, resource_tracking=True, upstream_tasks=[a]
    )
    assert daisy.run_blockwise([b], progress=False, summary=False)
    return tmp_path / "tracking"


def test_the_report_opens_offline_with_one_bar_per_block(tmp_path):
    out = write_html_report(pipeline(tmp_path), tmp_path / "report.html")
    page = out.read_text()
    assert "<script src=" not in page, "every script must be inline"
    assert out.stat().st_size < 20 * 2**20
    for words in ("Utilisation", "worker phases", "failed attempts over the block grid"):
        assert words in page
    # the run's outcome is the first thing on the page: it completed, after
    # one failed attempt of task a
    assert (
        'class=\\"daisy-outcome completed\\"' in page or 'class="daisy-outcome completed"' in page
    )
    assert "a: completed, 1 failed attempt(s), 12 blocks done" in page
    driver = chrome()
    try:
        load(driver, out)
        # one bar per block the run executed, and one for a's failed attempt
        assert sorted(timeline_bars(driver)) == [6, 13]
        assert severe_console_messages(driver) == []
        problems = unreadable_axes(driver, tasks=2)
        assert not problems, "\n".join(problems)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "html_report.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()


def test_a_run_of_100k_blocks_stays_small_and_opens_quickly(tmp_path):
    out = report_of_100k_blocks(tmp_path)
    assert out.stat().st_size < 20 * 2**20
    driver = chrome()
    try:
        # load() fails a report that takes more than 30 s to render; how fast
        # it opens is measured by benchmarks/test_report_bench.py
        load(driver, out)
        assert timeline_bars(driver) == [100_000]
        assert severe_console_messages(driver) == []
    finally:
        driver.quit()


def test_the_histograms_of_10k_blocks_have_readable_axes(tmp_path):
    out = report_of_10k_blocks(tmp_path)
    driver = chrome()
    try:
        load(driver, out)
        assert timeline_bars(driver) == [10_000]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "html_report_10k.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        # blocks of a few µs: plain seconds would be labelled 2.000e−5, 4.000e−5, …
        problems = unreadable_axes(driver, tasks=1)
        assert not problems, "\n".join(problems)
        assert severe_console_messages(driver) == []
    finally:
        driver.quit()


def _fail_block_3(block):
    if block.block_id[1] == 3:
        raise RuntimeError("block 3 always fails")


def test_the_histograms_count_only_the_blocks_that_completed(tmp_path):
    # a failed block has no measurements (its wall and CPU are NaN, its peak
    # RSS 0 in the store): it must not show as a block of 0 B
    from daisy.report.html import _bokeh, _task_section, find_runs_files, read_runs, store_of

    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("t", 10, process_function=_fail_block_3, resource_tracking=True, max_retries=0)
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    (runs,) = find_runs_files(tmp_path / "tracking")
    bk = _bokeh()
    parts = _task_section(bk, read_runs(runs)[-1], store_of(runs))
    counted = {}
    for model in parts:
        for fig in model.select({"name": "histogram"}):
            (glyph,) = fig.renderers
            counted[fig.title.text] = int(sum(glyph.data_source.data["top"]))
    assert counted == {"block wall time": 9, "block CPU": 9, "block peak RSS": 9}


def test_run_blockwise_writes_the_report_and_the_cli_too(tmp_path, capsys):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("t", 4, process_function=lambda b: None, resource_tracking=True)
    html = tmp_path / "run.html"
    assert daisy.run_blockwise([task], multiprocessing=False, summary=False, report_html=html)
    assert html.is_file() and "timeline" in html.read_text()
    # it says where it wrote the report
    assert f"daisy: the HTML report is at {html.absolute()}" in capsys.readouterr().out
    from daisy.cli import main

    assert main(["report", str(tmp_path / "tracking"), "--html", str(tmp_path / "cli.html")]) == 0
    assert (tmp_path / "cli.html").is_file()


def test_a_path_given_as_a_string_is_one_path(tmp_path, monkeypatch):
    """``write_html_report("tracking", "report.html")`` as the tutorial
    calls it (it read the string as the paths "t", "r", "a", ...)."""
    monkeypatch.chdir(tmp_path)
    daisy.set_tracking_basedir("tracking")
    task = line_task("t", 4, process_function=lambda b: None, resource_tracking=True)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    out = write_html_report("tracking", "report.html")
    assert out == Path("report.html") and out.is_file()


def test_no_runs_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="runs.jsonl"):
        write_html_report(tmp_path, tmp_path / "x.html")


def test_a_failed_run_says_so_at_the_top_of_the_page(tmp_path):
    daisy.set_tracking_basedir(tmp_path / "tracking")

    def fails_two(block):
        if block.block_id[1] in (1, 3):
            block.status = daisy.BlockStatus.FAILED

    task = line_task("seg", 6, process_function=fails_two, max_retries=0)
    assert not daisy.run_blockwise([task], multiprocessing=False, summary=False)
    page = write_html_report(tmp_path / "tracking", tmp_path / "failed.html").read_text()
    assert "daisy-outcome failed" in page
    assert "seg: failed, 2 failed attempt(s), 4 blocks done" in page
    assert page.index("daisy-outcome") < page.index("Utilisation")


def test_the_tasks_of_a_run_share_one_time_axis_from_its_start(tmp_path):
    """Task b starts when a's blocks are done: on one axis from the run's
    start, b's bars begin after a's (each timeline used to start at its
    own first block, at 0), and both figures pan together."""
    from daisy.report.html import report_layout

    layout = report_layout(pipeline(tmp_path))
    figs = {f.title.text.split(":")[0]: f for f in layout.select({"name": "timeline"})}
    assert set(figs) == {"a", "b"}
    assert figs["a"].x_range is figs["b"].x_range, "one axis for the run"
    first = {
        tid: float(min(f.select_one({"name": "timeline_source"}).data["left"]))
        for tid, f in figs.items()
    }
    assert 0 <= first["a"] < first["b"], first
    assert "seconds since the run started" in figs["a"].xaxis[0].axis_label


def test_failed_attempts_are_on_the_timeline(tmp_path):
    """Every failed attempt is a red bar where and when it ran (from the
    run's report: the store times a block's successful attempt only); a
    block done after a failed attempt is orange; with a legend."""
    from daisy.report.html import report_layout

    daisy.set_tracking_basedir(tmp_path / "tracking")
    marks = tmp_path / "marks"
    marks.mkdir()

    def work(block):
        if block.block_id[1] == 3:
            raise RuntimeError("block 3 always fails")
        if block.block_id[1] == 5 and not (marks / "x").exists():
            (marks / "x").touch()
            raise RuntimeError("block 5 fails once")

    task = line_task("t", 8, process_function=work, resource_tracking=True, max_retries=1)
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    report = task.report()
    assert sorted(a.block for a in report.failed_attempts) == [3, 3, 5]
    assert all(a.worker_id is not None for a in report.failed_attempts), "ran on workers"
    layout = report_layout(tmp_path / "tracking")
    source = layout.select_one({"name": "timeline_source"})
    bars = sorted(zip(source.data["cell"], source.data["state"], strict=True))
    assert (3, "failed attempt") in bars and bars.count((3, "failed attempt")) == 2
    assert (5, "failed attempt") in bars and (5, "done after a failed attempt") in bars
    assert (3, "done") not in bars, "block 3 never completed"
    assert all(r >= left for left, r in zip(source.data["left"], source.data["right"], strict=True))
    notes = " ".join(d.text for d in layout.select({"type": daisy.report.html._bokeh().models.Div}))
    assert "(1 of them after failed attempts), and 3 failed attempts" in notes, notes


def test_a_fully_resumed_rerun_says_there_was_nothing_to_do(tmp_path):
    """A rerun that finds every block done processed nothing: the page says
    so (not "a serial run") and draws no empty timeline."""
    from daisy.report.html import report_layout

    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("t", 6, process_function=lambda b: None, resource_tracking=True)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    layout = report_layout(tmp_path / "tracking")
    text = " ".join(d.text for d in layout.select({"type": daisy.report.html._bokeh().models.Div}))
    assert "Nothing to do" in text and "6 skipped" in text, text
    assert "a serial run" not in text
    assert not list(layout.select({"name": "timeline"})), "no empty timeline"
    assert "this run processed no block" in text


def test_a_task_without_a_store_says_where_its_failed_attempts_are(tmp_path):
    """Issue 41: the page of a task without a tracking store read "No failed
    attempts recorded in the store" under a banner of its failed attempts.
    It has no map of them (no store), and says so, with the fix."""
    daisy.logging.set_log_basedir(tmp_path / "logs")

    def fails_two(block):
        if block.block_id[1] in (1, 3):
            block.status = daisy.BlockStatus.FAILED

    task = line_task("untracked", 6, process_function=fails_two, max_retries=0, tracking_path=False)
    assert not daisy.run_blockwise([task], multiprocessing=False, summary=False)
    page = write_html_report(tmp_path / "logs", tmp_path / "untracked.html").read_text()
    assert "untracked: failed, 2 failed attempt(s)" in page
    assert "No failed attempts recorded" not in page
    assert "2 failed attempt(s) this run, without a tracking store" in page


#: every title of every plot on the loaded page (the figure's own and any
#: other ``Title`` above, below or beside it), with the width bokeh laid out
#: for it (its view's box: the plot's frame, for a title above) and the
#: width of its text drawn in its font (measured on a canvas, as bokeh
#: draws it; the longest line of a title of several lines)
TITLE_WIDTHS_JS = """
const views = [];
const walk = (v) => { views.push(v); for (const c of (v.child_views || [])) walk(c); };
for (const r of (Bokeh.index.roots ? [...Bokeh.index.roots] : Object.values(Bokeh.index))) walk(r);
const ctx = document.createElement('canvas').getContext('2d');
const out = [];
for (const v of views) {
  if (!v.frame_view) continue;  // not a plot
  const m = v.model;
  const titles = [m.title, ...m.above, ...m.below, ...m.left, ...m.right]
    .filter(t => t && t.type === 'Title' && t.text);
  for (const t of new Set(titles)) {
    const tv = v.owner.find_one(t);
    ctx.font = `${t.text_font_style} ${t.text_font_size} ${t.text_font}`;
    const text = Math.max(...t.text.split('\\n').map(line => ctx.measureText(line).width));
    out.push({title: t.text, text: text, space: tv ? tv.bbox.width : v.frame.bbox.width,
              plot: v.bbox.width});
  }
}
return out;
"""


def _fail_one_block_of_three_axes(block):
    if block.block_id[1] == 5:
        raise RuntimeError("block 5 always fails")


def test_every_figure_title_fits_its_figure(tmp_path):
    """The title of the failures heatmap, "failed attempts over the block
    grid (earlier axes summed)", was longer than its 330 px figure: the
    page cut it after "earlier ax". Each title's text, in the font bokeh
    draws it in, must fit the width bokeh's layout gives it. A task over
    three axes with a failed block shows every figure, the heatmap too."""
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = daisy.Task(
        "a_task_over_three_axes",
        total_roi=daisy.Roi((0, 0, 0), (3, 4, 5)),
        read_roi=daisy.Roi((0, 0, 0), (1, 1, 1)),
        write_roi=daisy.Roi((0, 0, 0), (1, 1, 1)),
        process_function=_fail_one_block_of_three_axes,
        read_write_conflict=False,
        resource_tracking=True,
        max_retries=0,
    )
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    out = write_html_report(tmp_path / "tracking", tmp_path / "titles.html")
    driver = chrome()
    try:
        load(driver, out)
        titles = driver.execute_script(TITLE_WIDTHS_JS)
        shown = " | ".join(t["title"] for t in titles)
        assert any(t["title"].startswith("failed attempts") for t in titles), shown
        assert len(titles) >= 6, shown  # timeline, 3 histograms, trend, phases, heatmap
        cut = [
            f"{t['title']!r}: {t['text']:.0f} px of text in {t['space']:.0f} px "
            f"(a figure {t['plot']:.0f} px wide)"
            for t in titles
            if t["text"] > t["space"]
        ]
        assert not cut, "titles cut off:\n" + "\n".join(cut)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "html_report_titles.png"))
        assert severe_console_messages(driver) == []
    finally:
        driver.quit()


def test_a_rerun_right_after_a_run_shows_only_its_own_blocks(tmp_path):
    """The tutorial reruns a pipeline at once, and its report drew the
    blocks of the run before too, at negative seconds "since the run
    started": the store keeps the stamps of every run, and the timeline took
    the blocks stamped up to a second before the run's start. The stamps of
    one run are read off one clock from its start (``RunLedger::new``), so
    a block of this run is stamped at or after it."""
    from daisy.report.html import report_layout

    daisy.set_tracking_basedir(tmp_path / "tracking")
    mark = tmp_path / "fixed"

    def work(block):
        if block.block_id[1] >= 4 and not mark.exists():
            raise RuntimeError("not yet")

    task = line_task("t", 8, process_function=work, resource_tracking=True, max_retries=0)
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    mark.touch()
    task = line_task("t", 8, process_function=work, resource_tracking=True, max_retries=0)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    layout = report_layout(tmp_path / "tracking")
    source = layout.select_one({"name": "timeline_source"})
    assert sorted(source.data["cell"]) == [4, 5, 6, 7], "the rerun ran blocks 4 to 7 only"
    assert min(source.data["left"]) >= 0, "no bar before the run started"
