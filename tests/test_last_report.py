"""``daisy.last_report()`` and ``daisy --version`` (issue 14)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import line_task

import daisy


def noop(block):
    pass


def test_last_report_is_none_before_any_run_in_a_process():
    out = subprocess.run(
        [sys.executable, "-c", "import daisy; print(daisy.last_report())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "None", out.stderr


@pytest.mark.parametrize("mp", [False, True], ids=["serial", "workers"])
def test_last_report_is_the_last_run_of_run_blockwise(mp):
    a = line_task("a", 3, process_function=noop)
    assert daisy.run_blockwise([a], multiprocessing=mp, progress=False, summary=False)
    first = daisy.last_report()
    assert isinstance(first, daisy.RunReport) and list(first) == ["a"]
    b = line_task("b", 2, process_function=noop)
    assert daisy.run_blockwise([b], multiprocessing=mp, progress=False, summary=False)
    second = daisy.last_report()
    assert second is not first and list(second) == ["b"]
    assert second["b"].blocks.count == 2


def test_daisy_version():
    out = subprocess.run(
        [sys.executable, "-m", "daisy", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == f"daisy {daisy.__version__}"


def corrupt_block_1(block):
    if block.block_id[1] == 1:
        raise ValueError("corrupt section")


def test_raise_on_failure_raises_run_failed_with_the_report():
    a = line_task("a", 3, process_function=corrupt_block_1, max_retries=1)
    b = line_task("b", 3, process_function=noop, upstream_tasks=[a])
    with pytest.raises(daisy.RunFailed, match="first failure: a: ValueError: corrupt section") as e:
        daisy.run_blockwise([b], raise_on_failure=True, progress=False, summary=False)
    err = e.value
    assert err.states["a"].failed_count == 1
    assert err.states["b"].orphaned_count >= 1
    assert err.report is daisy.last_report()
    assert [(t, i) for t, i, _w, _r in err.failures] == [("a", 1), ("a", 1)]
    assert isinstance(err, RuntimeError)
    # the default stays 1.x's: False, no exception
    assert daisy.run_blockwise([b], progress=False, summary=False) is False


def test_the_panel_lists_tasks_in_pipeline_order_not_by_name():
    """Issue 41: the report listed tasks alphabetically; a pipeline whose
    upstream task is called "z_segment" showed it after its downstream
    "a_relabel". The run's report keeps the pipeline's order, and so does
    its panel (also where no order is given, as ``str(report)``)."""
    import daisy

    up = daisy.Task(
        "z_segment",
        daisy.Roi((0,), (40,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=lambda b: None,
        max_workers=1,
    )
    down = daisy.Task(
        "a_relabel",
        daisy.Roi((0,), (40,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=lambda b: None,
        max_workers=1,
        upstream_tasks=[up],
    )
    assert daisy.run_blockwise([down, up], progress=False, summary=False)
    report = daisy.last_report()
    assert list(report.tasks) == ["z_segment", "a_relabel"]
    text = str(report)
    assert text.index("z_segment ") < text.index("a_relabel "), text
