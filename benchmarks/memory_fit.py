"""Workers that fit the node (issue 53): blocks whose memory varies by region, run in a
3 GiB memory cgroup, with this package and with daisy 2.0.0 side by side.

The workload is the one of issue 53: 120 blocks along one axis, each holding 150 MiB
(every page touched) and then sleeping 0.3 s, where ``--heavy K`` blocks in a row of
every 20 hold 1,200 MiB instead (a dense region, a big object). Each configuration runs
in a child interpreter moved into a fresh memory cgroup of ``--limit-mib`` (v1 under
``/sys/fs/cgroup/memory``, v2 under ``/sys/fs/cgroup``); each finished block appends a
line to its own marker file. Per configuration it prints one JSON line and, at the end,
a markdown table:

- ``kills``: the kernel's OOM kills in the cgroup (its own ``oom_kill`` count);
- ``stops``: the blocks daisy's memory guard held back (this package only);
- ``wall``: seconds from ``run_blockwise`` in to out;
- ``done``: blocks whose marker exists (the function finished), and ``marked``: blocks
  the run counted completed; ``twice``: markers written more than once;
- ``peak``: the cgroup's peak usage in MiB.

Run it as root (it writes the cgroup)::

    .venv/bin/python benchmarks/memory_fit.py --heavy 2
    .venv/bin/python benchmarks/memory_fit.py --heavy 1 --heavy 4 --skip-theirs

Where no memory cgroup can be made it says so and exits 0 without measuring. It runs
from a temporary directory and writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCKS = 120
EVERY = 20
FIRST_HEAVY = 7
V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


# --- the block function (imported by the workers from this file) --------------------


def memory_by_region(block):  # type: ignore[no-untyped-def]
    """Hold 150 MiB (or 1,200 MiB on the heavy blocks) for 0.3 s, then leave a marker."""
    import numpy as np

    heavy_run = int(os.environ["DAISY_BENCH_HEAVY_RUN"])
    index = block.write_roi.begin[0] // block.write_roi.shape[0]
    heavy = FIRST_HEAVY <= index % EVERY < FIRST_HEAVY + heavy_run
    mib = 1200 if heavy else 150
    a = np.ones(mib << 20, dtype=np.uint8)
    time.sleep(0.3)
    del a
    marker = Path(os.environ["DAISY_BENCH_MARKERS"]) / f"{index:04d}"
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")


def child(args: argparse.Namespace) -> int:
    """Run the workload once with whichever daisy this interpreter imports."""
    import daisy

    workers: int | str = args.workers if args.workers == "auto" else int(args.workers)
    task = daisy.Task(
        "memory_by_region",
        total_roi=daisy.Roi((0,), (BLOCKS * 10,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=memory_by_region,
        max_workers=workers,
        max_retries=2,
    )
    start = time.time()
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    wall = time.time() - start
    state = states["memory_by_region"]
    stops = None
    memory = None
    if hasattr(task, "report"):
        report = task.report()
        if getattr(report, "memory", None) is not None:
            stops = report.memory.held_back
            memory = report.memory.describe()
    print(
        "RESULT "
        + json.dumps(
            {
                "wall": round(wall, 1),
                "marked": state.completed_count,
                "failed": state.failed_count,
                "stops": stops,
                "memory": memory,
            }
        ),
        flush=True,
    )
    return 0


# --- the parent: one cgroup per configuration ----------------------------------------


class Cgroup:
    """A fresh memory cgroup (v1 or v2) with a limit, removed when done."""

    def __init__(self, name: str, limit: int) -> None:
        if (V1_ROOT / "memory.limit_in_bytes").exists():
            self.v1 = True
            self.path = V1_ROOT / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
        else:
            self.v1 = False
            self.path = V2_ROOT / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit))
            (self.path / "memory.swap.max").write_text("0")

    def enter(self) -> None:
        """Move the calling process in (run in the child before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def kills(self) -> int:
        name = "memory.oom_control" if self.v1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_mib(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        path = self.path / name
        return int(path.read_text()) >> 20 if path.exists() else None

    def remove(self) -> None:
        for _ in range(50):
            pids = (self.path / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.path.rmdir()


def can_make_cgroup() -> str | None:
    """None when a memory cgroup can be made here, else why not."""
    for root, probe in ((V1_ROOT, "memory.limit_in_bytes"), (V2_ROOT, "cgroup.controllers")):
        if (root / probe).exists():
            if not os.access(root, os.W_OK):
                return f"{root} is not writable (run as root)"
            if root is V2_ROOT and "memory" not in (root / probe).read_text():
                return "cgroup v2 without the memory controller"
            return None
    return "no memory cgroup hierarchy under /sys/fs/cgroup"


def run_one(python: str, label: str, workers: str, heavy: int, limit: int, timeout: float) -> dict:
    base = Path(tempfile.mkdtemp(prefix="daisy-bench-memory-"))
    markers = base / "markers"
    markers.mkdir()
    env = dict(os.environ)
    env.update(
        {
            "DAISY_BENCH_HEAVY_RUN": str(heavy),
            "DAISY_BENCH_MARKERS": str(markers),
            "PYTHONPATH": str(HERE),
        }
    )
    group = Cgroup(f"daisy-bench-{os.getpid()}-{label}-{workers}-{heavy}", limit)
    out = ""
    try:
        proc = subprocess.run(
            [python, "-c", "import memory_fit, sys; sys.exit(memory_fit.main())", "--child"]
            + ["--workers", workers],
            cwd=base,
            env=env,
            preexec_fn=group.enter,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        out = proc.stdout + proc.stderr
        timed_out = False
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        timed_out = True
    kills = group.kills()
    peak = group.peak_mib()
    group.remove()
    result: dict = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    counts = [len(p.read_text().splitlines()) for p in markers.iterdir()]
    row = {
        "daisy": label,
        "max_workers": workers,
        "heavy": heavy,
        "kills": kills,
        "stops": result.get("stops"),
        "wall": result.get("wall", f"> {timeout:.0f} (timed out)" if timed_out else None),
        "done": len(counts),
        "marked": result.get("marked"),
        "twice": sum(1 for c in counts if c > 1),
        "peak_mib": peak,
        "memory": result.get("memory"),
    }
    if not result:
        row["tail"] = out[-600:]
    shutil.rmtree(base, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default="8")
    parser.add_argument("--heavy", type=int, action="append", help="heavy blocks in a row of 20")
    parser.add_argument("--limit-mib", type=int, default=3072)
    parser.add_argument("--ours", default=str(HERE.parent / ".venv/bin/python"))
    parser.add_argument("--theirs", default="/work/venvs/daisy200/bin/python")
    parser.add_argument("--skip-theirs", action="store_true")
    parser.add_argument("--counts", default="2,8,auto", help="max_workers values to run")
    parser.add_argument("--timeout", type=float, default=400.0)
    args = parser.parse_args()
    if args.child:
        return child(args)
    why_not = can_make_cgroup()
    if why_not is not None:
        print(f"memory_fit: skipped: {why_not}")
        return 0
    rows = []
    for heavy in args.heavy or [2]:
        for workers in args.counts.split(","):
            runs = [("ours", args.ours)]
            if not args.skip_theirs and workers != "auto":
                runs.append(("2.0.0", args.theirs))
            for label, python in runs:
                row = run_one(python, label, workers, heavy, args.limit_mib << 20, args.timeout)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print()
    print(
        "| heavy of 20 | daisy | max_workers | OOM kills | guard stops | wall s | done | marked "
        "| run twice | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['heavy']} | {r['daisy']} | {r['max_workers']} | {r['kills']} | "
            f"{'-' if r['stops'] is None else r['stops']} | {r['wall']} | {r['done']}/{BLOCKS} | "
            f"{r['marked']} | {r['twice']} | {r['peak_mib']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
