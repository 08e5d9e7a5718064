"""Interrupt the kernel, run the cell again: the most common thing a
notebook user does with a long run. A real IPython kernel (the one
``test_notebook.py`` starts) runs a tracked task; once some blocks are
marked the kernel is interrupted (Jupyter's "interrupt": SIGINT to the
kernel), and the same cell runs again. IPython keeps the interrupted run's
exception and traceback (``sys.last_traceback``), and with them every frame
of the stopped run: the rerun must still get the store (it is this
process's own, and the run that held it is over), skip the blocks marked,
and finish the rest."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_notebook import kernel_manager

pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel")

N_BLOCKS = 40


def cell(store: Path, marks: Path, multiprocessing: bool) -> str:
    return f"""\
import os, time
import daisy

def work(block):
    time.sleep(0.1)
    open(os.path.join({str(marks)!r}, str(block.block_id[1])), "w").close()

task = daisy.Task(
    "interrupted",
    total_roi=daisy.Roi((0,), ({N_BLOCKS},)),
    read_roi=daisy.Roi((0,), (1,)),
    write_roi=daisy.Roi((0,), (1,)),
    process_function=work,
    max_workers=2,
    tracking_path={str(store)!r},
)
states = daisy.run_blockwise(
    [task], multiprocessing={multiprocessing}, progress=False, summary=False, return_states=True
)
s = states["interrupted"]
print("COUNTS", s.skipped_count, s.completed_count, s.failed_count)
"""


def run_cell(kc: Any, code: str, timeout: float) -> tuple[str, dict[str, Any]]:
    """Run `code` in the kernel; its stdout and its execute reply's content."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return "".join(out), reply["content"]


@pytest.mark.parametrize("multiprocessing", [False, True], ids=["serial", "workers"])
def test_a_cell_run_again_after_an_interrupt_resumes_from_the_marks(tmp_path, multiprocessing):
    store, marks = tmp_path / "store", tmp_path / "marks"
    marks.mkdir()
    km = kernel_manager(tmp_path)
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        code = cell(store, marks, multiprocessing)
        kc.execute(code)
        deadline = time.monotonic() + 120
        while len(list(marks.iterdir())) < 5:
            assert time.monotonic() < deadline, "no block ran in 120 s"
            time.sleep(0.05)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)["content"]
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
        marked = len(list(marks.iterdir()))
        assert marked < N_BLOCKS
        # the notebook keeps the interrupted run's traceback, as IPython does
        kept, _ = run_cell(kc, "import sys; print('KEPT', sys.last_traceback is not None)", 60)
        assert "KEPT True" in kept, kept
        out, reply = run_cell(kc, code, 300)
        assert reply["status"] == "ok", out
        skipped, completed, failed = (int(x) for x in out.split("COUNTS")[1].split()[:3])
        # every block marked before the interrupt is skipped (a block cut
        # short by the interrupt may have written its file and no mark)
        assert skipped >= marked - 2, out
        assert (completed, failed) == (N_BLOCKS, 0), out
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
