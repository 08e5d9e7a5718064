"""What a new user meets (issue 29): a fit that leaves part of the volume
out says so before and after the run, and a process_function whose
``block`` parameter was forgotten is explained, not "see the worker
logs"."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

import daisy


def _noop(block):
    pass


def _smoothing(fit: str) -> daisy.Task:
    # 256^3 with 8 voxels of context and 32^3 write blocks: the valid write
    # region 240^3 is tiled by 7^3 blocks covering 224^3
    return daisy.Task(
        f"smooth_{fit}",
        total_roi=daisy.Roi((0, 0, 0), (256, 256, 256)),
        read_roi=daisy.Roi((-8, -8, -8), (48, 48, 48)),
        write_roi=daisy.Roi((0, 0, 0), (32, 32, 32)),
        process_function=_noop,
        fit=fit,
    )


def test_a_fit_that_leaves_part_of_the_volume_out_says_how_much_before_and_after(caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="daisy"):
        task = _smoothing("valid")
    warned = [r.getMessage() for r in caplog.records if "never processed" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "18.7% of it is never processed" in warned[0]
    assert "(224, 224, 224)" in warned[0] and "(240, 240, 240)" in warned[0]
    assert "fit='shrink'" in warned[0] and "fit='overhang'" in warned[0]
    assert task.coverage_note == warned[0].removeprefix("daisy: ")

    assert daisy.run_blockwise([task], multiprocessing=False, progress=False)
    out = capsys.readouterr().out
    summary = out[out.index("Task smooth_valid") :]
    assert "all blocks processed successfully" in summary
    assert "18.7% of it is never processed" in " ".join(summary.split())


@pytest.mark.parametrize("fit", ["shrink", "overhang"])
def test_a_fit_that_covers_the_volume_says_nothing(fit, caplog):
    with caplog.at_level(logging.WARNING, logger="daisy"):
        task = _smoothing(fit)
    assert task.coverage_note is None
    assert "never processed" not in caplog.text


def test_a_forgotten_block_parameter_is_explained(capsys):
    task = daisy.Task(
        "forgot",
        total_roi=daisy.Roi((0,), (40,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=lambda: None,  # the user meant lambda block: ...
        max_workers=1,
        max_worker_restarts=2,
    )
    with pytest.raises(daisy.RunFailed) as failed:
        daisy.run_blockwise([task], progress=False)
    out = capsys.readouterr().out
    text = out + str(failed.value)
    assert "without taking a block" in text, text
    assert "daisy.Client().acquire_block()" in text, text
    assert "def process(block)" in text, text
    assert "see the worker logs" not in text, text


def test_the_package_namespace_holds_no_helpers_of_its_own_module():
    # neither 1.2.2 nor 2.0.0 has them (tests/fixtures/surface)
    for helper in ("annotations", "TYPE_CHECKING", "atexit"):
        assert helper not in dir(daisy), helper
        assert not hasattr(daisy, helper), helper


def _blocks_of(shape: int, store) -> daisy.Task:
    return daisy.Task(
        "seg",
        total_roi=daisy.Roi((0, 0, 0), (64, 64, 64)),
        read_roi=daisy.Roi((0, 0, 0), (shape,) * 3),
        write_roi=daisy.Roi((0, 0, 0), (shape,) * 3),
        process_function=_noop,
        tracking_path=store,
    )


def test_a_layout_mismatch_says_what_changed_and_how_to_keep_the_history(tmp_path):
    store = tmp_path / "seg.store"
    assert daisy.run_blockwise([_blocks_of(16, store)], multiprocessing=False, summary=False)
    changed = _blocks_of(32, store)
    with pytest.raises(daisy.LayoutMismatch) as mismatch:
        daisy.run_blockwise([changed], multiprocessing=False, summary=False)
    message = str(mismatch.value)
    assert "write_roi shape (16, 16, 16) -> (32, 32, 32)" in message, message
    assert "task.reset()" in message and "rm -rf" in message
    assert "deletes the history too" in message
    # the advice works: reset keeps the history, and the run goes ahead
    changed.reset()
    assert daisy.run_blockwise([changed], multiprocessing=False, summary=False)
    runs = daisy.run_report.read_runs(store / "runs.jsonl")
    assert [r.blocks.count for r in runs] == [64, 8]
    assert runs[-1].after_reset


def _fails_naming_its_block(block):
    raise ValueError(f"block {block.block_id} has NaN")


def test_failures_that_name_their_block_still_group(tmp_path):
    task = daisy.Task(
        "nan",
        total_roi=daisy.Roi((0,), (120,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=_fails_naming_its_block,
        max_retries=0,
        tracking_path=tmp_path / "nan.store",
    )
    assert not daisy.run_blockwise([task], progress=False, summary=False)
    causes = daisy.last_report()["nan"].failure_causes
    assert len(causes.messages) == 1, causes
    assert causes.messages[0][1] == 12 and causes.other == 0
    assert causes.causes[0].startswith("ValueError at test_what_a_scientist_sees.py:")
    assert causes.causes[0].endswith(" in _fails_naming_its_block")
    (line,) = causes.render()
    assert line.strip().startswith("12× ValueError at test_what_a_scientist_sees.py:")
    assert "e.g. ValueError: block ('nan', " in line


_WARM = {"done": False}


def _slow_first_block_per_worker(block):
    import time

    if not _WARM["done"]:  # per worker process: its first block warms up
        _WARM["done"] = True
        time.sleep(0.5)
    time.sleep(0.01)


def test_the_panel_says_where_the_time_went(tmp_path, capsys):
    task = daisy.Task(
        "warm",
        total_roi=daisy.Roi((0,), (400,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=_slow_first_block_per_worker,
        max_workers=2,
        resource_tracking=True,
        tracking_path=tmp_path / "warm.store",
    )
    assert daisy.run_blockwise([task], progress=False)
    out = capsys.readouterr().out
    panel = out[out.index("Resource Utilization") :]
    blocks = daisy.last_report()["warm"].blocks
    assert blocks.first_on_worker.n == 2
    assert blocks.warmup_ratio is not None and blocks.warmup_ratio > 10
    assert "warm-up: each worker's first block took" in panel, panel
    assert "slowest blocks" in panel and len(blocks.slowest) == 5
    # the two slowest are the workers' first blocks
    assert all(t > 0.4 for _, t in blocks.slowest[:2]), blocks.slowest
    # sleeping blocks use little CPU per wall second
    assert blocks.cpu_per_wall is not None and blocks.cpu_per_wall < 0.3
    assert "cpu per block-second" in panel and "mostly waiting" in panel


def test_opening_a_store_with_zarr_warns_about_nothing_of_daisys(tmp_path):
    """A tracking store is a Zarr group that also holds daisy's run history
    and lock; listing it with zarr (after ``import daisy``, with every
    warning shown) names no file of daisy's, while another stray file is
    still warned about."""
    store = tmp_path / "t.store"
    code = f"""
import warnings
import daisy, zarr
t = daisy.Task("t", daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
               lambda b: None, tracking_path={str(store)!r})
daisy.run_blockwise([t], multiprocessing=False, progress=False)
open({str(store / "notes.txt")!r}, "w").write("mine")
group = zarr.open_group({str(store)!r}, mode="r")
print(sorted(group.keys()))
print(sorted(name for name, _ in group.members(max_depth=None)))
"""
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert (store / "runs.jsonl").is_file() and (store / "daisy.lock").exists()
    assert "['done', 'failures']" in done.stdout, done.stdout
    assert "runs.jsonl" not in done.stderr and "daisy.lock" not in done.stderr, done.stderr
    assert "notes.txt is not recognized" in done.stderr, "only daisy's own files are quiet"


def _print_block(block):
    print(f"processing block {block.block_id[1]}", flush=True)


def test_worker_logs_tell_the_runs_that_append_to_them_apart(tmp_path):
    """A second run's worker 0 appends to the first run's worker_0.out
    (numbers start at 0 in every run): each opening starts with a header
    naming the worker, the task, when and the driver, so a reader sees
    where one run's output ends."""
    daisy.logging.set_log_basedir(tmp_path / "logs")
    for _ in range(2):
        task = daisy.Task(
            "printer",
            daisy.Roi((0,), (20,)),
            daisy.Roi((0,), (10,)),
            daisy.Roi((0,), (10,)),
            _print_block,
        )
        assert daisy.run_blockwise([task], progress=False, summary=False)
    text = (tmp_path / "logs" / "printer" / "worker_0.out").read_text()
    headers = [line for line in text.splitlines() if line.startswith("--- daisy: ")]
    assert len(headers) == 2, text
    for header in headers:
        assert header.startswith("--- daisy: worker_0 of task printer started 20"), header
        assert header.endswith(f"UTC (driver pid {os.getpid()}) ---"), header
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("--- daisy: ")]
    assert starts[0] == 0, "the header comes first"
    runs = [lines[starts[0] + 1 : starts[1]], lines[starts[1] + 1 :]]
    for run in runs:
        assert sorted(run) == ["processing block 0", "processing block 1"], text
    err = (tmp_path / "logs" / "printer" / "worker_0.err").read_text()
    assert err.count("--- daisy: worker_0 of task printer") == 2


def test_the_progress_bars_glyphs_are_explained_once(capsys):
    from daisy.progress import TqdmProgress

    bars = TqdmProgress(["a", "b"])
    state = daisy.TaskState()
    for tid in ("a", "b", "a"):
        bars.update(tid, state, 1)
    bars.close()
    err = capsys.readouterr().err
    assert err.count("⧗ pending  ▶ processing  ✔ done  ✗ failed  ∅ orphaned") == 1, err
    assert "a ▶" in err and err.index("⧗ pending") < err.index("a ▶"), "above the bars"


def _slow_unless_marked(block):
    import time

    if os.environ.get("DAISY_TEST_FAIL_FROM") and block.block_id[1] >= int(
        os.environ["DAISY_TEST_FAIL_FROM"]
    ):
        raise ValueError("not this time")
    time.sleep(0.01)


def test_a_reruns_first_progress_line_counts_what_it_skips(tmp_path, capsys, monkeypatch):
    """A rerun of a half-done pipeline: the first progress line of each
    task already counts the blocks found done (it once said 4/512 and then
    jumped to 488). A regression guard: it holds since the skipping before a
    task's first worker."""
    import re

    daisy.set_tracking_basedir(tmp_path / "tracking")
    daisy.logging.set_log_basedir(tmp_path / "logs")

    def tasks():
        a = daisy.Task(
            "a",
            daisy.Roi((0,), (400,)),
            daisy.Roi((0,), (10,)),
            daisy.Roi((0,), (10,)),
            _slow_unless_marked,
            max_retries=0,
        )
        b = daisy.Task(
            "b",
            daisy.Roi((0,), (400,)),
            daisy.Roi((0,), (10,)),
            daisy.Roi((0,), (10,)),
            _slow_unless_marked,
            max_retries=0,
        )
        return a + b

    monkeypatch.setenv("DAISY_TEST_FAIL_FROM", "30")
    assert not daisy.run_blockwise(tasks(), summary=False)
    monkeypatch.delenv("DAISY_TEST_FAIL_FROM")
    capsys.readouterr()
    assert daisy.run_blockwise(tasks(), summary=False, progress_interval=0.2)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("daisy: ")]
    for tid in ("a", "b"):
        first = next(ln for ln in lines if ln.startswith(f"daisy: {tid} "))
        done = int(re.match(rf"daisy: {tid} (\d+)/40 done", first).group(1))  # type: ignore[union-attr]
        assert done >= 30, f"the first line of {tid} missed the skipped blocks: {first}"


def test_a_resumed_summary_gives_the_skipped_count_once_and_says_what_it_means(tmp_path, capsys):
    # item 9: "Skipped: N" stood under 1.x's "completed: N (skipped N)" as a
    # bare repeat of the same number; the 1.x line stays as 1.2.2 prints it,
    # and the DONE_MARKERS line says what the skipped blocks are
    def task() -> daisy.Task:
        return daisy.Task(
            "resumed",
            total_roi=daisy.Roi((0,), (40,)),
            read_roi=daisy.Roi((0,), (10,)),
            write_roi=daisy.Roi((0,), (10,)),
            process_function=_noop,
            tracking_path=tmp_path / "store",
        )

    assert daisy.run_blockwise([task()], multiprocessing=False, progress=False)
    capsys.readouterr()
    assert daisy.run_blockwise([task()], multiprocessing=False, progress=False)
    lines = capsys.readouterr().out.splitlines()
    assert "    completed ✔: 4 (skipped 4)" in lines
    skipped = [line for line in lines if line.strip().startswith("Skipped:")]
    assert skipped == [
        "    Skipped: 4 (found done before they ran, by done markers, the skip mask or the "
        "check_function: not processed again)"
    ], lines


def test_a_resumed_bars_first_rate_leaves_the_skipped_blocks_out():
    """A resumed run's bar said 195 blocks/s for blocks of 50 ms on 2
    workers (seen under load in tests/test_interrupted_run.py): before its
    first timed update, tqdm falls back to ``(n - initial) / elapsed``, and
    ``n`` held the 195 blocks found done. They are no work done now."""
    import re
    import time
    from types import SimpleNamespace

    from daisy.progress import TqdmProgress

    def state(skipped, completed):  # completed counts the skipped, as the core's
        return SimpleNamespace(
            total_block_count=400,
            skipped_count=skipped,
            completed_count=completed,
            failed_count=0,
            orphaned_count=0,
            pending_count=400 - completed,
            ready_count=0,
            processing_count=2,
            all_completed=False,
            is_done=lambda: False,
        )

    bars = TqdmProgress(["smooth"])
    bars.update("smooth", state(195, 195), 2)
    time.sleep(0.5)
    bars.update("smooth", state(195, 196), 2)
    bar = bars._bars["smooth"]
    # what tqdm shows until its first timed update (its moving average
    # still empty; a loaded machine's ticks come late): its fallback rate
    shown = bar.format_meter(**{**bar.format_dict, "rate": None})
    bars.close()
    assert "196/400" in shown, shown
    rates = [float(r) for r in re.findall(r"(\d+(?:\.\d+)?)blocks/s", shown)]
    assert rates and max(rates) < 10, shown
