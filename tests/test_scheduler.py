"""Driving daisy.Scheduler by hand: task states, skips, retries, failures
and orphans, release errors, and a property test over random pipelines and
random acquire/release interleavings."""

from __future__ import annotations

import random

import pytest
from conftest import bid, ids, line_task, make_task, noop, transitive_downstream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daisy
from daisy import BlockStatus

COUNTS = (
    "ready_count",
    "processing_count",
    "pending_count",
    "completed_count",
    "failed_count",
    "orphaned_count",
)


def balanced(state) -> bool:
    return sum(getattr(state, c) for c in COUNTS) == state.total_block_count


def two_level_task(**kwargs):
    """1D, 9 blocks: write [5:15], [15:25], ..., read 5 wider on each side.
    Blocks 1, 3, 5, 7 are level 0 (the roots), 0, 2, 4, 6, 8 wait for
    their neighbours."""
    return make_task("t", ((0,), (100,)), ((-5,), (20,)), ((0,), (10,)), **kwargs)


def drain(scheduler, task_ids, fail=frozenset(), limit=10_000):
    """Acquire and release until nothing is handed out; blocks in ``fail``
    are released FAILED. Returns the ids in the order they were handed out."""
    order = []
    for _ in range(limit):
        progressed = False
        for task_id in task_ids:
            block = scheduler.acquire_block(task_id)
            if block is None:
                continue
            progressed = True
            order.append(bid(block))
            block.status = BlockStatus.FAILED if bid(block) in fail else BlockStatus.SUCCESS
            scheduler.release_block(block)
        if not progressed:
            return order
    raise AssertionError("the scheduler kept handing out blocks")


# ---------------------------------------------------------------------------
# task states
# ---------------------------------------------------------------------------


def test_fresh_task_state():
    state = daisy.Scheduler([two_level_task()]).task_states["t"]
    assert isinstance(state, daisy.TaskState)
    assert state.started is False
    assert state.total_block_count == 9
    assert state.ready_count == 4
    assert state.pending_count == 5
    assert state.processing_count == 0
    assert state.completed_count == state.skipped_count == 0
    assert state.failed_count == state.orphaned_count == 0
    assert state.is_done() is False
    assert balanced(state)


def test_task_state_str_format():
    state = daisy.Scheduler([two_level_task()]).task_states["t"]
    expected = (
        "Started: False\nTotal Blocks: 9\nReady: 4\nProcessing: 0\nPending: 5\n"
        "Completed: 0\nSkipped: 0\nFailed: 0\nOrphaned: 0\n"
    )
    assert str(state) == expected
    assert repr(state) == expected


def test_acquire_hands_out_only_ready_blocks():
    scheduler = daisy.Scheduler([two_level_task()])
    out = []
    while (block := scheduler.acquire_block("t")) is not None:
        assert (
            block.status is BlockStatus.CREATED
        )  # as 1.2.2 and 2.0.0 hand it out (probe scheduler_block_status.py)
        assert block.task_id == "t"
        out.append(block)
    assert sorted(b.block_id[1] for b in out) == [1, 3, 5, 7]
    state = scheduler.task_states["t"]
    assert state.started is True
    assert state.processing_count == 4
    assert state.ready_count == 0
    assert state.pending_count == 5
    assert balanced(state)
    assert str(state).startswith("Started: True\nTotal Blocks: 9\nReady: 0\nProcessing: 4\n")

    for block in out:
        block.status = BlockStatus.SUCCESS
        scheduler.release_block(block)
    state = scheduler.task_states["t"]
    assert state.completed_count == 4
    assert state.ready_count == 5
    assert state.pending_count == 0
    assert balanced(state)
    assert not state.is_done()
    assert not scheduler.is_done()

    order = drain(scheduler, ["t"])
    assert sorted(i for _, i in order) == [0, 2, 4, 6, 8]
    state = scheduler.task_states["t"]
    assert state.completed_count == 9
    assert state.is_done() is True
    assert scheduler.is_done()
    assert scheduler.acquire_block("t") is None


def test_blocks_wait_for_their_upstream_blocks():
    t = two_level_task()
    scheduler = daisy.Scheduler([t])
    b1 = scheduler.acquire_block("t")
    assert b1.block_id == ("t", 1)
    b1.status = BlockStatus.SUCCESS
    scheduler.release_block(b1)
    # block 0 waits for block 1 only; block 2 waits for 1 and 3
    handed = []
    while (b := scheduler.acquire_block("t")) is not None:
        handed.append(b.block_id[1])
    assert 0 in handed
    assert 2 not in handed


def test_snapshot_is_a_copy():
    scheduler = daisy.Scheduler([two_level_task()])
    before = scheduler.task_states["t"]
    scheduler.acquire_block("t")
    after = scheduler.task_states["t"]
    assert before.processing_count == 0
    assert after.processing_count == 1


def test_get_ready_tasks():
    a = line_task("a", 2)
    b = line_task("b", 2, upstream_tasks=[a])
    scheduler = daisy.Scheduler([b])
    assert [t.task_id for t in scheduler.get_ready_tasks()] == ["a"]
    drain(scheduler, ["a"])
    assert [t.task_id for t in scheduler.get_ready_tasks()] == ["b"]


def test_unknown_task_id():
    """None, as 1.2.2 and 2.0.0 answer (recorded in
    tests/fixtures/scheduler_order/: ``acquire_unknown_task_id``)."""
    scheduler = daisy.Scheduler([line_task("a", 2)])
    assert scheduler.acquire_block("nope") is None


# ---------------------------------------------------------------------------
# check_function
# ---------------------------------------------------------------------------


def test_check_function_skips_blocks_and_releases_downstream():
    checked = []

    def check(block):
        checked.append(bid(block))
        return block.block_id[1] == 3

    a = line_task("a", 5, check_function=check)
    b = line_task("b", 5, upstream_tasks=[a])
    scheduler = daisy.Scheduler([b])
    out = []
    while (block := scheduler.acquire_block("a")) is not None:
        out.append(block)
    assert sorted(bid(x) for x in out) == [("a", 0), ("a", 1), ("a", 2), ("a", 4)]
    assert sorted(checked) == [("a", i) for i in range(5)]
    state = scheduler.task_states["a"]
    assert state.completed_count == 1
    assert state.skipped_count == 1
    assert state.processing_count == 4
    assert state.started is True
    assert balanced(state)
    # b/3 reads only what a/3 wrote, and a/3 is done: b/3 runs now
    first_b = scheduler.acquire_block("b")
    assert first_b is not None and bid(first_b) == ("b", 3)
    assert scheduler.acquire_block("b") is None
    for block in out + [first_b]:
        block.status = BlockStatus.SUCCESS
        scheduler.release_block(block)
    drain(scheduler, ["a", "b"])
    states = scheduler.task_states
    assert (states["a"].completed_count, states["a"].skipped_count) == (5, 1)
    assert (states["b"].completed_count, states["b"].skipped_count) == (5, 0)
    assert all(s.is_done() for s in states.values())


def test_check_function_that_skips_everything():
    t = two_level_task(check_function=lambda block: True)
    scheduler = daisy.Scheduler([t])
    assert scheduler.acquire_block("t") is None
    state = scheduler.task_states["t"]
    assert state.completed_count == state.skipped_count == 9
    assert state.is_done()
    assert state.started is True


def test_check_function_is_called_before_the_block_is_handed_out():
    """A skipped level-0 block frees its level-1 neighbours."""
    t = two_level_task(check_function=lambda block: block.block_id[1] in (1, 3))
    scheduler = daisy.Scheduler([t])
    handed = []
    while (block := scheduler.acquire_block("t")) is not None:
        handed.append(block.block_id[1])
    # 0 waits for 1 only, 2 for 1 and 3: both were skipped
    assert {0, 2} <= set(handed)
    assert not {1, 3} & set(handed)


# ---------------------------------------------------------------------------
# retries and failures
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("max_retries", [0, 1, 2, 4])
def test_a_failing_block_is_tried_max_retries_plus_one_times(max_retries):
    t = line_task("t", 3, max_retries=max_retries)
    scheduler = daisy.Scheduler([t])
    order = drain(scheduler, ["t"], fail={("t", 1)})
    assert order.count(("t", 1)) == max_retries + 1
    assert order.count(("t", 0)) == order.count(("t", 2)) == 1
    state = scheduler.task_states["t"]
    assert state.failed_count == 1
    assert state.completed_count == 2
    assert state.is_done()
    assert balanced(state)


def test_a_retried_block_waits_behind_the_remaining_roots_as_in_1x():
    """daisy 1.x queues a failed block at the back (the recorded orders of
    tests/fixtures/scheduler_order/ cover it with conflicts)."""
    t = line_task("t", 5, max_retries=2)
    scheduler = daisy.Scheduler([t])
    first = scheduler.acquire_block("t")
    first.status = BlockStatus.FAILED
    scheduler.release_block(first)
    state = scheduler.task_states["t"]
    assert state.failed_count == 0  # not failed yet: it will be retried
    assert balanced(state)
    rest = drain(scheduler, ["t"])
    assert rest == [("t", i) for i in range(1, 5)] + [bid(first)]
    assert scheduler.task_states["t"].completed_count == 5


def test_a_block_that_succeeds_on_retry_is_completed():
    t = line_task("t", 2, max_retries=1)
    scheduler = daisy.Scheduler([t])
    block = scheduler.acquire_block("t")
    block.status = BlockStatus.FAILED
    scheduler.release_block(block)
    other = scheduler.acquire_block("t")
    assert other != block  # the retry waits behind the other root
    other.status = BlockStatus.SUCCESS
    scheduler.release_block(other)
    retry = scheduler.acquire_block("t")
    assert retry == block
    retry.status = BlockStatus.SUCCESS
    scheduler.release_block(retry)
    drain(scheduler, ["t"])
    state = scheduler.task_states["t"]
    assert (state.completed_count, state.failed_count, state.orphaned_count) == (2, 0, 0)


def _diamond(max_retries=0):
    a = make_task("a", ((0,), (80,)), ((0,), (10,)), ((0,), (10,)), max_retries=max_retries)
    b = make_task("b", ((0,), (80,)), ((-5,), (20,)), ((0,), (10,)), upstream_tasks=[a])
    c = make_task("c", ((0,), (80,)), ((-10,), (30,)), ((0,), (10,)), upstream_tasks=[a])
    d = make_task("d", ((0,), (80,)), ((-2,), (13,)), ((0,), (10,)), upstream_tasks=[b, c])
    return a, b, c, d


def test_permanent_failure_orphans_every_transitive_downstream_block_once():
    a, b, c, d = _diamond()
    graph = daisy.DependencyGraph([d])
    failed = next(x for x in graph.blocks("a") if x.block_id[1] == 3)
    doomed = transitive_downstream(graph, [failed])
    # blocks of b, c and d are reached by several paths
    assert {t for t, _ in doomed} == {"b", "c", "d"}
    scheduler = daisy.Scheduler([d])
    order = drain(scheduler, ["a", "b", "c", "d"], fail={("a", 3)})
    assert not doomed & set(order), "an orphaned block was handed out"
    assert len(order) == len(set(order))
    states = scheduler.task_states
    for task_id in "abcd":
        s = states[task_id]
        want_orphans = sum(1 for t, _ in doomed if t == task_id)
        assert s.orphaned_count == want_orphans, task_id
        assert s.failed_count == (1 if task_id == "a" else 0)
        assert s.completed_count == s.total_block_count - want_orphans - s.failed_count
        assert s.ready_count == s.processing_count == s.pending_count == 0
        assert s.is_done()
        assert balanced(s)
    assert scheduler.is_done()


def test_orphans_are_counted_as_soon_as_the_block_fails():
    a, b, c, d = _diamond()
    graph = daisy.DependencyGraph([d])
    failed_ref = ("a", 0)
    doomed = transitive_downstream(graph, [x for x in graph.blocks("a") if bid(x) == failed_ref])
    scheduler = daisy.Scheduler([d])
    while (x := scheduler.acquire_block("a")) is not None:
        x.status = BlockStatus.FAILED if bid(x) == failed_ref else BlockStatus.SUCCESS
        scheduler.release_block(x)
    states = scheduler.task_states
    assert sum(s.orphaned_count for s in states.values()) == len(doomed)
    assert all(balanced(s) for s in states.values())


def test_failure_after_retries_orphans_downstream():
    seen = []
    a = line_task("a", 3, max_retries=1)
    b = line_task("b", 3, upstream_tasks=[a])
    scheduler = daisy.Scheduler([b])
    seen = drain(scheduler, ["a", "b"], fail={("a", 2)})
    assert seen.count(("a", 2)) == 2
    assert ("b", 2) not in seen
    states = scheduler.task_states
    assert states["a"].failed_count == 1
    assert states["b"].orphaned_count == 1
    assert states["b"].completed_count == 2


def test_max_retries_set_after_construction_is_not_ignored():
    """``task.max_retries = 0`` must either be refused or be what the
    scheduler uses; the task must not report 0 while blocks are retried
    twice."""
    t = line_task("t", 1, max_retries=2)
    try:
        t.max_retries = 0
    except (AttributeError, TypeError, ValueError):
        assert t.max_retries == 2
        return
    order = drain(daisy.Scheduler([t]), ["t"], fail={("t", 0)})
    assert len(order) == t.max_retries + 1 == 1


@pytest.mark.parametrize(
    "attribute, value, blocks",
    [
        ("total_roi", daisy.Roi((0,), (100,)), 10),
        ("write_roi", daisy.Roi((0,), (5,)), 6),
        ("fit", "shrink", 4),
    ],
)
def test_geometry_set_after_construction_is_not_ignored(attribute, value, blocks):
    """Assigning a Task's geometry must either be refused or be what the
    graph is built from (as in daisy 1.x, where the graph was built from the
    task's attributes when it was scheduled)."""
    t = make_task("t", ((0,), (35,)), ((0,), (10,)), ((0,), (10,)))
    assert t.num_blocks == 3
    try:
        setattr(t, attribute, value)
    except (AttributeError, TypeError, ValueError):
        return
    assert daisy.DependencyGraph([t]).num_blocks("t") == blocks
    assert t.num_blocks == blocks


# ---------------------------------------------------------------------------
# release errors
# ---------------------------------------------------------------------------


def test_release_twice_is_an_error():
    scheduler = daisy.Scheduler([line_task("t", 3)])
    block = scheduler.acquire_block("t")
    block.status = BlockStatus.SUCCESS
    scheduler.release_block(block)
    with pytest.raises(ValueError, match="release"):
        scheduler.release_block(block)
    state = scheduler.task_states["t"]
    assert state.completed_count == 1
    assert balanced(state)


def test_release_of_a_copy_after_release_is_an_error():
    scheduler = daisy.Scheduler([line_task("t", 3)])
    block = scheduler.acquire_block("t")
    twin = block.copy()
    block.status = twin.status = BlockStatus.SUCCESS
    scheduler.release_block(block)
    with pytest.raises(ValueError):
        scheduler.release_block(twin)
    assert scheduler.task_states["t"].completed_count == 1


@pytest.mark.parametrize("status", [BlockStatus.PROCESSING, BlockStatus.CREATED])
def test_release_without_an_outcome_is_an_error(status):
    scheduler = daisy.Scheduler([line_task("t", 3)])
    block = scheduler.acquire_block("t")
    block.status = status
    with pytest.raises(ValueError, match="status"):
        scheduler.release_block(block)
    state = scheduler.task_states["t"]
    assert state.processing_count == 1  # still out; it can be released properly
    block.status = BlockStatus.SUCCESS
    scheduler.release_block(block)
    assert scheduler.task_states["t"].completed_count == 1


def test_release_of_a_block_never_handed_out_is_an_error():
    t = line_task("t", 3)
    scheduler = daisy.Scheduler([t])
    block = daisy.DependencyGraph([t]).blocks("t")[2]
    block.status = BlockStatus.SUCCESS
    with pytest.raises(ValueError):
        scheduler.release_block(block)
    assert scheduler.task_states["t"].completed_count == 0


def test_release_of_a_bare_block_is_an_error():
    scheduler = daisy.Scheduler([line_task("t", 3)])
    block = daisy.Block(daisy.Roi((0,), (30,)), daisy.Roi((3,), (10,)), daisy.Roi((3,), (10,)))
    block.status = BlockStatus.SUCCESS
    with pytest.raises(ValueError, match="block"):
        scheduler.release_block(block)


# ---------------------------------------------------------------------------
# property test: random pipelines, random interleavings
# ---------------------------------------------------------------------------

MAX_BLOCKS_PER_DIM = {1: 10, 2: 5, 3: 3}


@st.composite
def chains(draw):
    """1-3 tasks of one dimensionality, each possibly reading the output of
    the previous one, with small random geometries."""
    dims = draw(st.integers(1, 3))
    tasks = []
    for i in range(draw(st.integers(1, 3))):
        # sampled_from draws uniformly (integers() favours tiny values)
        w = [draw(st.sampled_from([1, 2, 3, 4])) for _ in range(dims)]
        lo = [draw(st.sampled_from([0, 1, 2, 3, 5, 8])) for _ in range(dims)]
        hi = [draw(st.sampled_from([0, 1, 2, 3, 5, 8])) for _ in range(dims)]
        sizes = list(range(MAX_BLOCKS_PER_DIM[dims], -1, -1))
        n = [draw(st.sampled_from(sizes)) for _ in range(dims)]
        extra = [draw(st.integers(0, w[d] - 1)) for d in range(dims)]
        offset = [draw(st.integers(-4, 4)) for _ in range(dims)]
        total = (offset, [lo[d] + n[d] * w[d] + hi[d] + extra[d] for d in range(dims)])
        if any(s <= 0 for s in total[1]):
            total = (offset, [max(1, s) for s in total[1]])
        read = ([-x for x in lo], [lo[d] + w[d] + hi[d] for d in range(dims)])
        write = ([0] * dims, w)
        skip_mod = draw(st.sampled_from([0, 0, 2, 3, 5]))
        check = None
        if skip_mod:
            check = (skip_mod, draw(st.integers(0, skip_mod - 1)))
        upstream = [tasks[-1]] if tasks and draw(st.integers(0, 3)) else []
        tasks.append(
            dict(
                task_id=f"t{i}",
                total=total,
                read=read,
                write=write,
                fit=draw(st.sampled_from(["valid", "overhang", "shrink"])),
                read_write_conflict=draw(st.sampled_from([True, True, False])),
                max_retries=draw(st.integers(0, 2)),
                upstream=upstream,
                check=check,
            )
        )
    return tasks


def _rect(r):
    return tuple(r.begin), tuple(r.end)


def _overlap(a, b):
    return all(a[0][d] < b[1][d] and b[0][d] < a[1][d] for d in range(len(a[0])))


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    specs=chains(),
    rng=st.randoms(use_true_random=False),
    p_fail=st.sampled_from([0.0, 0.1, 0.35]),
)
def test_random_interleavings_keep_the_scheduler_consistent(specs, rng: random.Random, p_fail):
    completed: set = set()
    skipped: set = set()
    checked_too_early: list = []
    tasks: dict[str, daisy.Task] = {}
    graph_holder: list = []

    def make_check(mod, rem):
        def check(block):
            ups = ids(graph_holder[0].upstream(block))
            if not ups <= completed:
                checked_too_early.append(bid(block))
            if block.block_id[1] % mod == rem:
                skipped.add(bid(block))
                completed.add(bid(block))
                return True
            return False

        return check

    for spec in specs:
        tasks[spec["task_id"]] = make_task(
            spec["task_id"],
            spec["total"],
            spec["read"],
            spec["write"],
            fit=spec["fit"],
            read_write_conflict=spec["read_write_conflict"],
            max_retries=spec["max_retries"],
            upstream_tasks=[tasks[u["task_id"]] for u in spec["upstream"]],
            check_function=make_check(*spec["check"]) if spec["check"] else None,
            process_function=noop,
        )
    task_list = list(tasks.values())
    graph = daisy.DependencyGraph(task_list)
    graph_holder.append(graph)
    blocks = {bid(b): b for t in tasks for b in graph.blocks(t)}
    upstream = {k: ids(graph.upstream(b)) for k, b in blocks.items()}
    rects = {k: (_rect(b.read_roi), _rect(b.write_roi)) for k, b in blocks.items()}
    total = {t: graph.num_blocks(t) for t in tasks}

    scheduler = daisy.Scheduler(task_list)
    out: dict = {}  # id -> block
    attempts: dict = {}
    failed: set = set()

    def check_counts():
        states = scheduler.task_states
        for t, s in states.items():
            assert s.total_block_count == total[t]
            assert balanced(s), f"{t}: {s}"
            assert s.skipped_count <= s.completed_count
            assert s.processing_count == sum(1 for k in out if k[0] == t)

    task_ids = list(tasks)
    max_steps = 20 * (sum(total.values()) * 3 + 10)
    idle_sweeps = 0
    for _ in range(max_steps):
        if out and (rng.random() < 0.5 or idle_sweeps):
            key = rng.choice(sorted(out))
            block = out.pop(key)
            fails = rng.random() < p_fail
            block.status = BlockStatus.FAILED if fails else BlockStatus.SUCCESS
            scheduler.release_block(block)
            if fails:
                if attempts[key] > tasks[key[0]].max_retries:
                    failed.add(key)
            else:
                completed.add(key)
            idle_sweeps = 0
        else:
            task_id = rng.choice(task_ids)
            block = scheduler.acquire_block(task_id)
            if block is None:
                # nothing ready here; make sure nothing is ready anywhere
                others = [scheduler.acquire_block(t) for t in task_ids]
                got = [b for b in others if b is not None]
                if not got:
                    if not out:
                        break
                    idle_sweeps += 1
                    continue
                block = got[0]
                for extra in got[1:]:
                    # hand back later like any other block
                    k = bid(extra)
                    attempts[k] = attempts.get(k, 0) + 1
                    out[k] = extra
                    _check_handout(k, extra, out, rects, upstream, completed, tasks, attempts)
            key = bid(block)
            attempts[key] = attempts.get(key, 0) + 1
            out[key] = block
            _check_handout(key, block, out, rects, upstream, completed, tasks, attempts)
        check_counts()
    else:
        raise AssertionError("the run did not terminate")

    assert not out
    assert not checked_too_early, f"check_function ran before upstream: {checked_too_early}"
    states = scheduler.task_states
    doomed = transitive_downstream(graph, [blocks[k] for k in failed]) - failed
    assert scheduler.is_done()
    for t, s in states.items():
        assert s.is_done(), f"{t}: {s}"
        assert s.completed_count == sum(1 for k in completed if k[0] == t)
        assert s.skipped_count == sum(1 for k in skipped if k[0] == t)
        assert s.failed_count == sum(1 for k in failed if k[0] == t)
        assert s.orphaned_count == sum(1 for k in doomed if k[0] == t)
        assert s.completed_count + s.failed_count + s.orphaned_count == total[t]
    assert not doomed & completed


def _check_handout(key, block, out, rects, upstream, completed, tasks, attempts):
    assert key in rects, f"unknown block {key}"
    assert block.status is BlockStatus.CREATED  # as both releases (probe scheduler_block_status.py)
    assert upstream[key] <= completed, f"{key} handed out before {upstream[key] - completed}"
    assert attempts[key] <= tasks[key[0]].max_retries + 1, f"{key} handed out too often"
    assert key not in completed
    if tasks[key[0]].read_write_conflict:
        read, write = rects[key]
        for other in out:
            if other == key or other[0] != key[0]:
                continue
            o_read, o_write = rects[other]
            assert not (_overlap(read, o_write) or _overlap(o_read, write)), (
                f"{key} and {other} conflict and are out at once"
            )
