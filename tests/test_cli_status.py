"""``daisy status`` and the header of ``daisy report`` on a real
interrupted store (issue 41): the report of an interrupted run said
"smooth 7 blocks, 3 workers, 10.79 s wall", with no total, nothing left,
nothing about the interruption. Now the store says, per task, done of
total and left, failed blocks, how its last recorded run ended, and
whether a run holds it now. The pipeline runs as a user's script, is
interrupted with the SIGINT that Ctrl-C sends (and, once, killed outright,
as a batch system does), and the real ``daisy`` command reads the store."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """\
    import os, sys, time
    import daisy

    marks, delay = sys.argv[2], float(sys.argv[3])

    def smooth(block):
        open(os.path.join(marks, str(block.block_id[1])), "w").close()
        time.sleep(delay)

    task = daisy.Task(
        "smooth", daisy.Roi((0,), (64,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
        process_function=smooth, max_workers=1, tracking_path=sys.argv[1],
    )
    daisy.run_blockwise([task], progress=False)
    """
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daisy", *args], capture_output=True, text=True, timeout=120
    )


def start(tmp_path: Path, seconds_per_block: float) -> tuple[subprocess.Popen[str], Path, Path]:
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    store, marks = tmp_path / "smooth.store", tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    driver = subprocess.Popen(
        [sys.executable, str(script), str(store), str(marks), str(seconds_per_block)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return driver, store, marks


def wait_for_marks(marks: Path, n: int, driver: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while len(list(marks.iterdir())) < n:
        assert driver.poll() is None, driver.stdout.read() if driver.stdout else ""
        assert time.monotonic() < deadline, "the blocks did not start"
        time.sleep(0.05)


def test_an_interrupted_store_says_done_of_total_left_and_how_it_ended(tmp_path):
    driver, store, marks = start(tmp_path, 0.1)
    wait_for_marks(marks, 6, driver)
    driver.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, _ = driver.communicate(timeout=120)
    assert driver.returncode != 0, out
    status = cli("status", str(store))
    assert status.returncode == 0, status.stderr
    row = json.loads(cli("status", str(store), "--format", "json").stdout)[0]
    done = row["done"]
    assert 4 <= done < 64 and row["total"] == 64 and row["left"] == 64 - done, row
    assert row["last_run"] == "interrupted" and row["held_by"] is None, row
    text = status.stdout
    assert f"smooth: {done} of 64 blocks done, {64 - done} left" in text, text
    assert "last run interrupted at" in text and "no run holds it now" in text, text
    # the report's header says the same
    report = cli("report", str(store))
    assert report.returncode == 0, report.stderr
    assert f"interrupted; the store now: {done} of 64 blocks done, {64 - done} left" in (
        report.stdout
    ), report.stdout


def test_a_store_a_run_holds_says_who_and_a_killed_run_leaves_it_free(tmp_path):
    driver, store, marks = start(tmp_path, 0.2)
    try:
        wait_for_marks(marks, 2, driver)
        held = json.loads(cli("status", str(store), "--format", "json").stdout)[0]
        assert held["held_by"] is not None and f"pid {driver.pid}" in held["held_by"], held
        text = cli("status", str(tmp_path)).stdout  # the base directory finds the store
        assert f"held now by pid {driver.pid}" in text, text
    finally:
        driver.kill()  # SIGKILL: no report line is written
        driver.communicate(timeout=60)
    row = json.loads(cli("status", str(store), "--format", "json").stdout)[0]
    assert row["held_by"] is None and row["last_run"] is None, row
    assert row["done"] >= 1, row
    text = cli("status", str(store)).stdout
    assert "no run recorded" in text and "no run holds it now" in text, text


def test_status_of_a_path_with_no_store_is_a_clear_error(tmp_path):
    got = cli("status", str(tmp_path))
    assert got.returncode == 2 and "no tracking store at" in got.stderr, got


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def test_a_history_this_user_cannot_read_is_named_with_exit_2(tmp_path):
    # another user's runs.jsonl, mode 0600: root reads everything, so the command runs
    # as root without the capabilities that override file permissions (setpriv)
    import os
    import pwd
    import shutil

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to read as a user without permission")
    other = next((p for p in pwd.getpwall() if p.pw_uid not in (0,) and p.pw_uid >= 1), None)
    if other is None:
        pytest.skip("no second user on this machine")
    import daisy

    store = tmp_path / "store"
    task = daisy.Task(
        "h",
        daisy.Roi((0,), (4,)),
        daisy.Roi((0,), (1,)),
        daisy.Roi((0,), (1,)),
        process_function=lambda b: None,
        tracking_path=store,
    )
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    runs = store / "runs.jsonl"
    os.chown(runs, other.pw_uid, other.pw_gid)
    runs.chmod(0o600)
    for command in ("status", "report", "compare"):
        out = subprocess.run(
            ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
            + [sys.executable, "-m", "daisy", command, str(store)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert f"daisy: cannot read {runs}: Permission denied" in out.stderr, (command, out.stderr)
        assert "Traceback" not in out.stderr, out.stderr
