"""Block layout and dependencies against daisy 1.2.2, case by case.

``fixtures/v1_geometries.json`` was recorded by running daisy 1.2.2
(``fixtures/make_v1_fixtures.py``). Per case it holds the tasks
(``[offset, shape]`` ROIs, fit, read_write_conflict, upstream task ids),
``block_count`` per task, every block (spatial id, read and write ROI), the
blocks without any upstream block (``roots``), the upstream and downstream
relations keyed ``"task_id:spatial_id"`` (blocks without entries have none),
and the initial ``TaskState`` counts of a fresh ``Scheduler``.

Our graph must match block counts, block ids and ROIs, roots and upstream
sets exactly. daisy 1.2.2's own ``downstream()`` between tasks is not the
inverse of its ``upstream()`` when the downstream task's context is
asymmetric; ours must be the inverse of the recorded upstream relation, and
equal to the recorded downstream relation wherever that one is consistent.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import bid, noop, roi, roi_json

import daisy

FIXTURE = Path(__file__).parent / "fixtures" / "v1_geometries.json"
DATA = json.loads(FIXTURE.read_text())
CASES = {case["name"]: case for case in DATA["cases"]}

Ref = tuple[str, int]


def ref(pair: list[Any]) -> Ref:
    return (pair[0], int(pair[1]))


def key_ref(key: str) -> Ref:
    task_id, spatial_id = key.rsplit(":", 1)
    return (task_id, int(spatial_id))


def relation(case: dict[str, Any], name: str) -> dict[Ref, set[Ref]]:
    """A recorded relation as {block: set of blocks}, with every block of
    the case present (empty set when none was recorded)."""
    out: dict[Ref, set[Ref]] = {
        (t, b["id"]): set() for t, blocks in case["blocks"].items() for b in blocks
    }
    for key, refs in case[name].items():
        out[key_ref(key)] = {ref(r) for r in refs}
    return out


def inverse(rel: dict[Ref, set[Ref]]) -> dict[Ref, set[Ref]]:
    out: dict[Ref, set[Ref]] = {k: set() for k in rel}
    for down, ups in rel.items():
        for up in ups:
            out[up].add(down)
    return out


def build_tasks(case: dict[str, Any]) -> dict[str, daisy.Task]:
    tasks: dict[str, daisy.Task] = {}
    for spec in case["tasks"]:
        tasks[spec["task_id"]] = daisy.Task(
            spec["task_id"],
            roi(*spec["total_roi"]),
            roi(*spec["read_roi"]),
            roi(*spec["write_roi"]),
            process_function=noop,
            read_write_conflict=spec["read_write_conflict"],
            fit=spec["fit"],
            upstream_tasks=[tasks[u] for u in spec["upstream"]],
        )
    return tasks


@pytest.fixture(scope="module")
def built():
    """Per case: (tasks, graph, blocks by id), built once per module."""
    cache: dict[str, Any] = {}

    def get(name: str):
        if name not in cache:
            tasks = build_tasks(CASES[name])
            graph = daisy.DependencyGraph(list(tasks.values()))
            blocks = {bid(b): b for t in tasks for b in graph.blocks(t)}
            cache[name] = (tasks, graph, blocks)
        return cache[name]

    return get


def test_fixture_file_is_the_1_2_2_recording():
    assert DATA["daisy_version"] == "1.2.2"
    assert len(CASES) == len(DATA["cases"]) >= 100
    # some cases have tasks without blocks; those must be covered
    assert any(0 in case["block_count"].values() for case in CASES.values())
    assert any(len(case["tasks"]) >= 3 for case in CASES.values())


@pytest.mark.parametrize("name", CASES)
def test_block_counts(name, built):
    case = CASES[name]
    tasks, graph, _ = built(name)
    assert sorted(graph.task_ids) == sorted(tasks)
    for task_id, count in case["block_count"].items():
        assert graph.num_blocks(task_id) == count
        assert tasks[task_id].num_blocks == count
        assert len(graph.blocks(task_id)) == count


@pytest.mark.parametrize("name", CASES)
def test_block_ids_and_rois(name, built):
    case = CASES[name]
    _, graph, _ = built(name)
    for task_id, expected in case["blocks"].items():
        want = {b["id"]: (b["read_roi"], b["write_roi"]) for b in expected}
        got = {}
        for b in graph.blocks(task_id):
            assert b.task_id == task_id
            assert b.block_id[0] == task_id
            assert b.block_id[1] not in got, f"duplicate spatial id {b.block_id}"
            got[b.block_id[1]] = (roi_json(b.read_roi), roi_json(b.write_roi))
        assert got == want, f"{name}/{task_id}"


@pytest.mark.parametrize("name", CASES)
def test_roots(name, built):
    """``root_gen(task)`` yields the task's blocks that wait for no block at
    all; together they are 1.2.2's blocks without upstream blocks."""
    case = CASES[name]
    tasks, graph, _ = built(name)
    want = {ref(r) for r in case["roots"]}
    got: set[Ref] = set()
    for task_id in tasks:
        roots = list(graph.root_gen(task_id))
        task_roots = {bid(b) for b in roots}
        assert len(task_roots) == len(roots), "a root was yielded twice"
        assert graph.num_roots(task_id) == len(roots)
        assert all(b.task_id == task_id for b in roots)
        if not tasks[task_id].upstream_tasks:
            # without upstream tasks these are also 1.2.2's root_gen blocks
            assert task_roots == {ref(r) for r in case["task_roots"][task_id]}
        got |= task_roots
    assert got == want


@pytest.mark.parametrize("name", CASES)
def test_upstream_sets(name, built):
    case = CASES[name]
    _, graph, blocks = built(name)
    want = relation(case, "upstream")
    assert set(blocks) == set(want)
    for block_ref, block in blocks.items():
        ups = graph.upstream(block)
        got = {bid(b) for b in ups}
        assert len(got) == len(ups), f"{block_ref}: duplicate upstream blocks"
        assert got == want[block_ref], f"{name}: upstream of {block_ref}"


@pytest.mark.parametrize("name", CASES)
def test_downstream_is_the_inverse_of_upstream(name, built):
    case = CASES[name]
    _, graph, blocks = built(name)
    recorded_up = relation(case, "upstream")
    recorded_down = relation(case, "downstream")
    want = inverse(recorded_up)
    v1_consistent = recorded_down == want
    for block_ref, block in blocks.items():
        downs = graph.downstream(block)
        got = {bid(b) for b in downs}
        assert len(got) == len(downs), f"{block_ref}: duplicate downstream blocks"
        assert got == want[block_ref], f"{name}: downstream of {block_ref}"
        if v1_consistent:
            assert got == recorded_down[block_ref]


def test_some_cases_have_a_1x_downstream_that_is_not_the_inverse():
    """Guards the premise of the test above: the recording does contain
    cases where 1.2.2's downstream disagrees with its upstream."""
    differ = [
        name
        for name, case in CASES.items()
        if relation(case, "downstream") != inverse(relation(case, "upstream"))
    ]
    assert differ
    assert all(len(CASES[name]["tasks"]) > 1 for name in differ)


@pytest.mark.parametrize("name", CASES)
def test_graph_blocks_returned_by_upstream_are_the_real_blocks(name, built):
    """Blocks returned by upstream()/downstream() carry the same ROIs as the
    blocks of their task."""
    _, graph, blocks = built(name)
    for block in list(blocks.values())[:50]:
        for other in graph.upstream(block) + graph.downstream(block):
            same = blocks[bid(other)]
            assert other.read_roi == same.read_roi
            assert other.write_roi == same.write_roi


SINGLE_TASK_WITH_STATES = [
    name
    for name, case in CASES.items()
    if len(case["tasks"]) == 1 and "initial_task_states" in case
]
WITH_STATES = [name for name, case in CASES.items() if "initial_task_states" in case]


@pytest.mark.parametrize("name", SINGLE_TASK_WITH_STATES)
def test_initial_task_state_of_single_task_cases(name, built):
    case = CASES[name]
    tasks, _, _ = built(name)
    (task_id,) = tasks
    state = daisy.Scheduler([tasks[task_id]]).task_states[task_id]
    want = case["initial_task_states"][task_id]
    assert state.started is want["started"] is False
    assert state.total_block_count == want["total_block_count"]
    assert state.ready_count == want["ready_count"]
    assert state.pending_count == want["pending_count"]
    assert state.processing_count == state.completed_count == 0
    assert state.failed_count == state.orphaned_count == state.skipped_count == 0
    assert not state.is_done()


@pytest.mark.parametrize("name", WITH_STATES)
def test_initial_totals_of_every_case(name, built):
    case = CASES[name]
    tasks, _, _ = built(name)
    states = daisy.Scheduler(list(tasks.values())).task_states
    assert set(states) == set(tasks)
    for task_id, want in case["initial_task_states"].items():
        s = states[task_id]
        assert s.total_block_count == want["total_block_count"]
        assert s.started is False
        assert (
            s.ready_count + s.pending_count + s.processing_count + s.completed_count
            == s.total_block_count
        )


ZERO_BLOCK_CASES = [name for name, case in CASES.items() if 0 in case["block_count"].values()]


@pytest.mark.parametrize("name", ZERO_BLOCK_CASES)
def test_tasks_without_blocks_schedule_and_run(name, built):
    """daisy 1.2.2 raised IndexError here; we report an empty task as done."""
    case = CASES[name]
    tasks, graph, _ = built(name)
    empty = [t for t, n in case["block_count"].items() if n == 0]
    assert empty
    for task_id in empty:
        assert graph.num_roots(task_id) == 0
        assert list(graph.root_gen(task_id)) == []
    scheduler = daisy.Scheduler(list(tasks.values()))
    for task_id in empty:
        assert scheduler.acquire_block(task_id) is None
        assert scheduler.task_states[task_id].total_block_count == 0
        assert scheduler.task_states[task_id].is_done()
    states = daisy.SerialServer().run_blockwise(list(tasks.values()))
    for task_id, count in case["block_count"].items():
        assert states[task_id].completed_count == count
        assert states[task_id].is_done()


@pytest.mark.parametrize("name", [n for n in CASES if "acquire_order" in CASES[n]])
def test_serial_acquire_hands_out_every_block_once(name, built):
    """Acquire/release one block at a time: the same set of blocks 1.2.2
    handed out, each once, each after its upstream blocks."""
    case = CASES[name]
    tasks, graph, blocks = built(name)
    (task_id,) = tasks
    scheduler = daisy.Scheduler([tasks[task_id]])
    order: list[Ref] = []
    while (b := scheduler.acquire_block(task_id)) is not None:
        done = set(order)
        assert {bid(u) for u in graph.upstream(blocks[bid(b)])} <= done
        order.append(bid(b))
        b.status = daisy.BlockStatus.SUCCESS
        scheduler.release_block(b)
    assert len(order) == len(set(order))
    assert set(order) == {ref(r) for r in case["acquire_order"]}
    assert scheduler.task_states[task_id].completed_count == len(order)


def test_per_task_relation_counts_are_consistent():
    """Sanity check of the recording itself: every recorded edge names blocks
    that exist."""
    for name, case in CASES.items():
        known = set(relation(case, "upstream"))
        by_task = defaultdict(int)
        for t, _ in known:
            by_task[t] += 1
        assert dict(by_task) == {t: n for t, n in case["block_count"].items() if n}, name
        for rel in ("upstream", "downstream"):
            for key, refs in case[rel].items():
                assert key_ref(key) in known
                assert {ref(r) for r in refs} <= known
