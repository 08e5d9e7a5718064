"""``Task(outputs=[...])``: what daisy checks of the arrays a task declares
it writes (issue 39).

The issue's two silent losses, met the way a user meets them: a ``labels``
array prepared with 48^3 chunks under 64^3 write blocks and
``read_write_conflict=False`` (two workers read-modify-write one chunk, and
20 of 64 blocks lost writes while the run said ✔), and an output deleted
and re-created after a full run (the rerun skipped every block over an
empty array). With ``outputs=`` the first is refused before any block
runs, saying which chunk shape fits, and the second is refused on the
rerun, offering ``task.reset()``. The per-axis rule and the store's record
are tested in the core (``task_outputs``, ``tracking_store::outputs``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import daisy

zarr = pytest.importorskip("zarr")

SIZE, BLOCK = 128, 64


def cube(offset, shape):
    return daisy.Roi((offset,) * 3, (shape,) * 3)


def write_labels(path):
    """A block function as a segmentation step writes it: open the output
    with zarr, write the block's labels (its block id, so a lost write
    shows)."""

    def process(block):
        import zarr

        labels = zarr.open_array(path, mode="r+")
        w = block.write_roi
        index = tuple(slice(b, e) for b, e in zip(w.begin, w.end, strict=True))
        labels[index] = block.block_id[1] + 1

    return process


def labels_task(path, output, conflict=False, **kwargs):
    return daisy.Task(
        "labels",
        cube(0, SIZE),
        cube(0, BLOCK),
        cube(0, BLOCK),
        process_function=write_labels(str(path)),
        read_write_conflict=conflict,
        max_workers=kwargs.pop("max_workers", 3),
        outputs=None if output is None else [output],
        **kwargs,
    )


def make_labels(path, chunk):
    return zarr.create_array(
        str(path), shape=(SIZE,) * 3, dtype=np.uint32, chunks=(chunk,) * 3, overwrite=True
    )


@pytest.mark.parametrize("form", ["zarr", "path", "funlib"])
def test_chunks_that_straddle_write_blocks_are_refused_before_any_block_runs(tmp_path, form):
    path = tmp_path / "labels.zarr"
    array = make_labels(path, 48)
    if form == "zarr":
        output = array
    elif form == "path":
        output = str(path)
    else:
        funlib = pytest.importorskip("funlib.persistence")
        output = funlib.open_ds(str(path), mode="r+")
    task = labels_task(path, output)
    with pytest.raises(ValueError) as raised:
        daisy.run_blockwise(task)
    text = str(raised.value)
    assert text.startswith(f'outputs: task "labels": output {path}'), text
    assert "chunks of (48, 48, 48)" in text and "(64, 64, 64)" in text, text
    assert "chunks of (64, 64, 64) would do" in text, text
    # nothing ran: the array is as prepared
    assert not np.asarray(zarr.open_array(str(path), mode="r")[:]).any()


def test_aligned_chunks_run_and_every_block_lands(tmp_path):
    path = tmp_path / "labels.zarr"
    make_labels(path, 32)
    task = labels_task(path, str(path))
    assert daisy.run_blockwise(task)
    labels = np.asarray(zarr.open_array(str(path), mode="r")[:])
    n = SIZE // BLOCK
    for i in range(n):
        for j in range(n):
            for k in range(n):
                part = labels[
                    i * BLOCK : (i + 1) * BLOCK,
                    j * BLOCK : (j + 1) * BLOCK,
                    k * BLOCK : (k + 1) * BLOCK,
                ]
                assert len(np.unique(part)) == 1 and part.flat[0] > 0, (i, j, k)


def test_a_funlib_array_is_read_in_world_units(tmp_path):
    """Voxel size 4 and an offset: 16-voxel chunks are 64 world units, on
    the block grid; 12-voxel chunks (48) are not."""
    funlib = pytest.importorskip("funlib.persistence")
    from funlib.geometry import Coordinate, Roi

    for chunk, ok in ((16, True), (12, False)):
        path = tmp_path / f"fl{chunk}.zarr"
        array = funlib.prepare_ds(
            str(path),
            shape=(SIZE // 4,) * 3,
            offset=Coordinate((0, 0, 0)),
            voxel_size=Coordinate((4, 4, 4)),
            chunk_shape=(chunk,) * 3,
            dtype=np.uint32,
            mode="w",
        )
        assert array.roi == Roi((0, 0, 0), (SIZE,) * 3)
        task = daisy.Task(
            f"fl{chunk}",
            cube(0, SIZE),
            cube(0, BLOCK),
            cube(0, BLOCK),
            process_function=lambda b: None,
            read_write_conflict=False,
            outputs=[array],
        )
        if ok:
            assert daisy.run_blockwise(task)
        else:
            with pytest.raises(ValueError, match=r"chunks of \(48, 48, 48\) \(world units\)"):
                daisy.run_blockwise(task)


def test_a_recreated_output_is_refused_on_rerun_and_reset_redoes_it(tmp_path):
    path = tmp_path / "labels.zarr"
    make_labels(path, 32)
    tracking = tmp_path / "labels.store"
    assert daisy.run_blockwise(labels_task(path, str(path), tracking_path=tracking))
    first = np.asarray(zarr.open_array(str(path), mode="r")[:])
    assert first.all()
    # the same output again: every block is skipped, as before
    task = labels_task(path, str(path), tracking_path=tracking)
    states = daisy.run_blockwise(task, return_states=True)
    assert states["labels"].skipped_count == 8
    # "redo it": delete the output and make it again, then rerun
    make_labels(path, 32)
    task = labels_task(path, str(path), tracking_path=tracking)
    with pytest.raises(daisy.LayoutMismatch) as raised:
        daisy.run_blockwise(task)
    text = str(raised.value)
    assert f"output {path} was deleted and made again since tracking store" in text, text
    assert "marked 8 block(s) done" in text and "task.reset()" in text, text
    assert not np.asarray(zarr.open_array(str(path), mode="r")[:]).any()
    # deleted and not made again: refused too
    import shutil

    shutil.rmtree(path)
    with pytest.raises(daisy.LayoutMismatch, match="was deleted since"):
        daisy.run_blockwise(labels_task(path, str(path), tracking_path=tracking))
    # the fix it offers: reset, and the rerun does every block again
    make_labels(path, 32)
    task = labels_task(path, str(path), tracking_path=tracking)
    task.reset()
    states = daisy.run_blockwise(task, return_states=True)
    assert states["labels"].skipped_count == 0 and states["labels"].completed_count == 8
    assert (np.asarray(zarr.open_array(str(path), mode="r")[:]) == first).all()


def test_outputs_must_be_arrays_or_paths():
    with pytest.raises(TypeError, match="outputs: expected zarr arrays"):
        daisy.Task("t", cube(0, 8), cube(0, 8), cube(0, 8), lambda b: None, outputs=[3])
    with pytest.raises(TypeError, match="outputs: expected a list"):
        daisy.Task("t", cube(0, 8), cube(0, 8), cube(0, 8), lambda b: None, outputs=3)


def test_a_task_without_outputs_runs_as_before(tmp_path):
    """Optional: the misaligned array without ``outputs=`` is not checked
    (daisy cannot see it), and the run goes ahead."""
    path = tmp_path / "labels.zarr"
    make_labels(path, 48)
    task = labels_task(path, None, max_workers=1)
    assert daisy.run_blockwise(task)
    assert os.path.isdir(path)
