"""daisy.Task warns where daisy 2.0.0 warns, with its words: for the 1.x
keywords ``num_workers`` and ``upstream_tasks`` (recorded by
``tests/fixtures/deprecations/record_deprecations.py``; 1.2.2 warned for
neither, and a warning does not stop 1.x code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "deprecations"


def test_task_warns_as_2_0_0_does(tmp_path):
    out = tmp_path / "ours.json"
    proc = subprocess.run(
        [sys.executable, str(FIXTURES / "record_deprecations.py"), str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ours = json.loads(out.read_text())["warnings"]
    release = json.loads((FIXTURES / "daisy_2.0.0.json").read_text())["warnings"]
    assert ours == release
    assert release["num_workers"] and release["upstream_tasks"] and not release["plain"]


def test_get_done_marker_basedir_is_2_0_0s_deprecated_alias(tmp_path):
    import warnings

    import daisy

    daisy.set_tracking_basedir(tmp_path)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert daisy.get_done_marker_basedir() == daisy.get_tracking_basedir()
    # 2.0.0's words
    assert [str(w.message) for w in got] == [
        "get_done_marker_basedir() is deprecated; use get_tracking_basedir()."
    ]
