"""Run reports: what every block and every worker of a run cost.

The Rust core builds one JSON object per task when a run ends (see
``daisy-core/src/run_report.rs``), appends it as one line to the task's
``runs.jsonl`` and hands the same JSON to Python, where these classes read
it. The object a run returns and the record it leaves on disk are
therefore the same thing. ``runs.jsonl`` lives in the task's tracking store
when it has one, else under ``<log basedir>/<task_id>/`` next to its worker
logs (written here, when file logging is on).

The classes live in `daisy.report` (``figures``: the sections of a report;
``task_report``: `TaskReport`, `RunReport`; ``history``: where reports
live and reading them back); this module is the one path users name.

In the process that ran the pipeline or any later one::

    t = task.report()          # TaskReport: the last line of runs.jsonl
    t.blocks.round_trip        # Stat: n, mean, std, min, max, total (seconds)
    t.blocks.wall              # the worker's own measurement (resource_tracking)
    t.workers.startup          # Stat over workers
    t.worker(1)                # WorkerRecord
    t.block((1, 2))            # BlockRecord read from the tracking store
    print(t.render())          # the task's section of the panel

``daisy.Server().last_report`` is the whole run's `RunReport`.
"""

from daisy.report.figures import (
    QUEUED_SPAWNERS,
    BlockRecord,
    BlockSummary,
    EtaCheckpoint,
    FailedAttempt,
    FailureCauses,
    JobRecord,
    MemoryReport,
    Stat,
    WorkerRecord,
    WorkerSummary,
)
from daisy.report.history import (
    RESET_KEY,
    RUNS_FILE,
    SCHEMA_FILE,
    read_last_run,
    read_runs,
    report_schema,
    runs_file_for,
)
from daisy.report.task_report import (
    IMPORT_NOTE,
    WARMUP_SHOWN,
    ReportedTask,
    RunReport,
    TaskReport,
    last_report,
)
from daisy.units import format_bytes, format_seconds

__all__ = [
    "IMPORT_NOTE",
    "QUEUED_SPAWNERS",
    "RESET_KEY",
    "RUNS_FILE",
    "SCHEMA_FILE",
    "WARMUP_SHOWN",
    "BlockRecord",
    "BlockSummary",
    "FailedAttempt",
    "FailureCauses",
    "JobRecord",
    "EtaCheckpoint",
    "MemoryReport",
    "ReportedTask",
    "RunReport",
    "Stat",
    "TaskReport",
    "WorkerRecord",
    "WorkerSummary",
    "format_bytes",
    "format_seconds",
    "last_report",
    "read_last_run",
    "read_runs",
    "report_schema",
    "runs_file_for",
]
