"""Forecast accuracy (issue 54): `daisy.forecast([task], sample_blocks=20)`
then `run_blockwise` of the rest, on one task of 20 x 20 blocks, 4 workers,
resource tracking on, blocks that sleep and hold memory
(`forecast_workloads.py`: uniform, a costly disk in the middle, 2 % rare
costly blocks). For each workload and repetition, in a fresh store:

- the forecast wall of the rest against the measured wall of the run (from
  its `run_blockwise` call to its return), the error in per cent, and
  whether the measured wall lies in the forecast's interval;
- the naive forecast beside it: the sample's mean block time times the
  blocks left over the workers (a mean rate, as a progress bar's ETA);
- the forecast p95 block peak memory against the run's own p95 (its
  `runs.jsonl` line);
- the ETA the run recorded (its `runs.jsonl` line's ``eta`` checkpoints)
  nearest 25, 50 and 75 % of the blocks it ran, against the time really
  left until its last block came back, beside a mean rate's ETA at the
  same moment (blocks left over blocks done per second so far).

Usage: ``python benchmarks/forecast_accuracy.py [--reps 3] [--workloads
uniform,disk,rare]``; prints a Markdown table (for `RESULTS.md`) and
writes the rows as JSON to ``--json`` if given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import forecast_workloads as wl  # noqa: E402

import daisy  # noqa: E402
from daisy import _daisy  # noqa: E402

WORKERS = 4
SAMPLE = 20


def one(name: str, base: Path) -> dict[str, float | bool | str]:
    store = base / name
    roi = daisy.Roi((0, 0), (wl.GRID * wl.BLOCK, wl.GRID * wl.BLOCK))
    block = daisy.Roi((0, 0), (wl.BLOCK, wl.BLOCK))
    task = daisy.Task(
        name,
        roi,
        block,
        block,
        process_function=wl.WORKLOADS[name],
        max_workers=WORKERS,
        tracking_path=store,
        resource_tracking=True,
    )
    fc = daisy.forecast([task], sample_blocks=SAMPLE)
    # the sample's blocks as the forecast counts them: dispatch to return
    sample = [r.round_trip or r.wall_seconds for r in task.block_records() if r.stats]
    t = fc[name]
    naive = statistics.fmean(sample) * t.blocks_left / WORKERS
    start = time.perf_counter()
    assert daisy.run_blockwise([task], progress=False, summary=False)
    wall = time.perf_counter() - start
    report = json.loads(_daisy.read_last_report(str(store / "runs.jsonl")) or "{}")
    p95 = report["blocks"]["peak_rss_p95"]
    etas = {}
    end = report["last_block_at"] - report["started_at"]
    for q in (25, 50, 75):
        target = q / 100 * t.blocks_left
        cp = min(report["eta"], key=lambda c: abs(c["done"] - target))
        left = end - cp["elapsed_seconds"]
        rate = cp["done"] / cp["elapsed_seconds"]
        naive_eta = (t.blocks_left - cp["done"]) / rate
        etas[f"eta{q}_error_pct"] = 100 * (cp["eta_seconds"] - left) / left
        etas[f"eta{q}_naive_error_pct"] = 100 * (naive_eta - left) / left
    return {
        **etas,
        "workload": name,
        "forecast_s": fc.wall_seconds,
        "low_s": fc.wall_seconds_low,
        "high_s": fc.wall_seconds_high,
        "measured_s": wall,
        "error_pct": 100 * (fc.wall_seconds - wall) / wall,
        "naive_s": naive,
        "naive_error_pct": 100 * (naive - wall) / wall,
        "inside": fc.wall_seconds_low <= wall <= fc.wall_seconds_high,
        "p95_forecast_mib": t.peak_rss_bytes_p95 / 2**20,
        "p95_measured_mib": p95 / 2**20,
        "p95_error_pct": 100 * (t.peak_rss_bytes_p95 - p95) / p95,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workloads", default="uniform,disk,rare")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for rep in range(args.reps):
        for name in args.workloads.split(","):
            with tempfile.TemporaryDirectory() as base:
                row = one(name, Path(base))
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    print(
        "| workload | rep | forecast (interval) | measured | error | inside | naive mean rate "
        "| p95 peak forecast / measured | ETA error at 25 / 50 / 75 % (mean rate's) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['workload']} | {r['rep']} | {r['forecast_s']:.2f} s ({r['low_s']:.2f}–"
            f"{r['high_s']:.2f}) | {r['measured_s']:.2f} s | {r['error_pct']:+.1f} % | "
            f"{'yes' if r['inside'] else 'NO'} | {r['naive_s']:.2f} s "
            f"({r['naive_error_pct']:+.1f} %) "
            f"| {r['p95_forecast_mib']:.0f} / {r['p95_measured_mib']:.0f} MiB "
            f"({r['p95_error_pct']:+.1f} %) | "
            + " / ".join(
                f"{r[f'eta{q}_error_pct']:+.0f} % ({r[f'eta{q}_naive_error_pct']:+.0f} %)"
                for q in (25, 50, 75)
            )
            + " |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
