"""The demo, as a new user runs it: ``python examples/demo.py DIR`` prints
the summary and the panel and checks its result; run again on the same
directory, it resumes (every block already done) and its result still
checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def _demo(workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), str(workdir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_demo_runs_and_a_second_run_on_its_directory_resumes(tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "checked: blockwise output equals the whole-volume computation" in first.stdout
    assert "Resource Utilization" in first.stdout
    second = _demo(tmp_path)
    assert second.returncode == 0, second.stderr
    assert "checked: blockwise output equals the whole-volume computation" in second.stdout
    # the second run found every block done
    assert "64 skipped" in second.stdout or "skipped: 64" in second.stdout.lower(), second.stdout
