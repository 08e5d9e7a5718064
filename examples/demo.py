"""A small daisy pipeline over a synthetic zarr volume.

Two tasks, read and written blockwise with funlib.persistence, as our
users do:

1. ``smooth``: a 3D box filter over the raw volume. Its blocks read one
   voxel of context around what they write, so neighbouring blocks
   conflict and daisy runs them in levels.
2. ``threshold``: reads the smoothed volume and writes a mask. It is
   downstream of ``smooth``: each of its blocks starts as soon as the
   ``smooth`` blocks it reads are done, not when the whole task is.

Both run on worker processes with resource tracking, so at the end daisy
prints the Execution Summary and the Resource Utilization panel (what the
blocks cost, what the workers did); the demo then checks the result
against the same filter applied to the whole volume at once. Running it
again on the same output directory resumes: every block is already done,
and the result still checks.

Run: ``python examples/demo.py [output directory]`` (default:
``daisy_demo`` in the current directory). The output stays there: the
zarr volumes, the worker logs and each task's tracking store with its run
history, which ``daisy report <output directory>`` reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from funlib.persistence import open_ds, prepare_ds

import daisy

SHAPE = (64, 64, 64)
BLOCK = (16, 16, 16)


def box_filter(data: np.ndarray) -> np.ndarray:
    """Mean over each voxel's 3x3x3 neighbourhood, the border dropped."""
    out = np.zeros(tuple(s - 2 for s in data.shape), dtype=np.float32)
    for dz in range(3):
        for dy in range(3):
            for dx in range(3):
                out += data[dz : dz + out.shape[0], dy : dy + out.shape[1], dx : dx + out.shape[2]]
    return out / 27.0


def main(workdir: Path) -> bool:
    store = workdir / "demo.zarr"
    daisy.logging.set_log_basedir(workdir / "daisy_logs")
    daisy.set_tracking_basedir(workdir / "tracking")
    rng = np.random.default_rng(42)
    # The raw volume has one voxel of margin around the 64^3 output, so every
    # output block gets its full context. Output blocks coincide with zarr
    # chunks: two workers never write into the same chunk at once.
    margin = (1, 1, 1)
    raw_shape = tuple(s + 2 for s in SHAPE)
    if (store / "raw").exists():
        # a rerun: the datasets and the tracking stores are the first run's,
        # so daisy skips every block that run finished
        raw, smoothed, mask = (open_ds(store / name) for name in ("raw", "smoothed", "mask"))
    else:
        raw = prepare_ds(
            store / "raw", raw_shape, offset=(-1, -1, -1), dtype=np.float32, chunk_shape=BLOCK
        )
        raw[raw.roi] = rng.random(raw_shape, dtype=np.float32)
        smoothed = prepare_ds(store / "smoothed", SHAPE, dtype=np.float32, chunk_shape=BLOCK)
        mask = prepare_ds(store / "mask", SHAPE, dtype=np.uint8, chunk_shape=BLOCK)

    def smooth_block(block: daisy.Block) -> None:
        data = open_ds(store / "raw")[block.read_roi]
        open_ds(store / "smoothed", mode="r+")[block.write_roi] = box_filter(data)

    def threshold_block(block: daisy.Block) -> None:
        data = open_ds(store / "smoothed")[block.write_roi]
        open_ds(store / "mask", mode="r+")[block.write_roi] = (data > 0.5).astype(np.uint8)

    output = daisy.Roi((0, 0, 0), SHAPE)
    smooth = daisy.Task(
        "smooth",
        total_roi=output.grow(margin, margin),
        read_roi=daisy.Roi((-1, -1, -1), (18, 18, 18)),
        write_roi=daisy.Roi((0, 0, 0), BLOCK),
        process_function=smooth_block,
        read_write_conflict=True,
        max_workers=2,
        resource_tracking=True,
    )
    threshold = daisy.Task(
        "threshold",
        total_roi=output,
        read_roi=daisy.Roi((0, 0, 0), BLOCK),
        write_roi=daisy.Roi((0, 0, 0), BLOCK),
        process_function=threshold_block,
        read_write_conflict=False,
        max_workers=2,
        resource_tracking=True,
    )
    # `smooth + threshold`: threshold reads smooth's output, block by block
    ok = daisy.run_blockwise(smooth + threshold)

    expected = box_filter(raw[raw.roi])
    got = smoothed[output]
    assert np.allclose(got, expected, atol=1e-5), "blockwise result differs from whole-volume"
    assert np.array_equal(mask[output], (expected > 0.5).astype(np.uint8))
    print(f"checked: blockwise output equals the whole-volume computation ({store})")
    return ok


#: where the demo writes when given no directory
DEFAULT_OUTPUT = Path("daisy_demo")


def daisy_command() -> str:
    """How to run the ``daisy`` command from the shell the demo was started
    in: ``daisy`` where that is this installation's (an activated
    virtualenv), else the script beside this interpreter (``.venv/bin/daisy``
    after ``make demo``, which activates nothing), else ``python -m daisy``."""
    import shlex
    import shutil

    script = Path(sys.executable).parent / "daisy"
    found = shutil.which("daisy")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "daisy"
    if script.exists():
        try:
            return shlex.quote(str(script.absolute().relative_to(Path.cwd())))
        except ValueError:
            return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m daisy"


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUTPUT
    out.mkdir(parents=True, exist_ok=True)
    ok = main(out)
    daisy = daisy_command()
    print(
        f"\nThe output is in {out}/ (run the demo again to see it resume).\n"
        f"Where the time went: {daisy} report {out / 'tracking'}\n"
        f"A page with the timelines: {daisy} report {out / 'tracking'} --html report.html"
    )
    sys.exit(0 if ok else 1)
