"""Pipelines: upstream_tasks, ``a + b``, ``a | b``, validation of the task
graph (cycles, duplicate ids) and scheduling across tasks."""

from __future__ import annotations

import pytest
from conftest import bid, ids, line_task, make_task

import daisy
from daisy import BlockStatus, Pipeline


def recording_task(task_id, seen, n=4, size=10, **kwargs):
    return line_task(task_id, n, size, process_function=lambda b: seen.append(bid(b)), **kwargs)


def cross_upstream(graph, block, other_task):
    return {bid(u) for u in graph.upstream(block) if u.task_id == other_task}


# ---------------------------------------------------------------------------
# building pipelines
# ---------------------------------------------------------------------------


def test_upstream_tasks_make_an_edge():
    a = line_task("a", 4)
    b = line_task("b", 4, upstream_tasks=[a])
    assert b.upstream_tasks == [a]
    assert b.requires() == [a]
    graph = daisy.DependencyGraph([b])
    assert graph.task_ids == ["a", "b"]
    assert graph.root_tasks() == ["a"]
    for block in graph.blocks("b"):
        # b's block i reads exactly what a's block i wrote
        assert cross_upstream(graph, block, "a") == {("a", block.block_id[1])}


def test_plus_runs_the_right_side_after_the_left():
    a, b = line_task("a", 4), line_task("b", 4)
    p = a + b
    assert isinstance(p, Pipeline)
    assert [t.task_id for t in p.tasks] == ["a", "b"]
    assert p.upstream_ids("b") == ["a"]
    assert p.upstream_ids("a") == []
    graph = daisy.DependencyGraph(p)
    assert graph.root_tasks() == ["a"]
    for block in graph.blocks("b"):
        assert cross_upstream(graph, block, "a") == {("a", block.block_id[1])}
    # the tasks themselves are not changed
    assert a.upstream_tasks == [] and b.upstream_tasks == []


def test_or_runs_tasks_side_by_side():
    a, b = line_task("a", 4), line_task("b", 4)
    p = a | b
    assert sorted(t.task_id for t in p.tasks) == ["a", "b"]
    assert p.upstream_ids("a") == p.upstream_ids("b") == []
    graph = daisy.DependencyGraph(p)
    assert sorted(graph.root_tasks()) == ["a", "b"]
    for block in graph.blocks("a") + graph.blocks("b"):
        assert graph.upstream(block) == []
    scheduler = daisy.Scheduler(p)
    # both tasks are ready from the start
    assert scheduler.acquire_block("a") is not None
    assert scheduler.acquire_block("b") is not None


def test_fan_in_and_fan_out():
    a, b, c, d = (line_task(n, 3) for n in "abcd")
    p = (a | b) + c
    assert p.upstream_ids("c") == ["a", "b"]
    q = a + (b | c)
    assert q.upstream_ids("b") == ["a"] and q.upstream_ids("c") == ["a"]
    diamond = a + (b | c) + d
    assert diamond.upstream_ids("d") == ["b", "c"]
    graph = daisy.DependencyGraph(diamond)
    assert graph.root_tasks() == ["a"]
    assert graph.task_ids.index("a") < graph.task_ids.index("b") < graph.task_ids.index("d")
    assert graph.task_ids.index("c") < graph.task_ids.index("d")
    block = graph.blocks("d")[1]
    assert ids(graph.upstream(block)) == {("b", 1), ("c", 1)}


def test_pipelines_are_accepted_everywhere_tasks_are():
    seen: list = []
    a, b = recording_task("a", seen), recording_task("b", seen)
    p = a + b
    assert set(daisy.Scheduler(p).task_states) == {"a", "b"}
    assert daisy.DependencyGraph(p).task_ids == ["a", "b"]
    assert set(daisy.SerialServer().run_blockwise(p)) == {"a", "b"}
    assert len(seen) == 8
    seen.clear()
    assert daisy.run_blockwise(p, multiprocessing=False, summary=False) is True
    assert len(seen) == 8


# ---------------------------------------------------------------------------
# invalid graphs
# ---------------------------------------------------------------------------


def test_cycle_through_plus_is_rejected():
    a, b = line_task("a", 2), line_task("b", 2)
    with pytest.raises(ValueError) as excinfo:
        (a + b) + a
    assert "cycle" in str(excinfo.value)
    assert '"a"' in str(excinfo.value) or "'a'" in str(excinfo.value)


def test_cycle_from_two_pipelines_is_rejected():
    a, b = line_task("a", 2), line_task("b", 2)
    with pytest.raises(ValueError, match="cycle"):
        (a + b) | (b + a)


def test_task_after_itself_is_a_cycle():
    a = line_task("a", 2)
    with pytest.raises(ValueError, match="cycle"):
        a + a


def test_cycle_through_upstream_tasks_is_rejected():
    a = line_task("a", 2)
    b = line_task("b", 2, upstream_tasks=[a])
    a.upstream_tasks.append(b)  # a now waits for b, which waits for a
    for build in (daisy.DependencyGraph, daisy.Scheduler, Pipeline.of):
        with pytest.raises(ValueError, match="cycle"):
            build([b])
    with pytest.raises(ValueError, match="cycle"):
        daisy.run_blockwise([a], multiprocessing=False)


def test_cycle_in_explicit_edges_is_rejected():
    a, b, c = line_task("a", 2), line_task("b", 2), line_task("c", 2)
    with pytest.raises(ValueError, match="cycle"):
        Pipeline([a, b, c], [("a", "b"), ("b", "c"), ("c", "a")])


def test_duplicate_task_ids_are_rejected():
    a, a2 = line_task("a", 2), line_task("a", 3)
    b = line_task("b", 2)
    for build in (
        lambda: a + a2,
        lambda: a | a2,
        lambda: (a + b) | a2,
        lambda: Pipeline([a, a2]),
        lambda: daisy.DependencyGraph([a, a2]),
        lambda: daisy.Scheduler([b, a, a2]),
        lambda: daisy.run_blockwise([a, a2], multiprocessing=False),
    ):
        with pytest.raises(ValueError) as excinfo:
            build()
        assert "'a'" in str(excinfo.value) or '"a"' in str(excinfo.value)
        assert "task_id" in str(excinfo.value)


def test_duplicate_ids_among_upstream_tasks_are_rejected():
    x = line_task("x", 2, upstream_tasks=[line_task("a", 2)])
    y = line_task("y", 2, upstream_tasks=[line_task("a", 2)])
    with pytest.raises(ValueError, match="task_id"):
        daisy.DependencyGraph([x, y])


def test_the_same_task_object_twice_is_one_task():
    seen: list = []
    a = recording_task("a", seen)
    for tasks in ([a, a], a | a, Pipeline([a, a])):
        graph = daisy.DependencyGraph(tasks)
        assert graph.task_ids == ["a"]
    assert daisy.run_blockwise([a, a], multiprocessing=False, summary=False)
    assert sorted(seen) == [("a", i) for i in range(4)]


def test_shared_upstream_task_object_is_one_task():
    seen: list = []
    a = recording_task("a", seen)
    x = recording_task("x", seen, upstream_tasks=[a])
    y = recording_task("y", seen, upstream_tasks=[a])
    graph = daisy.DependencyGraph([x, y])
    assert sorted(graph.task_ids) == ["a", "x", "y"]
    assert graph.root_tasks() == ["a"]
    assert daisy.run_blockwise([x, y], multiprocessing=False, summary=False)
    assert len(seen) == len(set(seen)) == 12


def _upstream_sets(tasks, task_id="b"):
    graph = daisy.DependencyGraph(tasks)
    return {bid(x): ids(graph.upstream(x)) for x in graph.blocks(task_id)}


def _single_edge_reference():
    a = line_task("a", 4)
    return _upstream_sets([line_task("b", 4, upstream_tasks=[a])])


def test_repeated_upstream_task_is_one_edge():
    seen: list = []
    a = recording_task("a", seen)
    b = recording_task("b", seen, upstream_tasks=[a, a])
    for tasks in ([b], [b, a], [a, b, b]):
        assert Pipeline.of(tasks).upstream_ids("b") == ["a"]
        assert _upstream_sets(tasks) == _single_edge_reference()
    graph = daisy.DependencyGraph([b])
    for x in graph.blocks("a"):
        downs = graph.downstream(x)
        assert len(downs) == len(ids(downs)) == 1
    assert daisy.run_blockwise([b], multiprocessing=False, summary=False)
    assert sorted(seen) == sorted([("a", i) for i in range(4)] + [("b", i) for i in range(4)])


def test_the_same_edge_from_two_pipelines_is_one_edge():
    seen: list = []
    a, b = recording_task("a", seen), recording_task("b", seen)
    p = (a + b) | (a + b)
    assert p.upstream_ids("b") == ["a"]
    assert _upstream_sets(p) == _single_edge_reference()
    assert daisy.run_blockwise(p, multiprocessing=False, summary=False)
    assert len(seen) == len(set(seen)) == 8


def test_duplicate_explicit_edges_are_one_edge():
    a, b = line_task("a", 4), line_task("b", 4)
    p = Pipeline([a, b], [("a", "b"), ("a", "b")])
    assert p.upstream_ids("b") == ["a"]
    assert _upstream_sets(p) == _single_edge_reference()


def test_plus_repeating_an_upstream_tasks_edge_is_harmless():
    """``b`` already lists ``a`` in ``upstream_tasks``; writing ``a + b`` as
    well states the same edge twice and must mean the same pipeline (not a
    cycle ``a -> a``)."""
    seen: list = []
    a = recording_task("a", seen)
    b = recording_task("b", seen, upstream_tasks=[a])
    p = a + b
    assert p.upstream_ids("b") == ["a"]
    assert p.upstream_ids("a") == []
    assert _upstream_sets(p) == _single_edge_reference()
    assert daisy.run_blockwise(p, multiprocessing=False, summary=False)
    assert len(seen) == len(set(seen)) == 8


def test_pipeline_rejects_non_tasks():
    with pytest.raises(TypeError, match="tasks"):
        Pipeline.of([line_task("a", 2), "b"])
    with pytest.raises(TypeError, match="tasks"):
        line_task("a", 2) + 3


# ---------------------------------------------------------------------------
# upstream tasks are pulled in
# ---------------------------------------------------------------------------


def test_upstream_tasks_are_pulled_in_recursively():
    seen: list = []
    a = recording_task("a", seen)
    b = recording_task("b", seen, upstream_tasks=[a])
    c = recording_task("c", seen, upstream_tasks=[b])
    graph = daisy.DependencyGraph([c])
    assert graph.task_ids == ["a", "b", "c"]
    assert graph.root_tasks() == ["a"]
    scheduler = daisy.Scheduler([c])
    assert list(scheduler.task_states) == ["a", "b", "c"]
    assert [t.task_id for t in scheduler.tasks] == ["a", "b", "c"]
    assert scheduler.acquire_block("c") is None  # c waits for b waits for a
    assert scheduler.acquire_block("a") is not None
    states = daisy.SerialServer().run_blockwise([c])
    assert list(states) == ["a", "b", "c"]
    assert all(s.completed_count == 4 for s in states.values())
    assert len(seen) == 12
    first_b = seen.index(("b", 0))
    assert ("a", 0) in seen[:first_b]


def test_cross_task_dependencies_follow_read_rois():
    """b's block waits for exactly the a blocks whose write ROI overlaps its
    read ROI."""
    a = make_task("a", ((0,), (60,)), ((0,), (10,)), ((0,), (10,)))
    b = make_task("b", ((0,), (60,)), ((-3,), (16,)), ((0,), (10,)), upstream_tasks=[a])
    graph = daisy.DependencyGraph([b])
    a_blocks = graph.blocks("a")
    for block in graph.blocks("b"):
        want = {bid(x) for x in a_blocks if x.write_roi.intersects(block.read_roi)}
        assert cross_upstream(graph, block, "a") == want
        assert len(want) >= 2


# ---------------------------------------------------------------------------
# blocks that read no upstream output
# ---------------------------------------------------------------------------


def _a_and_c():
    seen: list = []
    a = make_task(
        "a", ((0,), (50,)), ((-2,), (9,)), ((0,), (5,)), process_function=lambda b: seen.append(b)
    )
    c = make_task(
        "c",
        ((0,), (50,)),
        ((0,), (4,)),
        ((0,), (4,)),
        fit="overhang",
        upstream_tasks=[a],
        process_function=lambda b: seen.append(b),
    )
    return a, c, seen


def test_block_reading_no_upstream_output_has_no_cross_task_upstream():
    """c/12 reads [48:52]; a's blocks write [2:47] only."""
    _, c, _ = _a_and_c()
    graph = daisy.DependencyGraph([c])
    assert graph.num_blocks("a") == 9
    assert graph.num_blocks("c") == 13
    lonely = next(b for b in graph.blocks("c") if b.block_id[1] == 12)
    assert lonely.read_roi == daisy.Roi((48,), (4,))
    assert graph.upstream(lonely) == []
    assert ("c", 12) in ids(graph.root_gen("c"))


def test_block_reading_no_upstream_output_is_still_scheduled():
    """daisy 1.2.2 never scheduled such a block (the run ended with it
    pending); it must run."""
    _, c, seen = _a_and_c()
    assert daisy.run_blockwise([c], multiprocessing=False, summary=False) is True
    assert ("c", 12) in {bid(b) for b in seen}
    assert len(seen) == 9 + 13


def test_block_reading_no_upstream_output_is_handed_out_by_the_scheduler():
    _, c, _ = _a_and_c()
    scheduler = daisy.Scheduler([c])
    handed: list = []
    for _ in range(100):
        progressed = False
        for task_id in ("c", "a"):
            block = scheduler.acquire_block(task_id)
            if block is not None:
                handed.append(bid(block))
                block.status = BlockStatus.SUCCESS
                scheduler.release_block(block)
                progressed = True
        if not progressed:
            break
    assert ("c", 12) in handed
    assert len(handed) == len(set(handed)) == 22
    assert all(s.is_done() for s in scheduler.task_states.values())
    assert scheduler.is_done()


def test_a_list_of_tasks_is_checked_once_not_once_per_task(monkeypatch):
    """``run_blockwise([...])`` composes its list through ``Pipeline.of``:
    folding ``|`` over the list re-checked the growing pipeline per task
    (quadratic: 1,000 tasks took 4 s). The list is now checked once, with
    every task and edge; ``benchmarks/test_planning_bench.py`` times it."""
    import daisy.pipeline as pipeline_module

    built: list[int] = []
    real = pipeline_module.DependencyGraph

    def counting(specs):
        built.append(len(specs))
        return real(specs)

    tasks = []
    for i in range(200):
        tasks.append(line_task(f"t{i}", 1, upstream_tasks=[tasks[-1]] if tasks else None))
    monkeypatch.setattr(pipeline_module, "DependencyGraph", counting)
    p = daisy.Pipeline.of(tasks)
    assert built == [200]
    assert len(p.tasks) == 200
    assert p.upstream_ids("t199") == ["t198"]
    # nested lists and pipelines in the list are still taken
    built.clear()
    q = daisy.Pipeline.of([tasks[:3], daisy.Pipeline([tasks[5]]), tasks[7]])
    assert {t.task_id for t in q.tasks} == {f"t{i}" for i in range(8)}
    with pytest.raises(TypeError, match="tasks: expected"):
        daisy.Pipeline.of([tasks[0], 3])


# ---------------------------------------------------------------------------
# joining two checked pipelines checks what the join adds (issue 56)
# ---------------------------------------------------------------------------


def test_plus_checks_the_edges_it_adds_between_two_pipelines():
    a, b = line_task("a", 4), line_task("b", 4)
    flat = daisy.Task(
        "flat",
        daisy.Roi((0, 0), (4, 4)),
        daisy.Roi((0, 0), (1, 1)),
        daisy.Roi((0, 0), (1, 1)),
        process_function=lambda b: None,
    )
    with pytest.raises(ValueError, match='task "flat" has 2 axes but its upstream task "b"'):
        (a + b) + flat


def test_plus_and_bar_refuse_two_tasks_of_either_side_on_one_store(tmp_path):
    a = line_task("a", 2, tracking_path=str(tmp_path / "one"))
    b = line_task("b", 2, tracking_path=str(tmp_path / "one"))
    c = line_task("c", 2)
    for build in (lambda: (a + c) | b, lambda: (c | a) + b):
        with pytest.raises(ValueError, match='tasks "a" and "b" resolve to the same tracking'):
            build()


def test_a_long_chain_built_with_plus_has_one_source_one_output_and_every_edge():
    tasks = [line_task(f"t{i}", 1) for i in range(300)]
    p = tasks[0]
    for t in tasks[1:]:
        p = p + t
    assert [t.task_id for t in p.sources] == ["t0"]
    assert [t.task_id for t in p.outputs] == ["t299"]
    assert len(p.edges) == 299
    assert p.upstream_ids("t150") == ["t149"]
    # a side joined in parallel keeps its own end as an output, until joined after
    q = (p | line_task("side", 1)) + line_task("end", 1)
    assert [t.task_id for t in q.outputs] == ["end"]
    assert sorted(q.upstream_ids("end")) == ["side", "t299"]
