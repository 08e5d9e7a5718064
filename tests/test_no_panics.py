"""No hostile value makes a public entry point panic.

A Rust panic reaching Python is a ``pyo3_runtime.PanicException``, a
``BaseException``: these tests feed every public constructor and function
that crosses into the core with arbitrary values (hypothesis) and accept
any ordinary exception (a ``ValueError`` or ``TypeError`` naming the
parameter is the point) but never a panic, which would escape the
``except Exception`` below and fail the test.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daisy
from daisy import _daisy

#: numbers at and beyond every integer width the core uses, and floats that
#: do not convert
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
VALUES = st.one_of(
    NUMBERS,
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(NUMBERS, max_size=4),
    st.tuples(st.lists(NUMBERS, max_size=3), st.lists(NUMBERS, max_size=3)),
)
COORDS = st.lists(st.integers(min_value=-(2**62), max_value=2**62), min_size=0, max_size=4)
ROIS = st.one_of(VALUES, st.tuples(COORDS, COORDS))

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def call(f: Any, *args: Any, **kwargs: Any) -> None:
    """Call ``f``; ordinary exceptions are fine, a panic is not (it is a
    BaseException and propagates)."""
    try:
        f(*args, **kwargs)
    except Exception:
        pass


@SETTINGS
@given(total=ROIS, read=ROIS, write=ROIS, retries=VALUES, fit=VALUES, conflict=VALUES)
def test_task_spec(
    total: Any, read: Any, write: Any, retries: Any, fit: Any, conflict: Any
) -> None:
    call(_daisy.TaskSpec, "t", total, read, write, fit, conflict, retries)


@SETTINGS
@given(total=ROIS, read=ROIS, write=ROIS, timeout=VALUES, workers=VALUES, retries=VALUES)
def test_task(total: Any, read: Any, write: Any, timeout: Any, workers: Any, retries: Any) -> None:
    call(
        daisy.Task,
        "t",
        total,
        read,
        write,
        process_function=lambda b: None,
        timeout=timeout,
        max_workers=workers,
        max_retries=retries,
    )


@SETTINGS
@given(total=ROIS, read=ROIS, write=ROIS, block_id=VALUES, task_id=VALUES)
def test_block(total: Any, read: Any, write: Any, block_id: Any, task_id: Any) -> None:
    call(_daisy.Block, total, read, write, block_id, task_id)


@SETTINGS
@given(position=st.lists(NUMBERS, max_size=5), value=ROIS)
def test_geometry_functions(position: Any, value: Any) -> None:
    call(_daisy.cantor_number, position)
    call(_daisy.validated_roi, value, "total_roi")


@SETTINGS
@given(
    workers=VALUES,
    timeout=VALUES,
    restarts=VALUES,
    amount=VALUES,
    port=VALUES,
    mode=VALUES,
)
def test_run_configuration(
    workers: Any, timeout: Any, restarts: Any, amount: Any, port: Any, mode: Any
) -> None:
    call(
        _daisy.TaskConfig,
        "t",
        max_workers=workers,
        timeout=timeout,
        max_worker_restarts=restarts,
        requires={"gpu": amount},
        program=None,
        args=[],
        stdin=b"",
        stop=[],
        resource_tracking=False,
        spawner="local",
    )
    call(
        _daisy.RunConfig,
        host="127.0.0.1",
        port=port,
        resources={"gpu": amount},
        log_dir=None,
        log_mode=mode,
    )


@SETTINGS
@given(name=st.text(max_size=12), path=st.text(max_size=12))
def test_store_readers(name: str, path: str) -> None:
    call(_daisy.read_tracking_array, path, name)
    call(_daisy.reset_tracking, "/nonexistent/" + path.replace("\0", ""))


@SETTINGS
@given(offset=COORDS, task_id=st.text(max_size=6))
def test_scheduler_release_of_made_up_blocks(offset: list[int], task_id: str) -> None:
    roi = daisy.Roi((0, 0), (40, 40))
    block = daisy.Roi((0, 0), (10, 10))
    task = daisy.Task("t", roi, block, block, process_function=lambda b: None)
    scheduler = daisy.Scheduler([task])
    call(lambda: scheduler.release_block(_daisy.Block(roi, block, block, None, task_id or "t")))
    shifted = daisy.Roi(tuple(offset[:2]) or (0, 0), (10, 10)) if len(offset) >= 2 else block
    call(lambda: scheduler.release_block(_daisy.Block(roi, shifted, shifted, None, "t")))


@SETTINGS
@given(up_dims=st.integers(1, 3), down_dims=st.integers(1, 3), size=st.integers(1, 30))
def test_pipelines_of_any_dimensions(up_dims: int, down_dims: int, size: int) -> None:
    def task(task_id: str, dims: int, upstream: list[daisy.Task]) -> daisy.Task:
        total = daisy.Roi((0,) * dims, (size * 4,) * dims)
        block = daisy.Roi((0,) * dims, (size,) * dims)
        return daisy.Task(
            task_id, total, block, block, process_function=lambda b: None, upstream_tasks=upstream
        )

    def build() -> None:
        up = task("up", up_dims, [])
        down = task("down", down_dims, [up])
        scheduler = daisy.Scheduler([down])
        while (block := scheduler.acquire_block("up")) is not None:
            block.status = daisy.BlockStatus.SUCCESS
            scheduler.release_block(block)
        scheduler.acquire_block("down")

    call(build)
