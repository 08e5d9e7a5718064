"""Where worker logs go (``daisy.logging`` in daisy 1.x).

Worker logs are written under ``<log basedir>/<task_id>/worker_<id>.out``
and ``.err``, captured at the file-descriptor level (output of C code and
subprocesses included). The base directory is ``./daisy_logs`` unless set
with `set_log_basedir`; ``None`` sends everything to the console. The log
mode (`set_log_mode`) chooses "file" (the default), "console" or "both".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LOG_BASEDIR: Path | None = Path("daisy_logs")
LOG_MODES = ("console", "file", "both")
_log_mode = "file"


def set_log_mode(mode: str) -> None:
    """Where worker output goes: ``"file"`` (the log files, the default),
    ``"console"`` (the driver's terminal) or ``"both"``."""
    global _log_mode
    if mode not in LOG_MODES:
        raise ValueError(f'mode: unknown log mode {mode!r}; use "console", "file" or "both"')
    _log_mode = mode


def get_log_mode() -> str:
    """The current log mode; "console" whenever no base directory is set."""
    return "console" if LOG_BASEDIR is None else _log_mode


def set_log_basedir(path: str | os.PathLike[str] | None) -> None:
    """Set the base directory for worker logs; ``None`` logs to the
    console only."""
    global LOG_BASEDIR
    LOG_BASEDIR = None if path is None else Path(path)


def get_log_basedir() -> Path | None:
    """The base directory for worker logs (None: console only)."""
    return LOG_BASEDIR


def get_worker_log_basename(worker_id: int, task_id: str | None = None) -> Path | None:
    """``<basedir>/<task_id>/worker_<worker_id>`` (without extension), or
    None when logging to the console."""
    if LOG_BASEDIR is None:
        return None
    base = LOG_BASEDIR / task_id if task_id is not None else LOG_BASEDIR
    return base / f"worker_{worker_id}"


def redirect_stdouterr(basename: str | os.PathLike[str], mode: str = "w") -> None:
    """Send this process's stdout and stderr to ``<basename>.out`` and
    ``<basename>.err``, at the file-descriptor level, so output of C
    extensions and subprocesses is captured too."""
    base = Path(basename)
    base.parent.mkdir(parents=True, exist_ok=True)
    for stream, fd, suffix in ((sys.stdout, 1, ".out"), (sys.stderr, 2, ".err")):
        stream.flush()
        with open(str(base) + suffix, mode) as f:
            os.dup2(f.fileno(), fd)
    # line-buffered so a killed worker leaves its last lines behind
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
