"""How fast a driver exits after Ctrl-C (this package only).

A driver script runs a task whose blocks sleep 30 s on two worker
processes; once both workers are in their blocks, SIGINT goes to the
driver's process group, as Ctrl-C in a terminal sends it. Measured: from
the signal until the driver has exited, having killed and reaped its
workers. The figure to keep is well under a second;
``tests/test_faults.py`` checks what Ctrl-C does (``KeyboardInterrupt``,
no worker left), with a deadline that only catches a driver waiting for
its workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DRIVER = """
import os, time
import daisy

PIDS = {pids!r}
daisy.logging.set_log_basedir({logs!r})

def process(block):
    open(os.path.join(PIDS, str(os.getpid())), "w").close()
    time.sleep(30)

task = daisy.Task("A", daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
                  process_function=process, max_workers=2)
daisy.run_blockwise(task, progress=False)
"""


def start_driver(base: Path) -> tuple[subprocess.Popen[str], Path]:
    """Start a driver and return once both its workers are in their blocks."""
    base.mkdir()
    pids = base / "pids"
    pids.mkdir()
    script = base / "driver.py"
    script.write_text(DRIVER.format(pids=str(pids), logs=str(base / "logs")))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
    )
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the workers did not start: {proc.communicate()}")
        time.sleep(0.02)
    return proc, pids


def ctrl_c(proc: subprocess.Popen[str]) -> str:
    """SIGINT to the driver's process group; its stderr once it exited."""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return err


def test_ctrl_c_exit(benchmark, tmp_path):
    rounds = iter(range(1000))
    started: list[tuple[subprocess.Popen[str], Path]] = []
    errors: list[str] = []

    def setup():
        started.append(start_driver(tmp_path / f"round_{next(rounds)}"))
        return (started[-1][0],), {}

    def once(proc):
        errors.append(ctrl_c(proc))

    try:
        benchmark.pedantic(once, setup=setup, rounds=3, iterations=1)
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert errors and all("KeyboardInterrupt" in err for err in errors), errors
    assert all(proc.returncode != 0 for proc, _ in started)
    # no worker outlived its driver: each is gone, or dead and unreaped
    for _, pids in started:
        for pid in (int(p.name) for p in pids.iterdir()):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            assert state == "Z", f"worker {pid} survived Ctrl-C (state {state})"
