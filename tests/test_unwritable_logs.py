"""Logs that cannot be written (issue 56, item 3): a driver started in a read-only working
directory, where the default log base (``./daisy_logs``) cannot be made, abandoned its task
with "Read-only file system" and no path. It now writes the worker logs to a private
temporary directory, says where and why, and runs every block.

Root reads and writes everything whatever the mode bits, so the directory is made read-only
the way a read-only share is: a read-only bind mount.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DRIVER = textwrap.dedent(
    """
    import os
    import daisy

    def mark(block):
        open(os.path.join(os.environ["MARKS"], str(block.block_id[1])), "w").close()

    task = daisy.Task(
        "readonly_cwd", daisy.Roi((0,), (6,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
        process_function=mark, max_workers=2,
    )
    print("RESULT", daisy.run_blockwise([task], progress=False, summary=False))
    """
)


@pytest.fixture
def read_only_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    where = tmp_path / "share"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    for cmd in (
        ["mount", "--bind", str(where), str(where)],
        ["mount", "-o", "remount,ro,bind", str(where)],
    ):
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            subprocess.run(["umount", str(where)], capture_output=True)
            pytest.skip(f"cannot make a read-only bind mount here ({' '.join(cmd)})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_driver_in_a_read_only_directory_runs_every_block_and_says_where_its_logs_went(
    tmp_path, read_only_dir
):
    with pytest.raises(OSError):
        (read_only_dir / "probe").touch()
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=read_only_dir,
        env={**os.environ, "MARKS": str(marks)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "RESULT True" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(int(p.name) for p in marks.iterdir()) == list(range(6))
    said = [line for line in proc.stderr.splitlines() if "worker logs cannot be written" in line]
    assert said, proc.stderr
    assert f"{read_only_dir}/daisy_logs" in said[0] and "Read-only file system" in said[0]
    fallback = Path(said[0].split("writing them to ")[1].split(" instead")[0])
    assert fallback.is_dir() and (fallback.stat().st_mode & 0o777) == 0o700
    assert any(fallback.rglob("worker_*")), "the worker logs are there"
