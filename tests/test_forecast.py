"""`daisy.forecast` (issue 54): a sample of each task's blocks run for real,
spread over the volume, and the rest forecast from what was measured.
Behaviour only: which blocks ran, what the store holds, what the forecast
says it could not use; its accuracy is `benchmarks/forecast_accuracy.py`'s."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_task, recorder, take_calls

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


def results(tmp_path: Path) -> Counter[int]:
    """Block ids in the per-worker result files (`per_worker_results`, each
    kept open by its worker until it exits), with how often each came."""
    out: Counter[int] = Counter()
    for f in tmp_path.glob("results-*.csv"):
        out.update(int(line) for line in f.read_text().split())
    return out


def grid_task(task_id, fn, n, tracking_path, **kwargs):
    """An ``n`` x ``n`` grid of 10 x 10 blocks."""
    return make_task(
        task_id,
        ((0, 0), (10 * n, 10 * n)),
        ((0, 0), (10, 10)),
        ((0, 0), (10, 10)),
        process_function=fn,
        tracking_path=tracking_path,
        **kwargs,
    )


def test_a_spread_sample_runs_for_real_and_the_run_does_only_the_rest(blockfns, tmp_path):
    task = grid_task("grid", blockfns.per_worker_results, 6, tmp_path / "store", max_workers=2)
    fc = daisy.forecast(task, sample_blocks=9)
    sampled = results(tmp_path)
    assert sum(sampled.values()) == 9 and set(sampled.values()) == {1}
    # spread: the middle of the volume is in it, not just the first rows
    middle = {
        b.block_id[1] for b in task_blocks(task) if b.write_roi.offset in ((20, 20), (30, 30))
    }
    assert sampled.keys() & middle, sorted(sampled)
    assert fc.sampled == {"grid": 9}
    t = fc["grid"]
    assert (t.blocks, t.blocks_left, t.measured, t.workers) == (36, 27, 9, 2)
    assert fc.wall_seconds_low <= fc.wall_seconds <= fc.wall_seconds_high
    assert fc.bounding_task == "grid" and t.recommended_workers >= 1
    assert t.block_seconds_p50 > 0 and t.peak_rss_bytes_p95 > 0
    assert "grid" in str(fc) and "27/36" in str(fc)
    assert "<table>" in fc._repr_html_()
    assert json.loads(json.dumps(fc.to_dict()))["tasks"][0]["blocks_left"] == 27
    assert fc.slurm is not None and fc.slurm["spawner"].startswith("SlurmSpawner(mem=")
    # the run skips the sample: every block exactly once over both
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert results(tmp_path) == Counter({i: 1 for i in all_ids(task)})


def task_blocks(task):
    """Every block of ``task`` (its upstream tasks' left out)."""
    graph = daisy.DependencyGraph([*task.upstream_tasks, task])
    return list(graph.blocks(task.task_id))


def all_ids(task):
    return {b.block_id[1] for b in task_blocks(task)}


def test_the_memory_figures_see_a_heavy_region_and_the_workers_fit_the_budget(
    blockfns, tmp_path, monkeypatch
):
    # 20 blocks on a line, every 5th (from the 3rd) holding 150 MiB, the rest 10
    monkeypatch.setenv("DAISY_WL_EVERY", "5")
    monkeypatch.setenv("DAISY_WL_HEAVY_MIB", "150")
    monkeypatch.setenv("DAISY_WL_LIGHT_MIB", "10")
    task = make_task(
        "region",
        ((0,), (200,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=blockfns.memory_by_region,
        tracking_path=tmp_path / "store",
        max_workers=2,
    )
    fc = daisy.forecast(task, sample_blocks=10, memory_budget=1 << 30)
    t = fc["region"]
    assert t.measured == 10
    assert t.peak_rss_bytes_max - t.peak_rss_bytes_p50 > 100 << 20, t.to_dict()
    assert 1 <= t.recommended_workers <= (1 << 30) // t.peak_rss_bytes_p95
    assert fc.memory_budget_bytes == 1 << 30


def test_without_a_store_the_sample_runs_in_a_temporary_one_and_the_run_does_it_again(
    calls, tmp_path, monkeypatch
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    task = make_task(
        "untracked",
        ((0,), (100,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        max_workers=2,
    )
    fc = daisy.forecast(task, sample_blocks=4)
    assert sum(take_calls(calls).values()) == 4
    assert any("no tracking store" in n and "again" in n for n in fc.notes), fc.notes
    assert fc.wall_seconds is not None, (fc.notes, fc.to_dict()["tasks"])
    assert list(scratch.iterdir()) == [], "the temporary store is gone"
    assert task.tracking_path is None and not task.resource_tracking
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert sum(take_calls(calls).values()) == 10


def test_history_alone_forecasts_when_sample_blocks_is_0_and_says_when_there_is_none(
    calls, tmp_path
):
    import numpy as np

    store = tmp_path / "store"
    half = np.zeros(10, dtype=bool)
    half[5:] = True
    task = make_task(
        "hist",
        ((0,), (100,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=store,
        resource_tracking=True,
        skip_mask=half,
    )
    assert daisy.run_blockwise([task], progress=False, summary=False)
    take_calls(calls)
    task.skip_mask, task._skip_mask = None, None
    fc = daisy.forecast(task, sample_blocks=0)
    assert take_calls(calls) == Counter()
    assert fc.sampled == {} and fc["hist"].measured == 5 and fc["hist"].blocks_left == 5
    assert fc.wall_seconds is not None and fc.wall_seconds > 0
    fresh = make_task(
        "fresh", ((0,), (100,)), ((0,), (10,)), ((0,), (10,)), tracking_path=tmp_path / "other"
    )
    none = daisy.forecast(fresh, sample_blocks=0)
    assert none.wall_seconds is None
    assert any("no history" in n for n in none.notes), none.notes
    assert "no wall time" in str(none)


@pytest.mark.parametrize("bad", [-1, "5", True, 2.5])
def test_a_bad_sample_size_is_refused_by_name(bad, tmp_path):
    task = make_task("t", ((0,), (40,)), ((0,), (10,)), ((0,), (10,)))
    with pytest.raises(ValueError, match="sample_blocks"):
        daisy.forecast(task, sample_blocks=bad)
    with pytest.raises(ValueError, match="max_workers"):
        daisy.forecast(task, max_workers=0)


def test_a_sample_larger_than_the_task_runs_it_all_and_leaves_nothing_to_forecast(calls, tmp_path):
    task = make_task(
        "small",
        ((0,), (40,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=tmp_path / "store",
    )
    fc = daisy.forecast(task, sample_blocks=1000)
    assert sum(take_calls(calls).values()) == 4
    assert fc["small"].blocks_left == 0 and fc.wall_seconds == 0.0
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert take_calls(calls) == Counter()


def test_a_store_of_another_volume_is_refused_naming_it(tmp_path):
    store = tmp_path / "store"
    first = make_task("vol", ((0,), (40,)), ((0,), (10,)), ((0,), (10,)), tracking_path=store)
    assert daisy.run_blockwise([first], progress=False, summary=False)
    other = make_task("vol", ((0,), (80,)), ((0,), (20,)), ((0,), (20,)), tracking_path=store)
    with pytest.raises(daisy.LayoutMismatch, match=str(store)):
        daisy.forecast(other, sample_blocks=2)


def test_a_downstream_sample_runs_the_upstream_blocks_it_reads_first(calls, tmp_path):
    up = make_task(
        "up",
        ((0,), (200,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=tmp_path / "up",
    )
    down = make_task(
        "down",
        ((0,), (200,)),
        ((-10,), (30,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=tmp_path / "down",
        upstream_tasks=[up],
        fit="shrink",
    )
    fc = daisy.forecast(down, sample_blocks=3)
    ran = take_calls(calls)
    down_done = {o[0] for (t, o) in ran if t == "down"}
    up_done = {o[0] for (t, o) in ran if t == "up"}
    assert len(down_done) == 3
    for x in down_done:
        # what the block reads that an upstream block writes ran too
        assert {x - 10, x, x + 10} & set(range(0, 200, 10)) <= up_done, (x, up_done)
    assert fc["up"].measured >= 3 and fc["down"].measured == 3
    assert fc.bounding_task in ("up", "down")
    assert daisy.run_blockwise([down], progress=False, summary=False)
    again = take_calls(calls)
    assert all(n == 1 for n in again.values())
    every = {int(b.write_roi.offset[0]) for b in task_blocks(down)}
    assert {o[0] for (t, o) in again if t == "down"} == every - down_done


def test_the_samples_history_line_says_it_is_one_and_status_and_compare_read_it_so(
    calls, tmp_path, capsys
):
    from daisy.cli import main

    store = tmp_path / "store"
    task = make_task(
        "said",
        ((0,), (100,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=store,
    )
    daisy.forecast(task, sample_blocks=3)
    lines = [json.loads(x) for x in (store / "runs.jsonl").read_text().splitlines()]
    assert [x["forecast_sample"] for x in lines] == [True]
    assert main(["status", str(store)]) == 0
    assert "last a forecast's sample completed" in capsys.readouterr().out
    assert daisy.run_blockwise([task], progress=False, summary=False)
    lines = [json.loads(x) for x in (store / "runs.jsonl").read_text().splitlines()]
    assert [x["forecast_sample"] for x in lines] == [True, False]
    # one run of the task: nothing to compare it with, the sample is no run
    assert main(["compare", str(store)]) == 0
    assert "nothing to compare yet" in capsys.readouterr().out
    assert main(["status", str(store)]) == 0
    assert "last run completed" in capsys.readouterr().out


def test_daisy_forecast_path_forecasts_the_next_run_from_the_history_alone(calls, tmp_path, capsys):
    import numpy as np

    from daisy.cli import main

    store = tmp_path / "store"
    half = np.zeros(10, dtype=bool)
    half[5:] = True
    task = make_task(
        "cli",
        ((0,), (100,)),
        ((0,), (10,)),
        ((0,), (10,)),
        process_function=recorder(calls),
        tracking_path=store,
        resource_tracking=True,
        max_workers=2,
        skip_mask=half,
    )
    assert daisy.run_blockwise([task], progress=False, summary=False)
    take_calls(calls)
    assert main(["forecast", str(store)]) == 0
    out = capsys.readouterr().out
    assert "Forecast: the rest of the run takes" in out and "5/10" in out, out
    assert take_calls(calls) == Counter(), "the command runs no block"
    assert main(["forecast", str(tmp_path), "--workers", "3", "--format", "json"]) == 0
    [fc] = json.loads(capsys.readouterr().out)
    assert fc["tasks"][0]["workers"] == 3 and fc["tasks"][0]["measured"] == 5
    # every block done: the run after a reset, said so
    task.skip_mask, task._skip_mask = None, None
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert main(["forecast", str(store), "--format", "json"]) == 0
    [fc] = json.loads(capsys.readouterr().out)
    assert fc["tasks"][0]["blocks_left"] == 10 and fc["wall_seconds"] > 0
    assert any("after a reset" in n for n in fc["notes"]), fc["notes"]
    # what it cannot use: said in one line, exit 2
    assert main(["forecast", str(tmp_path / "nothing")]) == 2
    assert "no tracking store" in capsys.readouterr().err
    assert main(["forecast", str(store), "--workers", "0"]) == 2
    assert "--workers 0" in capsys.readouterr().err


def measured_as_before(block: daisy.Block) -> None:
    """The block function as it was when the store's blocks were measured."""
    time.sleep(0.001)


def measured_after_an_edit(block: daisy.Block) -> None:
    """The same task's block function after an edit."""
    time.sleep(0.002)


def test_blocks_measured_with_another_block_function_are_left_out_and_said(tmp_path):
    import numpy as np

    store = tmp_path / "store"
    half = np.zeros(10, dtype=bool)
    half[5:] = True

    def task_of(fn, mask=None):  # type: ignore[no-untyped-def]
        return make_task(
            "code",
            ((0,), (100,)),
            ((0,), (10,)),
            ((0,), (10,)),
            process_function=fn,
            tracking_path=store,
            resource_tracking=True,
            skip_mask=mask,
        )

    assert daisy.run_blockwise([task_of(measured_as_before, half)], progress=False, summary=False)
    same = daisy.forecast(task_of(measured_as_before), sample_blocks=0)
    assert same["code"].measured == 5 and same.wall_seconds is not None
    edited = daisy.forecast(task_of(measured_after_an_edit), sample_blocks=0)
    assert edited["code"].measured == 0 and edited.wall_seconds is None
    assert any("5 measured blocks left out" in n and "another version" in n for n in edited.notes)


def test_a_block_functions_code_hash_is_its_code_and_not_its_data(tmp_path):
    import subprocess
    import sys

    from daisy.block_function import code_sha256

    def make(threshold):  # type: ignore[no-untyped-def]
        def f(block):  # type: ignore[no-untyped-def]
            return block if threshold in {"a", "b", "c"} else None

        return f

    # the same code over other data: the same hash, call after call
    assert code_sha256(make("a")) == code_sha256(make("z")) == code_sha256(make("a"))
    assert code_sha256(measured_as_before) != code_sha256(measured_after_an_edit)
    assert code_sha256(len) is None
    # and in another process with another string hash seed
    script = tmp_path / "fn.py"
    script.write_text(
        "def f(block):\n    return block if block in {'x', 'y', 'z'} else 0\n"
        "from daisy.block_function import code_sha256\nprint(code_sha256(f))\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1 and len(next(iter(seen))) == 64, seen


def test_a_task_without_blocks_is_forecast_as_nothing_to_run_and_says_why():
    empty = make_task("empty", ((0,), (5,)), ((0,), (10,)), ((0,), (10,)))
    fc = daisy.forecast(empty, sample_blocks=5)
    assert fc.sampled == {} and fc.wall_seconds == 0.0 and fc.bounding_task is None
    assert any("has no blocks" in n for n in fc.notes), fc.notes
    assert not any("temporary" in n for n in fc.notes), "nothing was sampled"
    assert "nothing left to run" in str(fc) and "-0.00" not in str(fc)
