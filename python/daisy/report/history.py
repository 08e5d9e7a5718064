"""Where a task's reports live and reading them back: its ``runs.jsonl``
(in its tracking store, else next to its worker logs), read by the core
line by line (a line that is no report skipped, with one warning per file
naming each and why), the reports as `TaskReport` objects.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daisy._daisy import history_file, read_history, read_last_report
from daisy.units import format_bytes as format_bytes
from daisy.units import format_seconds as format_seconds

if TYPE_CHECKING:
    pass
from daisy.report.task_report import ReportedTask, TaskReport

RUNS_FILE = "runs.jsonl"

#: the key of a reset record in ``runs.jsonl`` (``Task.reset()`` writes
#: ``{"reset_at": <epoch seconds>}`` where it keeps the history)
RESET_KEY = "reset_at"


# -- where reports live -------------------------------------------------------


def runs_file_for(task: ReportedTask) -> Path | None:
    """The ``runs.jsonl`` a task's reports go to (the core's rule, which
    its writer follows): in its tracking store, else next to its worker
    logs when file logging is on, else None."""
    from daisy.logging import get_log_basedir, get_log_mode

    base = get_log_basedir()
    path = history_file(
        task.task_id,
        task.tracking_path,
        None if base is None else Path(base).absolute(),
        get_log_mode(),
    )
    return None if path is None else Path(path)


# What a history line must be to be read as a report: the core's published
# JSON Schema of a report line (``report_schema.json``, generated from the
# core's report types by ``daisy-core/src/run_report.rs``, whose test fails
# when the file is stale). It is read here, not restated.

#: the schema's file, shipped in the package
SCHEMA_FILE = Path(__file__).parent.parent / "report_schema.json"


@functools.cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema of one ``runs.jsonl`` line, as the core publishes
    it."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


#: the skipped lines each history file was last warned about, with its size
#: and modification time then: one warning per file, not one per reading
_warned: dict[str, tuple[int, int, list[tuple[int, str]]]] = {}

#: line numbers a warning names for one reason before it counts the rest
_LINES_NAMED = 10


def _warn_skipped(path: Path, skipped: list[tuple[int, str]]) -> None:
    """One warning for every line of ``path`` that is not a report: the
    file, each reason with the numbers of its lines. Said once per file
    for as long as the file stays as it is."""
    try:
        stat = path.stat()
        state = (stat.st_size, stat.st_mtime_ns, skipped)
    except OSError:
        state = (-1, -1, skipped)
    key = str(path.absolute())
    if _warned.get(key) == state:
        return
    _warned[key] = state
    by_reason: dict[str, list[int]] = {}
    for number, reason in skipped:
        by_reason.setdefault(reason, []).append(number)
    parts = []
    for reason, numbers in by_reason.items():
        shown = ", ".join(str(n) for n in numbers[:_LINES_NAMED])
        if len(numbers) > _LINES_NAMED:
            shown += f" and {len(numbers) - _LINES_NAMED} more"
        parts.append(f"{'lines' if len(numbers) > 1 else 'line'} {shown} ({reason})")
    what = (
        "line that is not a run report" if len(skipped) == 1 else "lines that are not run reports"
    )
    logging.getLogger(__name__).warning(
        "daisy: %s: skipped %d %s: %s", path, len(skipped), what, "; ".join(parts)
    )


def _report_lines(path: Path) -> list[TaskReport]:
    """Every report of a ``runs.jsonl``, oldest first; a report that follows
    a reset record has ``after_reset`` set. The core reads the file and
    decodes each line by the report's own types (``read_history``): a line
    that is no report (cut short by a full disk or a killed writer, or
    valid JSON that is not a report: another program's, a hand edit) is
    skipped, and one warning names every such line and why: one odd line
    must not cost the rest of the history."""
    reports, skipped = read_history(path)
    out: list[TaskReport] = []
    for _number, after_reset, text in reports:
        report = TaskReport.from_dict(json.loads(text))
        report.after_reset = after_reset
        out.append(report)
    if skipped:
        _warn_skipped(path, skipped)
    return out


def read_last_run(path: str | os.PathLike[str]) -> TaskReport | None:
    """The last report of a ``runs.jsonl``, or None: read from the end of
    the file by the core, so as fast on a history of years as on one run
    (``after_reset`` is not set: `read_runs` knows what came before)."""
    text = read_last_report(Path(path))
    return None if text is None else TaskReport.from_dict(json.loads(text))


def read_runs(path: str | os.PathLike[str]) -> list[TaskReport]:
    """Every report of a ``runs.jsonl``, oldest first. Reset records (which
    ``Task.reset()`` leaves where it keeps the history) are not reports:
    the report after one has ``after_reset`` set. Any other line that is
    not a report the core wrote (damaged, not JSON, or JSON of another
    shape) is skipped, and one warning names the file, those lines and
    why."""
    return _report_lines(Path(path))
