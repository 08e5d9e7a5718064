"""A worker the OOM killer ended says so (issue 26, item 16): its block's
failure names the likely cause, the worker's last peak RSS and the memory
limit, where it used to say only "died (signal: 9 (SIGKILL))" and point at
empty logs.

The driver runs in a memory cgroup of its own with a small limit, and a
block allocates past it: the kernel's OOM killer, not a test, kills the
worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

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
    server = daisy.Server()
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


def test_a_worker_the_oom_killer_ended_says_so(tmp_path: Path) -> None:
    """The second block of a task allocates 900 MiB in a cgroup limited to
    300 MiB: the OOM killer kills its worker, and the block's failure says
    it was likely the OOM killer, with the worker's last peak RSS and the
    300 MiB limit, and what to do."""
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
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.1)
    assert proc.returncode == 0, proc.stderr
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(failures) == 1, failures
    text = failures[0]
    assert "signal: 9 (SIGKILL)" in text, text
    assert "likely killed by the OOM killer" in text, text
    assert "300 MiB" in text, text
    assert "its last block peaked at" in text, text
    assert "more memory" in text, text
