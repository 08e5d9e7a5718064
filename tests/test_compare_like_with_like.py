"""`daisy compare` sets like against like (issue 54): a partial rerun of the
costliest blocks of a run (``task.reset()`` and a ``skip_mask`` of all but
those) was flagged "2.4-3.4x worse" and exited 1, its mean over 4 costly
blocks set against the mean over all 64. The store keeps each block's wall
time in its last four runs, so the rerun is compared on the blocks both
runs did, and says how many."""

from __future__ import annotations

import json
import time

import numpy as np
from conftest import make_task

import daisy
from daisy.cli import main

#: the costliest blocks of the 8 x 8 grid: the middle four
COSTLY = {(3, 3), (3, 4), (4, 3), (4, 4)}


def costly_middle(block: daisy.Block) -> None:
    """The middle of the volume costs ten times the rest."""
    cell = tuple(int(c) // 10 for c in block.write_roi.offset)
    time.sleep(0.1 if cell in COSTLY else 0.01)


def five_times_slower(block: daisy.Block) -> None:
    """The same blocks, after a change that made every one five times
    dearer."""
    for _ in range(5):
        costly_middle(block)


def grid_task(store, process_function=costly_middle, **kwargs):  # type: ignore[no-untyped-def]
    return make_task(
        "cmp",
        ((0, 0), (80, 80)),
        ((0, 0), (10, 10)),
        ((0, 0), (10, 10)),
        process_function=process_function,
        tracking_path=store,
        resource_tracking=True,
        max_workers=2,
        **kwargs,
    )


def test_a_partial_rerun_of_the_costliest_blocks_is_compared_on_the_blocks_both_did(
    tmp_path, capsys
):
    store = tmp_path / "store"
    task = grid_task(store)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    task.reset()
    mask = np.ones((8, 8), dtype=bool)
    for x, y in COSTLY:
        mask[x, y] = False
    rerun = grid_task(store, skip_mask=mask)
    assert daisy.run_blockwise([rerun], progress=False, summary=False)
    assert rerun.report().blocks.count - rerun.report().blocks.skipped == 4
    assert main(["compare", str(store)]) == 0
    out = capsys.readouterr().out
    assert "worse" not in out, out
    assert "compared on 4 common blocks" in out, out
    assert main(["compare", str(store), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    common = [r for r in rows if r["figure"] == "wall_common_blocks_s"]
    assert len(common) == 1 and common[0]["blocks"] == 4, rows
    assert 0.5 < common[0]["ratio"] < 2.0, common
    # the mean over another mix of blocks is not set against this run
    assert not [r for r in rows if r["figure"] == "wall_mean_s"], rows
    assert not any(r["flagged"] for r in rows), rows


def test_a_rerun_that_really_got_slower_on_the_same_blocks_is_still_flagged(tmp_path, capsys):
    store = tmp_path / "store"
    task = grid_task(store)
    assert daisy.run_blockwise([task], progress=False, summary=False)
    task.reset()
    mask = np.ones((8, 8), dtype=bool)
    for x, y in COSTLY:
        mask[x, y] = False
    slower = grid_task(store, five_times_slower, skip_mask=mask)
    assert daisy.run_blockwise([slower], progress=False, summary=False)
    assert main(["compare", str(store), "--format", "json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    [common] = [r for r in rows if r["figure"] == "wall_common_blocks_s"]
    assert common["flagged"] and common["blocks"] == 4 and common["ratio"] > 3, common
