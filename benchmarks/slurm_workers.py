"""SLURM worker figures for benchmarks/RESULTS.md (issue 31), on the real
single-node cluster the tests start (`tests/slurm_cluster.py`; needs root
and Debian's slurmctld, slurmd and munge, as `make system-deps` installs):

- time to the first block of 16 SLURM workers, the jobs submitted and the
  run's wall, with one job per worker and with 4 workers per job;
- how far apart the workers of one job of 4 start, alone on the node;
- idle worker-seconds of a downstream task waiting on a slow upstream,
  with and without an ``idle_timeout``.

Run: ``python benchmarks/slurm_workers.py [--rounds N]``. It prints one
Markdown table row per figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from slurm_cluster import slurm_cluster  # noqa: E402

import daisy  # noqa: E402


def _nothing(block: daisy.Block) -> None:
    time.sleep(0.5)


def _slow(block: daisy.Block) -> None:
    time.sleep(0.6)


def _fast(block: daisy.Block) -> None:
    pass


def _line(task_id: str, n: int, **kwargs: object) -> daisy.Task:
    return daisy.Task(
        task_id,
        total_roi=daisy.Roi((0,), (10 * n,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        max_retries=0,
        **kwargs,  # type: ignore[arg-type]
    )


def quiesce() -> None:
    """Wait (at most 30 s) until the node is idle again: each round starts
    on a cluster done with the last one's jobs (a node still completing
    them delays the next submission), whichever way that round ended."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True
        ).stdout.split()
        jobs = subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout
        if state and all(s == "idle" for s in state) and not jobs.strip():
            return
        time.sleep(0.2)


def first_block(tmp: Path, workers_per_job: int = 1) -> tuple[float, int, float, list[float]]:
    """Seconds from the run's start to its first block handed to a worker,
    for 16 workers of one task on SLURM; the jobs submitted; and the run's
    wall (32 blocks of 0.5 s: 1 s of work once all 16 are in); and, per
    job of several workers, how long after its first worker its last one
    started. (No
    ``cpus``: one CPU per job, SLURM's default, so that a job of 4 fits the
    2-CPU node.)"""
    quiesce()
    daisy.set_tracking_basedir(tmp / f"first-{time.monotonic_ns()}")
    task = _line(
        "first",
        32,
        process_function=_nothing,
        max_workers=16,
        spawner=daisy.SlurmSpawner(workers_per_job=workers_per_job),
    )
    server = daisy.Server()
    begun = time.monotonic()
    server.run_blockwise([task], progress=False)
    wall = time.monotonic() - begun
    report = server.last_report
    assert report is not None
    t = report["first"]
    assert t.first_block_at is not None
    jobs = len(t.workers.jobs) if workers_per_job > 1 else t.workers.count
    spreads = [j.starts[-1] - j.starts[0] for j in t.workers.jobs if j.starts]
    return t.first_block_at - t.started_at, jobs, wall, spreads


def lone_job(tmp: Path) -> float:
    """How long after its first worker the 4th of one job of 4 started,
    the job alone on the node (no other launcher forking beside it)."""
    quiesce()
    daisy.set_tracking_basedir(tmp / f"lone-{time.monotonic_ns()}")
    task = _line(
        "lone",
        8,
        process_function=_nothing,
        max_workers=4,
        spawner=daisy.SlurmSpawner(workers_per_job=4),
    )
    server = daisy.Server()
    server.run_blockwise([task], progress=False)
    report = server.last_report
    assert report is not None
    (job,) = report["lone"].workers.jobs
    return job.starts[3] - job.starts[0]


def idle(tmp: Path, idle_timeout: float | None) -> tuple[float, int, int, float]:
    """Idle worker-seconds, workers started and handed back of the
    downstream task, and the run's wall."""
    quiesce()
    daisy.set_tracking_basedir(tmp / f"idle-{time.monotonic_ns()}")
    a = _line("a", 16, process_function=_slow, max_workers=2, spawner=daisy.SlurmSpawner(cpus=1))
    b = _line(
        "b",
        16,
        process_function=_fast,
        max_workers=2,
        upstream_tasks=[a],
        spawner=daisy.SlurmSpawner(cpus=1, idle_timeout=idle_timeout),
    )
    server = daisy.Server()
    begun = time.monotonic()
    states = server.run_blockwise([a, b], progress=False)
    wall = time.monotonic() - begun
    assert all(s.all_completed for s in states.values()), states
    report = server.last_report
    assert report is not None
    w = report["b"].workers
    return w.idle_seconds, w.count, w.handed_back, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d, slurm_cluster(Path(d) / "slurm") as env:
        os.environ["SLURM_CONF"] = env["SLURM_CONF"]
        os.chdir(d)
        tmp = Path(d)
        for per_job in (1, 4):
            firsts = [first_block(tmp, per_job) for _ in range(args.rounds)]
            secs = [f[0] for f in firsts]
            walls = [f[2] for f in firsts]
            spreads = [s for f in firsts for s in f[3]]
            spread = (
                f"; a job's workers start within {statistics.median(spreads) * 1e3:.0f} ms "
                f"of its first (median over {len(spreads)} jobs, max "
                f"{max(spreads) * 1e3:.0f} ms)"
                if spreads
                else ""
            )
            print(
                f"| first block, 16 workers, {per_job} per job | "
                f"median {statistics.median(secs):.2f} s "
                f"(min {min(secs):.2f}, max {max(secs):.2f}) | {firsts[0][1]} jobs per run, "
                f"wall median {statistics.median(walls):.2f} s "
                f"(min {min(walls):.2f}, max {max(walls):.2f}){spread} |"
            )
        lone = [lone_job(tmp) for _ in range(args.rounds)]
        print(
            f"| one job of 4 alone: its 4th worker after its first | median "
            f"{statistics.median(lone) * 1e3:.0f} ms (min {min(lone) * 1e3:.0f}, max "
            f"{max(lone) * 1e3:.0f}) | forked by the job's launcher |"
        )
        for timeout in (None, 0.5):
            runs = [idle(tmp, timeout) for _ in range(args.rounds)]
            med = statistics.median(r[0] for r in runs)
            print(
                f"| downstream idle worker-seconds, idle_timeout={timeout} | median {med:.2f} "
                f"({', '.join(f'{r[0]:.2f}' for r in runs)}) | workers started "
                f"{[r[1] for r in runs]}, handed back {[r[2] for r in runs]}, wall "
                f"{statistics.median(r[3] for r in runs):.1f} s |"
            )


if __name__ == "__main__":
    main()
