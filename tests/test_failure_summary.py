"""What a user reads after a run in which blocks failed: one line per
failed block with its ROI and attempts, the first traceback once (with
the script's real path, also in the worker log), why blocks were
orphaned, and what to do next.

The pipeline runs as a script (``python pipeline.py``), as a user runs
one, so its block function lives in ``__main__`` and travels to the
workers by value.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """\
    import sys

    import daisy


    def extract(block):
        start = block.write_roi.begin[0]
        if start in (30, 100):
            raise ValueError(f"corrupt section at {start}")


    def smooth(block):
        pass


    if __name__ == "__main__":
        trk = sys.argv[1]
        a = daisy.Task(
            "extract", daisy.Roi((0,), (160,)), daisy.Roi((-10,), (30,)), daisy.Roi((0,), (10,)),
            process_function=extract, max_workers=2, max_retries=1, tracking_path=trk + "/a",
        )
        b = daisy.Task(
            "smooth", daisy.Roi((0,), (160,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
            process_function=smooth, max_workers=1, tracking_path=trk + "/b",
        )
        print("RESULT", daisy.run_blockwise(a + b))
    """
)
#: the line of ``raise`` in SCRIPT, 1-based
RAISE_LINE = 9


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("failed_run")
    script = tmp / "pipeline.py"
    script.write_text(SCRIPT)
    assert SCRIPT.splitlines()[RAISE_LINE - 1].strip().startswith("raise ValueError")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp / "trk")],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "RESULT False" in proc.stdout, proc.stdout + proc.stderr
    return tmp, proc.stdout


def _task_section(out: str, task: str) -> str:
    start = out.index(f"Task {task}:")
    end = out.find("\n  Task ", start + 1)
    res = out.find("Resource Utilization", start)
    ends = [e for e in (end, res) if e != -1]
    return out[start : min(ends)] if ends else out[start:]


def test_one_line_per_failed_block_with_its_roi_and_attempts(failed_run):
    _, out = failed_run
    section = _task_section(out, "extract")
    for start in (30, 100):
        pattern = (
            rf"block \d+ \[{start}:{start + 10}\]: failed 2 of 2 attempts: "
            rf"ValueError: corrupt section at {start}"
        )
        assert len(re.findall(pattern, section)) == 1, section
    # no repeated lines for the attempts of one block
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("block ")]
    assert len(lines) == 2, section


def test_the_first_traceback_is_printed_once_with_the_scripts_path(failed_run):
    tmp, out = failed_run
    assert out.count("Traceback (most recent call last)") == 1, out
    assert f'File "{tmp / "pipeline.py"}", line {RAISE_LINE}, in extract' in out, out
    assert "<dynamic-code>" not in out


def test_worker_logs_name_the_scripts_path(failed_run):
    tmp, _ = failed_run
    errs = "".join(p.read_text() for p in (tmp / "daisy_logs" / "extract").glob("worker_*.err"))
    assert "corrupt section at 30" in errs
    assert f'File "{tmp / "pipeline.py"}", line {RAISE_LINE}, in extract' in errs, errs
    assert "<dynamic-code>" not in errs


def test_the_summary_says_why_blocks_were_orphaned(failed_run):
    _, out = failed_run
    extract, smooth = _task_section(out, "extract"), _task_section(out, "smooth")
    # a failed block of extract orphans the conflicting neighbour after it
    # in extract, and every smooth block that reads a failed or orphaned one
    assert "orphaned  ∅: 2" in extract, extract
    assert re.search(r"2 orphaned: a conflicting block of this task failed", extract), extract
    assert "orphaned  ∅: 4" in smooth, smooth
    assert re.search(r"4 orphaned: a block of an upstream task failed", smooth), smooth


def test_the_summary_says_what_to_do_next(failed_run):
    tmp, out = failed_run
    section = _task_section(out, "extract")
    assert (
        "rerun to retry the failed blocks (done blocks are skipped: tracking store at "
        f"{tmp / 'trk' / 'a'})" in section
    ), section
    logs = re.findall(r"worker logs: (\S+\.err)", section)
    assert logs, section
    assert all((tmp / log).exists() or Path(log).exists() for log in logs), logs


def test_blocks_that_failed_the_same_way_every_time_point_at_the_code(failed_run):
    """Issue 41: blocks 30 and 100 raise the same error on both attempts;
    a rerun would fail again until the code or the ROI is fixed, and the
    advice says so before it says to rerun."""
    _, out = failed_run
    section = _task_section(out, "extract")
    next_line = next(line for line in section.splitlines() if "Next:" in line)
    assert "failed the same way on every attempt" in next_line, section
    assert "the code or the block's ROI" in next_line, section
    assert "not chance" in next_line, section


RETRIED_SCRIPT = textwrap.dedent(
    """\
    import os

    import daisy


    def flaky(block):
        marker = os.path.join(os.environ["FLAKY_MARKS"], f"tried-{block.block_id[1]}")
        if block.block_id[1] == 2 and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("a transient error")


    if __name__ == "__main__":
        task = daisy.Task(
            "flaky", daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
            process_function=flaky, max_workers=1, max_retries=1,
        )
        print("RESULT", daisy.run_blockwise([task], progress=False))
    """
)


def test_a_run_whose_failed_attempts_all_succeeded_on_retry_asks_for_no_rerun(tmp_path):
    script = tmp_path / "retried.py"
    script.write_text(RETRIED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, FLAKY_MARKS=str(tmp_path)),
    )
    assert "RESULT True" in proc.stdout, proc.stdout + proc.stderr
    section = _task_section(proc.stdout, "flaky")
    # the retried block is listed, with what happened
    assert re.search(r"block 2 \[20:30\]: failed 1 attempt, retried", section), section
    assert "rerun" not in section, section


CHECKED_SCRIPT = textwrap.dedent(
    """\
    import daisy


    def fails_block_2(block):
        if block.block_id[1] == 2:
            raise ValueError("block 2 is broken")


    def is_done(block):
        return False


    if __name__ == "__main__":
        task = daisy.Task(
            "checked", daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
            process_function=fails_block_2, check_function=is_done, max_workers=1, max_retries=0,
        )
        print("RESULT", daisy.run_blockwise([task], progress=False))
    """
)


def test_the_advice_for_a_task_with_a_check_function_says_it_skips_the_done_blocks(tmp_path):
    # every volara task has a check_function and no tracking store: a rerun
    # skips its done blocks, which the advice used to deny
    script = tmp_path / "checked.py"
    script.write_text(CHECKED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert "RESULT False" in proc.stdout, proc.stdout + proc.stderr
    section = _task_section(proc.stdout, "checked")
    assert (
        "Next: rerun to retry the failed blocks (done blocks are skipped: the task's "
        "check_function finds them)" in section
    ), section


def test_workers_killed_alike_are_one_cause_without_their_ids(tmp_path):
    """Issue 41: four workers SIGKILLed (each on its first block) were four
    causes, "1× worker N died (signal: 9 (SIGKILL); ...)", one per worker
    id and last-block figure; they are one: "4× a worker died (signal: 9
    (SIGKILL))". Each worker's own text (its id, the OOM hint) stays in the
    failed attempts."""
    import daisy

    marks = tmp_path / "killed"
    marks.mkdir()

    def process(block):
        import os
        import signal

        mark = marks / str(block.block_id[1])
        if block.block_id[1] < 4 and not mark.exists():
            mark.touch()
            os.kill(os.getpid(), signal.SIGKILL)

    task = daisy.Task(
        "killed",
        daisy.Roi((0,), (12,)),
        daisy.Roi((0,), (1,)),
        daisy.Roi((0,), (1,)),
        process_function=process,
        max_workers=1,
        max_retries=1,
    )
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    assert states["killed"].completed_count == 12
    causes = server.last_report["killed"].failure_causes
    assert causes.messages == (("a worker died (signal: 9 (SIGKILL))", 4),), causes.messages
    assert "4× a worker died (signal: 9 (SIGKILL))" in server.last_report.render()
    assert sorted({reason.split(" died")[0] for _, _, _, reason in server.failures}) == [
        f"worker {i}" for i in range(4)
    ]


def _differs_each_time(block):
    import os

    marks = os.environ["DIFFERS_MARKS"]
    n = len(os.listdir(marks))
    open(os.path.join(marks, str(n)), "w").close()
    raise ValueError(f"attempt {n} met a different error")


def test_blocks_that_failed_differently_get_no_such_diagnosis(tmp_path, monkeypatch):
    """The diagnosis needs the same error on every attempt: errors that
    differ from one attempt to the next may be chance, and the advice is
    the plain rerun."""
    import daisy

    monkeypatch.setenv("DIFFERS_MARKS", str(tmp_path))
    task = daisy.Task(
        "differs",
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_differs_each_time,
        max_workers=1,
        max_retries=2,
    )
    server = daisy.Server()
    server.run_blockwise([task], progress=False)
    notes = server.failure_notes()["differs"]
    advice = next(line for line in notes if line.startswith("Next:"))
    assert advice.startswith("Next: rerun to retry the failed blocks"), notes
    assert "the same way" not in advice, notes


ABANDONED = textwrap.dedent(
    """\
    import os, signal

    import daisy


    def segment(block):
        # every block takes the worker down, as a block far too large for
        # the node's memory does (the OOM killer's SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


    def relabel(block):
        pass


    if __name__ == "__main__":
        up = daisy.Task(
            "segment", daisy.Roi((0,), (20,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
            process_function=segment, max_workers=2, max_worker_restarts=3,
        )
        down = daisy.Task(
            "relabel", daisy.Roi((0,), (20,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
            process_function=relabel, max_workers=1,
        )
        daisy.run_blockwise(up + down)
    """
)


def test_an_abandoned_task_says_why_and_what_to_change_without_contradiction(tmp_path):
    """Issue 41: a task whose every block SIGKILLs its worker is abandoned
    after its restart cap. What the user read contradicted itself: "0
    failed, 20 orphaned" in the error, the downstream task's "orphaned: a
    block of an upstream task failed" though none failed, a "Failed
    Blocks" list under "failed ✗: 0", "Next: rerun to retry the failed
    blocks", and "see the worker logs" right after saying the OOM killer
    leaves nothing in them. It says instead: abandoned after N worker
    deaths, why, and what to change."""
    script = tmp_path / "pipeline.py"
    script.write_text(ABANDONED)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    error = proc.stderr[proc.stderr.index("RunFailed") :]
    assert "segment: abandoned, 20 of 20 not completed" in error, error
    assert "relabel: abandoned, 20 of 20 not completed" in error, error
    assert "task 'segment' was abandoned: its workers were killed (SIGKILL) 4 times" in error
    assert "Next for task 'segment': give its workers more memory" in error, error
    assert "0 failed, 20 orphaned" not in error, error
    up = _task_section(proc.stdout, "segment")
    down = _task_section(proc.stdout, "relabel")
    assert "Failed Blocks:" not in up, up
    assert "Failed attempts (their blocks were orphaned when the task was abandoned):" in up, up
    assert "20 orphaned: the task was abandoned before they were done" in up, up
    assert "rerun to retry the failed blocks" not in up + down, up + down
    assert "see the worker logs" not in out, out
    # why, and what to change
    assert "killed (SIGKILL) 4 times" in up and "OOM killer" in up, up
    assert "Next: give its workers more memory" in up and "max_worker_restarts" in up, up
    # the downstream task: its blocks wait on an abandoned task, no block failed
    assert "a block of an upstream task failed" not in down, down
    assert '20 orphaned: upstream task "segment" was abandoned' in down, down
    assert 'Next: fix task "segment" (above), then rerun' in down, down
