"""Where worker logs go, and how block failures are written (``daisy.logging``
in daisy 1.x and 2.0).

Worker logs are written under ``<log basedir>/<task_id>/worker_<id>.out``
and ``.err``, captured at the file-descriptor level (output of C code and
subprocesses included). The base directory is ``./daisy_logs`` unless set
with `set_log_basedir`; ``None`` sends everything to the console. The log
mode (`set_log_mode`) chooses "file" (the default), "console" or "both".

As in daisy 2.0: `set_log_level` sets the level of the ``"daisy"`` logger
(`logger`) that daisy's own messages go through; `set_traceback_style`
chooses how `format_traceback` renders a failed block's exception
("plain", or "rich" with the ``rich`` package); `emit_failure` writes a
failure message where the log mode sends worker errors; `clear_logs`
deletes old logs. Inside a worker process `current_slot_files` gives the
worker's own log files, and `close_all_log_files` closes them.
"""

from __future__ import annotations

import importlib
import io
import json
import logging as _logging
import os
import re
import shutil
import sys
import threading
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

#: the ``"daisy"`` logger: daisy's own messages (and the Rust core's) go here
logger = _logging.getLogger("daisy")

LOG_BASEDIR: Path | None = Path("daisy_logs")
LOG_MODES = ("console", "file", "both")
_log_mode = "file"

#: the styles `set_traceback_style` takes
TRACEBACK_STYLES = ("plain", "rich")
_traceback_style = "plain"
_traceback_show_locals = False
_traceback_width = 100
_traceback_extra_lines = 2
# rich's renderer and linecache are not safe to drive from several threads
_traceback_lock = threading.Lock()
_DAISY_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the pseudo file name IPython gives a notebook cell's code
_IPYTHON_CELL = re.compile(r"<ipython-input-(\d+)-[0-9a-f]+>")

_slot_lock = threading.Lock()
_slot_files: tuple[TextIO, TextIO] | None = None


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


def writable_log_dir(path: Path | None) -> Path | None:
    """``path`` when worker logs can be written there, else a fresh private
    temporary directory, with a warning naming both: a driver started in a
    read-only directory (the default base is ``./daisy_logs``) runs on
    instead of losing its task. Nothing is made or written here (the core
    makes the directory, private); the nearest existing directory on the
    way is asked (``access(2)``, which answers "read-only file system" to
    root too). None stays None (console only)."""
    if path is None:
        return None
    where = path.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    if os.access(where, os.W_OK | os.X_OK):
        return path
    import errno
    import tempfile

    why = "Read-only file system" if _read_only(where) else os.strerror(errno.EACCES)
    fallback = Path(tempfile.mkdtemp(prefix="daisy-logs-"))
    _logging.getLogger(__name__).warning(
        "daisy: worker logs cannot be written to %s (%s); writing them to %s instead "
        "(daisy.logging.set_log_basedir(...) sets where they go)",
        path.absolute(),
        why,
        fallback,
    )
    return fallback


def _read_only(path: Path) -> bool:
    """Whether ``path`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


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


def set_log_level(level: int | str) -> None:
    """Set the minimum level of the ``"daisy"`` logger (`logger`): a
    ``logging`` level such as ``logging.INFO`` or its name (``"INFO"``), as
    `logging.Logger.setLevel` takes them (it raises for anything else)."""
    logger.setLevel(level)


def get_log_level() -> int:
    """The level set on the ``"daisy"`` logger (0, ``logging.NOTSET``, until
    `set_log_level` or the application sets one)."""
    return logger.level


def set_traceback_style(
    style: str, *, show_locals: bool = False, width: int = 100, extra_lines: int = 2
) -> None:
    """Choose how `format_traceback` renders a block failure's exception.

    ``"plain"`` (the default) is Python's own traceback text, which any
    tool can grep. ``"rich"`` is ``rich.traceback``'s rendering, with
    source context and ANSI colour, and needs the ``rich`` package;
    ``show_locals`` (the local variables of each frame), ``width`` and
    ``extra_lines`` (source lines around each frame's line) apply to it
    only."""
    global _traceback_style, _traceback_show_locals, _traceback_width, _traceback_extra_lines
    if style not in TRACEBACK_STYLES:
        raise ValueError(f"style must be 'plain' or 'rich', got {style!r}")
    show, w, extra = bool(show_locals), int(width), int(extra_lines)
    if style == "rich":
        try:
            importlib.import_module("rich.traceback")
        except ImportError:
            raise ImportError(
                "set_traceback_style('rich') requires the `rich` package. "
                "Install it with `pip install rich`."
            ) from None
    _traceback_style = style
    _traceback_show_locals, _traceback_width, _traceback_extra_lines = show, w, extra


def get_traceback_style() -> str:
    """The traceback style `format_traceback` uses: "plain" or "rich"."""
    return _traceback_style


def format_traceback(
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> str:
    """An exception and its traceback as text, in the style chosen with
    `set_traceback_style`. The leading frames that are daisy's own are
    left out, so the trace starts in the user's code, and IPython's
    notebook-cell file names (``<ipython-input-3-...>``) read ``[notebook
    cell 3]``. Never raises: if rendering fails, the exception's repr and
    why."""
    with _traceback_lock:
        try:
            while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_DAISY_DIR):
                tb = tb.tb_next
            if _traceback_style == "rich":
                return _format_rich(exc_type, exc, tb)
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            return _IPYTHON_CELL.sub(r"[notebook cell \1]", text)
        except Exception as e:
            name = getattr(exc_type, "__name__", None) or "Exception"
            try:
                shown = repr(exc)
            except Exception:
                shown = object.__repr__(exc)
            return f"{name}: {shown}\n(daisy failed to format the traceback: {e!r})\n"


def _format_rich(
    exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
) -> str:
    console = importlib.import_module("rich.console")
    rich_traceback = importlib.import_module("rich.traceback")
    buffer = io.StringIO()
    # colour whatever TERM says: the text goes to log files and terminals alike
    out = console.Console(
        file=buffer, force_terminal=True, color_system="standard", width=_traceback_width
    )
    out.print(
        rich_traceback.Traceback.from_exception(
            exc_type,
            exc,
            tb,
            show_locals=_traceback_show_locals,
            extra_lines=_traceback_extra_lines,
        )
    )
    return buffer.getvalue()


def clear_logs(task_id: str | None = None) -> Path | None:
    """Delete the worker logs of one task (its directory under the log base
    directory) or, without ``task_id``, the whole base directory, so a run
    starts from empty files instead of appending to old ones. A symlink or
    a file in that place is left alone. Returns the path cleared (which may
    not have existed), or None when there is no base directory."""
    if LOG_BASEDIR is None:
        return None
    target = LOG_BASEDIR / task_id if task_id is not None else LOG_BASEDIR
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    return target


def _worker_context() -> dict[str, Any] | None:
    """This process's ``DAISY_CONTEXT`` when a daisy server started it as a
    worker (it names a task and a worker id), else None. Our server writes
    it as JSON; read here without `daisy.Context`, whose module reads this
    one's base directory."""
    raw = os.environ.get("DAISY_CONTEXT")
    if not raw:
        return None
    try:
        values = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(values, dict):
        return None
    if values.get("task_id") is None or values.get("worker_id") is None:
        return None
    return values


def current_slot_files() -> tuple[TextIO, TextIO] | None:
    """The ``(out, err)`` log files of this worker, opened for appending
    (line-buffered), so a process the worker starts can be handed them; None
    outside a worker process, without a log directory, or when the server
    writes no log files for the worker (log mode "console"). Stay open until
    `close_all_log_files`."""
    global _slot_files
    with _slot_lock:
        if _slot_files is not None and not any(f.closed for f in _slot_files):
            return _slot_files
        context = _worker_context()
        if context is None:
            return None
        log_dir = context.get("logdir") or context.get("log_dir")
        if not log_dir:
            return None
        base = Path(log_dir) / str(context["task_id"]) / f"worker_{context['worker_id']}"
        paths = [Path(f"{base}.out"), Path(f"{base}.err")]
        if not all(p.is_file() for p in paths):
            return None
        out, err = (open(p, "a", buffering=1, encoding="utf-8") for p in paths)  # noqa: SIM115
        _slot_files = (out, err)
        return _slot_files


def close_all_log_files() -> None:
    """Close the log files `current_slot_files` opened (a no-op when none
    are open)."""
    global _slot_files
    with _slot_lock:
        files, _slot_files = _slot_files, None
    for f in files or ():
        f.close()


def emit_failure(message: str) -> None:
    """Write a complete failure message (such as ``"block ... failed:\\n"``
    and its traceback) where worker errors go, ending it with a newline.

    In a worker process that is its stderr, which the server sends to the
    worker's ``.err`` file, the console, or both, as the log mode says.
    Elsewhere it is the console's stderr (``sys.__stderr__``, whatever
    replaced ``sys.stderr``) in modes "console" and "both", and nowhere in
    mode "file"."""
    if not message.endswith("\n"):
        message += "\n"
    if _worker_context() is None and get_log_mode() == "file":
        return
    stream = sys.__stderr__
    if stream is None:
        return
    stream.write(message)
    stream.flush()
