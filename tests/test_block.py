"""daisy.Block: the 1.x constructor, spatial ids, status, repr, identity,
copies, pickling and the funlib ROIs it hands to user code."""

from __future__ import annotations

import copy
import math
import pickle

import cloudpickle
import numpy as np
import pytest
from conftest import make_task, roi
from hypothesis import given, settings
from hypothesis import strategies as st

import daisy
from daisy import Block, BlockStatus


def reference_cantor(position: tuple[int, ...]) -> int:
    """daisy 1.x's n-dimensional Cantor polynomial (first coordinate
    innermost), also for negative coordinates:
    sum_k C(k - 1 + x_1 + ... + x_k, k) with C the falling factorial / k!."""
    total = 0
    partial = 0
    for k, x in enumerate(position, start=1):
        partial += x
        m = k - 1 + partial
        falling = 1
        for i in range(k):
            falling *= m - i
        assert falling % math.factorial(k) == 0
        total += falling // math.factorial(k)
    return total


def trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero (funlib's Coordinate ``/``)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def block_at(position, write_shape, total_offset=None, **kwargs) -> Block:
    """A standalone block whose write ROI sits at grid ``position``."""
    dims = len(position)
    total_offset = total_offset or (0,) * dims
    offset = tuple(o + p * w for o, p, w in zip(total_offset, position, write_shape, strict=True))
    write = roi(offset, write_shape)
    return Block(roi(total_offset, (1000,) * dims), write, write, **kwargs)


# ---------------------------------------------------------------------------
# constructor and block ids
# ---------------------------------------------------------------------------


def test_constructor_argument_order_is_total_read_write():
    total, read, write = roi((0, 0), (100, 100)), roi((-5, -5), (20, 20)), roi((0, 0), (10, 10))
    b = Block(total, read, write)
    assert b.read_roi == read
    assert b.write_roi == write
    assert b.block_id == (None, 0)
    assert b.task_id is None


def test_keyword_arguments_of_the_1x_signature():
    total, rw = roi((0, 0), (100, 100)), roi((0, 0), (10, 10))
    b = Block(total_roi=total, read_roi=rw, write_roi=rw, block_id=7, task_id="x")
    assert b.block_id == ("x", 7)
    assert b.task_id == "x"


def test_block_id_is_a_task_id_spatial_id_tuple():
    b = block_at((2, 2), (5, 5), task_id="t")
    assert isinstance(b.block_id, tuple)
    assert b.block_id == ("t", 12)
    assert type(b.block_id[1]) is int


def test_given_block_id_is_used_as_is():
    b = block_at((3, 4), (10, 10), block_id=99, task_id="t")
    assert b.block_id == ("t", 99)


def test_explicit_none_block_id_computes_it():
    b = block_at((3, 4), (10, 10), block_id=None, task_id="t")
    assert b.block_id == ("t", 31)


@pytest.mark.parametrize(
    "position, expected",
    [
        ((0, 0), 0),
        ((0, 1), 1),
        ((1, 0), 2),
        ((0, 2), 3),
        ((1, 1), 4),
        ((2, 0), 5),
        ((3, 4), 31),
        ((4, 3), 32),
        ((0, 0, 1), 1),
        ((0, 1, 0), 2),
        ((1, 0, 0), 3),
        ((0, 1, 1), 5),
        ((1, 0, 1), 6),
        ((1, 1, 0), 8),
        ((1, 1, 1), 14),
        ((7,), 7),
        ((-3,), -3),
        ((-1, -1), 0),
        ((-2, -2), 4),
        ((-2, 0), -1),
        ((-2, 1), -2),
        ((0, -2), 1),
    ],
)
def test_spatial_ids_follow_the_1x_cantor_numbering(position, expected):
    assert reference_cantor(position) == expected
    b = block_at(position, (10,) * len(position), total_offset=(3,) * len(position))
    assert b.block_id == (None, expected)


def test_standalone_block_uses_the_shape_of_its_write_roi():
    # a 5-wide write ROI at (10, 10) is grid position (2, 2)
    b = Block(roi((0, 0), (100, 100)), roi((10, 10), (5, 5)), roi((10, 10), (5, 5)))
    assert b.block_id == (None, 12)


@pytest.mark.parametrize(
    "write_offset, expected",
    [(-8, -1), (-3, 0), (2, 0), (12, 0), (13, 1), (-13, -1), (-14, -1), (-18, -2)],
)
def test_spatial_id_truncates_toward_zero(write_offset, expected):
    """(write.offset - total.offset) / write.shape truncates toward zero:
    -1.1 -> -1 and -0.6 -> 0 (not floor)."""
    total = roi((3,), (100,))
    write = roi((write_offset,), (10,))
    assert Block(total, write, write).block_id == (None, expected)
    assert trunc_div(write_offset - 3, 10) == expected


def test_spatial_id_truncation_in_4d():
    total = roi((0, 0, 0, 0), (100,) * 4)
    write = roi((-11, -3, 7, 11), (10,) * 4)
    b = Block(total, write, write)
    assert b.block_id == (None, reference_cantor((-1, 0, 0, 1)))


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    dims=st.integers(1, 4),
)
def test_spatial_ids_match_the_reference(data, dims):
    total_offset = data.draw(st.lists(st.integers(-50, 50), min_size=dims, max_size=dims))
    write_offset = data.draw(st.lists(st.integers(-200, 200), min_size=dims, max_size=dims))
    write_shape = data.draw(st.lists(st.integers(1, 15), min_size=dims, max_size=dims))
    index = tuple(
        trunc_div(w - t, s) for w, t, s in zip(write_offset, total_offset, write_shape, strict=True)
    )
    write = roi(write_offset, write_shape)
    b = Block(roi(total_offset, (1000,) * dims), write, write, task_id="t")
    assert b.block_id == ("t", reference_cantor(index))


@pytest.mark.parametrize(
    "total_offset, write_offset, write_shape",
    [
        # fits in 64 bits: must be exact
        ((0,), (-(2**63),), (5,)),
        ((0, 0), (2**30, 2**30), (1, 1)),
        # the grid index or the Cantor number does not fit in 64 bits
        ((0, 0), (2**31, 2**31), (1, 1)),
        ((-(2**62),), (2**62,), (1,)),
        ((0, 0), (3037000500, 3037000500), (1, 1)),
        ((0, 0, 0), (2**40, 2**40, 2**40), (1, 1, 1)),
        ((0, 0), (-(2**62), -(2**62)), (1, 1)),
    ],
    ids=[
        "min-int",
        "2d-2**30",
        "2d-2**31",
        "index-2**63",
        "2d-cantor-past-int64",
        "3d-huge",
        "2d-negative",
    ],
)
def test_spatial_id_is_exact_or_refused(total_offset, write_offset, write_shape):
    """Large positions give the exact (Python int) id or a ValueError /
    TypeError; a wrapped-around or saturated id would collide with the id of
    another block."""
    index = tuple(
        trunc_div(w - t, s) for w, t, s in zip(write_offset, total_offset, write_shape, strict=True)
    )
    want = reference_cantor(index)
    write = roi(write_offset, write_shape)
    try:
        b = Block(roi(total_offset, (1,) * len(total_offset)), write, write)
    except (ValueError, TypeError):
        return
    assert b.block_id == (None, want)


def test_graph_blocks_number_from_the_task_total_roi():
    """The first block of a task whose lower context is larger than its write
    shape is not at grid position 0 of the total (read) ROI."""
    t = make_task("t", ((0,), (100,)), ((-15,), (30,)), ((0,), (10,)))
    graph = daisy.DependencyGraph([t])
    blocks = graph.blocks("t")
    assert blocks[0].write_roi == roi((15,), (10,))
    assert sorted(b.block_id[1] for b in blocks) == list(range(1, 9))
    for b in blocks:
        assert b.block_id == ("t", b.write_roi.offset[0] // 10)


def test_shrunk_blocks_use_the_nominal_write_shape_for_their_id():
    t = make_task("t", ((0,), (52,)), ((0,), (7,)), ((0,), (7,)), fit="shrink")
    blocks = {b.block_id[1]: b for b in daisy.DependencyGraph([t]).blocks("t")}
    last = blocks[max(blocks)]
    assert last.write_roi == roi((49,), (3,))
    assert last.block_id == ("t", 7)
    # lower context 5: the write ROIs start at 5; the last one, [47:54], is
    # cut to [47:52] and keeps the id of its nominal position, 47 // 7
    t = make_task("t", ((0,), (52,)), ((-5,), (12,)), ((0,), (7,)), fit="shrink")
    blocks = {b.block_id[1]: b for b in daisy.DependencyGraph([t]).blocks("t")}
    last = blocks[max(blocks)]
    assert last.write_roi == roi((47,), (5,))
    assert last.requested_write_roi == roi((47,), (7,))
    assert last.block_id == ("t", 6)


# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------


def test_block_status_members():
    assert [(s.name, s.value) for s in BlockStatus] == [
        ("CREATED", 0),
        ("PROCESSING", 1),
        ("SUCCESS", 2),
        ("FAILED", 3),
    ]
    assert daisy.block.BlockStatus is BlockStatus


def test_new_block_is_created():
    b = block_at((0,), (10,))
    assert b.status is BlockStatus.CREATED
    assert b.started_processing is None
    assert b.stopped_processing is None


@pytest.mark.parametrize("status", list(BlockStatus))
def test_status_get_set(status):
    b = block_at((0,), (10,))
    b.status = status
    assert b.status is status
    assert isinstance(b.status, BlockStatus)


def test_processing_timestamps_can_be_set():
    b = block_at((0,), (10,))
    b.started_processing = 1.5
    b.stopped_processing = 2.5
    assert (b.started_processing, b.stopped_processing) == (1.5, 2.5)


# ---------------------------------------------------------------------------
# repr
# ---------------------------------------------------------------------------


def test_repr_of_a_bare_block():
    b = Block(roi((0, 0), (100, 100)), roi((-5, -5), (20, 20)), roi((0, 0), (10, 10)))
    expected = "None/0 with read ROI [-5:15, -5:15] (20, 20) and write ROI [0:10, 0:10] (10, 10)"
    assert repr(b) == expected
    assert str(b) == expected


def test_repr_with_task_and_block_id():
    rw = roi((0, 0), (10, 10))
    b = Block(roi((0, 0), (100, 100)), rw, rw, block_id=7, task_id="x")
    assert repr(b) == "x/7 with read ROI [0:10, 0:10] (10, 10) and write ROI [0:10, 0:10] (10, 10)"


def test_repr_of_a_graph_block_in_1d():
    t = make_task("t", ((0,), (100,)), ((-2,), (14,)), ((0,), (10,)))
    b = next(b for b in daisy.DependencyGraph([t]).blocks("t") if b.block_id[1] == 3)
    assert repr(b) == "t/3 with read ROI [30:44] (14) and write ROI [32:42] (10)"
    assert repr(b) == f"t/3 with read ROI {b.read_roi} and write ROI {b.write_roi}"


# ---------------------------------------------------------------------------
# equality, hashing, copies
# ---------------------------------------------------------------------------


def test_equality_compares_block_ids_only():
    a = Block(roi((0,), (100,)), roi((0,), (10,)), roi((0,), (10,)), block_id=3, task_id="t")
    b = Block(roi((0,), (100,)), roi((50,), (20,)), roi((55,), (5,)), block_id=3, task_id="t")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


def test_blocks_with_different_ids_differ():
    a = block_at((1,), (10,), task_id="t")
    b = block_at((2,), (10,), task_id="t")
    c = block_at((1,), (10,), task_id="u")
    assert a != b
    assert a != c
    assert len({a, b, c}) == 3


def test_hash_is_the_hash_of_the_block_id():
    for b in (block_at((3, 1), (4, 4), task_id="t"), block_at((2,), (5,))):
        assert hash(b) == hash(b.block_id)


def test_blocks_key_dicts_by_id():
    t = make_task("t", ((0,), (50,)), ((0,), (10,)), ((0,), (10,)))
    graph = daisy.DependencyGraph([t])
    first = {b: b.block_id for b in graph.blocks("t")}
    for b in graph.blocks("t"):  # fresh objects, same ids
        assert first[b] == b.block_id


def test_comparison_with_other_objects_is_false():
    b = block_at((0,), (10,))
    assert b != 5
    assert b != (None, 0)
    assert b is not None


def test_copy_is_an_equal_independent_object():
    b = block_at((1, 2), (10, 10), task_id="t")
    b.status = BlockStatus.SUCCESS
    for c in (b.copy(), copy.copy(b), copy.deepcopy(b)):
        assert c is not b
        assert c == b
        assert c.block_id == b.block_id
        assert c.read_roi == b.read_roi
        assert c.write_roi == b.write_roi
        assert c.status is BlockStatus.SUCCESS
        c.status = BlockStatus.FAILED
        assert b.status is BlockStatus.SUCCESS


# ---------------------------------------------------------------------------
# pickling
# ---------------------------------------------------------------------------


def _shrunk_block() -> Block:
    t = make_task("t", ((0,), (25,)), ((-1,), (12,)), ((0,), (10,)), fit="shrink")
    return max(daisy.DependencyGraph([t]).blocks("t"), key=lambda b: b.block_id[1])


@pytest.mark.parametrize(
    "dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)]
)
@pytest.mark.parametrize("which", ["bare", "graph-shrunk"])
def test_pickle_round_trip(dumps, loads, which):
    if which == "bare":
        b = Block(
            roi((0, 0), (100, 100)), roi((-5, -5), (20, 20)), roi((0, 0), (10, 10)), task_id="t"
        )
    else:
        b = _shrunk_block()
    b.status = BlockStatus.FAILED
    c = loads(dumps(b))
    assert isinstance(c, Block)
    assert c == b
    assert c.block_id == b.block_id
    assert c.task_id == b.task_id
    assert c.read_roi == b.read_roi
    assert c.write_roi == b.write_roi
    assert c.requested_write_roi == b.requested_write_roi
    assert c.status is BlockStatus.FAILED
    assert repr(c) == repr(b)


def test_pickled_scheduler_block_can_be_released():
    """A block that went to a worker and back (pickled) is still accepted."""
    t = make_task("t", ((0,), (30,)), ((-1,), (12,)), ((0,), (10,)))
    scheduler = daisy.Scheduler([t])
    done = 0
    while (b := scheduler.acquire_block("t")) is not None:
        back = pickle.loads(cloudpickle.dumps(b))
        back.status = BlockStatus.SUCCESS
        scheduler.release_block(back)
        done += 1
    assert done == 2
    state = scheduler.task_states["t"]
    assert state.completed_count == 2
    assert state.is_done()


# ---------------------------------------------------------------------------
# funlib ROIs
# ---------------------------------------------------------------------------


def test_rois_are_funlib_rois():
    b = Block(roi((0, 0), (100, 100)), roi((-5, -5), (20, 20)), roi((0, 0), (10, 10)))
    for r in (b.read_roi, b.write_roi, b.requested_write_roi):
        assert isinstance(r, daisy.Roi)
    assert b.read_roi.contains(b.write_roi)
    assert b.read_roi.grow((-5, -5), (-5, -5)) == b.write_roi
    assert b.read_roi.get_begin() == daisy.Coordinate((-5, -5))


def test_rois_index_numpy_arrays():
    data = np.arange(40 * 40).reshape(40, 40)
    t = make_task("t", ((0, 0), (40, 40)), ((-2, -2), (14, 14)), ((0, 0), (10, 10)))
    for b in daisy.DependencyGraph([t]).blocks("t"):
        read = data[b.read_roi.to_slices()]
        write = data[b.write_roi.to_slices()]
        assert read.shape == tuple(b.read_roi.shape)
        assert write.shape == (10, 10)
        # the write region sits 2 voxels into the read region
        assert np.array_equal(read[2:-2, 2:-2], write)
        assert read[0, 0] == data[b.read_roi.begin[0], b.read_roi.begin[1]]


def test_roi_attributes_can_be_reassigned():
    b = block_at((0,), (10,))
    b.read_roi = roi((-1,), (12,))
    b.write_roi = roi((0,), (10,))
    assert b.read_roi == roi((-1,), (12,))
    assert repr(b) == "None/0 with read ROI [-1:11] (12) and write ROI [0:10] (10)"


def test_requested_write_roi_of_a_shrunk_block():
    t = make_task("t", ((0,), (25,)), ((0,), (10,)), ((0,), (10,)), fit="shrink")
    blocks = {b.block_id[1]: b for b in daisy.DependencyGraph([t]).blocks("t")}
    assert sorted(blocks) == [0, 1, 2]
    last = blocks[2]
    assert last.write_roi == roi((20,), (5,))
    assert last.read_roi == roi((20,), (5,))
    assert last.requested_write_roi == roi((20,), (10,))
    for b in (blocks[0], blocks[1]):
        assert b.requested_write_roi == b.write_roi


def test_shrunk_block_keeps_its_context():
    t = make_task("t", ((0, 0), (25, 30)), ((-2, -1), (14, 13)), ((0, 0), (10, 10)), fit="shrink")
    blocks = daisy.DependencyGraph([t]).blocks("t")
    total = roi((0, 0), (25, 30))
    shrunk = [b for b in blocks if b.write_roi != b.requested_write_roi]
    assert shrunk
    for b in blocks:
        assert total.contains(b.read_roi)
        assert b.read_roi.grow((-2, -1), (-2, -2)) == b.write_roi
        assert b.requested_write_roi.offset == b.write_roi.offset
        assert b.requested_write_roi.shape == daisy.Coordinate((10, 10))
        assert b.requested_write_roi.contains(b.write_roi)


def test_bare_block_requested_write_roi_is_its_write_roi():
    b = block_at((2,), (10,))
    assert b.requested_write_roi == b.write_roi


def test_a_block_is_frozen_until_thawed_as_in_1x():
    """daisy 1.2.2 (observed): a new block refuses new attributes with a
    TypeError saying it is frozen, its own attributes stay settable;
    ``thaw()`` allows new ones, ``freeze()`` refuses them again while
    those already added stay settable."""
    b = daisy.Block(daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)))
    b.status = daisy.BlockStatus.SUCCESS
    with pytest.raises(TypeError, match="is frozen"):
        b.note = "x"
    b.thaw()
    b.note = "x"
    b.freeze()
    b.note = "y"
    assert b.note == "y"
    with pytest.raises(TypeError, match="is frozen"):
        b.other = 1

    class Annotated(daisy.Block):
        pass

    a = Annotated(daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)))
    a.note = "a subclass keeps its own attributes free"
