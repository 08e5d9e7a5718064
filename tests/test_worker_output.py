"""What workers print reaches their log files and the driver's console
without the server ever waiting for either (issue 43).

With ``daisy.logging.set_log_mode("both")`` the server copies each worker's
output into its log file and onto the driver's stdout. A driver whose
stdout is a pipe nobody reads for a while (``python run.py | less`` left
on its first page, a notebook's kernel whose output is not drained, a job
script piping into a slow ``tee`` on a shared filesystem) must not stop the
run: the copy happened on the server's own thread, so one full pipe
stalled every acquire of every task and the timeout sweep. Now a chatty
worker waits for its own output (as it would writing to a full terminal),
and every other worker goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

DRIVER = textwrap.dedent(
    """
    import os, sys
    import daisy

    BASE = sys.argv[1]

    def chatty(block):
        # 256 KiB a block: the driver's stdout pipe (64 KiB) fills at once
        sys.stdout.write(("x" * 1023 + "\\n") * 256)
        sys.stdout.flush()

    def quiet(block):
        with open(os.path.join(BASE, "quiet", str(block.block_id[1])), "w"):
            pass

    def line(task_id, blocks, fn, workers):
        return daisy.Task(
            task_id,
            total_roi=daisy.Roi((0,), (blocks,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=fn,
            num_workers=workers,
        )

    daisy.logging.set_log_basedir(os.path.join(BASE, "logs"))
    daisy.logging.set_log_mode("both")
    ok = daisy.run_blockwise(
        [line("chatty", 40, chatty, 1), line("quiet", 60, quiet, 1)], progress=False
    )
    print("RUN-RESULT", ok, flush=True)
    """
)


def test_a_driver_stdout_nobody_reads_stalls_only_the_worker_that_writes_to_it(tmp_path):
    (tmp_path / "quiet").mkdir()
    script = tmp_path / "run.py"
    script.write_text(DRIVER)
    with open(tmp_path / "stderr.txt", "w") as err:
        driver = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=tmp_path,
        )
        try:
            # nobody reads the driver's stdout yet: the quiet task's 60
            # blocks must all be done anyway (a generous deadline: only a
            # stalled server misses it)
            deadline = time.monotonic() + 90
            done = 0
            while time.monotonic() < deadline and driver.poll() is None:
                done = len(os.listdir(tmp_path / "quiet"))
                if done == 60:
                    break
                time.sleep(0.2)
            assert done == 60, (
                f"the quiet task did {done} of 60 blocks while the driver's stdout was full: "
                "the server waited for the console"
            )
            # now read it: the chatty task ends too, and nothing was lost
            out, _ = driver.communicate(timeout=180)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    lines = out.decode().splitlines()
    assert "RUN-RESULT True" in lines, (tmp_path / "stderr.txt").read_text()[-3000:]
    assert sum(1 for x in lines if x == "x" * 1023) == 40 * 256
    logged = "".join(p.read_text() for p in Path(tmp_path / "logs" / "chatty").glob("*.out"))
    assert sum(1 for x in logged.splitlines() if x == "x" * 1023) == 40 * 256
