"""What a block leaves running in the background ends with its worker
(issue 26, item 12): each worker leads a process group, the server kills
the group when the worker exits, and the group dies with the driver even
when the driver is killed with SIGKILL and can clean nothing up itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from conftest import line_task

import daisy


def leftovers(tag: str) -> list[int]:
    """Pids of the processes whose command line holds ``tag``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if tag.encode() in cmdline:
            found.append(int(entry.name))
    return found


def wait_until_gone(tag: str, deadline: float = 30.0) -> list[int]:
    """Wait (at most ``deadline`` seconds, to catch a hang) for no process
    to hold ``tag``; those still there."""
    end = time.monotonic() + deadline
    while leftovers(tag) and time.monotonic() < end:
        time.sleep(0.1)
    return leftovers(tag)


def leave_a_sleeper(seconds: str) -> object:
    """A block function that starts ``sleep <seconds>`` in the background
    and returns without waiting for it (a helper server, a forgotten
    ``&`` in a shell command)."""

    def block(b: daisy.Block) -> None:
        subprocess.Popen(["sleep", seconds], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    return block


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm", "cold"])
def test_a_normal_run_leaves_no_background_process(
    warm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight blocks each leave a ``sleep 600`` behind: none outlives the
    run, whether its workers were forked warm or started cold."""
    monkeypatch.setenv("DAISY_WARM_START", warm)
    tag = f"600.{uuid.uuid4().int % 10**9}"
    task = line_task("bg", 8, process_function=leave_a_sleeper(tag), max_workers=2)
    try:
        assert daisy.run_blockwise([task], progress=False, summary=False)
        assert wait_until_gone(tag) == [], "background processes outlived the run"
    finally:
        for pid in leftovers(tag):
            os.kill(pid, signal.SIGKILL)


DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    import daisy

    tag = sys.argv[1][::-1]  # given reversed: the driver's own command line does not match

    def block(b):
        subprocess.Popen(["sleep", tag], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(60)

    t = daisy.Task(
        "bg",
        total_roi=daisy.Roi((0,), (40,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=block,
        max_workers=2,
    )
    daisy.run_blockwise([t], progress=False, summary=False)
    """
)


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm", "cold"])
def test_a_driver_killed_with_sigkill_leaves_no_background_process(warm: str) -> None:
    """The driver is SIGKILLed while its two workers' blocks run, each
    having left a ``sleep 600`` behind: the workers and what they started
    all end, though nobody was left to clean up."""
    tag = f"600.{uuid.uuid4().int % 10**9}"
    env = dict(os.environ, DAISY_WARM_START=warm)
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, tag[::-1]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 60
        while len(leftovers(tag)) < 2 and time.monotonic() < end:
            time.sleep(0.1)
        assert len(leftovers(tag)) == 2, "the blocks never started their sleepers"
        driver.kill()
        driver.wait(10)
        assert wait_until_gone(tag) == [], "background processes outlived a killed driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in leftovers(tag):
            os.kill(pid, signal.SIGKILL)
