"""A gunpowder 1.4 blockwise pipeline driven by daisy, as gunpowder's users
write it: each daisy worker runs a gunpowder pipeline (a zarr source, a
5^3 box filter needing 2 voxels of context, a zarr writer) ending in
``DaisyRequestBlocks``, which asks daisy for blocks and requests each
through the pipeline; the written volume is checked against numpy.

Run by ``tests/test_downstream_gunpowder.py`` in ``.venv-gunpowder``
(gunpowder 1.4.4 needs zarr 2 and funlib.persistence 0.6, which the main
environment's zarr 3 excludes), and by ``benchmarks/test_real_pipelines_bench.py``
at two sizes. Usage: ``python gunpowder_pipeline.py OUT_DIR DAISY_WORKERS
GUNPOWDER_WORKERS [SHAPE]`` (GUNPOWDER_WORKERS is the node's ``num_workers``;
SHAPE, the volume's edge in voxels, a multiple of the 16-voxel block,
64 unless given); prints ``RESULT <run ok> <output exact> <max error>``."""

import sys
from pathlib import Path

import gunpowder as gp
import numpy as np
import zarr

import daisy

out_dir, n_workers, gp_workers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
SHAPE = int(sys.argv[4]) if len(sys.argv) > 4 else 64
BLOCK, CONTEXT = 16, 2
raw_data = np.arange(SHAPE**3, dtype=np.float32).reshape((SHAPE,) * 3) % 251
container = zarr.open_group(str(out_dir / "data.zarr"), mode="w")
for name in ("raw", "out"):
    ds = container.create_dataset(name, shape=raw_data.shape, chunks=(BLOCK,) * 3, dtype="float32")
    ds.attrs["resolution"] = [1, 1, 1]
    ds.attrs["offset"] = [0, 0, 0]
container["raw"][:] = raw_data

RAW, OUT = gp.ArrayKey("RAW"), gp.ArrayKey("OUT")


class Smooth(gp.BatchFilter):
    """OUT = mean over the 5-voxel box of RAW, cropped to OUT's ROI."""

    def setup(self):
        spec = self.spec[RAW].copy()
        self.provides(OUT, spec)

    def prepare(self, request):
        deps = gp.BatchRequest()
        deps[RAW] = request[OUT].copy()
        deps[RAW].roi = request[OUT].roi.grow((CONTEXT,) * 3, (CONTEXT,) * 3)
        return deps

    def process(self, batch, request):
        raw = batch[RAW].data
        k = 2 * CONTEXT + 1
        acc = np.zeros(tuple(s - 2 * CONTEXT for s in raw.shape), dtype=np.float32)
        for dz in range(k):
            for dy in range(k):
                for dx in range(k):
                    acc += raw[
                        dz : dz + acc.shape[0], dy : dy + acc.shape[1], dx : dx + acc.shape[2]
                    ]
        spec = batch[RAW].spec.copy()
        spec.roi = request[OUT].roi
        out = gp.Batch()
        out[OUT] = gp.Array(acc / k**3, spec)
        return out


def worker():
    reference = gp.BatchRequest()
    reference[RAW] = gp.ArraySpec(roi=gp.Roi((0, 0, 0), (BLOCK + 2 * CONTEXT,) * 3))
    reference[OUT] = gp.ArraySpec(roi=gp.Roi((CONTEXT,) * 3, (BLOCK,) * 3))
    pipeline = (
        gp.ZarrSource(
            str(out_dir / "data.zarr"),
            {RAW: "raw"},
            {RAW: gp.ArraySpec(interpolatable=True, voxel_size=(1, 1, 1))},
        )
        + gp.Pad(RAW, None)
        + Smooth()
        + gp.ZarrWrite({OUT: "out"}, output_dir=str(out_dir), output_filename="data.zarr")
        + gp.DaisyRequestBlocks(
            reference, {RAW: "read_roi", OUT: "write_roi"}, num_workers=gp_workers
        )
    )
    with gp.build(pipeline):
        pipeline.request_batch(gp.BatchRequest())


if __name__ == "__main__":
    total = daisy.Roi((-CONTEXT,) * 3, (SHAPE + 2 * CONTEXT,) * 3)
    task = daisy.Task(
        "gp",
        total,
        daisy.Roi((0, 0, 0), (BLOCK + 2 * CONTEXT,) * 3),
        daisy.Roi((CONTEXT,) * 3, (BLOCK,) * 3),
        process_function=worker,
        num_workers=n_workers,
        read_write_conflict=False,
    )
    ok = daisy.run_blockwise([task])
    padded = np.pad(raw_data, CONTEXT)
    k = 2 * CONTEXT + 1
    want = np.zeros_like(raw_data)
    for dz in range(k):
        for dy in range(k):
            for dx in range(k):
                want += padded[dz : dz + SHAPE, dy : dy + SHAPE, dx : dx + SHAPE]
    want /= k**3
    got = zarr.open_group(str(out_dir / "data.zarr"), mode="r")["out"][:]
    print("RESULT", ok, bool(np.allclose(got, want, atol=1e-3)), float(np.abs(got - want).max()))
