"""The block tracking store (DONE_MARKERS.md): where it lives, what it holds
on disk (read back with zarr-python, an independent Zarr v3 reader), and
how it drives skips, resumption after failures and crashes, layout
guarding and grown volumes.

Block functions note every call as a line ``<task_id> <write offset...>``
in ``<calls dir>/<pid>.txt`` when they start, so a test knows exactly which
blocks ran, in this process or on worker processes alike.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import children_of, offsets_of, proc_state, recorder, take_calls, worker_logs
from conftest import run_tasks as run

import daisy

RUN_TIMEOUT = 60.0
MODES = pytest.mark.parametrize("mp", [False, True], ids=["serial", "multiprocess"])


# --------------------------------------------------------------------------
# fixtures and helpers


def roi(offset, shape):
    return daisy.Roi(tuple(offset), tuple(shape))


def failing(how, offsets, once_dir=None):
    """A block body that fails the blocks at ``offsets`` (write offsets):
    ``raise`` an exception, set ``status`` FAILED, ``sigkill`` its worker or
    hang past the ``timeout``. With ``once_dir`` each block fails only on
    its first attempt."""
    offsets = {tuple(o) for o in offsets}
    once_dir = None if once_dir is None else str(once_dir)

    def body(block):
        offset = tuple(int(c) for c in block.write_roi.offset)
        if offset not in offsets:
            return
        if once_dir is not None:
            marker = os.path.join(once_dir, "_".join(map(str, offset)))
            try:
                open(marker, "x").close()
            except FileExistsError:
                return
        if how == "raise":
            raise RuntimeError(f"injected failure at {offset}")
        if how == "status":
            block.status = daisy.BlockStatus.FAILED
        elif how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(10)
        elif how == "timeout":
            time.sleep(30)
        else:
            raise AssertionError(how)

    return body


def keys(task, offsets=None):
    """``(task_id, offset)`` keys, as `take_calls` counts them."""
    return {(task.task_id, o) for o in (offsets_of(task) if offsets is None else offsets)}


def store_cell(task, offset):
    """A block's cell in the tracking arrays: the grid anchored at
    ``total_roi``."""
    return tuple(
        (o - t) // s
        for o, t, s in zip(offset, task.total_roi.offset, task.write_roi.shape, strict=True)
    )


def store_shape(task):
    """Shape of the block grid anchored at ``total_roi``."""
    cells = np.array([store_cell(task, o) for o in offsets_of(task)])
    return tuple(int(c) + 1 for c in cells.max(axis=0))


def read_store(path):
    """``(done, failures, attributes)`` as zarr-python reads them."""
    group = zarr.open_group(str(path), mode="r")
    return group["done"][...], group["failures"][...], dict(group.attrs)


def done_offsets(task, path):
    """Write offsets of the blocks the store marks done (each marked cell
    must belong to a block; every value is 0 or 1)."""
    done, _, _ = read_store(path)
    assert set(np.unique(done)) <= {0, 1}, np.unique(done)
    by_cell = {store_cell(task, o): o for o in offsets_of(task)}
    marked = {tuple(int(i) for i in idx) for idx in np.argwhere(done == 1)}
    assert marked <= set(by_cell), f"cells marked that hold no block: {marked - set(by_cell)}"
    return {by_cell[c] for c in marked}


def expected_done_array(task, offsets):
    out = np.zeros(store_shape(task), dtype=np.uint8)
    for o in offsets:
        out[store_cell(task, o)] = 1
    return out


def snapshot(path):
    """Every file under ``path`` with its bytes."""
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(Path(path).rglob("*"))
        if p.is_file()
    }


def line_task(task_id, n, process_function, size=10, **kwargs):
    return daisy.Task(
        task_id,
        roi((0,), (n * size,)),
        roi((0,), (size,)),
        roi((0,), (size,)),
        process_function=process_function,
        **kwargs,
    )


def reader_task(task_id, upstream, n, process_function, size=10, **kwargs):
    """Block ``i`` reads blocks ``i-1..i+1`` of ``upstream`` (a line task of
    ``n`` blocks)."""
    return daisy.Task(
        task_id,
        roi((-size,), ((n + 2) * size,)),
        roi((-size,), (3 * size,)),
        roi((0,), (size,)),
        process_function=process_function,
        upstream_tasks=[upstream],
        read_write_conflict=False,
        **kwargs,
    )


# --------------------------------------------------------------------------
# where the store lives


@MODES
def test_no_basedir_and_no_path_tracks_nothing(mp, tmp_path, calls, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a CWD-relative default would show up here
    assert daisy.get_tracking_basedir() is None
    task = line_task("untracked", 6, recorder(calls))
    assert task.tracking_path is None
    for _ in range(2):
        states = run(task, mp)
        assert take_calls(calls) == Counter(keys(task))
        assert states["untracked"].skipped_count == 0
        assert states["untracked"].completed_count == 6
    assert list(tmp_path.rglob("zarr.json")) == []


@MODES
def test_basedir_puts_the_store_at_basedir_slash_task_id(mp, tmp_path, calls):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    assert daisy.get_tracking_basedir() == base
    task = line_task("extract", 6, recorder(calls))
    assert task.tracking_path == base / "extract"
    run(task, mp)
    assert take_calls(calls) == Counter(keys(task))
    assert sorted(p.name for p in base.iterdir()) == ["extract"]
    assert done_offsets(task, base / "extract") == set(offsets_of(task))
    states = run(task, mp)
    assert take_calls(calls) == Counter()
    assert states["extract"].skipped_count == 6
    assert states["extract"].completed_count == 6


def test_relative_basedir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    daisy.set_tracking_basedir("rel")
    assert daisy.get_tracking_basedir() == tmp_path / "rel"
    task = line_task("t", 2, recorder(tmp_path))
    monkeypatch.chdir("/")
    assert task.tracking_path == tmp_path / "rel" / "t"


def test_tracking_path_true_is_refused(calls):
    with pytest.raises(TypeError, match="tracking_path"):
        line_task("t", 2, recorder(calls), tracking_path=True)


@MODES
def test_tracking_path_false_opts_out_even_with_a_basedir(mp, tmp_path, calls):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    task = line_task("optout", 5, recorder(calls), tracking_path=False)
    assert task.tracking_path is None
    for _ in range(2):
        states = run(task, mp)
        assert take_calls(calls) == Counter(keys(task))
        assert states["optout"].skipped_count == 0
    assert not (base / "optout").exists()
    assert list(tmp_path.rglob("zarr.json")) == []


@MODES
def test_explicit_tracking_path_wins_over_the_basedir(mp, tmp_path, calls):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    explicit = tmp_path / "elsewhere" / "store"
    task = line_task("explicit", 5, recorder(calls), tracking_path=str(explicit))
    assert task.tracking_path == explicit
    run(task, mp)
    assert not (base / "explicit").exists()
    assert done_offsets(task, explicit) == set(offsets_of(task))
    take_calls(calls)
    states = run(task, mp)
    assert take_calls(calls) == Counter()
    assert states["explicit"].skipped_count == 5


@MODES
def test_deprecated_done_marker_path_warns_and_works(mp, tmp_path, calls):
    path = tmp_path / "old_name"
    with pytest.warns(DeprecationWarning, match="tracking_path"):
        task = line_task("old", 4, recorder(calls), done_marker_path=path)
    assert task.tracking_path == path
    run(task, mp)
    assert take_calls(calls) == Counter(keys(task))
    assert done_offsets(task, path) == set(offsets_of(task))
    states = run(task, mp)
    assert take_calls(calls) == Counter()
    assert states["old"].skipped_count == 4

    daisy.set_tracking_basedir(tmp_path / "base")
    with pytest.warns(DeprecationWarning):
        off = line_task("old_off", 3, recorder(calls), done_marker_path=False)
    assert off.tracking_path is None
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError):
        line_task("both", 3, recorder(calls), done_marker_path=path, tracking_path=tmp_path / "x")


@MODES
def test_deprecated_set_done_marker_basedir_warns_and_works(mp, tmp_path, calls):
    base = tmp_path / "markers"
    with pytest.warns(DeprecationWarning, match="set_tracking_basedir"):
        daisy.set_done_marker_basedir(base)
    assert daisy.get_tracking_basedir() == base
    task = line_task("legacy", 4, recorder(calls))
    assert task.tracking_path == base / "legacy"
    run(task, mp)
    assert done_offsets(task, base / "legacy") == set(offsets_of(task))
    take_calls(calls)
    assert run(task, mp)["legacy"].skipped_count == 4
    assert take_calls(calls) == Counter()
    with pytest.warns(DeprecationWarning):
        daisy.set_done_marker_basedir(None)
    assert daisy.get_tracking_basedir() is None


# --------------------------------------------------------------------------
# what is on disk

GEOMETRIES = {
    # context (10) as wide as a block: the store grid is shifted by one cell
    "2d_wide_context": dict(
        total_roi=roi((0, 0), (50, 30)),
        read_roi=roi((-10, -10), (20, 20)),
        write_roi=roi((0, 0), (10, 10)),
        fit="valid",
        grid=(4, 2),
        shape=(5, 3),
    ),
    # context on both sides, one partial trailing block kept by overhang
    "3d_overhang": dict(
        total_roi=roi((0, 0, 0), (45, 24, 16)),
        read_roi=roi((-8, -4, 0), (24, 12, 8)),
        write_roi=roi((0, 0, 0), (8, 4, 8)),
        fit="overhang",
        grid=(4, 4, 2),
        shape=(5, 5, 2),
    ),
    "1d_shrink": dict(
        total_roi=roi((0,), (95,)),
        read_roi=roi((0,), (10,)),
        write_roi=roi((0,), (10,)),
        fit="shrink",
        grid=(10,),
        shape=(10,),
    ),
}


@MODES
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_store_layout_read_back_with_zarr(mp, geometry, tmp_path, calls):
    g = dict(GEOMETRIES[geometry])
    grid, shape = g.pop("grid"), g.pop("shape")
    path = tmp_path / "store"
    probe = daisy.Task("probe", **g, process_function=lambda b: None)
    every = offsets_of(probe)
    failed = every[::3]
    task = daisy.Task(
        "layout",
        **g,
        process_function=recorder(calls, failing("status", failed)),
        max_retries=0,
        read_write_conflict=False,
        tracking_path=path,
    )
    assert task.block_grid_shape == grid
    assert store_shape(task) == shape
    run(task, mp)
    ran = set(o for _, o in take_calls(calls))
    assert ran == set(every)

    # the group
    meta = json.loads((path / "zarr.json").read_text())
    assert meta["zarr_format"] == 3
    assert meta["node_type"] == "group"
    attrs = meta["attributes"]
    assert re.fullmatch(r"[0-9a-f]{64}", attrs["daisy_task_hash"])
    assert isinstance(attrs["daisy_layout"], dict) and attrs["daisy_layout"]
    # the arrays
    for name, dtype, itemsize in (("done", "uint8", 1), ("failures", "uint32", 4)):
        array_meta = json.loads((path / name / "zarr.json").read_text())
        assert array_meta["zarr_format"] == 3
        assert array_meta["node_type"] == "array"
        assert array_meta["data_type"] == dtype
        assert tuple(array_meta["shape"]) == shape
        assert array_meta["chunk_grid"]["name"] == "regular"
        assert tuple(array_meta["chunk_grid"]["configuration"]["chunk_shape"]) == shape
        assert array_meta["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
        chunk = path / name / "c" / Path(*["0"] * len(shape))
        assert chunk.is_file()
        assert chunk.stat().st_size == int(np.prod(shape)) * itemsize
    group = zarr.open_group(str(path), mode="r")
    assert dict(group.attrs)["daisy_task_hash"] == attrs["daisy_task_hash"]
    done, failures = group["done"], group["failures"]
    assert done.dtype == np.uint8 and failures.dtype == np.uint32
    assert done.shape == shape and failures.shape == shape
    assert done.chunks == shape
    # no compression: the chunk file is the raw little-endian array
    raw = np.fromfile(path / "done" / "c" / Path(*["0"] * len(shape)), dtype="<u1")
    np.testing.assert_array_equal(raw.reshape(shape), done[...])
    raw = np.fromfile(path / "failures" / "c" / Path(*["0"] * len(shape)), dtype="<u4")
    np.testing.assert_array_equal(raw.reshape(shape), failures[...])

    succeeded = set(every) - set(failed)
    np.testing.assert_array_equal(done[...], expected_done_array(task, succeeded))
    expected_failures = np.zeros(shape, dtype=np.uint32)
    for o in failed:
        expected_failures[store_cell(task, o)] = 1
    np.testing.assert_array_equal(failures[...], expected_failures)


def test_store_grid_is_anchored_at_total_roi_not_the_write_roi(tmp_path, calls):
    """With a context two blocks wide the store's cell of a block is
    ``(write_offset - total_offset) // write_shape``: the first block sits at
    cell (2, 2) and the grid is larger than block_grid_shape."""
    path = tmp_path / "store"
    task = daisy.Task(
        "anchored",
        roi((0, 0), (60, 50)),
        roi((-20, -20), (30, 30)),
        roi((0, 0), (10, 10)),
        process_function=recorder(calls),
        read_write_conflict=False,
        tracking_path=path,
    )
    assert task.block_grid_shape == (4, 3)
    run(task, False)
    done, _, _ = read_store(path)
    assert done.shape == (6, 5)
    expected = np.zeros((6, 5), dtype=np.uint8)
    expected[2:, 2:] = 1
    np.testing.assert_array_equal(done, expected)


# --------------------------------------------------------------------------
# skipping what is done


@MODES
def test_done_blocks_are_skipped_and_shown_in_the_summary(mp, tmp_path, calls, capsys):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("skipper", 12, recorder(calls), max_workers=3)
    assert daisy.run_blockwise(task, multiprocessing=mp, progress=False, summary=True)
    assert take_calls(calls) == Counter(keys(task))
    assert "(skipped 0)" in capsys.readouterr().out
    assert daisy.run_blockwise(task, multiprocessing=mp, progress=False, summary=True)
    assert take_calls(calls) == Counter()
    out = capsys.readouterr().out
    assert "completed ✔: 12 (skipped 12)" in out, out
    states = run(task, mp)
    s = states["skipper"]
    assert (s.skipped_count, s.completed_count, s.total_block_count) == (12, 12, 12)
    assert (s.failed_count, s.orphaned_count) == (0, 0)
    assert take_calls(calls) == Counter()


@MODES
def test_fully_skipped_upstream_releases_its_downstream(mp, tmp_path, calls):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    up = line_task("up", 6, recorder(calls), max_workers=2)
    run(up, mp)
    assert take_calls(calls) == Counter(keys(up))
    down = reader_task("down", up, 6, recorder(calls), max_workers=2)
    states = run([up, down], mp)
    assert take_calls(calls) == Counter(keys(down))
    assert states["up"].skipped_count == 6 and states["up"].completed_count == 6
    assert states["down"].completed_count == 6 and states["down"].skipped_count == 0
    assert done_offsets(down, tmp_path / "tracking" / "down") == set(offsets_of(down))


@MODES
def test_one_info_record_per_task_that_skipped(mp, tmp_path, calls, caplog):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    a = line_task("A", 4, recorder(calls))
    c = line_task("C", 3, recorder(calls))
    run([a, c], mp)
    take_calls(calls)
    b = line_task("B", 5, recorder(calls))
    caplog.clear()
    caplog.set_level(logging.INFO, logger="daisy")
    run([a, b, c], mp)
    assert take_calls(calls) == Counter(keys(b))
    records = [
        r
        for r in caplog.records
        if r.name.startswith("daisy") and "skipped" in r.getMessage() and r.levelno == logging.INFO
    ]
    assert len(records) == 2, [r.getMessage() for r in records]
    messages = sorted(r.getMessage() for r in records)
    assert "'A'" in messages[0] and "4/4" in messages[0], messages
    assert "'C'" in messages[1] and "3/3" in messages[1], messages
    assert not any("'B'" in m for m in messages)


# --------------------------------------------------------------------------
# failures and resumption


@pytest.mark.parametrize(
    "mp,how",
    [(False, "status"), (True, "status"), (True, "raise")],
    ids=["serial-status", "multiprocess-status", "multiprocess-raise"],
)
def test_failed_and_orphaned_blocks_stay_unmarked_and_rerun(mp, how, tmp_path, calls, log_dir):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    bad = [(20,), (70,)]
    up = line_task("up", 10, recorder(calls, failing(how, bad)), max_retries=1, max_workers=2)
    down = reader_task("down", up, 10, recorder(calls), max_workers=2)
    states = run([up, down], mp)
    first = take_calls(calls)
    assert states["up"].failed_count == 2
    # block i of down reads up's blocks i-1..i+1: offsets 10..30 and 60..80
    orphaned = {(10,), (20,), (30,), (60,), (70,), (80,)}
    assert states["down"].orphaned_count == len(orphaned), worker_logs(log_dir)
    assert {o for t, o in first if t == "down"} == set(offsets_of(down)) - orphaned
    assert first[("up", (20,))] == 2 and first[("up", (70,))] == 2

    assert done_offsets(up, base / "up") == set(offsets_of(up)) - set(bad)
    assert done_offsets(down, base / "down") == set(offsets_of(down)) - orphaned
    _, failures, _ = read_store(base / "up")
    expected = np.zeros(10, dtype=np.uint32)
    expected[[2, 7]] = 2  # max_retries=1: two failed attempts each
    np.testing.assert_array_equal(failures, expected)
    _, failures, _ = read_store(base / "down")
    assert not failures.any()

    # the bug is fixed: exactly the failed and orphaned blocks run
    up.process_function = recorder(calls)
    states = run([up, down], mp)
    assert take_calls(calls) == Counter(keys(up, bad) | keys(down, orphaned))
    assert states["up"].skipped_count == 8 and states["up"].completed_count == 10
    assert states["down"].skipped_count == 4 and states["down"].completed_count == 10
    assert done_offsets(up, base / "up") == set(offsets_of(up))
    assert done_offsets(down, base / "down") == set(offsets_of(down))
    _, failures, _ = read_store(base / "up")
    np.testing.assert_array_equal(failures, expected)  # history is kept


@pytest.mark.parametrize("how", ["raise", "status", "sigkill", "timeout"])
def test_failures_array_counts_every_failed_attempt(how, tmp_path, calls, log_dir):
    """Block 1 fails every attempt (max_retries=2: three), block 3 only its
    first one."""
    path = tmp_path / "store"
    once = tmp_path / "once"
    once.mkdir()
    always, first_only = failing(how, [(10,)]), failing(how, [(30,)], once_dir=once)

    def body(block):
        always(block)
        first_only(block)

    task = line_task(
        "counted",
        5,
        recorder(calls, body),
        max_retries=2,
        max_workers=2,
        timeout=0.75 if how == "timeout" else None,
        tracking_path=path,
    )
    states = run(task, True)
    s = states["counted"]
    assert (s.completed_count, s.failed_count) == (4, 1), worker_logs(log_dir)
    done, failures, _ = read_store(path)
    np.testing.assert_array_equal(done, [1, 0, 1, 1, 1])
    np.testing.assert_array_equal(failures, [0, 3, 0, 1, 0])
    assert failures.dtype == np.uint32


@MODES
def test_a_failing_post_check_fails_the_block_and_leaves_it_unmarked(mp, tmp_path, calls):
    path = tmp_path / "store"

    def pre(block):
        return False

    def post(block):
        return tuple(block.write_roi.offset) != (20,)

    task = line_task(
        "post", 4, recorder(calls), check_function=(pre, post), max_retries=1, tracking_path=path
    )
    states = run(task, mp)
    assert states["post"].failed_count == 1
    assert take_calls(calls)[("post", (20,))] == 2
    done, failures, _ = read_store(path)
    np.testing.assert_array_equal(done, [1, 1, 0, 1])
    np.testing.assert_array_equal(failures, [0, 0, 2, 0])


@MODES
def test_check_function_is_asked_after_the_marker(mp, tmp_path, calls):
    path = tmp_path / "store"
    checks = tmp_path / "checks"
    checks.mkdir()
    task = line_task(
        "checked",
        8,
        recorder(calls, failing("status", [(40,), (50,), (60,), (70,)])),
        max_retries=0,
        tracking_path=path,
    )
    run(task, mp)
    assert done_offsets(task, path) == {(0,), (10,), (20,), (30,)}
    take_calls(calls)

    claimed_done = {(40,), (50,)}
    check_calls = str(checks)

    def check(block):
        offset = tuple(int(c) for c in block.write_roi.offset)
        with open(os.path.join(check_calls, f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{block.task_id} {' '.join(map(str, offset))}\n")
        return offset in claimed_done

    task2 = line_task(
        "checked", 8, recorder(calls), check_function=check, max_retries=0, tracking_path=path
    )
    states = run(task2, mp)
    # the check is not asked about marked blocks, and each other block once
    assert take_calls(checks) == Counter(keys(task2, [(40,), (50,), (60,), (70,)]))
    assert take_calls(calls) == Counter(keys(task2, [(60,), (70,)]))
    assert states["checked"].skipped_count == 6
    assert states["checked"].completed_count == 8
    # blocks the check found done are marked, so the next run never asks
    assert done_offsets(task2, path) == set(offsets_of(task2))
    states = run(task2, mp)
    assert take_calls(checks) == Counter()
    assert take_calls(calls) == Counter()
    assert states["checked"].skipped_count == 8


@MODES
def test_check_function_saying_not_done_runs_the_block(mp, tmp_path, calls):
    path = tmp_path / "store"
    checked = []

    def never_done(block):
        checked.append(block.block_id[1])
        return False

    task = line_task("never", 4, recorder(calls), check_function=never_done, tracking_path=path)
    run(task, mp)
    assert take_calls(calls) == Counter(keys(task))
    assert sorted(checked) == [0, 1, 2, 3]  # the check runs in the driver
    assert done_offsets(task, path) == set(offsets_of(task))


# --------------------------------------------------------------------------
# reset


@MODES
def test_reset_deletes_only_the_store(mp, tmp_path, calls):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    a = line_task("a", 5, recorder(calls))
    b = line_task("b", 3, recorder(calls))
    run([a, b], mp)
    take_calls(calls)
    (base / "notes.txt").write_text("keep me")
    b_before = snapshot(base / "b")
    a.reset()
    # the markers go, the run history stays (test_history.py)
    assert sorted(p.name for p in (base / "a").iterdir()) == ["daisy.lock", "runs.jsonl"]
    assert (base / "notes.txt").read_text() == "keep me"
    assert snapshot(base / "b") == b_before
    states = run([a, b], mp)
    assert take_calls(calls) == Counter(keys(a))
    assert states["a"].skipped_count == 0 and states["b"].skipped_count == 3
    a.reset(history=True)
    assert not (base / "a").exists()
    a.reset()
    a.reset(history=True)  # nothing to delete is fine
    line_task("untracked", 2, recorder(calls), tracking_path=False).reset()


@pytest.mark.parametrize("content", ["foreign_file", "zarr_group_without_hash", "bare_array"])
def test_reset_refuses_a_directory_that_is_not_a_store(content, tmp_path, calls):
    path = tmp_path / "precious"
    path.mkdir()
    if content == "foreign_file":
        (path / "data.txt").write_text("do not delete")
    elif content == "zarr_group_without_hash":
        g = zarr.open_group(str(path), mode="w")
        g.create_array("x", shape=(3,), dtype="uint8")[:] = 7
    else:
        zarr.create_array(str(path), shape=(4,), dtype="uint8")[:] = 1
    before = snapshot(path)
    task = line_task("t", 4, recorder(calls), tracking_path=path)
    with pytest.raises(OSError):
        task.reset()
    assert snapshot(path) == before


# --------------------------------------------------------------------------
# layout guard

BASE_2D = dict(
    total_roi=roi((0, 0), (40, 40)),
    read_roi=roi((-5, -5), (20, 20)),
    write_roi=roi((0, 0), (10, 10)),
    fit="valid",
)
CHANGES = {
    "write_roi": dict(write_roi=roi((5, 5), (10, 10))),
    "read_roi": dict(read_roi=roi((-4, -4), (18, 18))),
    "fit": dict(fit="overhang"),
    "block_size": dict(read_roi=roi((-5, -5), (15, 15)), write_roi=roi((0, 0), (5, 5))),
    "total_shrunk": dict(total_roi=roi((0, 0), (30, 40))),
    "total_off_grid": dict(total_roi=roi((-3, 0), (43, 40))),
}


def hash_of(geometry, tmp_path):
    """The layout hash daisy gives a fresh store of ``geometry``."""
    path = tmp_path / f"fresh_{len(list(tmp_path.glob('fresh_*')))}"
    task = daisy.Task("fresh", **geometry, process_function=lambda b: None, tracking_path=path)
    run(task, False)
    return read_store(path)[2]["daisy_task_hash"]


@MODES
@pytest.mark.parametrize("change", list(CHANGES))
def test_another_layout_raises_layout_mismatch(mp, change, tmp_path, calls):
    path = tmp_path / "store"
    task = daisy.Task("guarded", **BASE_2D, process_function=recorder(calls), tracking_path=path)
    run(task, mp)
    take_calls(calls)
    old_hash = read_store(path)[2]["daisy_task_hash"]
    before = snapshot(path)
    changed = {**BASE_2D, **CHANGES[change]}
    new_hash = hash_of(changed, tmp_path)
    assert new_hash != old_hash
    task2 = daisy.Task("guarded", **changed, process_function=recorder(calls), tracking_path=path)
    with pytest.raises(daisy.LayoutMismatch) as info:
        run(task2, mp)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert str(path) in message
    assert old_hash in message and new_hash in message
    assert "rm -rf" in message
    assert take_calls(calls) == Counter()
    assert snapshot(path) == before


@MODES
def test_task_id_and_worker_count_do_not_change_the_hash(mp, tmp_path, calls):
    path = tmp_path / "shared_store"
    first = daisy.Task(
        "first", **BASE_2D, process_function=recorder(calls), max_workers=1, tracking_path=path
    )
    run(first, mp)
    assert len(take_calls(calls)) == 9
    old_hash = read_store(path)[2]["daisy_task_hash"]
    renamed = daisy.Task(
        "renamed",
        **BASE_2D,
        process_function=recorder(calls),
        max_workers=3,
        max_retries=5,
        timeout=20,
        tracking_path=path,
    )
    # the store records its task (issue 26, item 11): another task id is
    # refused until the renamed task adopts the store, keeping its marks
    with pytest.raises(daisy.LayoutMismatch, match='belongs to task "first"'):
        run(renamed, mp)
    assert take_calls(calls) == Counter()
    renamed.adopt_tracking_store()
    states = run(renamed, mp)
    assert take_calls(calls) == Counter()
    assert states["renamed"].skipped_count == 9
    assert read_store(path)[2]["daisy_task_hash"] == old_hash
    # more workers, retries and a timeout under the same id: the same store
    again = daisy.Task(
        "renamed", **BASE_2D, process_function=recorder(calls), max_workers=2, tracking_path=path
    )
    assert run(again, mp)["renamed"].skipped_count == 9


@MODES
@pytest.mark.parametrize(
    "content", ["bare_zarr_array", "foreign_files", "zarr_group_without_hash", "garbage_json"]
)
def test_a_directory_that_is_not_a_store_is_refused_untouched(mp, content, tmp_path, calls):
    path = tmp_path / "occupied"
    if content == "bare_zarr_array":
        # what an older daisy wrote: a bare Zarr v3 array, not a group
        array = zarr.create_array(str(path), shape=(3, 3), dtype="uint8", fill_value=0)
        array[:] = np.eye(3, dtype=np.uint8)
    elif content == "foreign_files":
        path.mkdir()
        (path / "results.csv").write_text("a,b\n1,2\n")
        (path / "sub").mkdir()
        (path / "sub" / "more.bin").write_bytes(b"\x00\x01")
    elif content == "zarr_group_without_hash":
        g = zarr.open_group(str(path), mode="w")
        g.attrs["owner"] = "someone else"
        g.create_array("done", shape=(3, 3), dtype="uint8")[:] = 1
    else:
        path.mkdir()
        (path / "zarr.json").write_text("{not json")
    before = snapshot(path)
    assert before
    task = daisy.Task("victim", **BASE_2D, process_function=recorder(calls), tracking_path=path)
    with pytest.raises(daisy.LayoutMismatch) as info:
        run(task, mp)
    assert str(path) in str(info.value)
    assert "rm -rf" in str(info.value)
    assert take_calls(calls) == Counter()
    assert snapshot(path) == before


@MODES
def test_an_empty_existing_directory_becomes_a_store(mp, tmp_path, calls):
    path = tmp_path / "empty"
    path.mkdir()
    task = daisy.Task("fresh", **BASE_2D, process_function=recorder(calls), tracking_path=path)
    run(task, mp)
    assert done_offsets(task, path) == set(offsets_of(task))


# --------------------------------------------------------------------------
# a grown volume

BLOCK_3D = dict(read_roi=roi((-4, -4, -4), (12, 12, 12)), write_roi=roi((0, 0, 0), (4, 4, 4)))


def task_3d(task_id, total, process_function, path, **kwargs):
    return daisy.Task(
        task_id,
        total,
        **BLOCK_3D,
        process_function=process_function,
        read_write_conflict=False,
        tracking_path=path,
        max_workers=3,
        **kwargs,
    )


@MODES
def test_grown_volume_keeps_every_done_block(mp, tmp_path, calls):
    path = tmp_path / "store"
    small_total = roi((0, 0, 0), (20, 16, 16))
    small = task_3d("vol", small_total, recorder(calls), path)
    assert small.block_grid_shape == (3, 2, 2)
    not_done = [offsets_of(small)[1], offsets_of(small)[-1]]
    small.process_function = recorder(calls, failing("status", not_done))
    small.max_retries = 0
    run(small, mp)
    take_calls(calls)
    done_small = set(offsets_of(small)) - set(not_done)
    assert done_offsets(small, path) == done_small
    old_hash = read_store(path)[2]["daisy_task_hash"]

    # two blocks more towards negative y, two more along z
    grown_total = roi((0, -8, 0), (20, 24, 24))
    grown = task_3d("vol", grown_total, recorder(calls), path)
    assert grown.block_grid_shape == (3, 4, 4)
    assert set(offsets_of(small)) <= set(offsets_of(grown))
    states = run(grown, mp)
    ran = take_calls(calls)
    assert ran == Counter(keys(grown, set(offsets_of(grown)) - done_small))
    assert max(ran.values()) == 1
    assert states["vol"].skipped_count == len(done_small)
    assert states["vol"].completed_count == 48

    done, failures, attrs = read_store(path)
    assert done.shape == store_shape(grown) == (4, 5, 5)
    assert failures.shape == done.shape
    np.testing.assert_array_equal(done, expected_done_array(grown, offsets_of(grown)))
    # the failure counts moved with their blocks
    expected_failures = np.zeros(done.shape, dtype=np.uint32)
    for o in not_done:
        expected_failures[store_cell(grown, o)] = 1
    np.testing.assert_array_equal(failures, expected_failures)
    assert attrs["daisy_task_hash"] != old_hash
    assert attrs["daisy_task_hash"] == hash_of(
        dict(total_roi=grown_total, **BLOCK_3D, fit="valid"), tmp_path
    )

    # a rerun of the grown task skips everything
    states = run(grown, mp)
    assert take_calls(calls) == Counter()
    assert states["vol"].skipped_count == 48

    # shrinking back is refused, and so is another block size
    before = snapshot(path)
    with pytest.raises(daisy.LayoutMismatch):
        run(task_3d("vol", small_total, recorder(calls), path), mp)
    other_block = daisy.Task(
        "vol",
        grown_total,
        roi((-4, -4, -4), (16, 16, 16)),
        roi((0, 0, 0), (8, 8, 8)),
        process_function=recorder(calls),
        tracking_path=path,
    )
    with pytest.raises(daisy.LayoutMismatch):
        run(other_block, mp)
    assert take_calls(calls) == Counter()
    assert snapshot(path) == before


@pytest.mark.parametrize("fit", ["shrink", "overhang"])
def test_growth_reruns_a_block_the_old_border_cut(fit, tmp_path, calls):
    """The block the old border cut at 95 is a different block once the
    volume grows; it runs again, the others not."""
    path = tmp_path / "store"
    small = daisy.Task(
        "cut",
        roi((0,), (95,)),
        roi((0,), (10,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        fit=fit,
        tracking_path=path,
    )
    run(small, False)
    assert len(take_calls(calls)) == 10
    grown = line_task("cut", 12, recorder(calls), fit=fit, tracking_path=path)
    run(grown, False)
    assert take_calls(calls) == Counter(keys(grown, [(90,), (100,), (110,)]))
    assert done_offsets(grown, path) == set(offsets_of(grown))


# --------------------------------------------------------------------------
# crash consistency and concurrency

DRIVER = """
import json, os, sys, time
import numpy as np
import daisy

TMP = {tmp!r}
RUN = sys.argv[1]
N, B = 8, 10
daisy.logging.set_log_basedir(os.path.join(TMP, "logs", RUN))
daisy.set_tracking_basedir(os.path.join(TMP, "tracking"))
VOLUME = daisy.Roi((0, 0), (N * B, N * B))


def note(what, block):
    with open(os.path.join(TMP, "calls", f"{{RUN}}_{{os.getpid()}}.txt"), "a") as f:
        f.write(f"{{what}} {{block.task_id}} {{block.block_id[1]}}\\n")


def array(name):
    return np.memmap(os.path.join(TMP, name), dtype=np.int32, mode="r+", shape=(N * B, N * B))


def write_a(block):
    note("start", block)
    out = array("a.dat")
    out[block.write_roi.to_slices()] = block.block_id[1]
    out.flush()
    time.sleep(0.05)
    note("end", block)


def write_b(block):
    note("start", block)
    a = array("a.dat")
    if (a[block.read_roi.intersect(VOLUME).to_slices()] < 0).any():
        raise RuntimeError("upstream output missing")
    out = array("b.dat")
    out[block.write_roi.to_slices()] = a[block.write_roi.to_slices()] + 1000
    out.flush()
    time.sleep(0.05)
    note("end", block)


a = daisy.Task("A", VOLUME, daisy.Roi((0, 0), (B, B)), daisy.Roi((0, 0), (B, B)),
               process_function=write_a, max_workers=4)
b = daisy.Task("B", daisy.Roi((-B, -B), ((N + 2) * B, (N + 2) * B)),
               daisy.Roi((-B, -B), (3 * B, 3 * B)), daisy.Roi((0, 0), (B, B)),
               process_function=write_b, upstream_tasks=[a], read_write_conflict=False,
               max_workers=4)
states = daisy.Server().run_blockwise([a, b], progress=False)
print(json.dumps({{t: [s.completed_count, s.skipped_count, s.failed_count]
                  for t, s in states.items()}}))
"""


def read_driver_calls(tmp_path, run_name, what):
    out = Counter()
    for path in (tmp_path / "calls").glob(f"{run_name}_*.txt"):
        for line in path.read_text().splitlines():
            kind, task_id, spatial_id = line.split()
            if kind == what:
                out[(task_id, int(spatial_id))] += 1
    return out


def test_driver_killed_mid_run_resumes_exactly_the_unfinished_blocks(tmp_path):
    n, b = 8, 10
    (tmp_path / "calls").mkdir()
    for name in ("a.dat", "b.dat"):
        np.memmap(tmp_path / name, dtype=np.int32, mode="w+", shape=(n * b, n * b))[:] = -1
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER.format(tmp=str(tmp_path))))
    # the driver's tasks, to map spatial ids to blocks and store cells
    a = daisy.Task("A", roi((0, 0), (n * b, n * b)), roi((0, 0), (b, b)), roi((0, 0), (b, b)))
    bt = daisy.Task(
        "B",
        roi((-b, -b), ((n + 2) * b, (n + 2) * b)),
        roi((-b, -b), (3 * b, 3 * b)),
        roi((0, 0), (b, b)),
        upstream_tasks=[a],
    )
    graph = daisy.DependencyGraph([a, bt])
    tasks = {"A": a, "B": bt}
    blocks = {(t, blk.block_id[1]): blk for t in tasks for blk in graph.blocks(t)}
    all_ids = set(blocks)
    assert len(all_ids) == 128

    proc = subprocess.Popen(
        [sys.executable, str(driver), "run1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers = set()
    try:
        deadline = time.monotonic() + 30
        while sum(read_driver_calls(tmp_path, "run1", "end").values()) < 60:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the first run made no progress"
            workers |= {pid for pid, _ in children_of(proc.pid)}
            time.sleep(0.01)
        workers |= {pid for pid, _ in children_of(proc.pid)}
        proc.kill()
        proc.communicate(timeout=10)
        assert workers, "no worker processes were seen"
        # the workers die with their driver (PR_SET_PDEATHSIG); PID 1 of a
        # sandbox may not reap them: dead means gone or a zombie
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if all(proc_state(pid) in (None, "Z") for pid in workers):
                break
            time.sleep(0.05)
        survivors = {pid: proc_state(pid) for pid in workers}
        survivors = {pid: s for pid, s in survivors.items() if s not in (None, "Z")}
        assert not survivors, f"workers outlived their killed driver: {survivors}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in workers:
            if proc_state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)

    # what the store says before the rerun
    done_before = set()
    for task_id in ("A", "B"):
        path = tmp_path / "tracking" / task_id
        if not (path / "zarr.json").exists():
            continue
        done = zarr.open_group(str(path), mode="r")["done"][...]
        assert set(np.unique(done)) <= {0, 1}
        for (t, sid), blk in blocks.items():
            offset = tuple(int(c) for c in blk.write_roi.offset)
            if t == task_id and done[store_cell(tasks[t], offset)]:
                done_before.add((t, sid))
        assert int(done.sum()) == sum(1 for t, _ in done_before if t == task_id)
    finished_run1 = set(read_driver_calls(tmp_path, "run1", "end"))
    assert done_before, "nothing was marked done before the kill"
    assert done_before < all_ids, "the first run finished before it was killed"
    # a mark is only ever written after its block completed
    assert done_before <= finished_run1
    a_out = np.memmap(tmp_path / "a.dat", dtype=np.int32, mode="r", shape=(n * b, n * b))
    for task_id, sid in done_before:
        if task_id == "A":
            assert (a_out[blocks[("A", sid)].write_roi.to_slices()] == sid).all()

    # the rerun, to completion
    rerun = subprocess.run(
        [sys.executable, str(driver), "run2"], capture_output=True, text=True, timeout=60
    )
    assert rerun.returncode == 0, rerun.stderr
    states = json.loads(rerun.stdout.strip().splitlines()[-1])
    ran = read_driver_calls(tmp_path, "run2", "start")
    assert not set(ran) & done_before, "blocks marked done ran again"
    assert set(ran) == all_ids - done_before
    assert max(ran.values()) == 1, {k: v for k, v in ran.items() if v > 1}
    for task_id in ("A", "B"):
        skipped = sum(1 for t, _ in done_before if t == task_id)
        assert states[task_id] == [64, skipped, 0]

    expected_a = np.zeros((n * b, n * b), dtype=np.int32)
    for (t, sid), blk in blocks.items():
        if t == "A":
            expected_a[blk.write_roi.to_slices()] = sid
    a_out = np.memmap(tmp_path / "a.dat", dtype=np.int32, mode="r", shape=(n * b, n * b))
    b_out = np.memmap(tmp_path / "b.dat", dtype=np.int32, mode="r", shape=(n * b, n * b))
    np.testing.assert_array_equal(a_out, expected_a)
    np.testing.assert_array_equal(b_out, expected_a + 1000)
    for task_id in ("A", "B"):
        done = zarr.open_group(str(tmp_path / "tracking" / task_id), mode="r")["done"][...]
        assert int(done.sum()) == 64


@MODES
def test_the_store_is_readable_with_zarr_while_a_run_writes_it(mp, tmp_path, calls):
    """Each block opens the task's store with zarr-python mid-run. Serially,
    each block sees exactly the blocks that ran before it marked done."""
    path = tmp_path / "store"
    seen_dir = str(tmp_path / "seen")
    os.mkdir(seen_dir)
    store = str(path)

    def peek(block):
        done = zarr.open_group(store, mode="r")["done"][...]
        assert done.shape == (8,) and set(np.unique(done)) <= {0, 1}
        with open(os.path.join(seen_dir, f"{block.block_id[1]}.txt"), "w") as f:
            f.write(",".join(str(int(i)) for i in np.flatnonzero(done)))

    task = line_task("peeked", 8, recorder(calls, peek), max_workers=2, tracking_path=path)
    states = run(task, mp)
    assert states["peeked"].completed_count == 8
    seen = {int(p.stem): p.read_text() for p in Path(seen_dir).iterdir()}
    assert sorted(seen) == list(range(8))
    if not mp:
        order = sorted(seen, key=lambda i: len(seen[i]))
        for k, sid in enumerate(order):
            marked = [int(i) for i in seen[sid].split(",") if i]
            assert marked == sorted(order[:k])


def test_many_workers_record_concurrently_without_losing_a_mark(tmp_path, calls, log_dir):
    path = tmp_path / "store"
    task = daisy.Task(
        "many",
        roi((0, 0), (100, 200)),
        roi((0, 0), (10, 10)),
        roi((0, 0), (10, 10)),
        process_function=recorder(calls),
        max_workers=6,
        tracking_path=path,
    )
    assert task.num_blocks == 200
    states = run(task, True)
    assert states["many"].completed_count == 200, worker_logs(log_dir)
    assert take_calls(calls) == Counter(keys(task))
    done, failures, _ = read_store(path)
    assert done.shape == (10, 20)
    assert int(done.sum()) == 200 and (done == 1).all()
    assert not failures.any()
    states = run(task, True)
    assert states["many"].skipped_count == 200
    assert take_calls(calls) == Counter()


SPARSE_RUN = textwrap.dedent(
    """
    import sys, time
    import daisy

    def first_then_slow(block):
        if block.block_id[1] != 0:
            time.sleep(600)

    task = daisy.Task("measured", daisy.Roi((0, 0), (1000, 1000)), daisy.Roi((0, 0), (1, 1)),
                      daisy.Roi((0, 0), (1, 1)), process_function=first_then_slow,
                      max_workers=1, resource_tracking=True, tracking_path=sys.argv[1])
    daisy.run_blockwise([task])
    """
)


def test_resource_tracking_arrays_of_a_stopped_run_are_sparse_and_read_as_their_fill(tmp_path):
    # 10^6 blocks with resource tracking, the driver killed after its first
    # block: the arrays of never-measured cells (NaN, "no worker") cost no
    # disk, and zarr-python reads them as their fill values
    store = tmp_path / "store"
    driver = subprocess.Popen(
        [sys.executable, "-c", SPARSE_RUN, str(store)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (store / "done" / "zarr.json").is_file():
                done = zarr.open_group(str(store), mode="r")["done"]
                if int(np.count_nonzero(done[...])) >= 1:
                    break
            assert driver.poll() is None, "the driver left before its first block was marked"
            time.sleep(0.1)
        else:
            pytest.fail("no block marked in 120 s")
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    apparent = allocated = 0
    for chunk in store.rglob("c/0/0"):
        apparent += chunk.stat().st_size
        allocated += chunk.stat().st_blocks * 512
    assert apparent >= 69_000_000  # 10^6 cells of 69 bytes
    assert allocated * 4 < apparent, f"{allocated} of {apparent} bytes allocated"
    group = zarr.open_group(str(store), mode="r")
    wall = group["wall_seconds"][...]
    assert wall.shape == (1000, 1000)
    assert np.count_nonzero(~np.isnan(wall)) == 1 and wall[0, 0] >= 0
    assert np.isnan(group["sent_at"][...]).sum() == 10**6 - 1
    workers = group["worker_id"][...]
    assert np.count_nonzero(workers != np.iinfo(np.uint32).max) == 1
    assert group["peak_rss_bytes"][0, 0] > 0
