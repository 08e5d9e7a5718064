"""How run reports look in a notebook: the HTML that Jupyter shows for a
`RunReport`, a `TaskReport`, a `BlockSummary` or a `WorkerSummary` (their
``_repr_html_``, IPython's display protocol).

Each view is the Resource Utilization panel as tables, plus, for a task
with workers, a compact timeline of each worker's life drawn as inline
SVG: startup, compute, idle, the final wait and teardown as consecutive
segments whose widths are the phases' seconds. Everything is
self-contained HTML (no script, no stylesheet, no network), so a saved
notebook shows it anywhere. The figures come formatted from the report
classes; nothing is computed here.
"""

from __future__ import annotations

from html import escape
from typing import Any

from daisy.report.timeline import WORKER_PHASES, phase_seconds
from daisy.units import format_bytes, format_seconds

# The report objects are typed Any here: `daisy.run_report` imports this
# module for its ``_repr_html_`` methods, so this one may not import it
# back (tests/test_layering.py keeps modules free of import circles).

#: the most workers drawn in a task's timeline (the table says how many
#: more there are): a notebook cell of 10^3 SVG rows helps nobody
MAX_TIMELINE_WORKERS = 32

#: timeline segments: (phase, colour), the one palette's
PHASES = WORKER_PHASES

_TABLE = 'style="border-collapse:collapse;font-size:12px;margin:2px 0 6px 0"'
_CELL = 'style="padding:1px 8px;text-align:left;border-bottom:1px solid #eee"'
_NUM = 'style="padding:1px 8px;text-align:right;border-bottom:1px solid #eee"'


_SIDE_BY_SIDE = '<div style="display:flex;flex-wrap:wrap;gap:0 32px;align-items:flex-start">'


def _rows(rows: list[tuple[str, str]]) -> str:
    body = "".join(
        f"<tr><th {_CELL}>{escape(k)}</th><td {_CELL}>{escape(v)}</td></tr>" for k, v in rows
    )
    return f"<table {_TABLE}>{body}</table>"


def block_summary_html(b: Any) -> str:
    """The per-block figures of one task as a two-column table."""
    rows = [("blocks", f"{b.count}" + (f" ({b.skipped} skipped)" if b.skipped else ""))]
    if b.failures:
        rows.append(("failed attempts", str(b.failures)))
    if b.round_trip:
        rows.append(("round trip", b.round_trip.format()))
    if b.has_stats:
        rows += [
            ("wall", b.wall.format()),
            ("cpu", b.cpu.format()),
            ("peak RSS", b.peak_rss.format("B")),
            ("io read", format_bytes(b.io_read.total)),
            ("io write", format_bytes(b.io_write.total)),
        ]
        if b.trend_shown:
            rows.append(("trend", f"{b.trend_slope_ms:+.4f} ms/block"))
        if b.overhead:
            rows.append(("overhead", b.overhead.format()))
        if b.gpu_util:
            rows.append(("gpu utilisation", b.gpu_util.format()))
        if b.gpu_mem:
            rows.append(("gpu memory peak", format_bytes(b.gpu_mem.max)))
    return _rows(rows)


def worker_summary_html(w: Any, max_workers: int = MAX_TIMELINE_WORKERS) -> str:
    """The workers of one task: their pooled figures, a row per worker, and
    the timeline."""
    if not w.count:
        extra = f" ({w.unmanaged_clients} unmanaged client(s))" if w.unmanaged_clients else ""
        return f"<p>no workers{escape(extra)}</p>"
    exits = ", ".join(f"{n} {kind}" for kind, n in w.exits.items() if n) or "—"
    pooled = _rows(
        [
            ("workers", f"{w.count}" + (f" ({w.spawner})" if w.spawner else "")),
            ("startup", w.startup.format()),
            ("idle", w.idle.format()),
            ("teardown", w.teardown.format()),
            ("exits", exits),
        ]
    )
    head = ("id", "startup", "blocks", "failed", "idle", "compute", "teardown", "exit")
    records = sorted(w.by_id.values(), key=lambda r: r.worker_id)
    body = []
    for r in records[:max_workers]:
        cells = (
            str(r.worker_id),
            format_seconds(r.startup),
            str(r.blocks_ok),
            str(r.blocks_failed),
            format_seconds(r.idle.total) if r.idle else "—",
            format_seconds(r.compute.total) if r.compute else "—",
            format_seconds(r.teardown),
            r.exit or "running",
        )
        body.append("<tr>" + "".join(f"<td {_NUM}>{escape(c)}</td>" for c in cells) + "</tr>")
    more = ""
    if len(records) > max_workers:
        more = f"<p>… {len(records) - max_workers} more workers (see workers.by_id)</p>"
    table = (
        f"<table {_TABLE}><tr>"
        + "".join(f"<th {_NUM}>{h}</th>" for h in head)
        + "</tr>"
        + "".join(body)
        + "</table>"
    )
    return pooled + table + more + timeline_svg(w, max_workers)


def timeline_svg(w: Any, max_workers: int = MAX_TIMELINE_WORKERS) -> str:
    """Each worker's life as a row of phase segments (startup, compute,
    idle, final wait, teardown), all rows on one time scale, with a
    legend. Empty when no worker has a measured phase."""
    records = sorted(w.by_id.values(), key=lambda r: r.worker_id)[:max_workers]
    lives = [(r.worker_id, phase_seconds(r)) for r in records]
    longest = max((sum(p) for _, p in lives), default=0.0)
    if longest <= 0:
        return ""
    width, label, row, gap = 480.0, 40.0, 12, 3
    height = len(lives) * (row + gap) + 22
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label + width + 10:.0f}" '
        f'height="{height}" font-size="10" font-family="sans-serif">'
    ]
    for i, (worker_id, phases) in enumerate(lives):
        y = i * (row + gap)
        parts.append(f'<g><text x="0" y="{y + row - 2}">w{worker_id}</text>')
        x = label
        for (name, colour), seconds in zip(PHASES, phases, strict=True):
            if seconds <= 0:
                continue
            w_px = width * seconds / longest
            parts.append(
                f'<rect x="{x:.1f}" y="{y}" width="{max(w_px, 0.5):.1f}" height="{row}" '
                f'fill="{colour}"><title>worker {worker_id} {name}: '
                f"{escape(format_seconds(seconds))}</title></rect>"
            )
            x += w_px
        parts.append("</g>")
    y = len(lives) * (row + gap) + 12
    x = label
    for name, colour in PHASES:
        parts.append(
            f'<rect x="{x:.0f}" y="{y - 8}" width="8" height="8" fill="{colour}"/>'
            f'<text x="{x + 11:.0f}" y="{y}">{name}</text>'
        )
        x += 11 + 6 * len(name) + 14
    parts.append(
        f'<text x="{label + width:.0f}" y="{y}" text-anchor="end">'
        f"{escape(format_seconds(longest))}</text></svg>"
    )
    return "".join(parts)


def task_report_html(t: Any) -> str:
    """One task's section of the panel."""
    head = f"<b>{escape(t.task_id)}</b>"
    if t.elapsed > 0:
        head += f" — {escape(format_seconds(t.elapsed))} wall"
    if t.outcome != "completed":
        head += f" — {escape(t.outcome)}"
    # the block and worker figures side by side, the worker rows and the
    # timeline under them: a task fits a notebook cell's first screen
    parts = [f'<div style="margin-bottom:12px"><div>{head}</div>', _SIDE_BY_SIDE]
    parts.append(f"<div>{block_summary_html(t.blocks)}</div>")
    parts.append(f"<div>{worker_summary_html(t.workers)}</div></div>")
    if t.failure_causes:
        ranked = sorted(t.failure_causes.messages, key=lambda mn: -mn[1])
        items = "".join(f"<li>{n}× <code>{escape(m)}</code></li>" for m, n in ranked[:5])
        if t.failure_causes.other:
            items += f"<li>… {t.failure_causes.other} more</li>"
        parts.append(f'<div>failed because</div><ul style="margin:2px 0">{items}</ul>')
    if t.failure_notes:
        # the failed blocks with their ROIs, the first traceback, what next:
        # what the Execution Summary said, which a notebook may not show
        notes = escape("\n".join(t.failure_notes))
        parts.append(
            '<details open="open"><summary>failed blocks and the first failure</summary>'
            f'<pre style="white-space:pre-wrap;margin:2px 0">{notes}</pre></details>'
        )
    parts.append("</div>")
    return "".join(parts)


def run_report_html(r: Any) -> str:
    """The whole Resource Utilization panel: a section per task."""
    sections = [task_report_html(t) for t in r.tasks.values()]
    body = "".join(sections) or "<p>no tasks</p>"
    return f'<div class="daisy-run-report"><h4>Resource Utilization</h4>{body}</div>'
