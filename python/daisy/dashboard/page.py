"""The dashboard's page: one self-contained HTML document (bokeh's inline
resources, no network) whose script polls ``/status.json`` and draws the
tasks, the timeline, the workers and the failures.
"""

from __future__ import annotations

import functools
import html
import json
from typing import Any

from daisy.report.timeline import BLOCK_OUTCOMES, RUN_OUTCOMES, TASK_COLOURS

#: the most block bars kept (and shipped) for the timeline: the latest ones
MAX_BARS = 5000
#: milliseconds between the page's polls
POLL_MS = 1000

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.2em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 0.3em 0; }
h2 { font-size: 1.05em; margin: 1.2em 0 0.3em 0; }
#run-state { font-weight: 600; }
#timeline-legend .key { margin-right: 1.2em; white-space: nowrap; }
#timeline-legend .swatch { display: inline-block; width: 0.9em; height: 0.9em;
  margin-right: 0.3em; vertical-align: -0.1em; border: 2px solid transparent; }
#run-state.lost { color: %(failed)s; }
#run-state.finished { color: %(completed)s; }
#run-state.finished.failed { color: %(failed)s; }
#run-state.finished.abandoned { color: %(abandoned)s; }
#run-state.finished.interrupted { color: %(interrupted)s; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
#failures li { font-family: monospace; font-size: 0.9em; }
#summary { white-space: pre-wrap; font-family: monospace; }
"""

_SCRIPT = """
(function () {
  const POLL_MS = %(poll)d;
  // this page's own id: the run's end waits for every page watching it
  const VIEWER = Math.random().toString(36).slice(2, 12);
  // the run's token, from the address this page was opened with: sent with
  // every poll as a header (not in the URL, and never a cookie)
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const AUTH = TOKEN ? {"Authorization": `Bearer ${TOKEN}`} : {};
  // a bar is filled in its task's colour; an attempt that did not end done
  // is outlined in its outcome's colour and drawn at least MIN_BAR of the
  // window wide, so a failure that took a millisecond is still seen
  const TASK_COLOURS = %(task_colours)s;
  const COLOURS = %(outcome_colours)s;
  const MIN_BAR = 1 / 250;
  const taskColour = (i) => TASK_COLOURS[i %% TASK_COLOURS.length];
  const d = window.daisyDashboard = {updates: 0, last: null, misses: 0};
  const $ = (id) => document.getElementById(id);
  const num = (x) => x == null ? "\\u2014" : Number(x).toLocaleString("en-US");
  const secs = (s) => {
    if (s == null) return "\\u2014";
    if (s < 10) return s.toFixed(1) + "s";
    s = Math.round(s);
    const h = Math.floor(s / 3600), m = Math.floor((s %% 3600) / 60), r = s %% 60;
    const two = (x) => String(x).padStart(2, "0");
    return h ? `${h}h${two(m)}m` : m ? `${m}m${two(r)}s` : `${r}s`;
  };
  const pct = (u) => u == null ? "\\u2014" : (100 * u).toFixed(0) + "%%";
  const bytes = (b) => b == null ? "\\u2014" : (b / 2 ** 20).toFixed(1) + " MiB";
  function cell(row, text, id) {
    const td = document.createElement("td");
    td.textContent = text;
    if (id) td.id = id;
    row.appendChild(td);
  }
  function fill(tbody, rows) {
    tbody.replaceChildren(...rows.map((cells) => {
      const tr = document.createElement("tr");
      for (const [text, id] of cells) cell(tr, text, id);
      return tr;
    }));
  }
  function source() {
    for (const doc of (window.Bokeh ? Bokeh.documents : [])) {
      const m = doc.get_model_by_name("dashboard_bars");
      if (m) return m;
    }
    return null;
  }
  function render(st) {
    const state = $("run-state");
    const updated = new Date(st.now * 1000).toLocaleTimeString();
    if (st.finished) {
      state.textContent = `finished (${st.summary.outcome}) at ${updated}`;
      // coloured by how it ended: only a completed run is green
      state.className = "finished " + st.summary.outcome;
    } else {
      state.textContent = `running \\u2014 updated ${updated}`;
      state.className = "";
    }
    fill($("tasks"), st.tasks.map((t) => [
      [t.task_id], [num(t.done), "done-" + t.task_id], [num(t.failed), "failed-" + t.task_id],
      [num(t.orphaned), "orphaned-" + t.task_id], [num(t.pending), "pending-" + t.task_id],
      [num(t.processing)], [num(t.held_back), "held-back-" + t.task_id], [num(t.total)],
      [num(t.workers)],
      [t.blocks_per_second.toFixed(1)], [st.finished ? "done" : secs(t.eta_seconds)],
      [pct(t.utilisation)],
    ]));
    fill($("workers"), st.workers.map((w) => [
      [String(w.worker_id)], [w.task_id], [w.block == null ? "waiting" : String(w.block)],
      [secs(w.age_seconds)], [bytes(w.last_peak_rss_bytes)], [num(w.blocks_done)],
      [num(w.blocks_failed)],
    ]));
    $("workers-note").textContent = st.workers.length ? "" : "no live workers";
    const fl = $("failures");
    fl.replaceChildren(...st.failures.last.slice().reverse().map((f) => {
      const li = document.createElement("li");
      const who = f.worker_id == null ? "" : `, worker ${f.worker_id}`;
      li.textContent = `${f.task_id} block ${f.block}${who}: ${f.message}`;
      return li;
    }));
    $("failures-total").textContent = `${num(st.failures.total)} failed attempts so far`;
    const tl = st.timeline, b = tl.bars, t0 = st.started_at;
    const order = st.tasks.map((t) => t.task_id);
    const colourOf = (tid) => taskColour(Math.max(0, order.indexOf(tid)));
    const src = source();
    if (src) {
      const left = b.start.map((x) => x - t0);
      // of the time the bars shown span (a run's first seconds are not the
      // whole window)
      const span = b.end.length ? Math.max(...b.end) - Math.min(...b.start) : 0;
      const minWidth = MIN_BAR * Math.min(span, tl.window_seconds);
      src.data = {
        left: left,
        right: b.end.map((x, i) => {
          const r = x - t0;
          return b.outcome[i] === "done" ? r : Math.max(r, left[i] + minWidth);
        }),
        bottom: b.worker_id.map((w) => (w == null ? -1 : w) - 0.4),
        top: b.worker_id.map((w) => (w == null ? -1 : w) + 0.4),
        color: b.task_id.map(colourOf),
        line: b.outcome.map((o) => COLOURS[o] || "rgba(0,0,0,0)"),
        line_width: b.outcome.map((o) => (o === "done" ? 0 : 2.5)),
        task: b.task_id, block: b.block, outcome: b.outcome,
        worker: b.worker_id.map((w) => w == null ? "client" : String(w)),
      };
    }
    const legend = $("timeline-legend");
    const keys = order.map((tid, i) => [taskColour(i), tid, false]).concat(
      Object.entries(COLOURS).map(([o, c]) => [c, o, true]));
    legend.replaceChildren(...keys.map(([c, label, outline]) => {
      const item = document.createElement("span");
      item.className = "key";
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style[outline ? "borderColor" : "background"] = c;
      item.append(swatch, label);
      return item;
    }));
    $("timeline-note").textContent =
      `${num(tl.shown)} blocks returned in the last ${secs(tl.window_seconds)} (the latest ` +
      `${num(%(max_bars)d)} at most)` + (tl.dropped ? `; ${num(tl.dropped)} not drawn` : "");
    if (st.finished) {
      $("summary").textContent = st.summary.tasks.map((t) =>
        `${t.task_id}: ${t.outcome}, ${num(t.done)} done, ${num(t.failed)} failed, ` +
        `${num(t.orphaned)} orphaned in ${secs(t.seconds)}; utilisation ${pct(t.utilisation)}`
      ).join("\\n");
    }
  }
  async function poll() {
    let st = null;
    try {
      const r = await fetch(`status.json?viewer=${VIEWER}`, {cache: "no-store", headers: AUTH});
      if (r.ok) st = await r.json();
    } catch (e) {
      st = null;
    }
    if (st == null) {
      d.misses += 1;
      if (d.misses >= 3) {
        const state = $("run-state");
        state.textContent = "the run's server no longer answers (the run ended or stopped)";
        state.className = "lost";
        return;
      }
    } else {
      d.misses = 0;
      render(st);
      d.last = st;
      d.updates += 1;
      if (st.finished) return;
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
"""


@functools.cache
def _timeline_figure(bokeh: Any) -> Any:
    """The live timeline: an empty bokeh figure whose bars (one row per
    worker) the page's script fills from ``status.json``."""
    src = bokeh.models.ColumnDataSource(
        name="dashboard_bars",
        data={
            k: []
            for k in (
                "left",
                "right",
                "bottom",
                "top",
                "color",
                "line",
                "line_width",
                "task",
                "block",
                "outcome",
                "worker",
            )
        },
    )
    fig = bokeh.plotting.figure(
        height=320,
        sizing_mode="stretch_width",
        x_axis_label="seconds since the run started",
        y_axis_label="worker",
        tools="xpan,xwheel_zoom,reset,save",
        toolbar_location="above",
    )
    fig.quad(
        source=src,
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        fill_color="color",
        line_color="line",
        line_width="line_width",
    )
    # one row per worker id: integer ticks only
    fig.yaxis.ticker = bokeh.models.AdaptiveTicker(min_interval=1.0)
    fig.yaxis.minor_tick_line_color = None
    fig.add_tools(
        bokeh.models.HoverTool(
            tooltips=[
                ("task", "@task"),
                ("block", "@block"),
                ("worker", "@worker"),
                ("outcome", "@outcome"),
            ]
        )
    )
    return fig


def page_html() -> str:
    """The dashboard page: the tables and the timeline, bokeh inline, and
    the script that polls ``status.json`` (built once per process: it is
    the same for every run)."""
    try:
        import bokeh.embed
        import bokeh.models
        import bokeh.plotting
        import bokeh.resources
    except ImportError:
        raise ImportError(
            "dashboard_port: the dashboard needs bokeh; pip install bokeh (or daisy[report])"
        ) from None
    script, div = bokeh.embed.components(_timeline_figure(bokeh))
    # bokeh's own bundle only (a figure needs no widgets, tables or GL):
    # a third of the size of every bundle inline
    resources = bokeh.resources.Resources(mode="inline", components=["bokeh"]).render()
    head = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in (
            "task",
            "done",
            "failed",
            "orphaned",
            "pending",
            "processing",
            "held back (memory)",
            "total",
            "workers",
            "blocks/s",
            "ETA",
            "utilisation",
        )
    )
    whead = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in ("worker", "task", "block", "age", "last peak RSS", "done", "failed")
    )
    code = _SCRIPT % {
        "poll": POLL_MS,
        "max_bars": MAX_BARS,
        # the one palette's (daisy.report.timeline): the task colours, and
        # the outline of an attempt that did not end done
        "task_colours": json.dumps(list(TASK_COLOURS)),
        "outcome_colours": json.dumps(
            {o: BLOCK_OUTCOMES[o] for o in ("failed", "timed out", "lost")}
        ),
    }
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>daisy: live run</title>
<link rel="icon" href="data:,">
<style>{_STYLE % RUN_OUTCOMES}</style>
{resources}
{script}
</head><body>
<h1>daisy: live run</h1>
<div id="run-state">connecting</div>
<h2>Tasks</h2>
<table><thead><tr>{head}</tr></thead><tbody id="tasks"></tbody></table>
<h2>Timeline</h2>
<div id="timeline-legend"></div>
<div id="timeline-note"></div>
{div}
<h2>Workers</h2>
<table><thead><tr>{whead}</tr></thead><tbody id="workers"></tbody></table>
<div id="workers-note"></div>
<h2>Last failures</h2>
<div id="failures-total"></div>
<ul id="failures"></ul>
<h2>Summary</h2>
<div id="summary">the run is going; its summary shows here when it ends</div>
<script>{code}</script>
</body></html>
"""
