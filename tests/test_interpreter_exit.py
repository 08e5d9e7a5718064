"""A run in a daemon thread when the interpreter exits: the run stops, the
process ends with the main thread's exit status, and nothing panics.

Before, the run's next hook attached to a finalising interpreter: PyO3
panicked ("The Python interpreter is not initialized") or CPython ended the
thread through Rust frames and the process aborted ("FATAL: exception not
rethrown"). Both runners are tried (worker processes and the serial
loop), and a client call in a daemon thread too; the done blocks of a
stopped run are recorded, so a rerun does only the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    import daisy
    from daisy import Roi

    mode, store = sys.argv[1], sys.argv[2]
    started = threading.Event()

    def f(block):
        time.sleep(0.02)

    def f_serial(block):
        started.set()
        f(block)

    task = daisy.Task(
        "d", total_roi=Roi((0,), (10000,)), read_roi=Roi((0,), (10,)),
        write_roi=Roi((0,), (10,)),
        process_function=f_serial if mode == "serial" else f, max_workers=2,
        tracking_path=store,
    )
    kwargs = {"multiprocessing": False} if mode == "serial" else {}
    th = threading.Thread(target=lambda: daisy.run_blockwise([task], **kwargs), daemon=True)
    th.start()
    if mode == "serial":
        assert started.wait(60)
    else:
        time.sleep(4)
    print("main thread ends", flush=True)
    sys.exit(3)
    """
)


def _run(tmp_path, mode):
    store = tmp_path / "store"
    script = tmp_path / "daemon_run.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), mode, str(store)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize("mode", ["distributed", "serial"])
def test_a_daemon_thread_run_stops_cleanly_at_interpreter_exit(tmp_path, mode):
    proc = _run(tmp_path, mode)
    out = proc.stdout + proc.stderr
    assert "main thread ends" in proc.stdout
    assert "panicked" not in out, out[-3000:]
    assert "FATAL" not in out, out[-3000:]
    # the main thread's own status, not an abort (-6) or a panic's 101
    assert proc.returncode == 3, out[-3000:]

    import daisy

    # the stopped run's done blocks are recorded: a rerun skips them
    done = []
    task = daisy.Task(
        "d",
        total_roi=daisy.Roi((0,), (10000,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=lambda b: done.append(b.block_id[1]),
        tracking_path=str(tmp_path / "store"),
    )
    assert daisy.run_blockwise([task], multiprocessing=False)
    assert 0 < len(done) < 1000


CLIENT_SCRIPT = textwrap.dedent(
    """
    import socket, sys, threading, time
    import daisy

    # a client whose server never answers: its acquire_block waits in Rust
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    host, port = listener.getsockname()

    def worker():
        client = daisy.Client(context=daisy.Context(hostname=host, port=port, task_id="t",
                                                    worker_id=0))
        client.acquire_block()

    threading.Thread(target=worker, daemon=True).start()
    time.sleep(1)
    print("main thread ends", flush=True)
    """
)


def test_a_client_call_in_a_daemon_thread_does_not_abort_the_exit(tmp_path):
    script = tmp_path / "daemon_client.py"
    script.write_text(CLIENT_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240
    )
    out = proc.stdout + proc.stderr
    assert "main thread ends" in proc.stdout
    assert "panicked" not in out and "FATAL" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]


SLOW_EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    import daisy
    from daisy import Roi

    class SlowToFinalise:
        # the interpreter's finalisation (after the exit hook let go) lasts
        # a second: long enough for a thread still in Rust to come back
        # (the module's own names may be gone by then: bound as a default)
        def __del__(self, sleep=time.sleep, write=os.write):
            write(1, b"finalising\\n")
            sleep(1.0)

    keep = SlowToFinalise()

    def f(block):
        time.sleep(0.01)

    task = daisy.Task(
        "d", total_roi=Roi((0,), (20000,)), read_roi=Roi((0,), (10,)),
        write_roi=Roi((0,), (10,)), process_function=f, max_workers=2,
    )
    th = threading.Thread(target=lambda: daisy.run_blockwise([task]), daemon=True)
    th.start()
    time.sleep(1.5)
    print("main thread ends", flush=True)
    sys.exit(3)
    """
)


def test_the_run_result_is_made_before_the_exit_goes_on(tmp_path):
    """Issue 42: the `stopped` getter of a run's result normalised the
    exception that stopped the run, which makes PyO3 release the GIL and
    take it again, after the exit hook had let the interpreter finalise;
    under load PyO3 found the interpreter gone and panicked. The fault
    point ``run-result-slow`` releases the GIL where the result is made
    (as the normalisation does), and the script's finalisation lasts a
    second, so the old order (the result made after the run stopped
    counting as busy) crashed every time. Now the result, its exception
    normalised, is made while the run still counts as busy, and nothing
    on the way back to Python releases the GIL."""
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT_SCRIPT)
    env = dict(os.environ, DAISY_FAULT_POINT="run-result-slow")
    for attempt in range(3):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        out = proc.stdout + proc.stderr
        assert "main thread ends" in proc.stdout, out[-3000:]
        assert "panicked" not in out, (attempt, out[-3000:])
        assert "FATAL" not in out, (attempt, out[-3000:])
        assert proc.returncode == 3, (attempt, proc.returncode, out[-3000:])
