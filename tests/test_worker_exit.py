"""A worker's end: after its last block it runs the `daisy.at_worker_exit`
hooks and leaves the interpreter's ordinary way, so ``atexit`` handlers
run and its logs and streams are flushed (issue 39: the fast exit that
skipped the finalisation lost what user code left for exit time; the
workloads of ``test_user_code_at_exit.py`` show what). The retired
``DAISY_WORKER_FAST_EXIT`` changes nothing."""

from __future__ import annotations

import os

import pytest

import daisy


def _task(task_id, process):
    return daisy.Task(
        task_id,
        daisy.Roi((0,), (40,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=process,
        max_workers=1,
    )


def _process_leaving_marks(marks):
    def process(block):
        import atexit
        import logging

        pid = os.getpid()
        atexit.register(lambda: (marks / f"atexit-{pid}").touch())
        daisy.at_worker_exit(lambda: (marks / f"hook-{pid}").touch())
        # the last words of every block: no newline, so they sit in the buffer
        print(f"last words of block {block.block_id[1]}", end="")
        logging.getLogger("user").warning("last log line of block %d", block.block_id[1])

    return process


def _kinds(marks):
    return sorted(p.name.split("-")[0] for p in marks.iterdir())


def test_a_worker_leaves_the_ordinary_way_after_its_hooks(tmp_path, log_dir):
    marks = tmp_path / "marks"
    marks.mkdir()
    assert daisy.run_blockwise(_task("fast", _process_leaving_marks(marks)), progress=False)
    # the hook ran, and so did the interpreter's finalisation (atexit)
    assert _kinds(marks) == ["atexit", "hook"], _kinds(marks)
    (out,) = (log_dir / "fast").glob("worker_*.out")
    (err,) = (log_dir / "fast").glob("worker_*.err")
    assert out.read_text().endswith("last words of block 3"), out.read_text()
    assert "last log line of block 3" in err.read_text(), err.read_text()
    report = daisy.last_report()["fast"]
    assert report.workers.exits == {"clean": 1}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_the_retired_fast_exit_variable_changes_nothing(tmp_path, log_dir, monkeypatch, warm):
    monkeypatch.setenv("DAISY_WORKER_FAST_EXIT", "1")
    marks = tmp_path / "marks"
    marks.mkdir()
    task = _task("slow", _process_leaving_marks(marks))
    task.warm_start = warm
    assert daisy.run_blockwise(task, progress=False)
    assert _kinds(marks) == ["atexit", "hook"], _kinds(marks)
    (err,) = (log_dir / "slow").glob("worker_*.err")
    assert "DAISY_WORKER_FAST_EXIT is no longer read" in err.read_text()


def test_a_hook_that_raises_does_not_fail_the_run(tmp_path, log_dir):
    def process(block):
        def broken():
            raise RuntimeError("hook broke")

        daisy.at_worker_exit(broken)

    assert daisy.run_blockwise(_task("hooked", process), progress=False)
    (err,) = (log_dir / "hooked").glob("worker_*.err")
    assert "RuntimeError: hook broke" in err.read_text()
    assert daisy.last_report()["hooked"].workers.exits == {"clean": 1}


def test_at_worker_exit_wants_a_callable():
    with pytest.raises(TypeError, match="at_worker_exit"):
        daisy.at_worker_exit("not a function")  # type: ignore[arg-type]


def _leave_in_block_1(marks, how):
    def process(block):
        import sys

        if block.block_id[1] == 1 and not (marks / "left").exists():
            (marks / "left").touch()
            if how == "os._exit":
                os._exit(0)
            sys.exit(0)

    return process


def _leaving_task(marks, how):  # type: ignore[no-untyped-def]
    return daisy.Task(
        "leaves",
        daisy.Roi((0,), (40,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_leave_in_block_1(marks, how),
        max_workers=1,
        max_retries=1,
    )


def test_a_worker_that_exits_0_in_the_middle_of_a_block_did_not_exit_cleanly(tmp_path, log_dir):
    marks = tmp_path / "marks"
    marks.mkdir()
    assert daisy.run_blockwise(_leaving_task(marks, "os._exit"), progress=False)
    report = daisy.last_report()["leaves"]
    assert report.blocks.failures == 1
    # the worker that left holding block 1 is no clean exit; its
    # replacement, told there was no more work, is
    assert report.workers.exits == {"clean": 1, "error": 1}, report.workers.exits


def test_sys_exit_in_a_block_fails_the_block_and_the_worker_goes_on(tmp_path, log_dir):
    # issue 56: SystemExit raised in a block (a library calling sys.exit) is a
    # BaseException like KeyboardInterrupt: it fails the block with its
    # traceback and the worker goes on (before, the worker left, "exit status")
    marks = tmp_path / "marks"
    marks.mkdir()
    assert daisy.run_blockwise(_leaving_task(marks, "sys.exit"), progress=False)
    report = daisy.last_report()["leaves"]
    assert report.blocks.failures == 1
    assert report.workers.exits == {"clean": 1}, report.workers.exits
    ((message, count),) = report.failure_causes.messages
    assert count == 1 and "SystemExit: 0" in message, message
