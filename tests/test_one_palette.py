"""Issue 52: every timeline daisy draws (the notebook's worker SVG, the HTML
report's worker phases and block Gantt chart, the live dashboard's block
bars) takes its phases, their order and their colours from one module,
`daisy.report.timeline`; a phase or an outcome has one colour wherever it
is drawn. Pure rendering: no run, no process."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from daisy.report import timeline


def _worker(worker_id: int, **seconds: float) -> SimpleNamespace:
    """A worker record as the report classes hand it over (the figures the
    timelines read)."""
    total = SimpleNamespace
    return SimpleNamespace(
        worker_id=worker_id,
        startup=seconds.get("startup"),
        compute=total(total=seconds.get("compute", 0.0)),
        idle=total(total=seconds.get("idle", 0.0)),
        final_wait=seconds.get("final_wait"),
        teardown=seconds.get("teardown"),
    )


def test_a_workers_phases_are_read_once_in_the_palettes_order():
    w = _worker(3, startup=1.0, compute=5.0, idle=0.5, final_wait=0.25, teardown=0.125)
    assert [name for name, _ in timeline.WORKER_PHASES] == [
        "startup",
        "compute",
        "idle",
        "final wait",
        "teardown",
    ]
    assert timeline.phase_seconds(w) == (1.0, 5.0, 0.5, 0.25, 0.125)
    # a worker still starting has no figure yet: zero, not an error
    assert timeline.phase_seconds(_worker(4)) == (0.0, 0.0, 0.0, 0.0, 0.0)
    colours = [c for _, c in timeline.WORKER_PHASES]
    assert len(set(colours)) == len(colours), "each phase its own colour"


def test_the_notebook_svg_draws_each_phase_in_the_palettes_colour():
    from daisy.report.notebook import timeline_svg

    w = _worker(1, startup=1.0, compute=2.0, idle=3.0, final_wait=4.0, teardown=5.0)
    svg = timeline_svg(SimpleNamespace(by_id={1: w}))
    drawn = dict(re.findall(r'fill="(#[0-9a-f]{6})"><title>worker 1 ([a-z ]+):', svg))
    assert drawn == {colour: name for name, colour in timeline.WORKER_PHASES}


def test_the_html_reports_worker_phases_use_the_same_colours_in_the_same_order():
    pytest.importorskip("bokeh")
    from daisy.report import html as html_report

    w = _worker(1, startup=1.0, compute=2.0, idle=3.0, final_wait=4.0, teardown=5.0)
    report = SimpleNamespace(workers=SimpleNamespace(by_id={1: w}), first_block_at=0.0)
    fig = html_report._worker_phases(html_report._bokeh(), report)
    bars = [r for r in fig.renderers if hasattr(r.glyph, "fill_color")]
    drawn = [(r.name, r.glyph.fill_color) for r in bars]
    assert drawn == list(timeline.WORKER_PHASES)
    data = bars[0].data_source.data
    assert [data[name][0] for name, _ in timeline.WORKER_PHASES] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_the_html_report_and_the_dashboard_colour_an_outcome_alike():
    from daisy.dashboard.page import page_html

    outcomes = timeline.BLOCK_OUTCOMES
    assert {"done", "failed", "timed out", "lost"} <= set(outcomes)
    page = page_html()
    for outcome in ("failed", "timed out", "lost"):
        assert f'"{outcome}": "{outcomes[outcome]}"' in page, outcome
    run = timeline.RUN_OUTCOMES
    assert f"#run-state.finished {{ color: {run['completed']}; }}" in page
    for state in ("failed", "abandoned", "interrupted"):
        assert f"#run-state.finished.{state} {{ color: {run[state]}; }}" in page, state
    for colour in timeline.TASK_COLOURS:
        assert f'"{colour}"' in page
    pytest.importorskip("bokeh")
    from daisy.report import html as html_report

    assert [outcomes[o] for o in html_report.BAR_OUTCOMES] == list(html_report.BAR_COLOURS)
    assert len(html_report.BAR_STATES) == len(html_report.BAR_OUTCOMES)
