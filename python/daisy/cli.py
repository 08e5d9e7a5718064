"""The ``daisy`` command line: look at runs without writing code.

``daisy report PATH`` prints the Resource Utilization panel of the last run
(or of ``--run N``) of every task found at PATH: a tracking store, a
tracking base directory (every store in it), or a ``runs.jsonl``.
``--format json|csv`` prints the per-task summary table instead, for
scripts and spreadsheets; ``--html out.html`` writes a self-contained HTML
performance report (see `daisy.report.html`).

``daisy compare PATH`` sets each task's last run against the median of the
runs before it and flags every figure that got worse by more than a
factor; it exits with status 1 when something is flagged, so it can gate a
nightly pipeline.

``daisy status PATH`` says where each tracking store at PATH stands: its
blocks done of its total and left, failed blocks not done, how its last
recorded run ended, and whether a run holds it now.

``daisy forecast PATH`` forecasts the next run of each task at PATH from
its store's history alone (see `daisy.forecast`): how long, the block time
and memory percentiles, the workers that fit this node.

Also available as ``python -m daisy``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from daisy._daisy import __version__, compare_to_baseline, store_status, store_wall_percentiles
from daisy.report.history import RUNS_FILE, read_last_run, read_runs
from daisy.report.stores import find_runs_files, find_stores, store_of
from daisy.report.task_report import TaskReport

#: per-task summary columns of ``daisy report --format json|csv``
SUMMARY_COLUMNS = [
    "task_id",
    "run",
    "outcome",
    "blocks",
    "skipped",
    "failures",
    "elapsed_s",
    "span_s",
    "wall_total_s",
    "wall_p50_s",
    "wall_p95_s",
    "cpu_total_s",
    "peak_rss_max_bytes",
    "io_read_bytes",
    "io_write_bytes",
    "gpu_util_mean_pct",
    "gpu_mem_max_bytes",
    "workers",
    "utilisation",
    "top_failure",
]


def wall_percentiles(store: Path) -> tuple[float | None, float | None]:
    """p50 and p95 of the recorded per-block wall times of a store (the
    stamps of the runs that executed each block): the core's."""
    p = store_wall_percentiles(store, [50.0, 95.0])
    return (None, None) if p is None else (p[0], p[1])


def summary_row(report: TaskReport, run: int, store: Path | None) -> dict[str, Any]:
    """One row of the per-task summary table."""
    b = report.blocks
    # the store's wall times belong to the runs that executed the blocks: a
    # run that measured nothing (fully resumed) shows no percentiles either
    measured = store is not None and bool(b.wall)
    p50, p95 = wall_percentiles(store) if measured and store is not None else (None, None)
    return {
        "task_id": report.task_id,
        "run": run,
        "outcome": report.outcome,
        "blocks": b.count,
        "skipped": b.skipped,
        "failures": b.failures,
        "elapsed_s": report.elapsed,
        "span_s": report.span,
        "wall_total_s": b.wall.total if b.wall else None,
        "wall_p50_s": p50,
        "wall_p95_s": p95,
        "cpu_total_s": b.cpu.total if b.cpu else None,
        "peak_rss_max_bytes": int(b.peak_rss.max) if b.peak_rss else None,
        "io_read_bytes": int(b.io_read.total) if b.io_read else None,
        "io_write_bytes": int(b.io_write.total) if b.io_write else None,
        "gpu_util_mean_pct": b.gpu_util.mean if b.gpu_util else None,
        "gpu_mem_max_bytes": int(b.gpu_mem.max) if b.gpu_mem else None,
        "workers": report.workers.count,
        "utilisation": report.utilisation,
        "top_failure": _top_failure(report),
    }


def _top_failure(report: TaskReport) -> str | None:
    """The most frequent failure cause of a run, with its count and an
    example message (the panel's first line)."""
    lines = report.failure_causes.render(indent="", limit=1)
    return lines[0] if lines and not lines[0].startswith("…") else None


class CliError(Exception):
    """A mistake in how the command was called or what it was pointed at:
    printed as one line on stderr, exit status 2."""


def _runs_files(path: str) -> list[Path]:
    """The run histories at `path` (a file, or a directory searched
    below), or a CliError saying there are none."""
    files = find_runs_files(Path(path))
    if not files:
        raise CliError(f"no {RUNS_FILE} at {path}")
    return files


#: what ``daisy report --html`` says, alone on stderr, where bokeh is missing
NEEDS_BOKEH = 'the HTML report needs bokeh: pip install "daisy[report]"'


def _has_bokeh() -> bool:
    """Whether bokeh (the ``daisy[report]`` extra) can be imported."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def _select(runs: list[TaskReport], run: int | None, where: Path) -> tuple[int, TaskReport]:
    if not runs:
        raise CliError(f"{where} has no runs yet")
    index = len(runs) - 1 if run is None else run
    if index < 0:
        index += len(runs)
    if not 0 <= index < len(runs):
        raise CliError(f"{where} has runs 0..{len(runs) - 1}; --run {run} is not one")
    return index, runs[index]


def _processed_blocks(report: TaskReport) -> bool:
    """Whether a run processed any block (a fully resumed run skipped them
    all and measured nothing)."""
    return report.blocks.count > report.blocks.skipped


def _check_option(ok: bool, option: str, value: object, give: str) -> None:
    """Refuse `option`'s `value` unless `ok`, in one line that says what to
    give instead."""
    if not ok:
        raise CliError(f"{option} {value}: give {give}")


def report_command(args: argparse.Namespace) -> int:
    """``daisy report``."""
    if args.html and not _has_bokeh():
        print(NEEDS_BOKEH, file=sys.stderr)
        return 2
    _check_option(
        args.max_workers >= 0,
        "--max-workers",
        args.max_workers,
        "the worker rows to show, 0 or more",
    )
    files = _runs_files(args.path)
    rows, sections = [], []
    for f in files:
        runs = read_runs(f)
        index, report = _select(runs, args.run, f)
        rows.append(summary_row(report, index, store_of(f)))
        section = report.render(max_workers=args.max_workers)
        if args.run is None and report.blocks.count and not _processed_blocks(report):
            worked = [i for i, r in enumerate(runs) if _processed_blocks(r)]
            if worked:
                section += (
                    f"\n    every block was skipped: --run {worked[-1]} is the last run that "
                    "processed blocks"
                )
        standing = _standing(store_of(f), report)
        if standing:
            head, _, rest = section.partition("\n")
            section = f"{head}\n    {standing}" + (f"\n{rest}" if rest else "")
        first = report.failure_causes.first_traceback
        if first:
            body = "\n".join("      " + line for line in first.splitlines())
            section += f"\n    first failure:\n{body}"
        sections.append(section)
    if args.html:
        from daisy.report.html import write_html_report

        try:
            written = write_html_report([Path(args.path)], Path(args.html), run=args.run)
        except OSError as e:
            raise CliError(
                f"--html: could not write {args.html}: {e.strerror or e}; give a path in a "
                "directory you can write to"
            ) from e
        print(f"daisy: wrote {written}")
        return 0
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    elif args.format == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=SUMMARY_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        print(out.getvalue(), end="")
    else:
        print("Resource Utilization\n--------------------")
        for section in sections:
            print()
            print(section)
    return 0


def _standing(store: Path | None, report: TaskReport) -> str | None:
    """For the panel's header: where the task's store stands now, when
    its blocks are not all done or the run did not complete (an
    interrupted run says so, with what is left)."""
    if store is None:
        return None
    try:
        s = store_status(store)
    except (OSError, RuntimeError):
        return None
    if s.total is None or (s.done == s.total and report.outcome == "completed"):
        return None
    return f"{report.outcome}; the store now: {_done_of(s.done, s.total)}"


def _done_of(done: int, total: int | None) -> str:
    """'7 of 64 blocks done, 57 left'."""
    if total is None:
        return f"{done} blocks done"
    return f"{done} of {total} blocks done, {total - done} left"


def status_rows(path: Path) -> list[dict[str, Any]]:
    """One row per tracking store at ``path`` (see `find_stores`): where it
    stands (the core's `store_status`) and how its last recorded run
    ended."""
    rows = []
    for store in find_stores(path):
        try:
            s = store_status(store)
        except (OSError, RuntimeError):
            continue  # a directory with a zarr.json that is no daisy store
        last = read_last_run(store / RUNS_FILE)
        rows.append(
            {
                "store": str(store),
                "task_id": s.task_id or store.name,
                "total": s.total,
                "done": s.done,
                "left": None if s.total is None else s.total - s.done,
                "failed": s.failed,
                "last_run": None if last is None else last.outcome,
                "last_run_finished_at": None if last is None else last.finished_at,
                "last_run_forecast_sample": last is not None and last.forecast_sample,
                "held_by": s.held_by,
            }
        )
    return rows


def status_command(args: argparse.Namespace) -> int:
    """``daisy status``."""
    path = Path(args.path)
    rows = status_rows(path)
    if not rows:
        raise CliError(f"no tracking store at {args.path}")
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    import datetime

    for r in rows:
        if r["last_run"] is None:
            last = "no run recorded (a run still going, or one killed before its end)"
        else:
            when = datetime.datetime.fromtimestamp(r["last_run_finished_at"])
            what = "a forecast's sample" if r["last_run_forecast_sample"] else "run"
            last = f"last {what} {r['last_run']} at {when:%Y-%m-%d %H:%M:%S}"
        now = f"held now by {r['held_by']}" if r["held_by"] else "no run holds it now"
        failed = f", {r['failed']} failed" if r["failed"] else ""
        print(f"{r['task_id']}: {_done_of(r['done'], r['total'])}{failed}; {last}; {now}")
        print(f"    {r['store']}")
    return 0


def _processed(report: TaskReport) -> int:
    """The blocks a run processed (its skips left out)."""
    return report.blocks.count - report.blocks.skipped


def _per_block(total: float | None, report: TaskReport) -> float | None:
    """A run's total per block it processed."""
    n = _processed(report)
    return None if total is None or n <= 0 else total / n


#: what ``daisy compare`` checks, and how to read each figure off a report:
#: figures per block, set against every earlier run that processed blocks
PER_BLOCK: dict[str, Callable[[TaskReport], float | None]] = {
    "span_per_block_s": lambda r: _per_block(r.span, r),
    "wall_mean_s": lambda r: r.blocks.wall.mean if r.blocks.wall else None,
    "cpu_mean_s": lambda r: r.blocks.cpu.mean if r.blocks.cpu else None,
    "peak_rss_max_bytes": lambda r: r.blocks.peak_rss.max if r.blocks.peak_rss else None,
    "round_trip_mean_s": lambda r: r.blocks.round_trip.mean if r.blocks.round_trip else None,
    "failures_per_block": lambda r: _per_block(float(r.blocks.failures), r),
}

#: totals, set only against earlier runs that processed as many blocks
TOTALS: dict[str, Callable[[TaskReport], float | None]] = {
    "span_s": lambda r: r.span,
    "wall_total_s": lambda r: r.blocks.wall.total if r.blocks.wall else None,
    "cpu_total_s": lambda r: r.blocks.cpu.total if r.blocks.cpu else None,
    "failures": lambda r: r.blocks.failures,
}


def _mixes(
    store: Path | None, last: TaskReport, previous: Sequence[TaskReport]
) -> list[tuple[int, float, float]] | None:
    """For each run of ``previous``, the blocks it and ``last`` both did,
    from the store's per-block figures (the core's ``common_blocks``):
    ``(count, last's wall seconds summed, its own)``; None without a store
    or per-block figures."""
    if store is None:
        return None
    from daisy._daisy import common_blocks

    out = []
    for r in previous:
        found = common_blocks(
            str(store), (last.started_at, last.finished_at), (r.started_at, r.finished_at)
        )
        if found is None:
            return None
        out.append(found)
    return out


def _same_blocks(
    last: TaskReport, previous: Sequence[TaskReport], mixes: list[tuple[int, float, float]] | None
) -> list[TaskReport]:
    """The runs of ``previous`` that did the same blocks as ``last`` (every
    block of each is one of the other's); without per-block figures, those
    that did as many."""
    if mixes is None:
        return [r for r in previous if _processed(r) == _processed(last)]
    return [
        r
        for r, (n, _, _) in zip(previous, mixes, strict=True)
        if n == _processed(last) == _processed(r)
    ]


def compare_runs(
    runs: Sequence[TaskReport], history: int, factor: float, store: Path | None = None
) -> list[dict[str, Any]]:
    """The last run against the median of up to ``history`` runs before it:
    one row per figure, flagged when it grew by more than ``factor``
    (failures: when they appear where the median had none, or grow by
    more than ``factor``). Runs that skipped every block are left out of
    the baseline: their figures say nothing about the work. With the
    store's per-block figures (``store``), like is compared with like:
    figures per block and totals only against runs that did the same
    blocks, and a run of another mix of blocks (a partial rerun of the
    costliest) against the latest run before it on the blocks both did
    (``wall_common_blocks_s``, with their count), never on its mean over
    other blocks. Without them, figures per block are set against every
    such run and totals against runs that processed as many blocks (see
    `not_comparable`)."""
    # a forecast's sample is no run of the task: neither the last nor a baseline
    runs = [r for r in runs if not r.forecast_sample]
    if len(runs) < 2:
        return []
    last = runs[-1]
    previous = [r for r in runs[:-1] if _processed_blocks(r)][-history:]
    # whether a Task.reset() lies between the oldest run compared and the last
    window = runs[runs.index(previous[0]) + 1 :] if previous else []
    reset_between = any(r.after_reset for r in window)
    mixes = _mixes(store, last, previous)
    alike = _same_blocks(last, previous, mixes)
    per_block = previous if mixes is None else alike
    rows = []
    for figures, baseline in ((PER_BLOCK, per_block), (TOTALS, alike)):
        for name, read in figures.items():
            now = read(last)
            before = [v for v in (read(r) for r in baseline) if v is not None]
            if now is None or not before:
                continue
            zero_is_normal = name.startswith("failures")
            compared = compare_to_baseline(now, before, factor, zero_is_normal=zero_is_normal)
            if compared is None:
                continue
            median, ratio, flagged = compared
            rows.append(
                {
                    "task_id": last.task_id,
                    "figure": name,
                    "last": now,
                    "median": median,
                    "runs": len(before),
                    "ratio": ratio,
                    "flagged": flagged,
                    "reset_between": reset_between,
                    "blocks": _processed(last),
                }
            )
    if mixes is not None:
        other = [
            (n, mine, theirs)
            for r, (n, mine, theirs) in zip(previous, mixes, strict=True)
            if r not in alike and n > 0
        ]
        if other:
            n, mine, theirs = other[-1]
            compared = compare_to_baseline(mine / n, [theirs / n], factor, zero_is_normal=False)
            if compared is not None:
                median, ratio, flagged = compared
                rows.append(
                    {
                        "task_id": last.task_id,
                        "figure": "wall_common_blocks_s",
                        "last": mine / n,
                        "median": median,
                        "runs": 1,
                        "ratio": ratio,
                        "flagged": flagged,
                        "reset_between": reset_between,
                        "blocks": n,
                    }
                )
    return rows


def not_comparable(
    runs: Sequence[TaskReport], history: int, store: Path | None = None
) -> str | None:
    """Why the last run's figures were not all compared (it did other
    blocks than every run before it), or None."""
    runs = [r for r in runs if not r.forecast_sample]
    if len(runs) < 2:
        return None
    last = runs[-1]
    previous = [r for r in runs[:-1] if _processed_blocks(r)][-history:]
    if not previous:
        return None
    mixes = _mixes(store, last, previous)
    if _same_blocks(last, previous, mixes):
        return None
    if mixes is None:
        counts = sorted({_processed(r) for r in previous})
        before = " or ".join(str(n) for n in counts)
        return (
            f"{last.task_id}: the last run processed {_processed(last)} blocks, the runs before "
            f"it {before}: its totals are not compared, only its figures per block"
        )
    shared = [n for n, _, _ in mixes if n > 0]
    if not shared:
        return (
            f"{last.task_id}: the last run did {_processed(last)} blocks, none of them done by "
            "the runs before it (or their figures are gone): it cannot be compared"
        )
    n, mine, theirs = [m for m in mixes if m[0] > 0][-1]
    return (
        f"{last.task_id}: the last run did {_processed(last)} blocks, another mix than the runs "
        f"before it: compared on {n} common block{'s' if n != 1 else ''}: "
        f"{mine / theirs if theirs else float('nan'):.2f}x"
    )


def compare_command(args: argparse.Namespace) -> int:
    """``daisy compare``."""
    _check_option(
        args.history >= 1,
        "--history",
        args.history,
        "how many earlier runs to compare with (1 or more)",
    )
    _check_option(
        args.factor > 0, "--factor", args.factor, "the growth to flag, a number above 0 (e.g. 2)"
    )
    files = _runs_files(args.path)
    rows, notes = [], []
    for f in files:
        runs = read_runs(f)
        store = f.parent if f.name == RUNS_FILE and (f.parent / "zarr.json").is_file() else None
        rows += compare_runs(runs, args.history, args.factor, store)
        note = not_comparable(runs, args.history, store)
        if note:
            notes.append(note)
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'task':<20} {'figure':<20} {'last':>12} {'median':>12} {'ratio':>7}")
        for r in rows:
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
            mark = "  ✗ worse" if r["flagged"] else ""
            print(
                f"{r['task_id']:<20} {r['figure']:<20} {r['last']:>12.4g} {r['median']:>12.4g} "
                f"{ratio:>7}{mark}"
            )
        for note in notes:
            print(f"({note})")
        reset_tasks = sorted({r["task_id"] for r in rows if r["reset_between"]})
        for tid in reset_tasks:
            print(f"({tid}: reset between the runs compared)")
        if not rows:
            print("nothing to compare yet: every task needs at least two runs")
    return 1 if any(r["flagged"] for r in rows) else 0


def forecast_command(args: argparse.Namespace) -> int:
    """``daisy forecast``."""
    from daisy._daisy import forecast_store
    from daisy.run_forecast import Forecast

    if args.workers is not None:
        _check_option(args.workers >= 1, "--workers", args.workers, "workers, 1 or more")
    stores = find_stores(Path(args.path))
    if not stores:
        raise CliError(f"no tracking store at {args.path}")
    out = []
    for store in stores:
        try:
            figures = json.loads(forecast_store(str(store), args.workers))
        except (RuntimeError, ValueError) as e:
            raise CliError(f"{store}: {e}") from None
        out.append(Forecast(figures, {}))
    if args.format == "json":
        print(json.dumps([fc.to_dict() for fc in out], indent=2))
        return 0
    for store, fc in zip(stores, out, strict=True):
        print(store)
        print(fc)
    return 0


# The --help texts: plain text, no reST markup (argparse shows them as
# written); every option's help gives its default.
_DESCRIPTION = "The daisy command line: look at runs without writing code."

_REPORT_DESCRIPTION = (
    "Print the Resource Utilization panel of the last run (or of --run N) of every task "
    "found at PATH; --format json|csv prints the per-task summary table instead, and "
    "--html writes a self-contained HTML performance report (it needs bokeh, the "
    "daisy[report] extra)."
)

_COMPARE_DESCRIPTION = (
    "Set each task's last run against the median of up to --history runs before it "
    "(runs that skipped every block left out) and flag every figure that grew by more "
    "than --factor, and failed attempts that appear where the median had none. Figures "
    "per block (span, wall and CPU time, peak memory, round trip, failures) and totals "
    "are set against the runs that did the same blocks (from the store's per-block "
    "figures; without them, figures per block against every such run and totals against "
    "runs that did as many blocks); a run of another mix of blocks (a partial rerun) is "
    "set against the run before it on the blocks both did, and says how many. Exits "
    "with status 1 when it finds a regression (a flagged figure), 0 when it finds "
    "none or has fewer than two runs to compare, 2 when there is no runs.jsonl at PATH."
)

_STATUS_DESCRIPTION = (
    "Say where each tracking store at PATH stands: its blocks done of its total and how "
    "many are left, failed blocks not done, how its last recorded run ended, and whether "
    "a run holds it now (read from this machine's lock table: a run on another host "
    "shows only while this machine sees its lock). Reads only; safe while a run writes."
)

_FORECAST_DESCRIPTION = (
    "Forecast the next run of each task at PATH from its tracking store's history alone "
    "(the blocks earlier runs measured with resource tracking): how long the blocks not "
    "done take (all of them when every block is done: the run after a reset), block time "
    "and peak memory percentiles, and the workers that fit this node. daisy.forecast() in "
    "Python also runs a sample of new blocks. Reads only."
)

_PATH_HELP = "a tracking store, a tracking base directory or a runs.jsonl"

_RUN_HELP = (
    "which run of each task: runs are numbered in the order they ran, 0 is the first; "
    "negative numbers count back from the last, -1 the last, -2 the one before "
    "(default: the last run)"
)


def _parser() -> argparse.ArgumentParser:
    """The ``daisy`` command's parser: one subcommand per job, each with its
    one positional PATH."""
    parser = argparse.ArgumentParser(
        prog="daisy",
        description=_DESCRIPTION,
        epilog="daisy COMMAND --help tells more about each command. "
        "Also available as python -m daisy.",
    )
    parser.add_argument("--version", action="version", version=f"daisy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    commands: list[tuple[str, str, str, str, Callable[[Any], None]]] = [
        (
            "report",
            "print the Resource Utilization panel of a run",
            _REPORT_DESCRIPTION,
            _PATH_HELP,
            _report_options,
        ),
        (
            "compare",
            "flag figures of the last run that got worse; exit status 1 if any",
            _COMPARE_DESCRIPTION,
            _PATH_HELP,
            _compare_options,
        ),
        (
            "status",
            "where each tracking store stands: done of total, left, last run, held now",
            _STATUS_DESCRIPTION,
            "a tracking store or a tracking base directory",
            _status_options,
        ),
        (
            "forecast",
            "forecast the next run of each task from its store's history",
            _FORECAST_DESCRIPTION,
            "a tracking store or a tracking base directory",
            _forecast_options,
        ),
    ]
    for name, help, description, path_help, add_options in commands:
        cmd = sub.add_parser(name, help=help, description=description)
        cmd.add_argument("path", help=path_help)
        add_options(cmd)
    return parser


def _add_format_option(cmd: Any, choices: list[str], help: str = "output format") -> None:
    """Add ``--format``, one of `choices`, the first the default."""
    cmd.add_argument(
        "--format",
        choices=choices,
        default=choices[0],
        help=f"{help} (default: %(default)s)",
    )


def _report_options(rep: Any) -> None:
    """``daisy report``'s options: the panel, a table or the HTML report of
    a run."""
    rep.add_argument("--run", type=int, default=None, help=_RUN_HELP)
    _add_format_option(
        rep,
        ["panel", "json", "csv"],
        "output format: the panel, or the per-task summary table as json or csv",
    )
    rep.add_argument(
        "--max-workers",
        type=int,
        default=10,
        help="rows of the worker table of the panel (default: %(default)s)",
    )
    rep.add_argument(
        "--html",
        metavar="OUT",
        help="write a self-contained HTML report to the file OUT instead of printing the "
        "panel or the table (default: none)",
    )
    rep.set_defaults(func=report_command)


def _compare_options(cmp_: Any) -> None:
    """``daisy compare``'s options: the last run against the runs before
    it."""
    cmp_.add_argument(
        "--history",
        type=int,
        default=7,
        help="how many runs before the last make the median (default: %(default)s)",
    )
    cmp_.add_argument(
        "--factor",
        type=float,
        default=2.0,
        help="flag a figure that grew by more than this factor over the median "
        "(default: %(default)s)",
    )
    _add_format_option(cmp_, ["table", "json"])
    cmp_.set_defaults(func=compare_command)


def _status_options(st: Any) -> None:
    """``daisy status``'s options: where each tracking store stands."""
    _add_format_option(st, ["text", "json"])
    st.set_defaults(func=status_command)


def _forecast_options(fc: Any) -> None:
    """``daisy forecast``'s options: the workers to forecast with."""
    fc.add_argument(
        "--workers",
        type=int,
        default=None,
        help="workers to forecast with (default: as many as the last run started, else 1)",
    )
    _add_format_option(fc, ["table", "json"])
    fc.set_defaults(func=forecast_command)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``daisy`` command."""
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as e:
        print(f"daisy: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # a store or a history this user cannot read (another user's runs.jsonl,
        # mode 0600), a path that went away: said with the path, exit 2, never
        # a traceback, and never 1 (which `compare` means as "regression")
        where = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
        print(f"daisy: cannot read {where}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`daisy report ... | head -1`): stop quietly,
        # and keep Python from failing again on flushing stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
