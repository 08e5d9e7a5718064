"""A worker leaves Python's root logger to the user, as daisy 1.2.2's and
2.0.0's workers do: at WARNING with no handler, so a ``logging.basicConfig``
in the user's function takes effect and a library's INFO lines stay out of
the worker's log unless the user asks for them. Daisy's own messages in a
worker go through the ``daisy`` logger's handler.

The expectation is the transcript of ``fixtures/probes/worker_logging.py``
run against both releases (the same for each).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROBES = Path(__file__).parent / "fixtures" / "probes"


def _recorded(release: str) -> dict:
    first = (PROBES / f"worker_logging_{release}.txt").read_text().splitlines()[0]
    return json.loads(first)


@pytest.mark.parametrize("warm", ["1", "0"], ids=["warm", "cold"])
def test_a_workers_logging_is_the_users_to_set_up(tmp_path, warm):
    shutil.copy(PROBES / "worker_logging.py", tmp_path)
    env = dict(os.environ, DAISY_WARM_START=warm)
    out = subprocess.run(
        [sys.executable, "worker_logging.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert _recorded("2.0.0") == _recorded("1.2.2")
    assert seen == _recorded("2.0.0")
