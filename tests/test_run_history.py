"""The run history (``runs.jsonl``) has one writer, the core: a task's line
goes to its tracking store, else next to its worker logs, and Python never
serialises a report for storage.

Where a line cannot be written the run still ends as it would, and the
core says which file it could not append to (Python used to drop the
``OSError`` without a word, so a history silently stopped growing)."""

from __future__ import annotations

import json
import logging

import pytest
from conftest import line_task

import daisy
import daisy.run_report as run_report


def _noop(block):
    pass


@pytest.mark.parametrize("mp", [False, True])
def test_the_line_next_to_the_logs_is_the_cores_report(log_dir, mp):
    task = line_task("u", 3, process_function=_noop)
    assert daisy.run_blockwise([task], multiprocessing=mp, progress=False, summary=False)
    lines = (log_dir / "u" / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["task_id"] == "u" and line["blocks"]["count"] == 3
    assert line["tracked"] is False
    # what readers find is where the core's rule puts it
    assert run_report.runs_file_for(task) == log_dir / "u" / "runs.jsonl"


def test_python_has_no_report_writer():
    assert not hasattr(run_report, "append_run")
    assert not hasattr(daisy._daisy, "append_runs_line")


def test_a_history_that_cannot_be_written_is_named_and_the_run_still_succeeds(log_dir, caplog):
    # the task's log directory is a file: its runs.jsonl cannot be made
    (log_dir / "blocked").write_text("not a directory")
    task = line_task("blocked", 2, process_function=_noop)
    with caplog.at_level(logging.WARNING, logger="daisy"):
        assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    warned = [r.getMessage() for r in caplog.records if "runs.jsonl" in r.getMessage()]
    assert warned and str(log_dir / "blocked" / "runs.jsonl") in warned[0], warned


def test_a_stopped_run_leaves_its_line(log_dir):
    def boom(block):
        raise KeyboardInterrupt

    task = line_task("stopped", 3, process_function=boom)
    with pytest.raises(KeyboardInterrupt):
        daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    lines = (log_dir / "stopped" / "runs.jsonl").read_text().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["outcome"] == "interrupted"


def test_console_logging_keeps_no_history(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    daisy.logging.set_log_basedir(None)
    task = line_task("quiet", 2, process_function=_noop)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    assert run_report.runs_file_for(task) is None
    assert not list(tmp_path.rglob("runs.jsonl"))
