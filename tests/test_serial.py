"""run_blockwise(multiprocessing=False) and SerialServer: every block once,
in dependency order, failures and retries, exceptions, the Execution
Summary, check functions, and pipelines that compute real arrays."""

from __future__ import annotations

import traceback

import numpy as np
import pytest
from conftest import bid, line_task, make_task, roi, transitive_downstream

import daisy
from daisy import BlockStatus


class Recorder:
    """A block function that records the ids it was called with."""

    def __init__(self, fail=(), fail_times=None):
        self.calls: list = []
        self.fail = set(fail)
        self.fail_times = fail_times  # None: always

    def __call__(self, block):
        self.calls.append(bid(block))
        if bid(block) in self.fail:
            if self.fail_times is None or self.calls.count(bid(block)) <= self.fail_times:
                block.status = BlockStatus.FAILED


def pipeline(recorder, a_retries=2):
    a = make_task(
        "a",
        ((0, 0), (40, 30)),
        ((0, 0), (10, 10)),
        ((0, 0), (10, 10)),
        process_function=recorder,
        max_retries=a_retries,
    )
    b = make_task(
        "b",
        ((0, 0), (40, 30)),
        ((-3, -2), (16, 14)),
        ((0, 0), (10, 10)),
        fit="shrink",
        upstream_tasks=[a],
        process_function=recorder,
    )
    c = make_task(
        "c",
        ((5, 5), (30, 20)),
        ((-1, -1), (7, 7)),
        ((0, 0), (5, 5)),
        upstream_tasks=[b],
        process_function=recorder,
    )
    return a, b, c


# ---------------------------------------------------------------------------
# order
# ---------------------------------------------------------------------------


def test_every_block_runs_once_in_dependency_order(capsys):
    rec = Recorder()
    a, b, c = pipeline(rec)
    assert daisy.run_blockwise([c], multiprocessing=False) is True
    graph = daisy.DependencyGraph([c])
    everything = {bid(x) for t in graph.task_ids for x in graph.blocks(t)}
    assert len(rec.calls) == len(set(rec.calls))
    assert set(rec.calls) == everything
    position = {k: i for i, k in enumerate(rec.calls)}
    for t in graph.task_ids:
        for block in graph.blocks(t):
            for up in graph.upstream(block):
                assert position[bid(up)] < position[bid(block)], (bid(up), bid(block))
    # some blocks really did wait for others
    assert any(graph.upstream(x) for x in graph.blocks("b"))
    assert "Execution Summary" in capsys.readouterr().out


def test_blocks_of_one_task_respect_read_write_conflicts():
    """Serially this is the dependency order: a block runs after every
    conflicting block of the previous level."""
    rec = Recorder()
    t = make_task("t", ((0,), (100,)), ((-5,), (20,)), ((0,), (10,)), process_function=rec)
    assert daisy.run_blockwise(t, multiprocessing=False, summary=False)
    order = [i for _, i in rec.calls]
    assert sorted(order) == list(range(9))
    # the roots (1, 3, 5, 7) come before their neighbours
    for i in (0, 2, 4, 6, 8):
        for j in (i - 1, i + 1):
            if 0 <= j <= 8:
                assert order.index(j) < order.index(i)


def test_process_function_gets_a_processing_block_with_funlib_rois():
    got = []

    def process(block):
        got.append(
            (
                block.status,
                isinstance(block.read_roi, daisy.Roi),
                isinstance(block.write_roi, daisy.Roi),
                block.task_id,
            )
        )

    t = line_task("t", 3, process_function=process)
    assert daisy.run_blockwise([t], multiprocessing=False, summary=False)
    assert got == [(BlockStatus.PROCESSING, True, True, "t")] * 3


def test_return_value_of_the_process_function_is_ignored():
    t = line_task("t", 3, process_function=lambda block: False)
    assert daisy.run_blockwise([t], multiprocessing=False, summary=False) is True


# ---------------------------------------------------------------------------
# failures
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_failed_block_is_retried_and_run_returns_false(max_retries, capsys):
    rec = Recorder(fail={("t", 2)})
    t = line_task("t", 4, process_function=rec, max_retries=max_retries)
    assert daisy.run_blockwise([t], multiprocessing=False) is False
    assert rec.calls.count(("t", 2)) == max_retries + 1
    assert all(rec.calls.count(("t", i)) == 1 for i in (0, 1, 3))
    out = capsys.readouterr().out
    assert "Task t: ✗" in out
    assert "failed    ✗: 1" in out
    assert "completed ✔: 3 (skipped 0)" in out
    assert "all blocks processed successfully" not in out


def test_block_that_succeeds_on_a_retry_counts_as_completed():
    rec = Recorder(fail={("t", 0)}, fail_times=2)
    t = line_task("t", 2, process_function=rec, max_retries=2)
    states = daisy.SerialServer().run_blockwise([t])
    assert rec.calls.count(("t", 0)) == 3
    s = states["t"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (2, 0, 0)


def test_orphaned_blocks_make_the_run_fail():
    rec = Recorder(fail={("a", 1)})
    a = line_task("a", 4, process_function=rec, max_retries=0)
    b = line_task("b", 4, process_function=rec, upstream_tasks=[a])
    assert daisy.run_blockwise([b], multiprocessing=False, summary=False) is False
    assert ("b", 1) not in rec.calls
    states = daisy.SerialServer().run_blockwise([b])
    assert states["b"].orphaned_count == 1
    assert states["b"].completed_count == 3
    assert states["a"].failed_count == 1


def test_failure_orphans_across_tasks():
    rec = Recorder(fail={("a", 4)})
    a, b, c = pipeline(rec, a_retries=0)
    graph = daisy.DependencyGraph([c])
    failed = next(x for x in graph.blocks("a") if bid(x) == ("a", 4))
    doomed = transitive_downstream(graph, [failed])
    assert {t for t, _ in doomed} == {"b", "c"}
    states = daisy.SerialServer().run_blockwise([c])
    assert rec.calls.count(("a", 4)) == 1
    assert not doomed & set(rec.calls)
    for t, s in states.items():
        assert s.orphaned_count == sum(1 for x, _ in doomed if x == t)
        assert s.completed_count + s.failed_count + s.orphaned_count == s.total_block_count


# ---------------------------------------------------------------------------
# exceptions
# ---------------------------------------------------------------------------


class BlockError(Exception):
    pass


def test_first_exception_propagates_with_type_and_traceback(capsys):
    calls = []
    raised = []

    def process_that_raises(block):
        calls.append(bid(block))
        if block.block_id[1] == 2:
            err = BlockError(f"block {block.block_id} broke")
            raised.append(err)
            raise err

    t = line_task("t", 5, process_function=process_that_raises, max_retries=3)
    with pytest.raises(BlockError, match=r"block \('t', 2\) broke") as excinfo:
        daisy.run_blockwise([t], multiprocessing=False)
    assert excinfo.value is raised[0]
    # not retried, and the run stopped there
    assert calls.count(("t", 2)) == 1
    assert calls[-1] == ("t", 2)
    frames = [entry.name for entry in excinfo.traceback]
    assert frames[-1] == "process_that_raises"
    assert "test_first_exception_propagates_with_type_and_traceback" in frames
    formatted = "".join(traceback.format_exception(excinfo.value))
    assert "raise err" in formatted
    # no summary after an exception
    assert "Execution Summary" not in capsys.readouterr().out


def test_exception_from_a_deeper_frame_keeps_it():
    def helper(block):
        return {}["missing key"]

    def process(block):
        helper(block)

    t = line_task("t", 2, process_function=process)
    with pytest.raises(KeyError) as excinfo:
        daisy.SerialServer().run_blockwise([t])
    names = [entry.name for entry in excinfo.traceback]
    assert names[-2:] == ["process", "helper"]


def test_exception_in_check_function_propagates():
    def check(block):
        raise ZeroDivisionError("check broke")

    t = line_task("t", 2, check_function=check)
    with pytest.raises(ZeroDivisionError, match="check broke"):
        daisy.run_blockwise([t], multiprocessing=False, summary=False)


# ---------------------------------------------------------------------------
# Execution Summary
# ---------------------------------------------------------------------------


def test_summary_of_a_successful_run(capsys):
    t = make_task("mytask", ((0,), (60,)), ((0,), (10,)), ((0,), (10,)))
    assert daisy.run_blockwise([t], multiprocessing=False) is True
    out = capsys.readouterr().out
    expected = (
        "\nExecution Summary\n-----------------\n\n  Task mytask: ✔\n\n"
        "    num blocks : 6\n    completed ✔: 6 (skipped 0)\n    failed    ✗: 0\n"
        "    orphaned  ∅: 0\n\n    all blocks processed successfully\n"
    )
    assert out.strip("\n") == expected.strip("\n")


def test_summary_of_a_failed_pipeline(capsys):
    rec = Recorder(fail={("A", 1)})
    a = line_task(
        "A", 5, process_function=rec, max_retries=0, check_function=lambda b: b.block_id[1] == 3
    )
    b = make_task(
        "B", ((0,), (50,)), ((-10,), (30,)), ((0,), (10,)), process_function=rec, upstream_tasks=[a]
    )
    assert daisy.run_blockwise([b], multiprocessing=False) is False
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1:3] == ["Execution Summary", "-----------------"]
    # upstream task first
    assert out.index("Task A:") < out.index("Task B:")
    section_a = out[out.index("Task A:") : out.index("Task B:")]
    section_b = out[out.index("Task B:") :]
    assert "Task A: ✗" in section_a
    assert "num blocks : 5" in section_a
    assert "completed ✔: 4 (skipped 1)" in section_a
    assert "failed    ✗: 1" in section_a
    assert "orphaned  ∅: 0" in section_a
    assert "Task B: ✗" in section_b
    assert "num blocks : 3" in section_b
    assert "failed    ✗: 0" in section_b
    states = daisy.SerialServer().run_blockwise([b])
    s = states["B"]
    assert f"orphaned  ∅: {s.orphaned_count}" in section_b
    assert f"completed ✔: {s.completed_count} (skipped 0)" in section_b
    assert s.orphaned_count >= 1
    assert "all blocks processed successfully" not in out


def test_summary_counts_skipped_blocks(capsys):
    rec = Recorder()
    t = line_task("t", 4, process_function=rec, check_function=lambda b: b.block_id[1] == 0)
    assert daisy.run_blockwise([t], multiprocessing=False) is True
    out = capsys.readouterr().out
    assert "completed ✔: 4 (skipped 1)" in out
    assert "Task t: ✔" in out
    assert "all blocks processed successfully" in out


def test_summary_can_be_switched_off(capsys):
    assert daisy.run_blockwise([line_task("t", 2)], multiprocessing=False, summary=False)
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------------------
# check_function
# ---------------------------------------------------------------------------


def test_check_function_skips_blocks():
    rec = Recorder()
    checked = []

    def check(block):
        checked.append(bid(block))
        return block.block_id[1] % 2 == 0

    t = line_task("t", 6, process_function=rec, check_function=check)
    states = daisy.SerialServer().run_blockwise([t])
    assert sorted(rec.calls) == [("t", 1), ("t", 3), ("t", 5)]
    assert sorted(checked) == [("t", i) for i in range(6)]
    s = states["t"]
    assert (s.completed_count, s.skipped_count) == (6, 3)
    assert s.started is True
    assert s.is_done()


def test_check_is_a_pre_check_only():
    """A single check function is called once per block, before the
    process function, and not again afterwards (as in daisy 1.x)."""
    events = []
    t = line_task(
        "t",
        2,
        process_function=lambda b: events.append(("process", b.block_id[1])),
        check_function=lambda b: events.append(("check", b.block_id[1])) or False,
    )
    assert daisy.run_blockwise([t], multiprocessing=False, summary=False)
    assert events == [("check", 0), ("process", 0), ("check", 1), ("process", 1)]


def test_post_check_that_fails_fails_the_block():
    rec = Recorder()
    t = line_task(
        "t",
        3,
        process_function=rec,
        max_retries=1,
        check_function=(lambda b: False, lambda b: b.block_id[1] != 1),
    )
    states = daisy.SerialServer().run_blockwise([t])
    assert rec.calls.count(("t", 1)) == 2
    assert states["t"].failed_count == 1
    assert states["t"].completed_count == 2


def test_skipped_upstream_blocks_release_downstream_blocks():
    rec = Recorder()
    a = line_task("a", 4, process_function=rec, check_function=lambda b: True)
    b = line_task("b", 4, process_function=rec, upstream_tasks=[a])
    assert daisy.run_blockwise([b], multiprocessing=False, summary=False)
    assert sorted(rec.calls) == [("b", i) for i in range(4)]


# ---------------------------------------------------------------------------
# SerialServer
# ---------------------------------------------------------------------------


def test_serial_server_returns_task_states_by_id():
    a, b, c = pipeline(Recorder())
    states = daisy.SerialServer().run_blockwise([c])
    assert isinstance(states, dict)
    assert list(states) == ["a", "b", "c"]
    graph = daisy.DependencyGraph([c])
    for task_id, s in states.items():
        assert isinstance(s, daisy.TaskState)
        assert s.total_block_count == graph.num_blocks(task_id)
        assert s.completed_count == s.total_block_count
        assert s.started is True
        assert s.is_done()
        assert s.ready_count == s.processing_count == s.pending_count == 0


def test_serial_server_accepts_a_task_or_a_pipeline():
    a, b = line_task("a", 2), line_task("b", 3)
    assert list(daisy.SerialServer().run_blockwise(a)) == ["a"]
    assert set(daisy.SerialServer().run_blockwise(a + b)) == {"a", "b"}


def test_serial_server_with_a_scheduler():
    t = line_task("t", 3)
    scheduler = daisy.Scheduler([t])
    states = daisy.SerialServer().run_blockwise([t], scheduler=scheduler)
    assert states["t"].completed_count == 3
    assert scheduler.is_done()


# ---------------------------------------------------------------------------
# pipelines that compute
# ---------------------------------------------------------------------------


def test_numpy_pipeline_computes_the_right_output():
    """a fills an array; b averages a 3x3 neighbourhood of a's output. b's
    blocks read a's output one voxel beyond their write ROI, so any block
    of b run before its upstream a blocks sees zeros and gets it wrong."""
    shape = (47, 38)
    rng = np.random.default_rng(0)
    source = rng.random(shape)
    a_out = np.zeros(shape)
    b_out = np.full(shape, np.nan)

    def fill(block):
        s = block.write_roi.to_slices()
        a_out[s] = source[s]

    def smooth(block):
        r, w = block.read_roi, block.write_roi
        data = a_out[r.to_slices()]
        assert data.shape == tuple(r.shape)
        out = np.zeros(tuple(w.shape))
        for dy in range(3):
            for dx in range(3):
                out += data[dy : dy + w.shape[0], dx : dx + w.shape[1]]
        b_out[w.to_slices()] = out / 9

    a = make_task(
        "a",
        ((0, 0), shape),
        ((0, 0), (6, 7)),
        ((0, 0), (6, 7)),
        fit="shrink",
        process_function=fill,
    )
    b = make_task(
        "b",
        ((0, 0), shape),
        ((-1, -1), (7, 6)),
        ((0, 0), (5, 4)),
        fit="shrink",
        process_function=smooth,
    )
    assert daisy.run_blockwise(a + b, multiprocessing=False, summary=False)
    expected = np.zeros((shape[0] - 2, shape[1] - 2))
    for dy in range(3):
        for dx in range(3):
            expected += source[dy : dy + shape[0] - 2, dx : dx + shape[1] - 2]
    expected /= 9
    assert np.allclose(b_out[1:-1, 1:-1], expected)
    # the border is outside b's total write ROI
    assert np.isnan(b_out[0]).all() and np.isnan(b_out[:, -1]).all()


def test_funlib_persistence_arrays_are_indexed_with_block_rois(tmp_path):
    import funlib.persistence as fp  # in the test extra: a hard requirement here

    voxel = daisy.Coordinate((2, 2))
    offset = daisy.Coordinate((10, 20))
    shape = (40, 30)  # voxels
    total = daisy.Roi(offset, voxel * daisy.Coordinate(shape))
    src = fp.prepare_ds(
        str(tmp_path / "data.zarr" / "src"),
        shape=shape,
        offset=offset,
        voxel_size=voxel,
        dtype=np.float32,
        mode="w",
    )
    dst = fp.prepare_ds(
        str(tmp_path / "data.zarr" / "dst"),
        shape=shape,
        offset=offset,
        voxel_size=voxel,
        dtype=np.float32,
        mode="w",
    )
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    src[total] = values
    assert src.roi == total

    def double(block):
        data = src[block.read_roi]
        assert data.shape == tuple(block.read_roi.shape / voxel)
        context = (block.write_roi.begin - block.read_roi.begin) / voxel
        inner = data[
            context[0] : context[0] + block.write_roi.shape[0] // voxel[0],
            context[1] : context[1] + block.write_roi.shape[1] // voxel[1],
        ]
        dst[block.write_roi] = 2 * inner

    # world units: blocks write 8x8 voxels (16 nm) and read one voxel more
    task = daisy.Task(
        "double",
        total,
        roi((-2, -2), (20, 20)),
        roi((0, 0), (16, 16)),
        process_function=double,
        fit="shrink",
    )
    assert daisy.run_blockwise([task], multiprocessing=False, summary=False)
    result = fp.open_ds(str(tmp_path / "data.zarr" / "dst"))[total]
    # everything but the one-voxel border (the read context) was written
    assert np.array_equal(result[1:-1, 1:-1], 2 * values[1:-1, 1:-1])
    assert (result[0] == 0).all() and (result[:, 0] == 0).all()
