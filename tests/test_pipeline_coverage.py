"""A downstream task that reads where no upstream block writes is found
when the run is planned (issue 39).

The issue's pipeline, scaled down: `smooth` (the shared workloads' zarr box
mean, 2 voxels of context, the default ``fit="valid"``) drops its last
partial block on every axis; `label` thresholds the smoothed volume over
the whole of it. 37 of label's 64 blocks read data smooth never wrote. The
run says so before its first block, in its summary and in its report, and
``strict=True`` refuses it before any block runs. The rule itself (which
blocks, and that context past the upstream's output is not counted) is
tested in the core (``pipeline_coverage``)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

import daisy

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"
SIZE, BLOCK, CONTEXT = 64, 16, 2


def cube(offset, shape):
    return daisy.Roi((offset,) * 3, (shape,) * 3)


@pytest.fixture
def volume(tmp_path, monkeypatch):
    """in.zarr (random), out.zarr and labels.zarr (empty), with chunks
    that are the write blocks; the workloads module on the path."""
    zarr = pytest.importorskip("zarr")
    monkeypatch.syspath_prepend(str(WORKLOADS))
    monkeypatch.setenv("DAISY_WL_DIR", str(tmp_path))
    data = np.random.default_rng(7).random((SIZE,) * 3).astype(np.float32)
    zarr.create_array(str(tmp_path / "in.zarr"), data=data, chunks=(BLOCK,) * 3)
    for name, dtype in (("out.zarr", np.float32), ("labels.zarr", np.uint8)):
        zarr.create_array(str(tmp_path / name), shape=(SIZE,) * 3, dtype=dtype, chunks=(BLOCK,) * 3)
    (tmp_path / "ran").mkdir()
    return tmp_path


def label(block):
    """Threshold what smooth wrote (the first block function any
    segmentation pipeline has), noting when each block ran."""
    import zarr

    base = os.environ["DAISY_WL_DIR"]
    smoothed = zarr.open_array(os.path.join(base, "out.zarr"), mode="r")
    labels = zarr.open_array(os.path.join(base, "labels.zarr"), mode="r+")
    w = block.write_roi
    index = tuple(slice(b, e) for b, e in zip(w.begin, w.end, strict=True))
    labels[index] = (np.asarray(smoothed[index]) > 0.5).astype(np.uint8)
    with open(os.path.join(base, "ran", str(block.block_id[1])), "w") as f:
        f.write(repr(time.time()))


def pipeline(tracking=None, fit="valid"):
    """smooth (``fit`` as given) and label over the whole volume, each with
    a store under ``tracking`` where one is given."""
    import blockfns

    def store(name):
        return None if tracking is None else tracking / name

    smooth = daisy.Task(
        "smooth",
        cube(0, SIZE),
        cube(-CONTEXT, BLOCK + 2 * CONTEXT),
        cube(0, BLOCK),
        process_function=blockfns.smooth_zarr,
        max_workers=2,
        fit=fit,
        tracking_path=store("smooth"),
    )
    labelled = daisy.Task(
        "label",
        cube(0, SIZE),
        cube(0, BLOCK),
        cube(0, BLOCK),
        process_function=label,
        max_workers=2,
        upstream_tasks=[smooth],
        tracking_path=store("label"),
    )
    return [smooth, labelled]


def test_the_uncovered_reads_are_said_before_the_first_block_and_in_summary_and_report(
    volume, caplog, capsys
):
    caplog.set_level(logging.WARNING, logger="daisy")
    assert daisy.run_blockwise(pipeline(volume / "tracking"))
    warned = [
        r
        for r in caplog.records
        if "37 of its 64 blocks read where no block of upstream task 'smooth'" in r.getMessage()
        or '37 of its 64 blocks read where no block of upstream task "smooth"' in r.getMessage()
    ]
    assert warned, [r.getMessage() for r in caplog.records]
    first_block = min(float(p.read_text()) for p in (volume / "ran").iterdir())
    assert warned[0].created < first_block
    assert "[2:50, 2:50, 2:50] of its total write ROI [2:62, 2:62, 2:62]" in warned[0].getMessage()
    out = capsys.readouterr().out
    summary = out[out.index("Task label") :]
    assert "37 of its 64 blocks read where" in " ".join(summary.split())
    notices = daisy.last_report()["label"].notices
    assert any("37 of its 64 blocks read where" in n for n in notices), notices
    # the history line keeps it too: what `daisy report` reads later
    lines = (volume / "tracking" / "label" / "runs.jsonl").read_text().splitlines()
    assert "37 of its 64 blocks read where" in lines[-1]


@pytest.mark.parametrize("multiprocessing", [True, False], ids=["workers", "serial"])
def test_strict_refuses_the_pipeline_before_any_block_runs(volume, multiprocessing):
    with pytest.raises(ValueError, match=r"strict: True refuses this pipeline: task .label.: 37"):
        daisy.run_blockwise(
            pipeline(volume / "tracking"), strict=True, multiprocessing=multiprocessing
        )
    assert list((volume / "ran").iterdir()) == []
    assert not (volume / "tracking" / "smooth" / "runs.jsonl").exists()


def test_a_pipeline_whose_upstream_writes_everything_it_reads_runs_silently(volume, caplog):
    caplog.set_level(logging.WARNING, logger="daisy")
    assert daisy.run_blockwise(pipeline(fit="shrink"), strict=True)
    assert not [r for r in caplog.records if "read where no block" in r.getMessage()]
    assert len(list((volume / "ran").iterdir())) == 64


def test_strict_must_be_a_bool():
    task = daisy.Task("t", cube(0, 8), cube(0, 8), cube(0, 8), process_function=lambda b: None)
    with pytest.raises(TypeError, match="strict: expected True or False"):
        daisy.run_blockwise(task, strict="yes")
