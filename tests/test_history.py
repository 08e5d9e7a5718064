"""What a task's run history keeps: it survives ``Task.reset()`` (the
moment a user wants to compare), it says why blocks failed, and ``daisy
compare`` judges each task by its own span, not the whole run's."""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

import pytest
from conftest import line_task

import daisy
from daisy.cli import compare_runs, main
from daisy.run_report import RESET_KEY, read_runs


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def noop(block):
    pass


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------
# reset keeps the history


def test_four_runs_with_resets_between_them_keep_four_reports(tmp_path, capsys):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 4, process_function=noop)
    for i in range(4):
        if i:
            task.reset()
        assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    runs_file = tmp_path / "seg" / "runs.jsonl"
    records = lines_of(runs_file)
    assert [RESET_KEY in r for r in records] == [False, True, False, True, False, True, False]
    runs = read_runs(runs_file)
    assert len(runs) == 4
    # every run after a reset processed every block again
    assert [r.blocks.skipped for r in runs] == [0, 0, 0, 0]
    assert [r.after_reset for r in runs] == [False, True, True, True]
    code, out = run_cli(capsys, "compare", str(tmp_path))
    assert "nothing to compare yet" not in out
    assert "span_s" in out
    assert "reset between the runs compared" in out


def test_reset_with_history_deletes_the_whole_store(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 3, process_function=noop)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    task.reset(history=True)
    assert not (tmp_path / "seg").exists()
    assert task.report() is None


def test_task_report_after_a_reset_is_still_the_last_run(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 3, process_function=noop)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    task.reset()
    report = task.report()
    assert report is not None and report.blocks.count == 3
    # the markers are gone: the next run does every block
    calls = []
    again = line_task("seg", 3, process_function=lambda b: calls.append(b.block_id[1]))
    assert daisy.run_blockwise([again], multiprocessing=False, progress=False, summary=False)
    assert len(calls) == 3


def test_pipeline_reset_resets_every_task_and_keeps_their_histories(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    a = line_task("a", 3, process_function=noop)
    b = line_task("b", 3, process_function=noop, upstream_tasks=[a])
    pipeline = daisy.Pipeline([a, b])
    assert daisy.run_blockwise(pipeline, multiprocessing=False, progress=False, summary=False)
    pipeline.reset()
    for tid in "ab":
        assert sorted(p.name for p in (tmp_path / tid).iterdir()) == ["daisy.lock", "runs.jsonl"]
        assert RESET_KEY in lines_of(tmp_path / tid / "runs.jsonl")[-1]
    assert daisy.run_blockwise(pipeline, multiprocessing=False, progress=False, summary=False)
    assert [r.blocks.skipped for r in read_runs(tmp_path / "b" / "runs.jsonl")] == [0, 0]
    pipeline.reset(history=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# --------------------------------------------------------------------------
# why blocks failed


def corrupt_sections(block):
    if block.block_id[1] % 4 == 1:
        raise ValueError(f"corrupt section in block {block.block_id[1] % 4}")


def test_the_report_line_keeps_why_blocks_failed(tmp_path, capsys):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 16, process_function=corrupt_sections, max_retries=1, max_workers=2)
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    report = task.report()
    assert report is not None
    causes = report.failure_causes
    assert causes.messages == (("ValueError: corrupt section in block 1", 8),)
    raising_line = corrupt_sections.__code__.co_firstlineno + 2
    cause = f"ValueError at test_history.py:{raising_line} in corrupt_sections"
    assert causes.causes == (cause,)
    assert causes.other == 0
    assert causes.first_traceback is not None
    assert "Traceback" in causes.first_traceback
    assert "corrupt_sections" in causes.first_traceback
    assert causes.first_traceback.rstrip().endswith("ValueError: corrupt section in block 1")
    # the next morning, from the disk
    code, out = run_cli(capsys, "report", str(tmp_path / "seg"))
    assert "failed because" in out
    top = f"8× {cause}, e.g. ValueError: corrupt section in block 1"
    assert top in out
    assert "first failure:" in out and "Traceback" in out
    code, out = run_cli(capsys, "report", str(tmp_path), "--format", "json")
    assert json.loads(out)[0]["top_failure"] == top


def fail_odd_blocks(block):
    if block.block_id[1] % 2:
        block.status = daisy.BlockStatus.FAILED


def test_a_serial_run_keeps_why_blocks_failed(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 6, process_function=fail_odd_blocks, max_retries=1)
    assert not daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    causes = read_runs(tmp_path / "seg" / "runs.jsonl")[-1].failure_causes
    assert causes.messages == (("the block function set status FAILED", 6),)


def every_block_differently(block):
    # a cause of its own per block: an exception type of its own
    raise type(f"Error{block.block_id[1]}", (KeyError,), {})(f"key {block.block_id[1]}")


def test_failure_messages_are_bounded(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 30, process_function=every_block_differently, max_retries=0)
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    causes = task.report().failure_causes
    assert len(causes.messages) == 20
    assert all(n == 1 for _, n in causes.messages)
    assert causes.other == 10
    line = (tmp_path / "seg" / "runs.jsonl").read_text()
    assert len(line) < 64 << 10


def test_a_run_without_failures_keeps_no_causes(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 3, process_function=noop)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    causes = task.report().failure_causes
    assert not causes and causes.first_traceback is None


# --------------------------------------------------------------------------
# each task's own span


def make_sleeper(seconds):
    def f(block):
        time.sleep(seconds)

    return f


def test_compare_does_not_blame_a_downstream_task_for_a_slow_upstream(tmp_path):
    daisy.set_tracking_basedir(tmp_path)

    def run(upstream_sleep):
        a = line_task("a", 4, process_function=make_sleeper(upstream_sleep))
        b = line_task("b", 4, process_function=make_sleeper(0.01), upstream_tasks=[a])
        assert daisy.run_blockwise([b], multiprocessing=False, progress=False, summary=False)
        a.reset()
        b.reset()

    for _ in range(3):
        run(0.01)
    run(0.15)
    a_runs = read_runs(tmp_path / "a" / "runs.jsonl")
    b_runs = read_runs(tmp_path / "b" / "runs.jsonl")
    last_b = b_runs[-1]
    # b's span leaves out the wait for a: well below the run's elapsed time
    assert last_b.span is not None and last_b.span < last_b.elapsed / 2
    a_rows = {r["figure"]: r for r in compare_runs(a_runs, history=7, factor=2.0)}
    b_rows = {r["figure"]: r for r in compare_runs(b_runs, history=7, factor=2.0)}
    assert a_rows["span_s"]["flagged"]
    assert not b_rows["span_s"]["flagged"]


def test_compare_sets_a_resumed_run_against_full_ones_block_for_block(tmp_path, capsys):
    """Issue 41: a resumed run that processed 10 of 40 blocks, each six
    times slower, was set against full runs by its totals: its span (0.6 s
    against 0.4 s) was within the factor, and nothing was flagged. It is
    compared block for block, and the totals are said not to be comparable."""
    daisy.set_tracking_basedir(tmp_path)
    for _ in range(3):
        task = line_task("seg", 40, process_function=make_sleeper(0.01))
        assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
        task.reset()
    mask = [i < 30 for i in range(40)]  # 30 done by hand: a resumed run of 10
    task = line_task("seg", 40, process_function=make_sleeper(0.06), skip_mask=mask)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    runs = read_runs(tmp_path / "seg" / "runs.jsonl")
    rows = {r["figure"]: r for r in compare_runs(runs, history=7, factor=2.0)}
    assert rows["span_per_block_s"]["flagged"], rows
    assert rows["span_per_block_s"]["ratio"] > 3, rows
    assert "span_s" not in rows, "totals of 10 blocks against totals of 40 say nothing"
    code = main(["compare", str(tmp_path / "seg")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "✗ worse" in out
    assert (
        "(seg: the last run processed 10 blocks, the runs before it 40: its totals are "
        "not compared, only its figures per block)"
    ) in out, out


# --------------------------------------------------------------------------
# what a resumed run says (DONE_MARKERS spec: "What the user sees")


def fail_from_40(block):
    if block.block_id[1] >= 40:
        block.status = daisy.BlockStatus.FAILED


def test_a_resumed_run_says_what_it_skipped(tmp_path, capsys, caplog):
    daisy.set_tracking_basedir(tmp_path)
    first = line_task("extract", 64, size=1, process_function=fail_from_40, max_retries=0)
    assert not daisy.run_blockwise([first], multiprocessing=False, progress=False)
    out = capsys.readouterr().out
    assert "Skipped:" not in out
    caplog.set_level(logging.INFO, logger="daisy")
    again = line_task("extract", 64, size=1, process_function=noop)
    assert daisy.run_blockwise([again], multiprocessing=False, progress=False)
    out = capsys.readouterr().out
    assert "    Skipped: 40 (found done before they ran" in out
    notices = [r for r in caplog.records if r.name == "daisy._progress"]
    assert [r.levelno for r in notices] == [logging.INFO]
    assert notices[0].getMessage() == (
        "task 'extract': resumed — 40/64 blocks skipped via done markers "
        "(Task.reset() or tracking_path=False reprocesses them)"
    )


def test_the_notice_names_every_reason_a_block_was_skipped(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="daisy")
    mask = line_task("masked", 4, process_function=noop, skip_mask=[True, False, True, False])
    assert daisy.run_blockwise([mask], multiprocessing=False, progress=False, summary=False)
    checked = line_task("checked", 4, process_function=noop, check_function=lambda b: True)
    assert daisy.run_blockwise([checked], multiprocessing=False, progress=False, summary=False)
    messages = [r.getMessage() for r in caplog.records if r.name == "daisy._progress"]
    assert messages == [
        "task 'masked': resumed — 2/4 blocks skipped via the skip mask "
        "(a narrower skip_mask reprocesses them)",
        "task 'checked': resumed — 4/4 blocks skipped via check_function "
        "(a check_function that returns False reprocesses them)",
    ]


# --------------------------------------------------------------------------
# Task.run_blockwise (RUN_STATS spec: ``task.run_blockwise()``)


def test_task_run_blockwise_runs_the_task_and_its_upstream_tasks(tmp_path, capsys):
    daisy.set_tracking_basedir(tmp_path)
    a = line_task("a", 3, process_function=noop)
    b = line_task("b", 4, process_function=noop, upstream_tasks=[a])
    assert b.run_blockwise(multiprocessing=False, progress=False) is True
    assert "Execution Summary" in capsys.readouterr().out
    assert a.report().blocks.count == 3 and b.report().blocks.count == 4
    failing = line_task("f", 2, process_function=fail_odd_blocks, max_retries=0)
    assert failing.run_blockwise(multiprocessing=False, progress=False, summary=False) is False
    with pytest.raises(TypeError, match="no_such_keyword"):
        a.run_blockwise(no_such_keyword=1)


# --------------------------------------------------------------------------
# a line of the history that is not a report (issue 26, item 10)


def _real_history(tmp_path: Path) -> tuple[daisy.Task, Path, list[str]]:
    """A tracked task run twice, on a worker and then serially, with a
    reset between: its ``runs.jsonl`` lines (report, reset record, report)
    as the core wrote them."""
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("seg", 4, process_function=noop, max_workers=1)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    task.reset()
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    runs_file = tmp_path / "tracking" / "seg" / "runs.jsonl"
    lines = runs_file.read_text().splitlines()
    assert len(lines) == 3 and RESET_KEY in json.loads(lines[1])
    return task, runs_file, lines


def _changed(line: str, change) -> str:
    d = json.loads(line)
    change(d)
    return json.dumps(d)


#: lines that are JSON but no report: how to make each from a real report
#: line, and a word the warning gives as the reason
ODD_LINES = {
    "object": (lambda real: '{"a": 1}', "missing field `task_id`"),
    "list": (lambda real: "[1, 2]", "a list"),
    "null": (lambda real: "null", "null"),
    "number": (lambda real: "42", "a number"),
    "string": (lambda real: '"a run"', "a string"),
    "missing-key": (
        lambda real: _changed(real, lambda d: d.pop("blocks")),
        "missing field `blocks`",
    ),
    "missing-nested-key": (
        lambda real: _changed(real, lambda d: d["blocks"]["wall"].pop("sum")),
        "blocks.wall: missing field `sum`",
    ),
    "count-is-text": (
        lambda real: _changed(real, lambda d: d["blocks"].update(count="four")),
        "blocks.count",
    ),
    "task-id-is-a-number": (
        lambda real: _changed(real, lambda d: d.update(task_id=7)),
        "task_id",
    ),
    "worker-startup-is-text": (
        lambda real: _changed(real, lambda d: d["workers"]["by_id"][0].update(startup="fast")),
        "startup",
    ),
    "exits-is-a-list": (
        lambda real: _changed(real, lambda d: d["workers"].update(exits=[1])),
        "workers.exits",
    ),
    "stat-is-text": (
        lambda real: _changed(real, lambda d: d["blocks"].update(round_trip="slow")),
        "blocks.round_trip",
    ),
}


def _history_warnings(caplog, runs_file: Path) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and str(runs_file) in r.getMessage()
    ]


@pytest.mark.parametrize("kind", sorted(ODD_LINES))
def test_a_line_that_is_not_a_report_is_skipped_with_one_warning(tmp_path, capsys, caplog, kind):
    task, runs_file, (first, reset, second) = _real_history(tmp_path)
    make, reason = ODD_LINES[kind]
    odd = make(first)
    json.loads(odd)  # valid JSON: not a torn line
    # lines 2 and 5 are the odd ones
    runs_file.write_text("\n".join([first, odd, reset, second, odd]) + "\n")
    caplog.set_level(logging.WARNING)

    report = task.report()
    assert report is not None and report.blocks.count == 4 and report.workers.count == 0
    runs = read_runs(runs_file)
    assert [r.workers.count for r in runs] == [1, 0]
    assert [r.after_reset for r in runs] == [False, True]

    code, out = run_cli(capsys, "report", str(tmp_path / "tracking"))
    assert code == 0 and "seg  4 blocks" in out
    code, out = run_cli(capsys, "report", str(runs_file), "--run", "0", "--format", "json")
    assert code == 0 and json.loads(out)[0]["workers"] == 1
    code, out = run_cli(capsys, "compare", str(tmp_path / "tracking"))
    assert code in (0, 1) and "span_s" in out, out

    # one warning for the file however often it is read, naming the file,
    # the lines and why
    warnings = _history_warnings(caplog, runs_file)
    assert len(warnings) == 1, warnings
    assert "2 lines" in warnings[0] and "lines 2, 5 (" in warnings[0], warnings
    assert reason in warnings[0], warnings

    # the next run appends to that history as to any other
    caplog.clear()
    assert daisy.run_blockwise([task], progress=False, summary=False)
    runs = read_runs(runs_file)
    assert len(runs) == 3 and runs[-1].blocks.skipped == 4
    assert task.report().blocks.skipped == 4
    assert len(_history_warnings(caplog, runs_file)) == 1
    assert runs_file.read_text().splitlines()[:5] == [first, odd, reset, second, odd]


def test_every_odd_line_of_a_history_is_named_in_one_warning(tmp_path, capsys, caplog):
    task, runs_file, (first, reset, second) = _real_history(tmp_path)
    odd = [make(first) for make, _ in ODD_LINES.values()]
    torn = second[: len(second) // 2]
    nulls = ["null"] * 30
    runs_file.write_text("\n".join([first, *odd, reset, torn, second, *odd, *nulls]) + "\n")
    caplog.set_level(logging.WARNING)
    assert [r.workers.count for r in read_runs(runs_file)] == [1, 0]
    torn_number = len(odd) + 3
    (warning,) = _history_warnings(caplog, runs_file)
    assert f"{2 * len(odd) + 1 + len(nulls)} lines" in warning, warning
    assert f"line {torn_number} (damaged" in warning, warning
    # every reason is given, with its lines; past ten, lines are counted
    for _, reason in ODD_LINES.values():
        assert reason in warning, (reason, warning)
    assert "lines 2, 17 (" in warning, warning
    assert "and 22 more (null" in warning, warning
    assert task.report().blocks.count == 4
    if importlib.util.find_spec("bokeh") is not None:
        page = tmp_path / "report.html"
        code, out = run_cli(capsys, "report", str(tmp_path / "tracking"), "--html", str(page))
        assert code == 0 and page.is_file(), out
