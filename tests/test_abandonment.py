"""A task whose workers keep dying is abandoned, as in daisy 2.0.0:
`daisy.run_blockwise` raises a `RuntimeError` (also with
``return_states=True``), so a pipeline that ignores the return value (volara
does) does not carry on as if the run had worked; `Server().run_blockwise`
returns the states instead. The blocks the task never ran, and every block
of the tasks downstream, are orphaned, not failed.

The expectation is the transcript of ``fixtures/probes/abandoned.py`` run
against daisy 2.0.0 (1.2.2 had no ``max_worker_restarts``: its workers were
replaced forever)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import line_task

import daisy

PROBES = Path(__file__).parent / "fixtures" / "probes"
MODES = ["run_blockwise", "return_states", "server"]
RECORDED = dict(
    zip(
        MODES,
        (json.loads(line) for line in (PROBES / "abandoned_2.0.0.txt").read_text().splitlines()),
        strict=False,
    )
)


def _probe(tmp_path: Path, mode: str) -> dict:
    shutil.copy(PROBES / "abandoned.py", tmp_path)
    out = subprocess.run(
        [sys.executable, "abandoned.py", mode],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("mode", ["run_blockwise", "return_states"])
def test_run_blockwise_raises_when_a_task_is_abandoned(tmp_path, mode):
    got = _probe(tmp_path, mode)
    assert RECORDED[mode]["runtime_error"] is True
    assert got.get("runtime_error") is True, got
    # says what to do, as 2.0.0's did
    assert "max_worker_restarts" in got["last_line"], got
    assert "Server().run_blockwise" in got["last_line"], got


def test_a_server_returns_the_states_with_the_unrun_blocks_orphaned(tmp_path):
    got = _probe(tmp_path, "server")["returned"]
    want = RECORDED["server"]["returned"]
    assert got["b"] == want["b"] == {"completed_count": 0, "failed_count": 0, "orphaned_count": 4}
    # the abandoned task: blocks lost with a dying worker may have failed
    # for good (max_retries=0); the others never ran and are orphaned
    a = got["a"]
    assert a["completed_count"] == 0 and a["failed_count"] + a["orphaned_count"] == 4, a
    assert a["orphaned_count"] >= 1, a


def _returns_at_once():
    pass  # a worker function that takes no block


def test_blocks_no_worker_ever_took_are_orphaned_and_the_error_says_why(log_dir):
    task = line_task(
        "lazy", 4, process_function=_returns_at_once, max_workers=1, max_worker_restarts=1
    )
    with pytest.raises(RuntimeError) as raised:
        daisy.run_blockwise([task], progress=False, summary=False)
    assert "lazy" in str(raised.value) and "max_worker_restarts=1" in str(raised.value)
    states = raised.value.states
    s = states["lazy"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (0, 0, 4)
    assert s.abandoned is True
