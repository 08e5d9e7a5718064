"""``Task(skip_mask=...)``: one cell per block (``Task.block_grid_shape``, in
C order, cell (0, 0, ...) the first block whatever the context), nonzero
meaning "skip this block in this run". Masked blocks are not run, count as
skipped, release their downstream blocks and are never written to the
tracking store (read back with zarr-python).

Block functions note every call as a line ``<task_id> <write offset...>``
in ``<calls dir>/<pid>.txt``, so a test knows which blocks ran, in this
process or on worker processes alike.
"""

from __future__ import annotations

import logging
import re
from collections import Counter

import numpy as np
import pytest
import zarr
from conftest import offsets_of, recorder, take_calls
from conftest import run_tasks as run

import daisy

RUN_TIMEOUT = 60.0
MODES = pytest.mark.parametrize("mp", [False, True], ids=["serial", "multiprocess"])


def roi(offset, shape):
    return daisy.Roi(tuple(offset), tuple(shape))


def mask_cell(task, offset):
    """The mask cell of a block: anchored at the total *write* ROI."""
    return tuple(
        (o - t) // s
        for o, t, s in zip(offset, task.total_write_roi.offset, task.write_roi.shape, strict=True)
    )


def store_cell(task, offset):
    """The tracking store's cell of a block: anchored at ``total_roi``."""
    return tuple(
        (o - t) // s
        for o, t, s in zip(offset, task.total_roi.offset, task.write_roi.shape, strict=True)
    )


def masked_offsets(task, mask):
    mask = np.asarray(mask)
    return {o for o in offsets_of(task) if mask[mask_cell(task, o)]}


def keys(task, offsets):
    return Counter({(task.task_id, o): 1 for o in offsets})


def done_offsets(task, path):
    done = zarr.open_group(str(path), mode="r")["done"][...]
    assert set(np.unique(done)) <= {0, 1}
    by_cell = {store_cell(task, o): o for o in offsets_of(task)}
    marked = {tuple(int(i) for i in idx) for idx in np.argwhere(done == 1)}
    assert marked <= set(by_cell)
    return {by_cell[c] for c in marked}


def store_hash(path):
    return dict(zarr.open_group(str(path), mode="r").attrs)["daisy_task_hash"]


# a 2D task whose context (10 before, 10 after) is a block wide
WIDE = dict(
    total_roi=roi((0, 0), (95, 60)),
    read_roi=roi((-10, -10), (30, 30)),
    write_roi=roi((0, 0), (10, 10)),
)

# context two blocks wide, on the low side only
LOW = dict(
    total_roi=roi((0, 0), (60, 50)),
    read_roi=roi((-20, -20), (30, 30)),
    write_roi=roi((0, 0), (10, 10)),
)


def task_of(task_id, geometry, process_function, **kwargs):
    kwargs.setdefault("read_write_conflict", False)
    return daisy.Task(task_id, **geometry, process_function=process_function, **kwargs)


# --------------------------------------------------------------------------
# the mask's shape and type


@pytest.mark.parametrize(
    "fit,shape_1d,shape_2d",
    [("valid", (9,), (7, 4)), ("overhang", (10,), (8, 4)), ("shrink", (10,), (8, 4))],
)
def test_block_grid_shape_per_fit(fit, shape_1d, shape_2d, calls):
    line = daisy.Task(
        "line",
        roi((0,), (95,)),
        roi((0,), (10,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        fit=fit,
    )
    assert line.block_grid_shape == shape_1d
    assert line.num_blocks == int(np.prod(shape_1d))
    wide = task_of("wide", WIDE, recorder(calls), fit=fit)
    assert wide.block_grid_shape == shape_2d
    assert wide.num_blocks == int(np.prod(shape_2d))
    # the block grid is anchored at the total write ROI
    assert {mask_cell(wide, o) for o in offsets_of(wide)} == set(np.ndindex(*shape_2d))
    # masks of exactly that shape are accepted...
    task_of("ok", WIDE, recorder(calls), fit=fit, skip_mask=np.zeros(shape_2d, dtype=bool))
    daisy.Task(
        "ok1",
        roi((0,), (95,)),
        roi((0,), (10,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        fit=fit,
        skip_mask=[0] * shape_1d[0],
    )
    # ...and the other fit's shape is not
    other = (10,) if shape_1d == (9,) else (9,)
    with pytest.raises(ValueError, match=re.escape(str(shape_1d))):
        daisy.Task(
            "bad1",
            roi((0,), (95,)),
            roi((0,), (10,)),
            roi((0,), (10,)),
            process_function=recorder(calls),
            fit=fit,
            skip_mask=np.zeros(other, dtype=bool),
        )


@pytest.mark.parametrize(
    "shape",
    [(8, 4), (4, 7), (28,), (7, 4, 1), (8, 5), ()],
    ids=["overhang_shape", "transposed", "flat", "extra_axis", "store_grid_shape", "scalar"],
)
def test_wrong_shape_is_rejected_naming_the_expected_shape(shape, calls):
    with pytest.raises(ValueError, match=re.escape("(7, 4)")):
        task_of("t", WIDE, recorder(calls), skip_mask=np.zeros(shape, dtype=bool))


@pytest.mark.parametrize(
    "mask",
    [
        np.zeros((7, 4), dtype=np.float64),
        np.zeros((7, 4), dtype=np.float32),
        np.zeros((7, 4), dtype=np.float16),
        np.zeros((7, 4), dtype=np.complex64),
        np.zeros((7, 4), dtype=object),
        np.full((7, 4), "x"),
        [[0.0] * 4] * 7,
    ],
    ids=["float64", "float32", "float16", "complex", "object", "str", "list_of_floats"],
)
def test_non_integer_dtypes_are_rejected(mask, calls):
    with pytest.raises(TypeError, match="skip_mask"):
        task_of("t", WIDE, recorder(calls), skip_mask=mask)


@pytest.mark.parametrize(
    "dtype",
    [bool, np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.uint64, "list"],
)
def test_bool_and_integer_dtypes_are_accepted_nonzero_skips(dtype, tmp_path, calls):
    values = np.zeros((7, 4), dtype=np.int64)
    values[0, 0] = 1
    values[3, 2] = 2
    values[6, 3] = -1 if dtype in (np.int8, np.int16, np.int32, np.int64) else 255
    values[2, 1] = 1
    if dtype == "list":
        mask = values.tolist()
    elif dtype is bool:
        mask = values != 0
    else:
        mask = values.astype(dtype)
    task = task_of("typed", WIDE, recorder(calls), skip_mask=mask)
    skipped = masked_offsets(task, values != 0)
    assert len(skipped) == 4
    states = run(task, False)
    assert take_calls(calls) == keys(task, set(offsets_of(task)) - skipped)
    assert states["typed"].skipped_count == 4
    assert states["typed"].completed_count == 28
    assert list(tmp_path.rglob("zarr.json")) == []  # untracked: no store anywhere


# --------------------------------------------------------------------------
# which blocks are skipped


@MODES
def test_cell_zero_is_the_first_block_even_with_a_wide_context(mp, calls):
    probe = task_of("probe", LOW, recorder(calls))
    assert probe.block_grid_shape == (4, 3)
    mask = np.zeros((4, 3), dtype=bool)
    mask[0, 0] = True
    task = task_of("anchor", LOW, recorder(calls), skip_mask=mask)
    states = run(task, mp)
    first = (20, 20)  # the total write ROI starts two blocks in
    assert masked_offsets(task, mask) == {first}
    assert take_calls(calls) == keys(task, set(offsets_of(task)) - {first})
    assert states["anchor"].skipped_count == 1

    # an arbitrary pattern maps in C order
    mask = np.array([[1, 0, 0], [0, 1, 1], [0, 0, 0], [1, 0, 1]], dtype=np.uint8)
    task = task_of("pattern", LOW, recorder(calls), skip_mask=mask)
    states = run(task, mp)
    expected_skipped = {(20, 20), (30, 30), (30, 40), (50, 20), (50, 40)}
    assert take_calls(calls) == keys(task, set(offsets_of(task)) - expected_skipped)
    assert states["pattern"].skipped_count == 5
    assert states["pattern"].completed_count == 12


@MODES
def test_partial_trailing_block_is_masked_by_its_own_cell(mp, calls):
    mask = np.zeros((8, 4), dtype=bool)
    mask[7, :] = True  # the row of partial blocks that overhang keeps
    task = task_of("overhang", WIDE, recorder(calls), fit="overhang", skip_mask=mask)
    run(task, mp)
    ran = {o for _, o in take_calls(calls)}
    assert {o[0] for o in ran} == {10, 20, 30, 40, 50, 60, 70}
    assert len(ran) == 28


@MODES
def test_masked_blocks_release_downstream_and_count_as_skipped(mp, calls, capsys, caplog):
    n = 6

    def line(task_id, **kwargs):
        return daisy.Task(
            task_id,
            roi((0,), (n * 10,)),
            roi((0,), (10,)),
            roi((0,), (10,)),
            process_function=recorder(calls),
            **kwargs,
        )

    up = line("up", skip_mask=np.ones(n, dtype=bool))
    down = daisy.Task(
        "down",
        roi((-10,), ((n + 2) * 10,)),
        roi((-10,), (30,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        upstream_tasks=[up],
        read_write_conflict=False,
    )
    caplog.set_level(logging.INFO, logger="daisy")
    assert daisy.run_blockwise([up, down], multiprocessing=mp, progress=False, summary=True)
    assert take_calls(calls) == keys(down, offsets_of(down))
    out = capsys.readouterr().out
    assert f"completed ✔: {n} (skipped {n})" in out, out
    assert "completed ✔: 6 (skipped 0)" in out, out
    records = [
        r for r in caplog.records if r.name.startswith("daisy") and "skipped" in r.getMessage()
    ]
    assert len(records) == 1 and "'up'" in records[0].getMessage(), records

    # a partial mask: downstream of masked and of run blocks alike runs
    mask = np.zeros(n, dtype=bool)
    mask[[1, 4]] = True
    up = line("up", skip_mask=mask)
    down = daisy.Task(
        "down",
        roi((-10,), ((n + 2) * 10,)),
        roi((-10,), (30,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        upstream_tasks=[up],
        read_write_conflict=False,
    )
    states = run([up, down], mp)
    assert take_calls(calls) == keys(up, {(0,), (20,), (30,), (50,)}) + keys(down, offsets_of(down))
    assert states["up"].skipped_count == 2 and states["up"].completed_count == n
    assert states["down"].completed_count == n and states["down"].skipped_count == 0


@MODES
def test_check_function_is_not_asked_about_masked_blocks(mp, tmp_path, calls):
    checked = []

    def check(block):
        checked.append(tuple(int(c) for c in block.write_roi.offset))
        return tuple(block.write_roi.offset) == (30,)

    mask = np.zeros(6, dtype=bool)
    mask[[0, 2]] = True
    task = daisy.Task(
        "checked",
        roi((0,), (60,)),
        roi((0,), (10,)),
        roi((0,), (10,)),
        process_function=recorder(calls),
        check_function=check,
        skip_mask=mask,
    )
    states = run(task, mp)
    assert sorted(checked) == [(10,), (30,), (40,), (50,)]
    assert take_calls(calls) == keys(task, {(10,), (40,), (50,)})
    assert states["checked"].skipped_count == 3


# --------------------------------------------------------------------------
# masks and the tracking store


@MODES
def test_masked_blocks_are_never_written_to_the_store(mp, tmp_path, calls):
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    path = base / "masked"
    every = set(offsets_of(task_of("probe", LOW, recorder(calls))))

    m1 = np.zeros((4, 3), dtype=bool)
    m1[0, :] = True
    m1[2, 1] = True
    task = task_of("masked", LOW, recorder(calls), skip_mask=m1)
    first_masked = masked_offsets(task, m1)
    assert len(first_masked) == 4
    states = run(task, mp)
    assert take_calls(calls) == keys(task, every - first_masked)
    assert states["masked"].skipped_count == 4
    assert done_offsets(task, path) == every - first_masked
    done = zarr.open_group(str(path), mode="r")["done"][...]
    assert done.shape == (6, 5)  # the store grid is anchored at total_roi
    assert not done[2, 2:].any()  # mask row 0 is store row 2
    the_hash = store_hash(path)
    assert re.fullmatch(r"[0-9a-f]{64}", the_hash)

    # another mask: over some done blocks and some never-run ones
    m2 = np.zeros((4, 3), dtype=bool)
    m2[0, 0] = True  # masked before, not done
    m2[1, :] = True  # done
    task = task_of("masked", LOW, recorder(calls), skip_mask=m2)
    second_masked = masked_offsets(task, m2)
    states = run(task, mp)
    assert take_calls(calls) == keys(task, first_masked - second_masked)
    still_undone = first_masked & second_masked
    assert still_undone == {(20, 20)}
    assert states["masked"].skipped_count == len((every - first_masked) | second_masked)
    assert done_offsets(task, path) == every - still_undone
    assert store_hash(path) == the_hash

    # no mask: exactly the block no run has done yet
    task = task_of("masked", LOW, recorder(calls))
    states = run(task, mp)
    assert take_calls(calls) == keys(task, still_undone)
    assert states["masked"].skipped_count == 11
    assert done_offsets(task, path) == every
    assert store_hash(path) == the_hash


@MODES
def test_a_store_written_by_a_fully_masked_run_still_guards_its_layout(mp, tmp_path, calls):
    path = tmp_path / "store"
    task = task_of(
        "t", LOW, recorder(calls), skip_mask=np.ones((4, 3), dtype=bool), tracking_path=path
    )
    states = run(task, mp)
    assert take_calls(calls) == Counter()
    assert states["t"].skipped_count == 12
    assert re.fullmatch(r"[0-9a-f]{64}", store_hash(path))
    assert done_offsets(task, path) == set()
    other = dict(LOW, read_roi=roi((-10, -10), (20, 20)))
    changed = task_of("t", other, recorder(calls), tracking_path=path)
    with pytest.raises(daisy.LayoutMismatch, match="rm -rf"):
        run(changed, mp)
    assert take_calls(calls) == Counter()
