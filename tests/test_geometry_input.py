"""Bad input to Task / Block / run_blockwise fails early, with a ValueError or
TypeError whose message names the offending parameter, and never with a
pyo3 PanicException (or any other exception type, or a crash)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from conftest import line_task, noop, roi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daisy

TOTAL = roi((0, 0), (100, 100))
READ = roi((-5, -5), (20, 20))
WRITE = roi((0, 0), (10, 10))


def task(**overrides):
    args = dict(
        task_id="t",
        total_roi=TOTAL,
        read_roi=READ,
        write_roi=WRITE,
        process_function=noop,
    )
    args.update(overrides)
    return daisy.Task(**args)


def assert_names(excinfo: pytest.ExceptionInfo, *names: str) -> None:
    message = str(excinfo.value)
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"


def test_valid_task_is_accepted():
    t = task()
    assert t.task_id == "t"
    assert t.total_roi == TOTAL
    assert t.read_roi == READ
    assert t.write_roi == WRITE
    assert t.num_blocks == 81  # (100 - 10) / 10 = 9 per axis
    assert t.max_retries == 2
    assert t.num_workers == t.max_workers == 1
    assert t.fit == "valid"


# ---------------------------------------------------------------------------
# (offset, shape) pairs
# ---------------------------------------------------------------------------


def test_offset_shape_pairs_are_accepted_for_task_rois():
    by_pairs = daisy.Task("t", ((0, 0), (100, 100)), ((-5, -5), (20, 20)), ((0, 0), (10, 10)), noop)
    by_rois = task()
    assert by_pairs.total_roi == TOTAL
    assert by_pairs.read_roi == READ
    assert by_pairs.write_roi == WRITE
    assert isinstance(by_pairs.total_roi, daisy.Roi)
    assert by_pairs.num_blocks == by_rois.num_blocks == 81


def test_offset_shape_pairs_as_lists_are_accepted():
    t = daisy.Task("t", [[0], [100]], [[0], [10]], [[0], [10]], noop)
    assert t.total_roi == roi((0,), (100,))
    assert t.num_blocks == 10


def test_offset_shape_pairs_are_accepted_for_block_rois():
    b = daisy.Block(((0, 0), (100, 100)), ((-5, -5), (20, 20)), ((0, 0), (10, 10)))
    assert b.read_roi == READ
    assert b.write_roi == WRITE
    assert b.block_id == (None, 0)


def test_offset_shape_pair_tasks_schedule_like_roi_tasks():
    a = daisy.Task("a", ((0,), (40,)), ((-2,), (14,)), ((0,), (10,)), noop, fit="shrink")
    b = daisy.Task("b", roi((0,), (40,)), roi((-2,), (14,)), roi((0,), (10,)), noop, fit="shrink")
    ga, gb = daisy.DependencyGraph([a]), daisy.DependencyGraph([b])
    assert [(x.block_id[1], x.read_roi, x.write_roi) for x in ga.blocks("a")] == [
        (x.block_id[1], x.read_roi, x.write_roi) for x in gb.blocks("b")
    ]


# ---------------------------------------------------------------------------
# dimensions
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, names",
    [
        ({"read_roi": roi((0,), (10,))}, ("read_roi", "total_roi")),
        ({"write_roi": roi((0, 0, 0), (10, 10, 10))}, ("write_roi",)),
        ({"total_roi": roi((0, 0, 0), (100, 100, 100))}, ("total_roi",)),
    ],
    ids=["read", "write", "total"],
)
def test_task_rois_of_different_dims_name_both(overrides, names):
    with pytest.raises(ValueError) as excinfo:
        task(**overrides)
    assert_names(excinfo, *names)
    message = str(excinfo.value)
    # the message names the mismatched ROI and one it disagrees with
    assert sum(n in message for n in ("total_roi", "read_roi", "write_roi")) >= 2, message


def test_task_read_and_write_dims_disagree_names_both():
    with pytest.raises(ValueError) as excinfo:
        daisy.Task("t", roi((0,), (100,)), roi((0,), (10,)), roi((0, 0), (10, 10)), noop)
    assert_names(excinfo, "write_roi")
    message = str(excinfo.value)
    assert "read_roi" in message or "total_roi" in message, message


@pytest.mark.parametrize(
    "rois",
    [
        (roi((0,), (100,)), roi((0, 0), (10, 10)), roi((0,), (10,))),
        (roi((0,), (100,)), roi((0,), (10,)), roi((0, 0), (10, 10))),
        (roi((0, 0), (100, 100)), roi((0,), (10,)), roi((0,), (10,))),
    ],
    ids=["read", "write", "total"],
)
def test_block_rois_of_different_dims(rois):
    with pytest.raises(ValueError) as excinfo:
        daisy.Block(*rois)
    message = str(excinfo.value)
    assert sum(n in message for n in ("total_roi", "read_roi", "write_roi")) >= 2, message


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
def test_offset_and_shape_of_different_dims_in_a_pair(param):
    """``(offset, shape)`` with a 2D offset and a 1D shape."""
    pairs = {
        "total_roi": ((0,), (100,)),
        "read_roi": ((0,), (10,)),
        "write_roi": ((0,), (10,)),
    }
    pairs[param] = ((0, 0), (10,))
    with pytest.raises(ValueError) as excinfo:
        daisy.Block(pairs["total_roi"], pairs["read_roi"], pairs["write_roi"])
    assert_names(excinfo, param)
    with pytest.raises(ValueError) as excinfo:
        daisy.Task("t", pairs["total_roi"], pairs["read_roi"], pairs["write_roi"], noop)
    assert_names(excinfo, param)


# ---------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
@pytest.mark.parametrize("extent", [0, -5], ids=["zero", "negative"])
def test_zero_or_negative_shape_in_task(param, extent):
    shapes = {"total_roi": (100, 100), "read_roi": (20, 20), "write_roi": (10, 10)}
    offsets = {"total_roi": (0, 0), "read_roi": (-5, -5), "write_roi": (0, 0)}
    shape = list(shapes[param])
    shape[1] = extent
    with pytest.raises(ValueError) as excinfo:
        task(**{param: roi(offsets[param], shape)})
    assert_names(excinfo, param)


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
@pytest.mark.parametrize("extent", [0, -3], ids=["zero", "negative"])
def test_zero_or_negative_shape_in_block(param, extent):
    rois = {"total_roi": roi((0,), (100,)), "read_roi": roi((0,), (10,))}
    rois["write_roi"] = roi((0,), (10,))
    rois[param] = roi((0,), (extent,))
    with pytest.raises(ValueError) as excinfo:
        daisy.Block(**rois)
    assert_names(excinfo, param)


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
def test_zero_shape_given_as_pair(param):
    pairs = {
        "total_roi": ((0,), (100,)),
        "read_roi": ((0,), (10,)),
        "write_roi": ((0,), (10,)),
    }
    pairs[param] = ((0,), (0,))
    with pytest.raises(ValueError) as excinfo:
        daisy.Task("t", pairs["total_roi"], pairs["read_roi"], pairs["write_roi"], noop)
    assert_names(excinfo, param)


# ---------------------------------------------------------------------------
# unbounded ROIs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unbounded",
    [
        daisy.Roi((None, None), (None, None)),
        daisy.Roi((0, None), (10, None)),
        daisy.Roi(None, None),
    ],
    ids=["all-none", "one-axis", "roi-none"],
)
@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
def test_unbounded_roi_in_task(param, unbounded):
    if unbounded.dims != 2:
        # a fully unbounded Roi(None, None) has no dims; it still must be refused
        with pytest.raises((ValueError, TypeError)) as excinfo:
            task(**{param: unbounded})
    else:
        with pytest.raises(ValueError) as excinfo:
            task(**{param: unbounded})
    assert_names(excinfo, param)


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
def test_unbounded_roi_in_block(param):
    rois = {"total_roi": roi((0,), (100,)), "read_roi": roi((0,), (10,))}
    rois["write_roi"] = roi((0,), (10,))
    rois[param] = daisy.Roi((None,), (None,))
    with pytest.raises(ValueError) as excinfo:
        daisy.Block(**rois)
    assert_names(excinfo, param)
    assert "unbounded" in str(excinfo.value)


# ---------------------------------------------------------------------------
# non-integer coordinates
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
@pytest.mark.parametrize("where", ["offset", "shape"])
def test_float_coordinates_in_block_pairs(param, where):
    pairs = {
        "total_roi": [(0,), (100,)],
        "read_roi": [(0,), (10,)],
        "write_roi": [(0,), (10,)],
    }
    index = 0 if where == "offset" else 1
    pairs[param][index] = (pairs[param][index][0] + 0.5,)
    with pytest.raises(TypeError) as excinfo:
        daisy.Block(*(tuple(pairs[p]) for p in ("total_roi", "read_roi", "write_roi")))
    assert_names(excinfo, param)


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
@pytest.mark.parametrize("where", ["offset", "shape"])
def test_float_coordinates_in_task_pairs(param, where):
    """``Task(..., total_roi=((0.5,), (100,)))`` must not silently truncate
    the float to an integer (``Block`` refuses the same pair)."""
    pairs = {
        "total_roi": [(0,), (100,)],
        "read_roi": [(0,), (10,)],
        "write_roi": [(0,), (10,)],
    }
    index = 0 if where == "offset" else 1
    pairs[param][index] = (pairs[param][index][0] + 0.5,)
    with pytest.raises((TypeError, ValueError)) as excinfo:
        daisy.Task("t", *(tuple(pairs[p]) for p in ("total_roi", "read_roi", "write_roi")), noop)
    assert_names(excinfo, param)


@pytest.mark.parametrize(
    "bad", [float("inf"), float("nan"), "3", True], ids=["inf", "nan", "str", "bool"]
)
def test_non_integer_coordinate_values_in_task_pairs(bad):
    with pytest.raises((TypeError, ValueError)) as excinfo:
        daisy.Task("t", ((bad,), (100,)), ((0,), (10,)), ((0,), (10,)), noop)
    assert_names(excinfo, "total_roi")


@pytest.mark.parametrize(
    "bad", [float("inf"), float("nan"), "3", True], ids=["inf", "nan", "str", "bool"]
)
def test_non_integer_coordinate_values_in_block_pairs(bad):
    with pytest.raises((TypeError, ValueError)) as excinfo:
        daisy.Block(((0,), (100,)), ((0,), (10,)), ((bad,), (10,)))
    assert_names(excinfo, "write_roi")


@pytest.mark.parametrize("param", ["total_roi", "read_roi", "write_roi"])
@pytest.mark.parametrize("bad", ["abc", 5, None, object(), ((0,),)], ids=repr)
def test_roi_of_wrong_type(param, bad):
    with pytest.raises(TypeError) as excinfo:
        task(**{param: bad})
    assert_names(excinfo, param)


def test_roi_end_past_int64_is_rejected():
    """An offset near 2**63 plus a shape overflows a 64 bit end; that must be
    refused instead of wrapping around."""
    huge = 2**63 - 1
    with pytest.raises((ValueError, TypeError)) as excinfo:
        daisy.Block(((0,), (10,)), ((0,), (10,)), ((huge,), (10,)))
    assert_names(excinfo, "write_roi")
    with pytest.raises((ValueError, TypeError)) as excinfo:
        daisy.Task("t", ((huge,), (10,)), ((0,), (1,)), ((0,), (1,)), noop)
    assert_names(excinfo, "total_roi")


# ---------------------------------------------------------------------------
# fit, write inside read
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fit", ["bogus", "VALID", "Shrink", "", 3, None])
def test_unknown_fit(fit):
    with pytest.raises((ValueError, TypeError)) as excinfo:
        task(fit=fit)
    assert_names(excinfo, "fit")


@pytest.mark.parametrize("fit", ["valid", "overhang", "shrink"])
def test_known_fits_are_accepted(fit):
    assert task(fit=fit).fit == fit


@pytest.mark.parametrize(
    "write",
    [
        roi((-6, 0), (10, 10)),  # sticks out below
        roi((6, 0), (10, 10)),  # sticks out above
        roi((0, 0), (30, 10)),  # larger than read
        roi((40, 40), (5, 5)),  # disjoint
    ],
    ids=["below", "above", "larger", "disjoint"],
)
def test_write_not_inside_read(write):
    with pytest.raises(ValueError) as excinfo:
        task(write_roi=write)
    assert_names(excinfo, "write_roi", "read_roi")


def test_write_equal_to_read_is_accepted():
    t = task(read_roi=WRITE)
    assert t.num_blocks == 100


# ---------------------------------------------------------------------------
# workers, retries, timeout
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1])
def test_max_workers_below_one(value):
    with pytest.raises(ValueError) as excinfo:
        task(max_workers=value)
    assert_names(excinfo, "max_workers")


@pytest.mark.parametrize("value", [0, -3])
def test_num_workers_below_one(value):
    with pytest.raises(ValueError) as excinfo:
        task(num_workers=value)
    assert_names(excinfo, "num_workers")


@pytest.mark.parametrize("param", ["max_workers", "num_workers"])
@pytest.mark.parametrize("value", [1.5, "2", True])
def test_workers_of_wrong_type(param, value):
    with pytest.raises(TypeError) as excinfo:
        task(**{param: value})
    assert_names(excinfo, param)


@pytest.mark.parametrize("namespace", ["daisy", "daisy.v1_compat"])
@pytest.mark.parametrize("values", [(2, 3), (4, 4)], ids=["disagreeing", "agreeing"])
def test_num_workers_and_max_workers_together_are_one_error_everywhere(namespace, values):
    """daisy 1.x's name and v2's together: daisy 2.0.0's TypeError, in the
    top level and in v1_compat alike (they disagreed: a ValueError for
    differing values in one, this TypeError in the other), before any
    warning."""
    import importlib
    import warnings

    module = importlib.import_module(namespace)
    num, most = values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError) as excinfo:
            module.Task(
                "t",
                total_roi=daisy.Roi((0,), (10,)),
                read_roi=daisy.Roi((0,), (1,)),
                write_roi=daisy.Roi((0,), (1,)),
                process_function=lambda b: None,
                num_workers=num,
                max_workers=most,
            )
    assert_names(excinfo, "num_workers", "max_workers")


def test_num_workers_is_the_1x_name_of_max_workers():
    assert task(num_workers=3).max_workers == 3
    assert task(max_workers=5).num_workers == 5


def test_negative_retries():
    with pytest.raises(ValueError) as excinfo:
        task(max_retries=-1)
    assert_names(excinfo, "max_retries")


@pytest.mark.parametrize("value", [1.5, "2", None, True])
def test_retries_of_wrong_type(value):
    with pytest.raises(TypeError) as excinfo:
        task(max_retries=value)
    assert_names(excinfo, "max_retries")


def test_zero_retries_is_accepted():
    assert task(max_retries=0).max_retries == 0


@pytest.mark.parametrize("value", [-1, -0.5, 0])
def test_negative_or_zero_timeout(value):
    with pytest.raises(ValueError) as excinfo:
        task(timeout=value)
    assert_names(excinfo, "timeout")


@pytest.mark.parametrize("value", ["10", [1], True])
def test_timeout_of_wrong_type(value):
    with pytest.raises(TypeError) as excinfo:
        task(timeout=value)
    assert_names(excinfo, "timeout")


@pytest.mark.parametrize("value", [None, 0.5, 30])
def test_valid_timeouts(value):
    assert task(timeout=value).timeout == value


# ---------------------------------------------------------------------------
# functions and upstream tasks
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [3, "f", [noop]], ids=repr)
def test_non_callable_process_function(value):
    with pytest.raises(TypeError) as excinfo:
        task(process_function=value)
    assert_names(excinfo, "process_function")


def test_process_function_with_too_many_arguments():
    with pytest.raises(TypeError) as excinfo:
        task(process_function=lambda block, other: None)
    assert_names(excinfo, "process_function")


@pytest.mark.parametrize("value", [3, "f", (noop,), (noop, 3), (noop, noop, noop)], ids=repr)
def test_non_callable_check_function(value):
    with pytest.raises(TypeError) as excinfo:
        task(check_function=value)
    assert_names(excinfo, "check_function")


def test_callable_check_functions_are_accepted():
    assert task(check_function=lambda b: False).check_function is not None
    pair = (lambda b: False, lambda b: True)
    assert task(check_function=pair).check_function == pair


def test_non_callable_init_callback():
    with pytest.raises(TypeError) as excinfo:
        task(init_callback_fn=5)
    assert_names(excinfo, "init_callback_fn")


@pytest.mark.parametrize("value", [[3], ["a"], [None], "abc"], ids=repr)
def test_upstream_tasks_that_are_not_tasks(value):
    with pytest.raises(TypeError) as excinfo:
        task(upstream_tasks=value)
    assert_names(excinfo, "upstream_tasks")


@pytest.mark.parametrize("value", [5, 2.5, object()], ids=["int", "float", "object"])
def test_upstream_tasks_not_iterable(value):
    with pytest.raises(TypeError) as excinfo:
        task(upstream_tasks=value)
    assert_names(excinfo, "upstream_tasks")


@pytest.mark.parametrize("value", ["", None, 1.5, ("a",)], ids=repr)
def test_bad_task_id(value):
    with pytest.raises(TypeError) as excinfo:
        task(task_id=value)
    assert_names(excinfo, "task_id")


def test_int_task_id_is_accepted_as_in_1x():
    t = task(task_id=5)
    assert t.task_id == "5"
    assert daisy.DependencyGraph([t]).task_ids == ["5"]


def test_read_write_conflict_must_be_bool():
    with pytest.raises(TypeError) as excinfo:
        task(read_write_conflict=1)
    assert_names(excinfo, "read_write_conflict")


# ---------------------------------------------------------------------------
# Block arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.5, "3", ("a", 3)], ids=repr)
def test_block_id_must_be_an_integer(value):
    with pytest.raises(TypeError) as excinfo:
        daisy.Block(TOTAL, READ, WRITE, block_id=value)
    assert_names(excinfo, "block_id")


def test_block_status_must_be_a_block_status():
    b = daisy.Block(TOTAL, READ, WRITE)
    with pytest.raises(TypeError) as excinfo:
        b.status = "done"
    assert_names(excinfo, "status")
    assert b.status == daisy.BlockStatus.CREATED


def test_block_does_not_require_write_inside_read():
    """As in daisy 1.x, a bare Block does not check its ROIs against each
    other (only a Task tiles)."""
    b = daisy.Block(roi((0,), (10,)), roi((0,), (5,)), roi((3,), (5,)))
    assert b.write_roi == roi((3,), (5,))


# ---------------------------------------------------------------------------
# run_blockwise arguments
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("tasks", ["abc", 3, [3], [None]], ids=repr)
def test_run_blockwise_rejects_non_tasks(tasks):
    with pytest.raises(TypeError) as excinfo:
        daisy.run_blockwise(tasks, multiprocessing=False)
    assert_names(excinfo, "tasks")


@pytest.mark.parametrize("value", ["no", 0, None])
def test_run_blockwise_multiprocessing_must_be_bool(value):
    with pytest.raises(TypeError) as excinfo:
        daisy.run_blockwise([line_task("t", 2)], multiprocessing=value)
    assert_names(excinfo, "multiprocessing")


def test_run_blockwise_without_process_function(capsys):
    t = daisy.Task("t", roi((0,), (20,)), roi((0,), (10,)), roi((0,), (10,)))
    with pytest.raises(ValueError) as excinfo:
        daisy.run_blockwise([t], multiprocessing=False)
    assert_names(excinfo, "process_function")
    assert "Execution Summary" not in capsys.readouterr().out


def test_serial_run_rejects_worker_functions():
    t = line_task("t", 2, process_function=lambda: None)
    with pytest.raises(ValueError) as excinfo:
        daisy.run_blockwise([t], multiprocessing=False)
    assert_names(excinfo, "process_function")


# ---------------------------------------------------------------------------
# junk never panics
# ---------------------------------------------------------------------------

small_int = st.integers(min_value=-30, max_value=30)
any_int = st.one_of(
    small_int,
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**31, -(2**31) - 1]),
)
scalar = st.one_of(
    any_int,
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
)
coord = st.one_of(
    st.lists(scalar, min_size=0, max_size=4).map(tuple),
    st.lists(any_int, min_size=1, max_size=4).map(tuple),
    scalar,
)
pair = st.tuples(coord, coord)
roi_like = st.one_of(
    pair,
    st.integers(1, 3).flatmap(
        lambda n: st.builds(
            daisy.Roi,
            st.lists(small_int, min_size=n, max_size=n).map(tuple),
            st.lists(small_int, min_size=n, max_size=n).map(tuple),
        )
    ),
    scalar,
    st.lists(coord, max_size=3),
)
junk = st.one_of(scalar, coord, roi_like, st.just(noop), st.lists(scalar, max_size=2))
ALLOWED = (ValueError, TypeError)


def _construct_only(fn, *args, **kwargs):
    """Call ``fn``; only ValueError / TypeError (not a PanicException, a
    BaseException, an AssertionError or an OverflowError) may escape."""
    try:
        return fn(*args, **kwargs)
    except ALLOWED:
        return None
    except BaseException as e:  # noqa: BLE001 - a PanicException is a BaseException
        pytest.fail(f"{type(e).__module__}.{type(e).__qualname__}: {e}")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(total=roi_like, read=roi_like, write=roi_like, block_id=junk, task_id=junk)
def test_block_junk_raises_only_value_or_type_errors(total, read, write, block_id, task_id):
    b = _construct_only(daisy.Block, total, read, write, block_id=block_id, task_id=task_id)
    if b is not None:
        assert isinstance(b.block_id, tuple) and len(b.block_id) == 2
        assert isinstance(repr(b), str)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    total=roi_like,
    read=roi_like,
    write=roi_like,
    fit=st.one_of(st.sampled_from(["valid", "overhang", "shrink"]), junk),
    retries=st.one_of(small_int, junk),
    workers=st.one_of(small_int, junk),
    timeout=st.one_of(st.none(), junk),
    process=st.one_of(st.just(noop), junk),
    check=st.one_of(st.none(), st.just(noop), junk),
    upstream=st.one_of(st.none(), junk),
)
def test_task_junk_raises_only_value_or_type_errors(
    total, read, write, fit, retries, workers, timeout, process, check, upstream
):
    _construct_only(
        daisy.Task,
        "t",
        total,
        read,
        write,
        process_function=process,
        check_function=check,
        num_workers=workers,
        max_retries=retries,
        fit=fit,
        timeout=timeout,
        upstream_tasks=upstream,
    )


@st.composite
def small_geometry(draw):
    """Three ``(offset, shape)`` pairs with matching offset/shape lengths,
    usually (not always) of one dimensionality, with small values."""
    dims = draw(st.integers(1, 3))
    out = []
    for _ in range(3):
        n = dims if draw(st.integers(0, 9)) else draw(st.integers(1, 3))
        offset = tuple(draw(st.lists(st.integers(-12, 12), min_size=n, max_size=n)))
        shape = tuple(draw(st.lists(st.integers(-2, 14), min_size=n, max_size=n)))
        out.append((offset, shape))
    return out


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    geometry=small_geometry(),
    fit=st.sampled_from(["valid", "overhang", "shrink"]),
    rwc=st.booleans(),
)
def test_small_geometries_build_graphs_or_fail_cleanly(geometry, fit, rwc):
    """Any small geometry either fails in Task() with ValueError/TypeError or
    gives a task whose graph, roots and scheduler all work."""
    t = _construct_only(
        daisy.Task,
        "t",
        *geometry,
        noop,
        fit=fit,
        read_write_conflict=rwc,
    )
    if t is None:
        return
    graph = daisy.DependencyGraph([t])
    n = graph.num_blocks("t")
    assert n == t.num_blocks == len(graph.blocks("t"))
    assert graph.num_roots("t") == len(list(graph.root_gen("t")))
    assert (n == 0) == (graph.num_roots("t") == 0)
    state = daisy.Scheduler([t]).task_states["t"]
    assert state.total_block_count == n


# ---------------------------------------------------------------------------
# large contexts must not exhaust memory (checked in a subprocess, since an
# allocation failure aborts the interpreter)
# ---------------------------------------------------------------------------

_LIMITED = """
import resource
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))
import daisy
{body}
"""


def _run_limited(body: str) -> subprocess.CompletedProcess:
    code = _LIMITED.format(body=textwrap.dedent(body))
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    # run in a scratch directory: a run writes daisy_logs/ into its cwd
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tempfile.mkdtemp(prefix="daisy-limited-"),
    )


def test_limited_subprocess_harness_works():
    proc = _run_limited(
        """
        t = daisy.Task("t", ((0,), (100,)), ((-2,), (14,)), ((0,), (10,)), lambda b: None)
        print(t.num_blocks)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["9"]


@pytest.mark.parametrize(
    "total, read, write, expected_blocks",
    [
        # 1D: context 10**9 on each side of a 1-wide write ROI, 5 blocks
        (((0,), (2 * 10**9 + 5,)), ((-(10**9),), (2 * 10**9 + 1,)), ((0,), (1,)), 5),
        # 1D: context larger than the total ROI: no blocks at all
        (((0,), (100,)), ((-(10**9),), (2 * 10**9 + 1,)), ((0,), (1,)), 0),
        # 3D: context 300 around 1-voxel blocks, a 2x2x2 grid
        (((0, 0, 0), (602,) * 3), ((-300,) * 3, (601,) * 3), ((0, 0, 0), (1, 1, 1)), 8),
    ],
    ids=["1d-five-blocks", "1d-no-blocks", "3d-eight-blocks"],
)
def test_large_context_does_not_exhaust_memory(total, read, write, expected_blocks):
    """The number of levels of a task can never exceed its number of
    blocks; a huge read context around small write ROIs must not make the
    core allocate per possible level (daisy 1.x caps the level stride at
    the grid extent)."""
    proc = _run_limited(
        f"""
        t = daisy.Task("t", {total!r}, {read!r}, {write!r}, lambda b: None)
        g = daisy.DependencyGraph([t])
        print(g.num_blocks("t"), g.num_roots("t"))
        print(daisy.run_blockwise([t], multiprocessing=False, summary=False))
        """
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[:1500]}"
    lines = proc.stdout.split("\n")
    n_blocks, n_roots = (int(x) for x in lines[0].split())
    assert n_blocks == expected_blocks
    # every block conflicts with every other one: a single chain
    assert n_roots == min(1, expected_blocks)
    assert lines[1] == "True"


def test_an_unknown_fit_is_refused_by_the_core_naming_the_choices():
    roi = daisy.Roi((0,), (10,))
    with pytest.raises(ValueError, match=r'fit: unknown fit "bogus"; use "valid", "overhang"'):
        daisy.Task("f", roi, roi, roi, process_function=lambda b: None, fit="bogus")
    with pytest.raises(TypeError, match="fit: expected the name of a fit, got int"):
        daisy.Task("f", roi, roi, roi, process_function=lambda b: None, fit=3)
