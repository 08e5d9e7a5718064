"""A tracking store never loses a mark (issue 26, items 4, 5 and 11): not to
a scratch purge that deletes its small old metadata files, not to a driver
killed in the middle of a migration, and not to another task pointed at it.

Block functions note their calls (`conftest.recorder`), so each test knows
exactly which blocks a run processed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import offsets_of, recorder, take_calls
from conftest import run_tasks as run

import daisy


def roi(offset: tuple[int, ...], shape: tuple[int, ...]) -> daisy.Roi:
    return daisy.Roi(offset, shape)


def task(store: Path, calls: Path, task_id: str = "seg", width: int = 80) -> daisy.Task:
    return daisy.Task(
        task_id,
        total_roi=roi((0, 0), (width, 40)),
        read_roi=roi((0, 0), (10, 10)),
        write_roi=roi((0, 0), (10, 10)),
        process_function=recorder(calls),
        read_write_conflict=False,
        tracking_path=store,
        max_workers=1,
    )


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    d = tmp_path / "calls"
    d.mkdir()
    return d


@pytest.mark.parametrize("purged", ["zarr.json", "done/zarr.json"])
def test_a_purged_metadata_file_is_refused_and_no_mark_is_lost(
    tmp_path: Path, calls: Path, purged: str
) -> None:
    """A scratch purge deleted one of the store's small metadata files
    (written once when the store was made, so the oldest files there). The
    next run must not make a new empty store over the marks and redo every
    block: it refuses, naming the missing file and the way back, and after
    ``task.adopt_tracking_store()`` the run skips every block done before."""
    store = tmp_path / "store"
    t = task(store, calls, width=40)
    run([t], mp=False)
    first = take_calls(calls)
    assert len(first) == 16
    chunk = store / "done" / "c" / "0" / "0"
    marks = chunk.read_bytes()
    assert marks == b"\x01" * 16
    (store / purged).unlink()

    again = task(store, calls, width=40)
    with pytest.raises(OSError) as err:
        run([again], mp=True)
    text = str(err.value)
    assert f"{store / purged} is missing" in text, text
    assert "adopt_tracking_store()" in text, text
    assert chunk.read_bytes() == marks, "the done marks were overwritten"
    assert not take_calls(calls), "a block ran on a store that was refused"

    again.adopt_tracking_store()
    states = run([again], mp=True)
    assert not take_calls(calls), "a block done before the purge was redone"
    assert states["seg"].skipped_count == 16


def test_a_purged_marks_directory_is_refused_with_the_fix(tmp_path: Path, calls: Path) -> None:
    """Issue 40, item 4: a scratch purge removed the store's whole ``done``
    directory, chunk and metadata. The next run redid
    every block without a word. The marks are gone for good, but the run
    history says there were some: the run is refused, naming the missing
    directory and the two ways on (restore it, or ``task.reset()``), and
    after the reset it runs every block again."""
    store = tmp_path / "store"
    purged = "done"
    run([task(store, calls, width=40)], mp=False)
    assert len(take_calls(calls)) == 16
    shutil.rmtree(store / purged)

    again = task(store, calls, width=40)
    with pytest.raises(OSError) as err:
        run([again], mp=True)
    text = str(err.value)
    assert f"{store / purged} is missing" in text, text
    assert "records earlier runs" in text and "task.reset()" in text, text
    assert "adopt_tracking_store" not in text, text  # adopting brings no mark back
    assert not take_calls(calls), "a block ran on a store that was refused"
    assert not (store / purged).exists(), "the refused store was changed"

    again.reset()
    states = run([again], mp=True)
    assert len(take_calls(calls)) == 16
    assert states["seg"].skipped_count == 0


def test_a_second_task_on_a_store_is_refused(tmp_path: Path, calls: Path) -> None:
    """Two tasks of one layout pointed at one store (a copy-pasted
    tracking_path): the second must not take the first one's done marks for
    its own and skip blocks it never processed."""
    store = tmp_path / "store"
    run([task(store, calls, "first", width=40)], mp=False)
    assert len(take_calls(calls)) == 16
    second = task(store, calls, "second", width=40)
    with pytest.raises(daisy.LayoutMismatch, match='belongs to task "first"'):
        run([second], mp=True)
    assert not take_calls(calls)
    # a task renamed on purpose keeps its marks by adopting the store
    second.adopt_tracking_store()
    states = run([second], mp=True)
    assert states["second"].skipped_count == 16
    assert not take_calls(calls)


def test_adopting_without_a_store_is_a_clear_error(tmp_path: Path, calls: Path) -> None:
    """``adopt_tracking_store`` on a task without a tracking store says so
    and names the parameter."""
    t = task(tmp_path / "s", calls)
    t_without = daisy.Task(
        "plain",
        total_roi=roi((0, 0), (10, 10)),
        read_roi=roi((0, 0), (10, 10)),
        write_roi=roi((0, 0), (10, 10)),
        process_function=recorder(calls),
        tracking_path=False,
    )
    with pytest.raises(ValueError, match="tracking_path"):
        t_without.adopt_tracking_store()
    with pytest.raises(OSError, match="no tracking store"):
        t.adopt_tracking_store()


DRIVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import daisy
    from conftest import recorder

    t = daisy.Task(
        "seg",
        total_roi=daisy.Roi((0, 0), ({width}, 40)),
        read_roi=daisy.Roi((0, 0), (10, 10)),
        write_roi=daisy.Roi((0, 0), (10, 10)),
        process_function=recorder({calls!r}),
        read_write_conflict=False,
        tracking_path={store!r},
        max_workers=1,
    )
    daisy.run_blockwise([t], multiprocessing=False, progress=False, summary=False)
    """
)


def drive(store: Path, calls: Path, width: int, fault: str | None) -> int:
    """Run task ``seg`` over a volume ``width`` wide in a driver process
    of its own, killed by the core at the fault point ``fault``; its exit
    status."""
    code = DRIVER.format(
        tests=str(Path(__file__).parent), width=width, calls=str(calls), store=str(store)
    )
    env = dict(os.environ)
    env.pop("DAISY_FAULT_POINT", None)
    if fault is not None:
        env["DAISY_FAULT_POINT"] = fault
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    if fault is None:
        assert proc.returncode == 0, proc.stderr
    return proc.returncode


@pytest.mark.parametrize(
    "fault",
    [
        "migration-staging",
        "migration-staged",
        "migration-committed",
        "migration-swapping",
        "migration-swapped",
    ],
)
def test_a_migration_killed_at_any_step_misplaces_no_mark(
    tmp_path: Path, calls: Path, fault: str
) -> None:
    """The volume grew (``total_roi`` twice as wide), so the store is
    migrated to the larger grid; the driver is SIGKILLed between two steps
    of the migration (after the first array was rewritten, after all were,
    after the new metadata was committed, in the middle of the swap, before
    the cleanup). The next run must process exactly the blocks that never
    ran: none of the first half again, every block of the second half once."""
    store = tmp_path / "store"
    assert drive(store, calls, width=40, fault=None) == 0
    first = {o for (_, o) in take_calls(calls)}
    assert len(first) == 16

    assert drive(store, calls, width=80, fault=fault) == -signal.SIGKILL
    assert not take_calls(calls), "the driver processed blocks before it was killed"

    assert drive(store, calls, width=80, fault=None) == 0
    rerun = take_calls(calls)
    every = set(offsets_of(task(store, calls, width=80)))
    assert set(o for (_, o) in rerun) == every - first
    assert all(n == 1 for n in rerun.values())


V200 = Path(__file__).parent / "fixtures" / "v200_store"


@pytest.mark.parametrize("case", ["2d", "3d", "3d_shrink"])
def test_a_store_daisy_200_wrote_is_resumed(tmp_path: Path, calls: Path, case: str) -> None:
    """Issue 26, item 13: a tracking store written by the published daisy
    2.0.0 wheel for the same task (recorded in tests/fixtures/v200_store)
    was refused as "written for a different block layout", with advice to
    delete it and redo everything. It is taken over: the blocks 2.0.0 had
    done are skipped, exactly the others run, and the next run skips all."""
    recorded = json.loads((V200 / f"blocks_{case}.json").read_text())
    params = recorded["task_params"]
    store = tmp_path / "store"
    shutil.copytree(V200 / f"store_{case}", store)
    t = daisy.Task(
        params["task_id"],
        total_roi=daisy.Roi(*params["total_roi"]),
        read_roi=daisy.Roi(*params["read_roi"]),
        write_roi=daisy.Roi(*params["write_roi"]),
        fit=params["fit"],
        process_function=recorder(calls),
        tracking_path=store,
        max_workers=1,
    )
    done = {tuple(b["write_offset"]) for b in recorded["blocks"] if b["status"] == "done"}
    every = {tuple(b["write_offset"]) for b in recorded["blocks"]}
    assert done and done != every
    states = run([t], mp=True)
    ran = take_calls(calls)
    assert set(o for (_, o) in ran) == every - done
    assert all(n == 1 for n in ran.values())
    assert states[params["task_id"]].skipped_count == len(done)
    again = run([t], mp=True)
    assert not take_calls(calls)
    assert again[params["task_id"]].skipped_count == len(every)


def test_a_store_for_more_blocks_than_a_file_can_hold_is_a_clear_error(
    tmp_path: Path, calls: Path
) -> None:
    """Issue 26, item 16: a task of 2^62 blocks with a tracking store
    failed with "File too large (os error 27)". The error says what is too
    large and what to do, and no block runs."""
    t = daisy.Task(
        "huge",
        total_roi=roi((0, 0), (1 << 31, 1 << 31)),
        read_roi=roi((0, 0), (1, 1)),
        write_roi=roi((0, 0), (1, 1)),
        process_function=recorder(calls),
        tracking_path=tmp_path / "store",
    )
    with pytest.raises(OSError, match="one per block.*larger write_roi.*tracking_path=False"):
        run([t], mp=False)
    assert not take_calls(calls)
