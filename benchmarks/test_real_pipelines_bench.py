"""Real pipelines, end to end (pytest-benchmark), each at two sizes so a
run's fixed cost and its cost per block separate; each checks its output
against the whole volume computed in one piece. With
``test_pipeline_bench.py``'s smooth+threshold pipeline they are the suite
``compare_with_daisy200.py`` runs under this package and under daisy
2.0.0 (only API the two share is used here).

- ``test_readme_pipeline``: the README's pipeline as written there (a
  float32 volume, a box mean with 8 voxels of context, 32^3 blocks,
  ``fit="shrink"``, one worker), at 64^3 (8 blocks) and 128^3 (64 blocks).
- ``test_connected_components``: a foreground mask, then
  ``scipy.ndimage.label`` of each block with uint64 ids unique across
  blocks (the first step of a blockwise connected components), two workers
  per task, block tracking on (this package's default; 2.0.0 has none), at
  128^3 and 256^3 with 64^3 blocks (8 and 64 blocks a task).
- ``test_gunpowder_request_blocks``: ``tests/gunpowder_pipeline.py``, a
  gunpowder 1.4.4 pipeline ending in ``DaisyRequestBlocks`` (a zarr source,
  a box filter with context, a zarr writer), two daisy workers, at 32^3 and
  64^3 with 16^3 blocks (8 and 64 blocks). gunpowder 1.4.4 needs zarr 2, so
  the run is a script in an environment of its own: ``.venv-gunpowder``
  (this package, made by ``make test``) or, under daisy 2.0.0,
  ``/work/venvs/gunpowder200`` (gunpowder 1.4.4 with the 2.0.0 wheel);
  ``DAISY_BENCH_GUNPOWDER_PYTHON`` names another. Its time is the script's
  whole run, interpreter and imports included, the same for both.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("funlib.persistence")

import daisy  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _pipeline_dir(monkeypatch) -> str:
    """A fresh directory for a pipeline's datasets, set where the block
    functions (here and in workers) look for it."""
    base = tempfile.mkdtemp(prefix="daisy-bench-real-")
    monkeypatch.setenv("DAISY_BENCH_PIPELINE_DIR", base)
    from bench_functions import point_paths_at

    point_paths_at(base)
    daisy.logging.set_log_basedir(tempfile.mkdtemp(prefix="daisy-bench-logs-"))
    return base


# -- the README's pipeline ---------------------------------------------------
README_BLOCK, README_CONTEXT = 32, 8


@pytest.mark.parametrize("size", [64, 128])
def test_readme_pipeline(benchmark, monkeypatch, size):
    from bench_functions import PIPELINE_PATHS, readme_box_mean, readme_smooth
    from funlib.persistence import open_ds, prepare_ds

    _pipeline_dir(monkeypatch)
    raw = prepare_ds(PIPELINE_PATHS["readme_raw"], shape=(size,) * 3, chunk_shape=(32,) * 3)
    data = np.random.default_rng(0).random(raw.shape, dtype=np.float32)
    raw[raw.roi] = data
    inner = size - 2 * README_CONTEXT
    prepare_ds(
        PIPELINE_PATHS["readme_smooth"],
        offset=(README_CONTEXT,) * 3,
        shape=(inner,) * 3,
        chunk_shape=(README_BLOCK,) * 3,
    )

    def once():
        task = daisy.Task(
            "smooth",
            total_roi=daisy.Roi((0, 0, 0), (size,) * 3),
            read_roi=daisy.Roi((-README_CONTEXT,) * 3, (README_BLOCK + 2 * README_CONTEXT,) * 3),
            write_roi=daisy.Roi((0, 0, 0), (README_BLOCK,) * 3),
            process_function=readme_smooth,
            read_write_conflict=False,
            fit="shrink",
            max_retries=2,
        )
        return daisy.run_blockwise([task], progress=False, summary=False)

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    smoothed = open_ds(PIPELINE_PATHS["readme_smooth"], mode="r")
    want = readme_box_mean(data, README_CONTEXT)
    assert np.allclose(smoothed[smoothed.roi], want, atol=1e-5)
    benchmark.extra_info["blocks"] = -((-inner // README_BLOCK) ** 3)


# -- connected components ----------------------------------------------------
CC_BLOCK = 64


def _cc_tasks(size: int) -> list[daisy.Task]:
    from bench_functions import foreground, label_components

    total = daisy.Roi((0, 0, 0), (size,) * 3)
    block = daisy.Roi((0, 0, 0), (CC_BLOCK,) * 3)

    def task(task_id: str, function: Any, **upstream: Any) -> daisy.Task:
        return daisy.Task(
            task_id,
            total_roi=total,
            read_roi=block,
            write_roi=block,
            process_function=function,
            read_write_conflict=False,
            num_workers=2,
            max_retries=0,
            **upstream,
        )

    mask = task("foreground", foreground)
    return [mask, task("label", label_components, upstream_tasks=[mask])]


def _blob_volume(size: int) -> np.ndarray:
    """Noise smoothed into blobs of a few voxels, values about 0..1, so the
    mask above 0.5 has many components, some crossing blocks."""
    from bench_functions import box_sum

    noise = np.random.default_rng(3).random((size + 4,) * 3, dtype=np.float32)
    return (box_sum(noise, 5) / 125.0 - 0.5) * 6.0 + 0.5


def _check_components(mask: np.ndarray, labels: np.ndarray) -> None:
    """``labels`` is, in every block, ``scipy.ndimage.label`` of that block of
    the whole-volume mask (the same partition, its ids offset), its ids never
    shared between blocks, and every block's component lies in one component
    of the whole volume's labelling."""
    import scipy.ndimage

    whole, _ = scipy.ndimage.label(mask)
    seen: set[int] = set()
    corners = range(0, mask.shape[0], CC_BLOCK)
    for z in corners:
        for y in corners:
            for x in corners:
                index = np.s_[z : z + CC_BLOCK, y : y + CC_BLOCK, x : x + CC_BLOCK]
                got, want, glob = labels[index], scipy.ndimage.label(mask[index])[0], whole[index]
                assert np.array_equal(got > 0, want > 0)
                fg = got > 0
                pairs = np.unique(np.stack([got[fg], want[fg].astype(np.uint64)]), axis=1)
                ids = np.unique(got[fg])
                # one block id per component of the block and back: the same partition
                assert pairs.shape[1] == len(ids) == len(np.unique(want[fg]))
                # each block component inside one whole-volume component
                assert np.unique(np.stack([got[fg], glob[fg].astype(np.uint64)]), axis=1).shape[
                    1
                ] == len(ids)
                assert seen.isdisjoint(ids.tolist())
                seen.update(ids.tolist())


@pytest.mark.parametrize("size", [128, 256])
def test_connected_components(benchmark, monkeypatch, size):
    from bench_functions import CC_THRESHOLD, PIPELINE_PATHS
    from funlib.persistence import open_ds, prepare_ds

    _pipeline_dir(monkeypatch)
    volume = _blob_volume(size)
    shape, chunks = (size,) * 3, (CC_BLOCK,) * 3
    raw = prepare_ds(PIPELINE_PATHS["cc_raw"], shape=shape, chunk_shape=chunks, dtype=np.float32)
    raw[raw.roi] = volume
    prepare_ds(PIPELINE_PATHS["cc_mask"], shape=shape, chunk_shape=chunks, dtype=np.uint8)
    prepare_ds(PIPELINE_PATHS["cc_labels"], shape=shape, chunk_shape=chunks, dtype=np.uint64)

    def once():
        return daisy.run_blockwise(_cc_tasks(size), progress=False, summary=False)

    ok = benchmark.pedantic(once, rounds=3, iterations=1)
    assert ok is True
    mask = open_ds(PIPELINE_PATHS["cc_mask"], mode="r")
    labels = open_ds(PIPELINE_PATHS["cc_labels"], mode="r")
    whole_mask = (volume > CC_THRESHOLD).astype(np.uint8)
    assert np.array_equal(mask[mask.roi], whole_mask)
    got = labels[labels.roi]
    assert got.dtype == np.uint64
    _check_components(whole_mask, got)
    benchmark.extra_info["blocks"] = 2 * (size // CC_BLOCK) ** 3


# -- gunpowder's DaisyRequestBlocks -------------------------------------------
def _gunpowder_python() -> Path | None:
    named = os.environ.get("DAISY_BENCH_GUNPOWDER_PYTHON")
    if named:
        return Path(named)
    if getattr(daisy, "__version__", "") == "2.0.0":
        return Path("/work/venvs/gunpowder200/bin/python")
    return REPO / ".venv-gunpowder" / "bin" / "python"


@pytest.mark.parametrize("size", [32, 64])
def test_gunpowder_request_blocks(benchmark, size):
    python = _gunpowder_python()
    if python is None or not python.exists():
        pytest.skip(f"no gunpowder environment at {python} (make test makes .venv-gunpowder)")
    script = REPO / "tests" / "gunpowder_pipeline.py"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    results = []

    def once():
        with tempfile.TemporaryDirectory(prefix="daisy-bench-gp-") as out:
            run = subprocess.run(
                [str(python), str(script), out, "2", "1", str(size)],
                capture_output=True,
                text=True,
                env=env,
                cwd=out,
                timeout=600,
            )
        results.append(run)

    benchmark.pedantic(once, rounds=3, iterations=1)
    for run in results:
        assert run.returncode == 0, run.stderr[-3000:]
        result = [line for line in run.stdout.splitlines() if line.startswith("RESULT")]
        assert result and result[-1].split()[1:3] == ["True", "True"], run.stdout[-3000:]
    benchmark.extra_info["blocks"] = (size // 16) ** 3
    benchmark.extra_info["python"] = str(python)
