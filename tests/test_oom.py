"""A worker the OOM killer ended says so (issue 26, item 16): its block's
failure names the likely cause, the worker's last peak RSS and the memory
limit, where it used to say only "died (signal: 9 (SIGKILL))" and point at
empty logs.

The driver runs in a memory cgroup of its own with a small limit, and a
block allocates past it: the kernel's OOM killer, not a test, kills the
worker. The runs turn daisy's memory guard off (``memory_guard=False``),
which would otherwise stop the worker first (``tests/test_memory_and_workers.py``):
what is tested here is what daisy says when the kernel did strike (with
the guard off, or where it lost the race).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from test_failure_summary import _task_section

LIMIT = 300 << 20

DRIVER = textwrap.dedent(
    """
    import json, sys
    import daisy

    def block(b):
        if b.write_roi.offset[0] == 0:
            x = bytearray(40 << 20)   # a measured block before the big one
            return
        x = bytearray(900 << 20)      # far past the cgroup's limit
        for i in range(0, len(x), 4096):
            x[i] = 1

    t = daisy.Task(
        "oom",
        total_roi=daisy.Roi((0,), (20,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=block,
        max_workers=1,
        max_retries=0,
        read_write_conflict=False,
        resource_tracking=True,
        tracking_path=sys.argv[1],
    )
    server = daisy.Server(memory_guard=False)
    server.run_blockwise([t], progress=False)
    print(json.dumps([f[3] for f in server.failures]))
    """
)


def memory_cgroup(limit: int) -> Path | None:
    """A new memory cgroup limited to ``limit`` bytes (v2 or v1), or None
    where none can be made (not root, no memory controller)."""
    name = f"daisy-oom-{uuid.uuid4().hex[:8]}"
    for root, file in (("/sys/fs/cgroup", "memory.max"), ("/sys/fs/cgroup/memory", None)):
        base = Path(root)
        if file == "memory.max" and not (base / "cgroup.subtree_control").exists():
            continue
        try:
            group = base / name
            group.mkdir()
            (group / (file or "memory.limit_in_bytes")).write_text(str(limit))
            if file is None:
                swap = group / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(limit))
            return group
        except OSError:
            continue
    return None


def remove(group: Path) -> None:
    """Remove a cgroup made by `memory_cgroup` once its processes are gone."""
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def test_a_worker_the_oom_killer_ended_says_so(tmp_path: Path) -> None:
    """The second block of a task allocates 900 MiB in a cgroup limited to
    300 MiB: the OOM killer kills its worker, and the block's failure says
    it was the OOM killer (the cgroup counts the kill: issue 41), with the
    worker's previous block's peak RSS (the big block filled the limit in
    less than a sample's time) and the 300 MiB limit, and what to do."""
    group = memory_cgroup(LIMIT)
    if group is None:
        pytest.skip("no memory cgroup can be made here (needs root and a memory controller)")

    def enter() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    try:
        proc = subprocess.run(
            [sys.executable, "-c", DRIVER, str(tmp_path / "store")],
            preexec_fn=enter,
            env=dict(os.environ, DAISY_WARM_START="0"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        remove(group)
    assert proc.returncode == 0, proc.stderr
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(failures) == 1, failures
    text = failures[0]
    assert "signal: 9 (SIGKILL)" in text, text
    assert "killed by the OOM killer (its cgroup counts the kill" in text, text
    assert "likely" not in text, text
    assert "300 MiB" in text, text
    assert "its previous block peaked at" in text, text
    assert "more memory" in text, text


OOM_KILLED = textwrap.dedent(
    """\
    import time

    import daisy


    def segment(block):
        # a block far too large for the node: it grows by 20 MiB every
        # 0.2 s (reading a large volume) until the OOM killer ends its worker
        held = []
        while True:
            chunk = bytearray(20 << 20)
            for i in range(0, len(chunk), 4096):
                chunk[i] = 1
            held.append(chunk)
            time.sleep(0.2)


    if __name__ == "__main__":
        task = daisy.Task(
            "segment", daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
            process_function=segment, max_workers=1, max_retries=0,
        )
        print("RESULT", daisy.run_blockwise([task], progress=False, memory_guard=False))
    """
)


def test_an_oom_kill_is_named_with_certainty_and_the_dying_blocks_memory(tmp_path: Path) -> None:
    """Issue 41: a worker SIGKILLed was "likely killed by the OOM killer ...
    its last block peaked at 139 MiB" when the dying block held more than
    1 GiB: the figure was the previous block's, and the cause a guess. The
    run here is in a memory cgroup of 400 MiB, as a batch job is, and its
    one block grows until the kernel kills the worker: the cgroup counts
    the kill, so the summary says so without "likely", and gives what the
    dying block held (sampled while it ran)."""
    group = memory_cgroup(400 << 20)
    if group is None:
        pytest.skip("no memory cgroup can be made here (needs root and a memory controller)")
    script = tmp_path / "pipeline.py"
    script.write_text(OOM_KILLED)
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        remove(group)
    out = proc.stdout + proc.stderr
    assert "RESULT False" in proc.stdout, out
    first = _task_section(proc.stdout, "segment")
    assert "killed by the OOM killer (its cgroup counts the kill" in first, first
    assert "likely killed" not in first, first
    held = re.search(r"it held at least (\d+) MiB while running its block", first)
    assert held, first
    assert 120 <= int(held.group(1)) <= 400, first
