"""What a worker's exit costs a real pipeline, and what it keeps (issue 39).

The smooth-then-threshold pipeline of ``test_pipeline_bench.py`` (256^3
uint8 zarr, 64 blocks of 64^3 per task, one worker per task, both
functions opening their datasets with ``funlib.persistence``), with the
threshold function written the way scientists write one: each worker keeps
a results file open in a module global and appends a line per block,
leaving the file for the interpreter to close. Per round it prints:

- ``wall``: the run, ``run_blockwise`` in to out;
- ``tail``: from the end of the pipeline's last block to ``run_blockwise``
  returning: the run's end, which waits for the workers' exits;
- ``teardown``: the report's mean worker teardown of each task (this
  package only; daisy 2.0.0 keeps no such figure);
- ``kept``: lines of the results files on disk after the run (64 when the
  exit keeps what the function left open).

Run it under each interpreter to compare (each imports its own daisy)::

    .venv/bin/python benchmarks/worker_exit.py --rounds 3
    /work/venvs/daisy200/bin/python benchmarks/worker_exit.py --rounds 3

It runs from a temporary directory and writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    base = tempfile.mkdtemp(prefix="daisy-bench-exit-")
    os.environ["DAISY_BENCH_PIPELINE_DIR"] = base
    os.environ["DAISY_BENCH_EXIT_DIR"] = base
    os.chdir(base)
    import bench_functions
    import test_pipeline_bench as pipeline

    import daisy

    for name in bench_functions.PIPELINE_PATHS:
        bench_functions.PIPELINE_PATHS[name] = os.path.join(base, f"{name}.zarr")
    raw = pipeline._prepare(base)
    expected = pipeline._expected_mask(raw)
    if hasattr(daisy, "logging") and hasattr(daisy.logging, "set_log_basedir"):
        daisy.logging.set_log_basedir(os.path.join(base, "logs"))
    rounds = []
    for _ in range(args.rounds):
        for path in glob.glob(os.path.join(base, "results-*.csv")) + glob.glob(
            os.path.join(base, "ends-*")
        ):
            os.remove(path)
        tasks = pipeline._tasks()
        tasks[1].process_function = bench_functions.threshold_keeping_results
        start = time.time()
        ok = daisy.run_blockwise(tasks, progress=False, summary=False)
        end = time.time()
        assert ok is True
        last_block = max(
            float(Path(p).read_text()) for p in glob.glob(os.path.join(base, "ends-*"))
        )
        kept = sum(
            len(Path(p).read_text().splitlines())
            for p in glob.glob(os.path.join(base, "results-*.csv"))
        )
        from funlib.persistence import open_ds

        mask = open_ds(os.path.join(base, "mask.zarr"), mode="r")
        assert (mask[mask.roi] == expected).all()
        teardown = {}
        last_report = getattr(daisy, "last_report", None)
        if last_report is not None and hasattr(daisy, "_daisy"):
            for task_id, report in last_report().tasks.items():
                teardown[task_id] = report.workers.teardown.mean
        rounds.append(
            {"wall": end - start, "tail": end - last_block, "kept": kept, "teardown": teardown}
        )
        print(json.dumps(rounds[-1]), flush=True)
    print(
        json.dumps(
            {
                "daisy": getattr(daisy, "__file__", "?"),
                "wall_median": statistics.median(r["wall"] for r in rounds),
                "tail_median": statistics.median(r["tail"] for r in rounds),
                "kept": [r["kept"] for r in rounds],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
