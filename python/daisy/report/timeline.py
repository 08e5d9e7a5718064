"""What every timeline daisy draws shares: the phases of a worker's life,
in the order they are lived, with the seconds each took; how a block's
attempt ended; and the one palette for both, with the tasks' colours and
the run's outcomes. The notebook's inline SVG (`daisy.report.notebook`), the
HTML report's bokeh figures (`daisy.report.html`) and the live dashboard's
page (`daisy.dashboard.page`) draw from here, so a phase or an outcome has
one colour wherever it is seen.

The phase colours run light to dark in the order a worker lives them, so
they tell apart in greyscale too; the outcome colours are the familiar
ones (blue done, orange retried, red failed, brown timed out, black lost);
the task colours are Tableau 10's first eight, which stay apart for the
common colour-vision deficiencies.
"""

from __future__ import annotations

from typing import Any

#: a worker's phases, in the order it lives them, with their colours
WORKER_PHASES: tuple[tuple[str, str], ...] = (
    ("startup", "#9ecae1"),
    ("compute", "#2171b5"),
    ("idle", "#fdd0a2"),
    ("final wait", "#d9d9d9"),
    ("teardown", "#636363"),
)

#: how a block's attempt ended, and its colour
BLOCK_OUTCOMES: dict[str, str] = {
    "done": "#4c78a8",
    "done after a failed attempt": "#f2a541",
    "failed": "#d62728",
    "timed out": "#7f3b08",
    "lost": "#111111",
}

#: each task's colour, by its place in the pipeline (repeating after eight)
TASK_COLOURS: tuple[str, ...] = (
    "#4c78a8",
    "#f2a541",
    "#54a24b",
    "#b279a2",
    "#9d755d",
    "#79706e",
    "#72b7b2",
    "#ff9da6",
)

#: a run's outcome, as its banner shows it: only a completed run is green
RUN_OUTCOMES: dict[str, str] = {
    "completed": "#1a7f37",
    "failed": "#b42318",
    "interrupted": "#b54708",
    "abandoned": "#b42318",
}


def phase_seconds(worker: Any) -> tuple[float, ...]:
    """The seconds of each of `WORKER_PHASES` of one worker record (a
    `WorkerRecord` of a report): a phase not measured (yet) is 0."""
    return (
        worker.startup or 0.0,
        worker.compute.total if worker.compute else 0.0,
        worker.idle.total if worker.idle else 0.0,
        worker.final_wait or 0.0,
        worker.teardown or 0.0,
    )
