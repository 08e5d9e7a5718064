"""Run reports: what every block and every worker of a run cost, as the
core reports it, and every way daisy shows it. A room of its own, one
module per concern:

- `task_report`: `RunReport` and `TaskReport`, read from the core's JSON
  (`daisy.run_report` is the name users import them by);
- `figures`: the summaries inside a task's report (blocks, workers, the
  pooled statistics) and their text panel;
- `history`: the run histories (`runs.jsonl`), read back by the core;
- `stores`: finding the stores and histories under a directory, and reading
  a store's arrays for the figures;
- `timeline`: the phases of a worker's life, the outcomes of a block, and
  the one palette every timeline is drawn in;
- `notebook`: the HTML a Jupyter cell shows (inline SVG, no script);
- `html`: the self-contained HTML report (bokeh);
- `execution_summary`, `failure_notes`: the text a run prints at its end,
  and what it says under a task whose blocks failed.
"""
