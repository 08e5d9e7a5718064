"""A self-contained HTML performance report of a run.

``daisy report PATH --html out.html`` (or ``run_blockwise(...,
report_html=path)``) writes one HTML file that opens offline: every
script is inline. Built with bokeh (the ``daisy[report]`` extra), from the
run reports and the tracking stores, per task:

- a Gantt timeline of every block on every worker (from the store's
  ``worker_id``, ``sent_at``, ``returned_at``) and every failed attempt
  (from the run's report), coloured by how it ended (done, done after
  failed attempts, failed, timed out), on one time axis for all the tasks
  of a run (seconds since it started);
- distributions of block wall time, CPU and peak RSS;
- block wall time over the run (completion order), with its trend;
- the worker phases (startup, idle, compute, final wait, teardown);
- failed attempts over the block grid (nD grids summed onto their last two
  axes);
- the utilisation (block compute seconds over the worker-seconds available)
  with a verdict in plain words.

Beyond `MAX_BARS` blocks the timeline shows an even sample, and says so:
the file stays small and opens quickly whatever the run's size.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from daisy.report.history import read_runs
from daisy.report.stores import find_runs_files, grid_shape, stat_array, store_of
from daisy.report.task_report import TaskReport
from daisy.report.timeline import BLOCK_OUTCOMES, RUN_OUTCOMES, WORKER_PHASES, phase_seconds
from daisy.units import format_seconds

#: most blocks drawn in a timeline; larger runs show an even sample
MAX_BARS = 100_000
#: most points of the wall-time-over-the-run plot (the trend uses them all)
MAX_TREND_POINTS = 10_000


def _bokeh() -> Any:
    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise ImportError(
            "the HTML report needs bokeh: pip install bokeh (or the daisy[report] extra)"
        ) from None
    import bokeh.embed
    import bokeh.layouts
    import bokeh.models
    import bokeh.plotting
    import bokeh.resources
    import bokeh.transform

    return bokeh


def verdict(u: float | None) -> str:
    """Plain words for a utilisation figure."""
    if u is None:
        return "no workers: nothing to say about utilisation (a serial run)"
    if u >= 0.8:
        return "workers spent nearly all their time on blocks: the timings account for the run"
    if u >= 0.5:
        return (
            "workers spent a fair share of their time outside blocks (startup, waiting, "
            "teardown): fewer or longer-lived workers may pay off"
        )
    return (
        "workers spent most of their time outside blocks: startup, waiting for upstream "
        "blocks or teardown dominate; use fewer workers or bigger blocks"
    )


def _store_arrays(store: Path | None) -> dict[str, np.ndarray]:
    if store is None:
        return {}
    out = {}
    for name in (
        "worker_id",
        "sent_at",
        "returned_at",
        "wall_seconds",
        "cpu_seconds",
        "peak_rss_bytes",
        "gpu_util_pct",
        "gpu_mem_bytes",
        "failures",
        "done",
    ):
        a = stat_array(store, name)
        if a is not None:
            out[name] = a
    shape = grid_shape(store)
    if shape is not None:
        out["shape"] = np.array(shape)
    return out


#: how a block's last attempt of the run ended, as the timeline colours it
#: how a bar of the block timeline ended, as its legend says it, and the
#: outcome whose colour it takes from the one palette
BAR_STATES = ("done", "done after a failed attempt", "failed attempt", "timed out")
BAR_OUTCOMES = ("done", "done after a failed attempt", "failed", "timed out")
BAR_COLOURS = tuple(BLOCK_OUTCOMES[o] for o in BAR_OUTCOMES)


def _timeline(
    bk: Any, report: TaskReport, arrays: dict[str, np.ndarray], axis: Any, t0: float
) -> list[Any]:
    """The Gantt chart of this run's blocks on its workers, on the run's
    time axis (``axis``, shared by the tasks of one run: seconds since
    ``t0``, the run's start), each bar coloured by how the block ended."""
    sent, ret, wid = arrays.get("sent_at"), arrays.get("returned_at"), arrays.get("worker_id")
    if sent is None or ret is None or wid is None:
        return [bk.models.Div(text="<p>No block timeline: the task has no resource tracking.</p>")]
    if report.first_block_at is None:
        return [
            bk.models.Div(
                text="<p>No block timeline: this run processed no block (every block was done "
                "already and skipped).</p>"
            )
        ]
    bars, shown, note = _timeline_bars(report, arrays, t0)
    source = bk.models.ColumnDataSource(bars, name="timeline_source")
    retried = bars["state"].count(BAR_STATES[1])
    text = (
        f"<p>{shown} blocks of this run on the timeline at their successful attempt "
        f"({retried} of them after failed attempts), and {len(report.failed_attempts)} failed "
        f"attempts (the report keeps the first 1,000 of a run).{note}</p>"
    )
    return [_timeline_figure(bk, report.task_id, source, axis), bk.models.Div(text=text)]


def _timeline_bars(
    report: TaskReport, arrays: dict[str, np.ndarray], t0: float
) -> tuple[dict[str, Any], int, str]:
    """The bars of the run's blocks (their successful attempts, from the
    store, at most `MAX_BARS` of them, evenly sampled) and of its failed
    attempts (from the report): their columns, how many blocks are shown,
    and a note where they were sampled."""
    sent, ret, wid = arrays["sent_at"], arrays["returned_at"], arrays["worker_id"]
    # the blocks this run executed (the store keeps older runs' stamps too):
    # a run's stamps are read off one clock from its start, so its blocks
    # are stamped between its start and its end; with a slack before the
    # start, a rerun right after a run drew that run's blocks as its own
    start, end = report.started_at, report.finished_at
    keep = np.isfinite(sent) & np.isfinite(ret) & (sent >= start) & (ret <= end)
    index = np.flatnonzero(keep)
    note = ""
    if index.size > MAX_BARS:
        step = int(np.ceil(index.size / MAX_BARS))
        note = (
            f" Showing every {step}th of {index.size} blocks (an even sample) to keep this file "
            "small."
        )
        index = index[::step]
    worker = np.where(wid[index] == np.uint32(0xFFFFFFFF), -1, wid[index].astype(np.int64))
    failures = arrays.get("failures")
    failed_before = (
        failures[index] > 0 if failures is not None else np.zeros(index.size, dtype=bool)
    )
    # the store times a block's successful attempt; the report, the run's
    # failed ones (its first 1,000)
    attempts = report.failed_attempts
    left = np.concatenate([sent[index] - t0, [a.sent_at - t0 for a in attempts]])
    right = np.concatenate([ret[index] - t0, [a.returned_at - t0 for a in attempts]])
    rows = np.concatenate(
        [worker, [-1 if a.worker_id is None else a.worker_id for a in attempts]]
    ).astype(np.float64)
    cells = np.concatenate([index, [a.index for a in attempts]]).astype(np.int64)
    states = [BAR_STATES[1] if f else BAR_STATES[0] for f in failed_before]
    states += [BAR_STATES[3] if a.timed_out else BAR_STATES[2] for a in attempts]
    bars = {"left": left, "right": right, "worker": rows, "cell": cells, "state": states}
    return bars, int(index.size), note


def _timeline_figure(bk: Any, task_id: str, source: Any, axis: Any) -> Any:
    """The Gantt chart itself: one row per worker (-1: blocks without a
    managed worker), bars coloured by how each attempt ended."""
    fig = bk.plotting.figure(
        title=f"{task_id}: blocks on workers (seconds since the run started)",
        height=260,
        sizing_mode="stretch_width",
        name="timeline",
        x_range=axis,
        tools="xpan,xwheel_zoom,reset,hover",
        tooltips=[
            ("cell", "@cell"),
            ("worker", "@worker"),
            ("from", "@left s"),
            ("to", "@right s"),
            ("ended", "@state"),
        ],
    )
    fig.quad(
        left="left",
        right="right",
        bottom=bk.transform.dodge("worker", -0.35),
        top=bk.transform.dodge("worker", 0.35),
        source=source,
        alpha=0.8,
        color=bk.transform.factor_cmap("state", palette=BAR_COLOURS, factors=BAR_STATES),
        legend_field="state",
        name="timeline_bars",
    )
    legend = fig.legend[0]
    fig.center.remove(legend)
    fig.add_layout(legend, "above")
    legend.orientation = "horizontal"
    legend.label_text_font_size = "8pt"
    fig.yaxis.axis_label = "worker"
    # worker ids are integers: no tick at 0.5 or 4.5
    fig.yaxis.ticker = bk.models.BasicTicker(min_interval=1)
    fig.xaxis.axis_label = "seconds since the run started (one axis for every task of the run)"
    return fig


#: units of the histograms' axes, largest first: (name, size in the base unit)
SECONDS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
BYTES = (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10), ("B", 1.0))
PERCENT = (("%", 1.0),)


def unit_for(values: np.ndarray, units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """The largest of ``units`` (``(name, size)``, largest first) in which
    the largest of ``values`` is at least 1: tick labels of at most a few
    digits, never in scientific notation. The smallest unit when every
    value is below it (or there are none)."""
    top = float(np.max(np.abs(values))) if values.size else 0.0
    for name, size in units:
        if top >= size:
            return name, size
    return units[-1]


def _histogram(bk: Any, title: str, values: np.ndarray, units: Sequence[tuple[str, float]]) -> Any:
    """A histogram of ``values`` (in the base unit of ``units``), drawn in
    the unit that suits them, with a few ticks and plain numbers so that
    the tick labels stay apart (tests/test_html_report.py checks it in a
    browser)."""
    values = values[np.isfinite(values)]
    unit, size = unit_for(values, units)
    fig = bk.plotting.figure(title=title, height=220, width=440, tools="", name="histogram")
    if values.size:
        counts, edges = np.histogram(values / size, bins=min(40, max(1, values.size)))
        fig.quad(bottom=0, top=counts, left=edges[:-1], right=edges[1:], alpha=0.7)
    fig.xaxis.ticker = bk.models.BasicTicker(desired_num_ticks=6)
    fig.xaxis.formatter = bk.models.BasicTickFormatter(use_scientific=False)
    fig.xaxis.axis_label = unit
    fig.yaxis.formatter = bk.models.BasicTickFormatter(use_scientific=False)
    fig.yaxis.axis_label = "blocks"
    return fig


def _trend(bk: Any, report: TaskReport, arrays: dict[str, np.ndarray]) -> Any:
    wall, ret = arrays.get("wall_seconds"), arrays.get("returned_at")
    if wall is None or ret is None:
        # an empty figure would make bokeh log W-1000 (MISSING_RENDERERS)
        return bk.models.Div(text="<p>No block wall times: the task has no resource tracking.</p>")
    fig = bk.plotting.figure(
        title=f"block wall time over the run (trend {report.blocks.trend_slope_ms:+.4f} ms/block)",
        height=220,
        width=480,
        tools="",
    )
    ok = np.isfinite(wall) & np.isfinite(ret)
    order = np.argsort(ret[ok])
    y = wall[ok][order].astype(np.float64) * 1e3
    x = np.arange(y.size)
    shown = np.linspace(0, y.size - 1, min(y.size, MAX_TREND_POINTS)).astype(np.int64)
    fig.scatter(x[shown], y[shown], size=3, alpha=0.6)
    b = report.blocks
    if b.wall.n >= 2:
        # the core's trend, drawn from its slope and mean
        ends = [0, b.wall.n - 1]
        fig.line(ends, [b.trend_ms(x) for x in ends], line_width=2, color="firebrick")
    fig.xaxis.axis_label = "completion order"
    fig.yaxis.axis_label = "ms"
    return fig


def _worker_phases(bk: Any, report: TaskReport) -> Any:
    rows = sorted(report.workers.by_id.values(), key=lambda r: r.worker_id)
    if not rows:
        if report.first_block_at is None:
            return bk.models.Div(text="<p>No workers: this run processed no block.</p>")
        return bk.models.Div(text="<p>No workers (a serial run): no worker phases.</p>")
    names = [str(r.worker_id) for r in rows]
    phases = [name for name, _ in WORKER_PHASES]
    seconds = [phase_seconds(r) for r in rows]
    data: dict[str, list[Any]] = {"worker": names}
    for i, name in enumerate(phases):
        data[name] = [s[i] for s in seconds]
    fig = bk.plotting.figure(
        title="worker phases (seconds)",
        y_range=names,
        height=max(160, 22 * len(names) + 80) + 40,  # + the legend above
        width=480,
        tools="hover",
        tooltips="$name: @$name s",
    )
    fig.hbar_stack(
        phases,
        y="worker",
        height=0.7,
        color=[colour for _, colour in WORKER_PHASES],
        source=bk.models.ColumnDataSource(data),
        legend_label=phases,
    )
    # above the plot, where it covers no worker's bar
    legend = fig.legend[0]
    fig.center.remove(legend)
    fig.add_layout(legend, "above")
    legend.orientation = "horizontal"
    legend.label_text_font_size = "8pt"
    return fig


def _failures(bk: Any, report: TaskReport, arrays: dict[str, np.ndarray]) -> Any:
    """The map of failed attempts over the block grid, from the store; a
    task without one says how many attempts failed and how to get a map."""
    failures, shape = arrays.get("failures"), arrays.get("shape")
    if failures is None or shape is None:
        n = report.blocks.failures
        text = (
            f"<p>{n} failed attempt(s) this run, without a tracking store to map them over the "
            "block grid (give the task a tracking_path for one); their causes are listed "
            "above.</p>"
            if n
            else "<p>No failed attempts this run.</p>"
        )
        return bk.models.Div(text=text)
    if not failures.any():
        return bk.models.Div(text="<p>No failed attempts recorded in the store.</p>")
    # a short title: bokeh draws it on the canvas and cuts what does not fit
    # (tests/test_html_report.py checks every title in a browser); what
    # a grid of more than two axes needs said goes under it
    fig = bk.plotting.figure(title="failed attempts over the block grid", height=260, width=360)
    grid = failures.reshape(tuple(int(s) for s in shape)).astype(np.float64)
    if grid.ndim > 2:
        fig.add_layout(
            bk.models.Title(
                text=(
                    f"summed over the first of its {grid.ndim} axes"
                    if grid.ndim == 3
                    else f"summed over the first {grid.ndim - 2} of its {grid.ndim} axes"
                ),
                text_font_style="italic",
                text_font_size="11px",
            ),
            "above",
        )
    while grid.ndim > 2:
        grid = grid.sum(axis=0)  # project onto the last two axes
    if grid.ndim == 1:
        grid = grid[None, :]
    mapper = bk.models.LinearColorMapper(palette="Reds256", low=0, high=max(1.0, grid.max()))
    mapper.palette = list(reversed(mapper.palette))
    fig.image(image=[grid], x=0, y=0, dw=grid.shape[1], dh=grid.shape[0], color_mapper=mapper)
    fig.xaxis.axis_label = "last axis"
    fig.yaxis.axis_label = "second to last axis"
    return fig


#: outcomes from the best to the worst; the banner shows the worst
_OUTCOMES = ("completed", "failed", "interrupted", "abandoned")


def _outcome_banner(bk: Any, reports: Sequence[TaskReport]) -> Any:
    """The run's outcome at the top of the page: the worst of its tasks',
    and per task what went wrong."""
    rank = {o: i for i, o in enumerate(_OUTCOMES)}
    worst = max((r.outcome for r in reports), key=lambda o: rank.get(o, len(_OUTCOMES)))
    lines = []
    for r in reports:
        if r.outcome == "completed" and not r.blocks.failures:
            continue
        what = f"{r.blocks.failures} failed attempt(s)" if r.blocks.failures else ""
        lines.append(
            f"{html.escape(r.task_id)}: {html.escape(r.outcome)}"
            + (f", {what}" if what else "")
            + f", {r.blocks.count} blocks done"
        )
    detail = "; ".join(lines) if lines else f"{len(reports)} task(s), every block done"
    colour = RUN_OUTCOMES.get(worst, "#444")
    return bk.models.Div(
        text=(
            f'<div class="daisy-outcome {html.escape(worst)}" style="background:{colour};'
            'color:white;padding:0.6em 1em;border-radius:4px;font-size:1.1em">'
            f"<b>{html.escape(worst)}</b>: {detail}</div>"
        ),
        sizing_mode="stretch_width",
    )


def _task_section(bk: Any, report: TaskReport, store: Path | None, axis: Any = None) -> list[Any]:
    """One task's part of the page; ``axis``: the time axis it shares with
    the other tasks of its run (a new one when None)."""
    if axis is None:
        axis = bk.models.DataRange1d()
    arrays = _store_arrays(store)
    u = report.utilisation
    resumed = report.first_block_at is None and report.blocks.skipped > 0
    if resumed:
        # a rerun that found every block done: nothing of this run to judge
        judged = (
            f"<p><b>Nothing to do</b>: every block was done already ({report.blocks.skipped} "
            "skipped), so this run processed none. The distributions below are the tracking "
            "store's, from the runs that processed the blocks.</p>"
        )
    else:
        judged = (
            f"<p><b>Utilisation {'—' if u is None else f'{100 * u:.0f}%'}</b>: "
            f"{html.escape(verdict(u))}.</p>"
        )
    head = (
        f"<h2>{html.escape(report.task_id)}</h2>"
        f"<p>{report.blocks.count} blocks ({report.blocks.skipped} skipped), "
        f"{report.blocks.failures} failed attempts, {report.workers.count} workers, "
        f"{format_seconds(report.elapsed)} wall, outcome {html.escape(report.outcome)}.</p>"
        f"{judged}"
        f"<pre>{html.escape(report.render())}</pre>"
    )
    parts: list[Any] = [bk.models.Div(text=head, sizing_mode="stretch_width")]
    parts += _timeline(bk, report, arrays, axis, report.started_at)
    hist = []
    if "wall_seconds" in arrays:
        wall = arrays["wall_seconds"].astype(np.float64)
        # the blocks measured: a block not run, or whose last attempt failed,
        # has a NaN wall time and a peak RSS of 0 that is no measurement
        done = np.isfinite(wall)
        hist = [
            _histogram(bk, "block wall time", wall[done], SECONDS),
            _histogram(bk, "block CPU", arrays["cpu_seconds"].astype(np.float64)[done], SECONDS),
            _histogram(
                bk, "block peak RSS", arrays["peak_rss_bytes"].astype(np.float64)[done], BYTES
            ),
        ]
    if report.blocks.gpu_mem and "gpu_mem_bytes" in arrays and "gpu_util_pct" in arrays:
        # a block has GPU figures where either was measured (NaN / 0: none)
        util = arrays["gpu_util_pct"].astype(np.float64)
        mem = arrays["gpu_mem_bytes"].astype(np.float64)
        measured = np.isfinite(util) | (mem > 0)
        hist += [
            _histogram(bk, "block GPU utilisation (%)", util[measured], PERCENT),
            _histogram(bk, "block GPU memory peak", mem[measured], BYTES),
        ]
    for i in range(0, len(hist), 3):  # three to a row: the GPU pair below
        parts.append(bk.layouts.row(*hist[i : i + 3]))
    parts.append(
        bk.layouts.row(
            _trend(bk, report, arrays),
            _worker_phases(bk, report),
            _failures(bk, report, arrays),
        )
    )
    return parts


def write_html_report(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    out: str | os.PathLike[str],
    run: int | None = None,
) -> Path:
    """Write the report of the runs found at ``paths`` (stores, base
    directories or ``runs.jsonl`` files) to ``out``; the last run of each
    task, or run ``run``."""
    bk = _bokeh()
    layout = report_layout(paths, run)
    page = bk.embed.file_html(layout, resources=bk.resources.INLINE, title="daisy run report")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def report_layout(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str], run: int | None = None
) -> Any:
    """The bokeh layout of `write_html_report`'s page."""
    bk = _bokeh()
    if isinstance(paths, str | os.PathLike):
        paths = [Path(paths)]  # one path (a str is not a list of one-letter paths)
    files = [f for p in paths for f in find_runs_files(Path(p))]
    if not files:
        raise FileNotFoundError(f"no runs.jsonl at {', '.join(str(p) for p in paths)}")
    parts: list[Any] = [
        bk.models.Div(
            text="<h1>daisy run report</h1><p>Every figure is read from the runs' reports "
            "(runs.jsonl) and tracking stores.</p>",
            sizing_mode="stretch_width",
        )
    ]
    shown: list[tuple[TaskReport, Path | None]] = []
    for f in files:
        runs = read_runs(f)
        if not runs:
            continue
        shown.append((runs[-1] if run is None else runs[run], store_of(f)))
    if shown:
        parts.append(_outcome_banner(bk, [r for r, _ in shown]))
    # the tasks of one run (one start) share one time axis, from its start
    axes: dict[float, Any] = {}
    for report, store in shown:
        axis = axes.setdefault(report.started_at, bk.models.DataRange1d())
        parts += _task_section(bk, report, store, axis)
    return bk.layouts.column(*parts, sizing_mode="stretch_width")
