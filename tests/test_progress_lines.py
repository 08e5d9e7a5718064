"""Progress where stderr is not a terminal (a batch job's log, a pipe): a
compact line per task at its start, at most one per interval while it
runs, and one at its end, on stderr, with no logging configured.

The runs are scripts in a subprocess whose stderr is a pipe, as in a batch
job with its output redirected.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """\
    import sys
    import time

    import daisy


    def slow(block):
        time.sleep(0.05)


    if __name__ == "__main__":
        mode = sys.argv[1]
        kwargs = {}
        if mode == "param":
            kwargs["progress_interval"] = 0.5
        elif mode == "off":
            kwargs["progress"] = False
        a = daisy.Task("extract", daisy.Roi((0,), (400,)), daisy.Roi((0,), (10,)),
                       daisy.Roi((0,), (10,)), process_function=slow, max_workers=1)
        b = daisy.Task("smooth", daisy.Roi((0,), (400,)), daisy.Roi((0,), (10,)),
                       daisy.Roi((0,), (10,)), process_function=slow, max_workers=1)
        start = time.monotonic()
        ok = daisy.run_blockwise(a + b, summary=False, **kwargs)
        print("ELAPSED", time.monotonic() - start)
        print("RESULT", ok)
    """
)

LINE = re.compile(
    r"^daisy: (?P<task>\w+) (?P<done>\d+)/(?P<total>\d+) done, (?P<failed>\d+) failed, "
    r"(?P<workers>\d+) workers?, (?P<rate>[\d.]+) blk/s, (?P<tail>eta \S+|finished in \S+)$"
)


def _run(tmp_path: Path, mode: str, env: dict[str, str] | None = None) -> tuple[str, str, float]:
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), mode],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    assert "RESULT True" in proc.stdout, proc.stdout + proc.stderr
    elapsed = float(re.search(r"ELAPSED (\S+)", proc.stdout).group(1))  # type: ignore[union-attr]
    return proc.stdout, proc.stderr, elapsed


def _lines_by_task(stderr: str) -> dict[str, list[re.Match[str]]]:
    by_task: dict[str, list[re.Match[str]]] = defaultdict(list)
    for line in stderr.splitlines():
        if line.startswith("daisy: "):
            m = LINE.match(line)
            assert m, f"not a progress line: {line!r}\n{stderr}"
            by_task[m["task"]].append(m)
    return by_task


def _check_lines(stderr: str, elapsed: float, interval: float) -> None:
    by_task = _lines_by_task(stderr)
    assert set(by_task) == {"extract", "smooth"}, stderr
    for task, lines in by_task.items():
        # the start line, one per interval while the task runs, the end line
        assert len(lines) <= 2 + int(elapsed / interval) + 1, (task, stderr)
        assert len(lines) >= 3, (task, stderr)  # each task runs 2 s, 4 intervals
        last = lines[-1]
        assert last["done"] == last["total"] == "40", stderr
        assert last["tail"].startswith("finished in"), stderr
        assert all(m["tail"].startswith("eta") for m in lines[:-1]), stderr
        assert [int(m["done"]) for m in lines] == sorted(int(m["done"]) for m in lines)
        # a middle line measures a rate (blocks of 50 ms, one worker)
        middle = [float(m["rate"]) for m in lines[1:-1]]
        assert any(0 < r for r in middle), stderr


def test_lines_at_start_per_interval_and_at_the_end_with_the_parameter(tmp_path):
    _, err, elapsed = _run(tmp_path, "param")
    _check_lines(err, elapsed, 0.5)


def test_the_interval_comes_from_the_environment(tmp_path):
    _, err, elapsed = _run(tmp_path, "default", {"DAISY_PROGRESS_INTERVAL": "0.5"})
    _check_lines(err, elapsed, 0.5)


def test_by_default_a_short_run_writes_a_start_and_an_end_line_per_task(tmp_path):
    _, err, _ = _run(tmp_path, "default")
    by_task = _lines_by_task(err)
    assert {t: len(lines) for t, lines in by_task.items()} == {"extract": 2, "smooth": 2}, err


def test_progress_false_writes_no_progress(tmp_path):
    _, err, _ = _run(tmp_path, "off", {"DAISY_PROGRESS_INTERVAL": "0.5"})
    assert not [line for line in err.splitlines() if line.startswith("daisy: ")], err


def test_a_bad_interval_names_the_variable(tmp_path):
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), "default"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DAISY_PROGRESS_INTERVAL": "soon"},
    )
    assert proc.returncode != 0
    assert "DAISY_PROGRESS_INTERVAL" in proc.stderr and "'soon'" in proc.stderr, proc.stderr


def _quick(block):
    pass


class _Recorder:
    """A progress observer keeping each task's last total and worker count."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int, int]] = {}

    def update(self, task_id, state, workers) -> None:
        self.last[task_id] = (state.total_block_count, workers)

    def close(self) -> None:
        pass


def test_each_tasks_progress_is_its_own_when_upstream_tasks_are_given_by_keyword(log_dir):
    # Passed as [downstream] with the upstream named by `upstream_tasks`, the
    # pipeline lists the tasks downstream first while the core runs them
    # upstream first: every per-task figure must still reach its own task.
    import daisy

    up = daisy.Task(
        "upstream12",
        daisy.Roi((0,), (120,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_quick,
        max_workers=1,
        read_write_conflict=False,
    )
    with pytest.warns(DeprecationWarning):
        down = daisy.Task(
            "downstream4",
            daisy.Roi((80,), (40,)),
            daisy.Roi((0,), (10,)),
            daisy.Roi((0,), (10,)),
            process_function=_quick,
            max_workers=1,
            read_write_conflict=False,
            upstream_tasks=[up],
        )
    recorder = _Recorder()
    assert daisy.run_blockwise([down], progress=[recorder], summary=False)
    assert {tid: total for tid, (total, _) in recorder.last.items()} == {
        "upstream12": 12,
        "downstream4": 4,
    }
    # and listed upstream first, as the summary lists them
    assert list(recorder.last) == ["upstream12", "downstream4"]


def _state(done: int, total: int):
    from types import SimpleNamespace

    return SimpleNamespace(
        completed_count=done,
        skipped_count=0,
        failed_count=0,
        orphaned_count=0,
        held_back_count=0,
        total_block_count=total,
        is_done=lambda: done == total,
    )


def test_a_task_cut_short_ends_with_stopped_not_finished():
    import io

    from daisy.progress import LineProgress

    out = io.StringIO()
    progress = LineProgress(interval=60, file=out)
    progress.update("cut", _state(104, 200), 2)
    progress.update("whole", _state(10, 10), 1)
    progress.close()  # the run was interrupted
    last = {line.split()[1]: line for line in out.getvalue().splitlines()}
    assert re.search(r"104/200 done, .* stopped after \S+$", last["cut"]), last
    assert re.search(r"10/10 done, .* finished in \S+$", last["whole"]), last


def test_the_line_shows_the_cores_pace_not_its_own():
    """Rate and ETA are the core's live pace (blocks per second over the
    last 30 s, what is left at that pace: the dashboard's figures), handed
    to the observer by the run; the line only formats them."""
    import io

    from daisy.progress import LineProgress

    out = io.StringIO()
    progress = LineProgress(interval=0, file=out)
    progress.update("seg", _state(0, 5000), 2)
    progress.pace("seg", 41.0, 92.0)
    progress.update("seg", _state(1234, 5000), 2)
    progress.pace("seg", 0.0, None)
    progress.update("seg", _state(1240, 5000), 2)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("0.0 blk/s, eta ?"), lines
    assert lines[1] == "daisy: seg 1234/5000 done, 0 failed, 2 workers, 41.0 blk/s, eta 1m32s"
    assert lines[2].endswith("0.0 blk/s, eta ?"), lines


def test_a_run_hands_its_observers_the_cores_pace(log_dir):
    import daisy

    class Paced(_Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.paces: list[tuple[str, float, float | None]] = []

        def pace(self, task_id, blocks_per_second, eta_seconds) -> None:
            self.paces.append((task_id, blocks_per_second, eta_seconds))

    task = daisy.Task(
        "paced",
        daisy.Roi((0,), (200,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_slowish,
        max_workers=1,
    )
    observer = Paced()
    assert daisy.run_blockwise([task], progress=[observer], summary=False)
    assert observer.paces and {t for t, _, _ in observer.paces} == {"paced"}
    assert any(bps > 0 for _, bps, _ in observer.paces), observer.paces


def _slowish(block):
    import time

    time.sleep(0.02)


def test_every_finished_line_names_the_workers_that_served_its_task(tmp_path):
    """Issue 41: the last lines mixed "1 worker" (a task that finished
    while the run went on, at the tick it finished) with "0 workers" (a
    task that finished with the run: its line came after its workers had
    left). Each finished line now names the workers its task had at its
    last tick."""
    _, stderr, _ = _run(tmp_path, "default")
    finished = {
        m["task"]: int(m["workers"])
        for lines in _lines_by_task(stderr).values()
        for m in lines
        if m["tail"].startswith("finished")
    }
    assert set(finished) == {"extract", "smooth"}, stderr
    assert finished == {"extract": 1, "smooth": 1}, stderr
