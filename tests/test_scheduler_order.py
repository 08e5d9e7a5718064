"""A Scheduler driven by hand hands out blocks in daisy 1.2.2's order.

The fixtures in ``tests/fixtures/scheduler_order/`` were recorded from the
released daisy 1.2.2 and 2.0.0 by ``record_scheduler_order.py`` (black
box: only public calls). Both releases agree on every order; these tests
rebuild the same tasks with this package, drive its Scheduler with the same
policies and compare the blocks handed out, the final counts, and what
``acquire_block`` returns when nothing is ready.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import daisy

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler_order"
RELEASES = {v: json.loads((FIXTURES / f"order_{v}.json").read_text()) for v in ("1.2.2", "2.0.0")}
SCENARIOS = {s["name"]: s for s in RELEASES["1.2.2"]["scenarios"]}
COUNTS = ("completed_count", "failed_count", "orphaned_count", "total_block_count")


def noop(block: daisy.Block) -> None:
    pass


def build(scenario: dict[str, Any]) -> daisy.Scheduler:
    tasks: dict[str, daisy.Task] = {}
    for spec in scenario["tasks"]:
        tasks[spec["task_id"]] = daisy.Task(
            spec["task_id"],
            daisy.Roi(*spec["total_roi"]),
            daisy.Roi(*spec["read_roi"]),
            daisy.Roi(*spec["write_roi"]),
            process_function=noop,
            read_write_conflict=spec["read_write_conflict"],
            fit=spec["fit"],
            max_retries=spec["max_retries"],
            upstream_tasks=[tasks[u] for u in spec["upstream"]] or None,
        )
    return daisy.Scheduler([tasks[t] for t in scenario["scheduler_tasks"]])


def key(block: daisy.Block) -> list[Any]:
    return [block.block_id[0], block.block_id[1]]


def counts(scheduler: daisy.Scheduler, order: list[str]) -> dict[str, dict[str, int]]:
    states = scheduler.task_states
    return {t: {c: getattr(states[t], c) for c in COUNTS} for t in order}


def acquire_all_then_release(scenario: dict[str, Any]) -> dict[str, Any]:
    scheduler, order = build(scenario), scenario["policy_task_order"]
    rounds = []
    while True:
        held = []
        for tid in order:
            while (block := scheduler.acquire_block(tid)) is not None:
                held.append(block)
        if not held:
            break
        rounds.append([key(b) for b in held])
        for b in held:
            b.status = daisy.BlockStatus.SUCCESS
            scheduler.release_block(b)
        assert len(rounds) < 1000
    return {"rounds": rounds, "final": counts(scheduler, order)}


def one_at_a_time(scenario: dict[str, Any]) -> dict[str, Any]:
    scheduler, order = build(scenario), scenario["policy_task_order"]
    fail = [list(k) for k in scenario.get("fail_blocks") or []]
    sequence = []
    while True:
        got = next((b for b in (scheduler.acquire_block(t) for t in order) if b is not None), None)
        if got is None:
            break
        sequence.append(key(got))
        failed = key(got) in fail
        got.status = daisy.BlockStatus.FAILED if failed else daisy.BlockStatus.SUCCESS
        scheduler.release_block(got)
        assert len(sequence) < 10_000
    return {"sequence": sequence, "final": counts(scheduler, order)}


def recorded(scenario: dict[str, Any], policy: str, field: str) -> Any:
    return scenario["results"][policy][field]


def recorded_final(scenario: dict[str, Any], policy: str) -> dict[str, dict[str, int]]:
    final = recorded(scenario, policy, "final_task_states")
    return {t: {c: final[t][c] for c in COUNTS} for t in final}


def test_both_releases_agree_on_every_order() -> None:
    """The fixture's premise: 1.2.2 and 2.0.0 hand out the same blocks."""
    other = {s["name"]: s for s in RELEASES["2.0.0"]["scenarios"]}
    assert set(other) == set(SCENARIOS)
    for name, s in SCENARIOS.items():
        for policy, result in s["results"].items():
            for field in ("rounds", "sequence"):
                if field in result:
                    assert other[name]["results"][policy][field] == result[field], (name, policy)


@pytest.mark.parametrize(
    "name", [n for n, s in SCENARIOS.items() if "acquire_all_then_release" in s["results"]]
)
def test_rounds_match_1_2_2(name: str) -> None:
    scenario = SCENARIOS[name]
    ours = acquire_all_then_release(scenario)
    assert ours["rounds"] == recorded(scenario, "acquire_all_then_release", "rounds")
    assert ours["final"] == recorded_final(scenario, "acquire_all_then_release")


@pytest.mark.parametrize(
    "name,policy",
    [
        (n, p)
        for n, s in SCENARIOS.items()
        for p in ("one_at_a_time", "one_at_a_time_with_failures")
        if p in s["results"]
    ],
)
def test_sequence_matches_1_2_2(name: str, policy: str) -> None:
    scenario = SCENARIOS[name]
    ours = one_at_a_time(scenario)
    assert ours["sequence"] == recorded(scenario, policy, "sequence")
    assert ours["final"] == recorded_final(scenario, policy)


def test_the_scheduler_has_its_dependency_graph() -> None:
    """2.0.0's ``Scheduler.dependency_graph``: ``upstream`` / ``downstream``
    of a block, the same blocks 1.2.2's graph names (recorded in the
    fixture's probe)."""
    scenario = SCENARIOS["test_2d"]
    scheduler = build(scenario)
    graph = scheduler.dependency_graph
    first = scheduler.acquire_block("a")
    assert first is not None
    probe = scenario["probe"]
    down = [key(b) for b in graph.downstream(first)]
    up = [key(b) for b in graph.upstream(first)]
    assert up == probe["first_block_upstream"]["blocks"] == []
    assert down == probe["first_block_downstream"]["blocks"] == [["a", 2], ["a", 7]]
