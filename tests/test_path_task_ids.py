"""Task ids that are paths (issue 51). dacapo-ml names its tasks after its
datasets, ``predict_{run}_{dataset}`` with a dataset such as ``0/val``, and
150 of its own tests failed at ``Task(...)``: "cannot be a task id: it
holds a path separator". daisy 2.0.0 takes such an id and nests it: the
store at ``<base>/predict_run/0/val``, the logs at
``daisy_logs/predict_run/0/val`` (tests/fixtures/probes/path_task_ids.py and
its transcripts). 2.0.0 also takes ids that leave the base directory
(``..``, a leading ``/``: its store went to the absolute path) or alias
another (``a/./b``); those are refused here, each saying which rule and
why, as are two stores that would nest (``a`` and ``a/b``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import line_task, recorder, run_tasks, take_calls

import daisy

V200 = Path(__file__).parent / "fixtures" / "v200_store"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daisy", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("mp", [True, False], ids=["workers", "serial"])
def test_a_dataset_path_as_task_id_runs_nested_as_2_0_0_lays_it_out(
    tmp_path: Path, calls: Path, log_dir: Path, mp: bool
) -> None:
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    tid = "predict_run/0/val"
    task = line_task(tid, 4, process_function=recorder(calls), max_workers=1)
    states = run_tasks([task], mp=mp)
    assert states[tid].completed_count == 4
    assert (base / "predict_run" / "0" / "val" / "zarr.json").is_file()
    assert (base / "predict_run" / "0" / "val" / "runs.jsonl").is_file()
    if mp:
        assert (log_dir / "predict_run" / "0" / "val" / "worker_0.out").is_file()
    assert {t for (t, _) in take_calls(calls)} == {tid}
    # the rerun resumes it: every block skipped, none run
    again = run_tasks([line_task(tid, 4, process_function=recorder(calls))], mp=mp)
    assert again[tid].skipped_count == 4
    assert not take_calls(calls)
    # the nested directories are private, as a store's own is
    for d in [base / "predict_run", base / "predict_run" / "0"]:
        assert d.stat().st_mode & 0o077 == 0, oct(d.stat().st_mode)


def test_a_store_2_0_0_made_for_a_path_task_id_resumes_with_no_block_redone(
    tmp_path: Path, calls: Path
) -> None:
    recorded = json.loads((V200 / "nested_ids.json").read_text())
    base = tmp_path / "tracking"
    shutil.copytree(V200 / "nested_base", base)
    daisy.set_tracking_basedir(base)
    tid = recorded["task_id"]
    assert tid == "predict_run/0/val"
    task = line_task(tid, 8, process_function=recorder(calls), max_workers=2)
    states = run_tasks([task], mp=True)
    ran = take_calls(calls)
    # exactly the blocks 2.0.0 failed ran again; the six it had done did not
    assert sorted(o[0] for (_, o) in ran) == recorded["failing_write_offsets"]
    assert all(n == 1 for n in ran.values())
    assert states[tid].skipped_count == recorded["completed"] == 6
    assert states[tid].completed_count == 8


UNSAFE = [
    ("../escape", "`..` segment"),
    ("a/../b", "`..` segment"),
    ("..", "`..` segment"),
    ("a/./b", "`.` segment"),
    (".", "the base directory itself"),
    ("/abs/daisy-task", "starts with `/`"),
    ("trail/", "ends with `/`"),
    ("a//b", "empty segment"),
    ("nul\0x", "control character"),
    ("a/" + "y" * 300, "300 bytes long"),
    ("a\\b", "backslash"),
]


@pytest.mark.parametrize(("task_id", "why"), UNSAFE, ids=[u[1] + ":" + u[0][:12] for u in UNSAFE])
def test_an_id_that_could_leave_the_base_or_alias_another_is_refused_saying_why(
    tmp_path: Path, task_id: str, why: str
) -> None:
    daisy.set_tracking_basedir(tmp_path / "tracking")
    with pytest.raises(ValueError, match="task_id") as e:
        line_task(task_id, 2)
    text = str(e.value)
    assert why in text, text
    assert "Use an id such as" in text, text
    # what it suggests is an id that is taken
    suggested = text.rsplit("Use an id such as ", 1)[1].strip().strip('"')
    assert line_task(suggested, 1).task_id == suggested
    assert not (tmp_path / "tracking").exists()


@pytest.mark.parametrize("order", [["a", "a/b"], ["a/b", "a"]])
def test_two_tasks_whose_stores_would_nest_are_refused_in_one_run(
    tmp_path: Path, calls: Path, order: list[str]
) -> None:
    daisy.set_tracking_basedir(tmp_path / "tracking")
    tasks = [line_task(t, 2, process_function=recorder(calls)) for t in order]
    with pytest.raises(ValueError, match="tracking_path") as e:
        daisy.run_blockwise(tasks, multiprocessing=False, progress=False)
    text = str(e.value)
    assert '"a"' in text and '"a/b"' in text and "inside" in text, text
    assert not take_calls(calls)


@pytest.mark.parametrize(
    ("first", "second"), [("r", "r/s"), ("u/v", "u")], ids=["inner-after", "outer-after"]
)
def test_a_store_that_would_nest_in_or_hold_a_store_of_an_earlier_run_is_refused(
    tmp_path: Path, calls: Path, first: str, second: str
) -> None:
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    states = run_tasks([line_task(first, 2, process_function=recorder(calls))], mp=False)
    assert states[first].completed_count == 2
    take_calls(calls)
    before = sorted(str(p.relative_to(base)) for p in base.rglob("*"))
    with pytest.raises(ValueError, match="tracking store") as e:
        run_tasks([line_task(second, 2, process_function=recorder(calls))], mp=True)
    text = str(e.value)
    assert str(base / first) in text and str(base / second) in text, text
    assert not take_calls(calls)
    # nothing was written for the refused task
    assert sorted(str(p.relative_to(base)) for p in base.rglob("*")) == before


def make_user_arrays(base: Path) -> None:
    """What scientists keep beside their stores: a zarr v2 array, a zarr v3
    group and an N5 container, each holding a copy of a daisy store deep
    inside (a finder that walked into them would list it)."""
    decoy = base / "predict_run" / "0" / "val"
    for container, marker in [
        ("seg.zarr", ".zarray"),
        ("raw.zarr", "zarr.json"),
        ("volume.n5", "attributes.json"),
    ]:
        root = base / "outputs" / container
        root.mkdir(parents=True)
        (root / marker).write_text("{}")
        shutil.copytree(decoy, root / "s0" / "decoy")


def test_status_report_and_compare_find_nested_stores_and_not_inside_user_arrays(
    tmp_path: Path, calls: Path
) -> None:
    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    ids = ["predict_run/0/val", "predict_run/1/val", "plain"]
    for _ in range(2):
        tasks = [line_task(t, 4, process_function=recorder(calls)) for t in ids]
        daisy.run_blockwise(tasks, multiprocessing=False, progress=False)
    make_user_arrays(base)

    status = cli("status", str(base), "--format", "json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert sorted(r["task_id"] for r in rows) == sorted(ids)
    assert all("outputs" not in r["store"] for r in rows), rows
    assert all(r["done"] == r["total"] == 4 for r in rows)
    text = cli("status", str(base)).stdout
    assert "predict_run/0/val: 4 of 4 blocks done" in text, text

    report = cli("report", str(base), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert sorted(r["task_id"] for r in json.loads(report.stdout)) == sorted(ids)
    panel = cli("report", str(base / "predict_run" / "0" / "val")).stdout
    assert "predict_run/0/val" in panel, panel

    compare = cli("compare", str(base / "predict_run" / "0" / "val"))
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert "predict_run/0/val" in compare.stdout, compare.stdout

    history = [
        json.loads(line)
        for line in (base / "predict_run" / "0" / "val" / "runs.jsonl").read_text().splitlines()
    ]
    assert [h["task_id"] for h in history] == ["predict_run/0/val"] * 2


def test_the_html_report_and_prometheus_name_a_nested_id_as_any_other(tmp_path: Path) -> None:
    pytest.importorskip("bokeh")
    from daisy.report.html import write_html_report

    base = tmp_path / "tracking"
    daisy.set_tracking_basedir(base)
    tid = "predict_run/0/val"
    daisy.run_blockwise([line_task(tid, 3)], multiprocessing=False, progress=False)
    out = write_html_report([base], tmp_path / "report.html")
    assert tid in out.read_text()

    from prometheus_client import generate_latest

    from daisy.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(0, [tid], serve=False)
    state = daisy.Scheduler([line_task(tid, 4)]).task_states[tid]
    metrics.update([state], [2], [0], [(tid, 0.02)])
    text = generate_latest(metrics.registry).decode()
    assert f'daisy_workers_alive{{task="{tid}"}} 2.0' in text, text
    assert f'daisy_block_seconds_count{{task="{tid}"}} 1.0' in text, text
