"""Nothing counted done that did not run (issue 56, item 1): block functions of the kinds
scientists hand daisy by mistake or on purpose, from the shared workloads.

- a generator function (a ``yield`` left from debugging) is refused when the Task is made;
- an ``async def`` block function runs, every body, on worker processes and serially;
- a plain function that *returns* a generator or an unawaited coroutine fails its block with
  the reason, and the block is never marked done.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import daisy

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"


@pytest.fixture
def blockfns(tmp_path, monkeypatch):
    """The shared workloads' module, writing its evidence under ``tmp_path``."""
    monkeypatch.syspath_prepend(str(WORKLOADS))
    monkeypatch.setenv("DAISY_WL_DIR", str(tmp_path))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(WORKLOADS), os.environ.get("PYTHONPATH", "")])
    )
    import blockfns as module

    return module


def ten_blocks(function, **kwargs):  # type: ignore[no-untyped-def]
    return daisy.Task(
        "kinds",
        total_roi=daisy.Roi((0,), (10,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=function,
        **kwargs,
    )


def ran(where: Path) -> set[int]:
    return {int(p.name.split("-")[1]) for p in where.glob("ran-*")}


def test_a_generator_block_function_is_refused_when_the_task_is_made(blockfns):
    with pytest.raises(TypeError) as caught:
        ten_blocks(blockfns.by_mistake_generator)
    text = str(caught.value)
    assert text.startswith("process_function: by_mistake_generator is a generator function")
    assert "its body would never run" in text and "remove the `yield`" in text


@pytest.mark.parametrize("multiprocessing", [True, False])
def test_an_async_block_function_runs_every_body(blockfns, tmp_path, multiprocessing):
    task = ten_blocks(blockfns.async_block, max_workers=2, tracking_path=tmp_path / "store")
    states = daisy.run_blockwise(
        [task], multiprocessing=multiprocessing, progress=False, summary=False, return_states=True
    )
    assert states["kinds"].completed_count == 10
    assert ran(tmp_path) == set(range(10)), "every body ran"


async def _later(block):  # type: ignore[no-untyped-def]
    Path(os.environ["DAISY_WL_DIR"], f"ran-{block.block_id[1]}").touch()


def returns_a_coroutine(block):  # type: ignore[no-untyped-def]
    """A plain function that forgot to await what it returns."""
    return _later(block)


def returns_a_generator(block):  # type: ignore[no-untyped-def]
    return (Path(os.environ["DAISY_WL_DIR"], f"ran-{i}").touch() for i in range(1))


@pytest.mark.parametrize(
    ("function", "words"),
    [
        (returns_a_coroutine, "returned coroutine (an awaitable) without awaiting it"),
        (returns_a_generator, "returned a generator: nothing of it ran"),
    ],
)
def test_a_function_returning_what_never_ran_fails_its_blocks(blockfns, tmp_path, function, words):
    task = ten_blocks(function, max_workers=2, max_retries=0, tracking_path=tmp_path / "store")
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    state = states["kinds"]
    assert (state.completed_count, state.failed_count) == (0, 10)
    assert ran(tmp_path) == set(), "nothing of the bodies ran"
    causes = task.report().failure_causes.messages
    assert any(words in message for message, _ in causes), causes
    # never marked: a resume runs every block again
    assert len(task.failed_blocks()) == 10


# ---------------------------------------------------------------------------
# every failure's text reaches the user intact (issue 56, item 2)
# ---------------------------------------------------------------------------


def test_a_lone_surrogate_in_the_message_fails_only_its_block_and_is_shown(blockfns, tmp_path):
    # block 3 raises ValueError(f"cannot parse {os.fsdecode(b'/data/sample-\xff.zarr')}")
    task = ten_blocks(blockfns.odd_exception, max_workers=2, max_retries=0)
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    state = states["kinds"]
    assert (state.completed_count, state.failed_count) == (9, 1)
    assert state.worker_restart_count == 0, "no worker died for it"
    (message, count), *_ = task.report().failure_causes.messages
    assert count == 1 and "ValueError: cannot parse /data/sample-\\udcff.zarr" in message
    assert "SIGKILL" not in message and "signal" not in message, message


class LibraryStop(BaseException):
    """A library's own BaseException subclass."""


def raises_base_exceptions(block):  # type: ignore[no-untyped-def]
    kinds = {2: KeyboardInterrupt("stop here"), 4: SystemExit(3), 6: LibraryStop("halt")}
    if block.block_id[1] in kinds:
        raise kinds[block.block_id[1]]


def test_base_exceptions_in_a_block_fail_the_block_with_their_traceback(tmp_path):
    task = ten_blocks(raises_base_exceptions, max_workers=1, max_retries=0)
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    state = states["kinds"]
    assert (state.completed_count, state.failed_count) == (7, 3)
    assert state.worker_restart_count == 0, "the worker went on"
    report = task.report()
    causes = " | ".join(message for message, _ in report.failure_causes.messages)
    for words in ("KeyboardInterrupt: stop here", "SystemExit: 3", "LibraryStop: halt"):
        assert words in causes, causes
    assert "Traceback (most recent call last)" in (report.failure_causes.first_traceback or "")
