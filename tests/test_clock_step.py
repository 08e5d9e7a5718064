"""A step of the system clock in the middle of a run changes none of its
figures (issue 26, item 14): the report's span and the stamps of its
blocks are carried by the monotonic clock from the run's start.

The driver runs under libfaketime with the wall clock stepped by a block
function half way through the run (``FAKETIME_TIMESTAMP_FILE``, read anew
on every call), and the monotonic clock left alone, as an NTP step or a
clock set by hand leaves it.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

FAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))

DRIVER = textwrap.dedent(
    """
    import sys, time
    import daisy

    step_file, store, step = sys.argv[1], sys.argv[2], sys.argv[3]

    def block(b):
        # libfaketime's sleep fails with the monotonic clock left real
        end = time.monotonic() + 0.2
        while time.monotonic() < end:
            pass
        if b.write_roi.offset[0] == 40:
            with open(step_file, "w") as f:
                f.write(step)

    t = daisy.Task(
        "stepped",
        total_roi=daisy.Roi((0,), (100,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=block,
        max_workers=1,
        tracking_path=store,
        resource_tracking=True,
    )
    assert daisy.run_blockwise([t], progress=False, summary=False)
    """
)


@pytest.mark.skipif(not FAKETIME, reason="libfaketime is not installed (make system-deps)")
@pytest.mark.parametrize("step", ["+3h", "-2h"])
def test_a_clock_step_mid_run_leaves_the_reported_span_right(tmp_path: Path, step: str) -> None:
    """Ten blocks of 0.2 s on one worker, the wall clock stepped by
    ``step`` after the fifth: the report's span is the run's (seconds, not
    three hours, and not zero), its blocks' stamps stay in order inside it,
    and the report still shows today's date."""
    step_file = tmp_path / "faketime"
    step_file.write_text("+0")
    store = tmp_path / "store"
    env = dict(
        os.environ,
        LD_PRELOAD=FAKETIME[0],
        FAKETIME_TIMESTAMP_FILE=str(step_file),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        DAISY_WARM_START="0",
    )
    before = __import__("time").time()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(step_file), str(store), step],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert step_file.read_text() == step, "the block never stepped the clock"
    line = json.loads((store / "runs.jsonl").read_text().splitlines()[-1])
    span = line["finished_at"] - line["started_at"]
    # the blocks alone took 2 s; a span of hours or of nothing is the step
    assert 2.0 <= span < 600, (span, line["started_at"], line["finished_at"])
    assert abs(line["started_at"] - before) < 600, "the report is not stamped with today"
    first, last = line["first_block_at"], line["last_block_at"]
    assert line["started_at"] <= first <= last <= line["finished_at"], line
