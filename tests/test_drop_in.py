"""What code written for daisy 1.2.2 and 2.0.0 sees (issue 28), checked
against the transcripts of the probes in ``tests/fixtures/probes/``, run
against the published wheels."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import line_task

import daisy

PROBES = Path(__file__).parent / "fixtures" / "probes"


def transcript(name: str, release: str) -> dict[str, str]:
    """The ``key value`` lines a probe printed under a release."""
    lines = (PROBES / f"{name}_{release}.txt").read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines if " " in line)


def test_a_hand_driven_scheduler_hands_out_created_blocks_that_print_as_1x() -> None:
    """Item 1 (probe ``scheduler_block_status.py``): both releases hand a
    block out as CREATED; 1.2.2 prints it ``BlockStatus.CREATED`` (what 1.x
    tutorials show), where an IntEnum prints ``0``."""
    v1, v2 = (
        transcript("scheduler_block_status", "1.2.2"),
        transcript("scheduler_block_status", "2.0.0"),
    )
    assert v1["is"] == v2["is"] == "CREATED True"
    t = daisy.Task(
        "t",
        daisy.Roi((0,), (20,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=lambda b: None,
    )
    s = daisy.Scheduler([t])
    block = s.acquire_block("t")
    assert block is not None
    assert block.status == daisy.BlockStatus.CREATED
    assert repr(block.status) == v1["status"]
    assert str(block.status) == v1["str"] == f"{block.status}" == v1["format"]
    # still a number for 2.0.0 code comparing numbers
    assert block.status == 0 and int(block.status) == int(v2["str"])
    block.status = daisy.BlockStatus.SUCCESS
    s.release_block(block)
    assert s.task_states["t"].completed_count == 1


def test_enumerate_all_dependencies_is_a_sequence_as_200s_list() -> None:
    """Item 2 (probe ``dependencies_sequence.py``): 2.0.0 returned a list
    (its own benchmark calls ``len()`` on it); 1.2.2 a generator. Ours is a
    sequence computed as it is walked: ``len()``, indexing from either end,
    slices and iterating twice give 2.0.0's answers."""
    want = transcript("dependencies_sequence", "2.0.0")
    g = daisy.BlockwiseDependencyGraph(
        "t",
        daisy.Roi((-5, -5), (20, 20)),
        daisy.Roi((0, 0), (10, 10)),
        True,
        "valid",
        total_read_roi=daisy.Roi((-5, -5), (45, 45)),
    )
    deps = g.enumerate_all_dependencies()
    assert str(len(deps)) == want["len"]
    first, last = deps[0], deps[-1]
    assert f"{first[0].block_id} {sorted(b.block_id for b in first[1])}" == want["first"]
    assert f"{last[0].block_id} {sorted(b.block_id for b in last[1])}" == want["last"]
    assert len(list(deps)) == len(list(deps)) == len(deps)
    assert str([b.block_id for b, _ in deps[1:3]]) == want["slice"]
    with pytest.raises(IndexError):
        deps[len(deps)]


def test_an_unpicklable_function_is_both_errors_code_catches() -> None:
    """Item 7 (probe ``unpicklable.py``): 2.0.0 raises a RuntimeError for a
    function it cannot send to its workers, this package raised a
    TypeError; the error is both, so code catching either keeps working
    (1.2.2 forked its workers and ran such a function)."""
    assert transcript("unpicklable", "2.0.0")["raised"].startswith("RuntimeError")
    lock = threading.Lock()

    def uses_a_lock(block: daisy.Block) -> None:
        with lock:  # captured: pickled by value, and a lock cannot be
            pass

    t = daisy.Task(
        "t",
        daisy.Roi((0,), (20,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=uses_a_lock,
    )
    for caught in (RuntimeError, TypeError):
        with pytest.raises(caught, match="cannot be sent to worker processes"):
            daisy.run_blockwise([t], progress=False, summary=False)


def _crash_at_once() -> None:
    import os

    os._exit(1)


def test_restarts_count_replacements_and_failures_count_deaths_as_200() -> None:
    """Item 3 (probe ``worker_restarts.py``): a worker function that always
    dies at once, ``max_workers=1``, ``max_worker_restarts=3``: 2.0.0 starts
    4 workers, counts 3 restarts (the 4th death replaces nothing: the task
    is abandoned) and 4 worker failures, and orphans every block. This
    package counted 4 restarts and 0 failures."""
    want = transcript("worker_restarts", "2.0.0")
    t = daisy.Task(
        "t",
        daisy.Roi((0,), (40,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=_crash_at_once,
        max_workers=1,
        max_worker_restarts=3,
    )
    state = daisy.Server().run_blockwise([t], progress=False)["t"]
    for name in (
        "worker_restart_count",
        "worker_failure_count",
        "worker_start_count",
        "completed_count",
        "failed_count",
        "orphaned_count",
    ):
        assert str(getattr(state, name)) == want[name], name


def test_a_check_function_that_says_all_is_done_starts_no_worker() -> None:
    """Item 6: a fully resumed run whose ``check_function`` says every
    block is done (gunpowder's ``DaisyRequestBlocks`` resuming) started the
    launcher and workers for nothing: 1.2 s where 1.2.2 took 0.15 s. No
    block to process, no worker; and a task with one block left gets its
    worker for that block."""
    t = line_task("resumed", 20, check_function=lambda b: True, max_workers=2)
    state = daisy.Server().run_blockwise([t], progress=False)["resumed"]
    assert state.skipped_count == state.completed_count == 20
    assert state.worker_start_count == 0
    last = line_task("one_left", 20, check_function=lambda b: b.block_id[1] != 7, max_workers=2)
    state = daisy.Server().run_blockwise([last], progress=False)["one_left"]
    assert state.skipped_count == 19 and state.completed_count == 20
    assert state.worker_start_count >= 1


@pytest.mark.parametrize("mode", ["serial", "workers"])
def test_a_block_function_sees_its_block_processing(mode: str, tmp_path: Path) -> None:
    """Probe ``block_status_in_worker.py``: on worker processes both
    releases hand the block function a PROCESSING block, and 2.0.0's serial
    mode does too (while a hand-driven Scheduler hands out CREATED ones)."""
    want = transcript("block_status_in_worker", "2.0.0")[mode]
    seen = tmp_path / "status.txt"

    def process(block: daisy.Block) -> None:
        with open(seen, "a") as f:
            f.write(f"{int(block.status)}\n")

    t = line_task("t", 2, process_function=process)
    assert daisy.run_blockwise(
        [t], multiprocessing=mode == "workers", progress=False, summary=False
    )
    assert str(sorted(set(seen.read_text().split()))) == want
