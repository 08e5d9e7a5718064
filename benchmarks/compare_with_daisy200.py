"""Run ``benchmarks/test_core_bench.py``, ``test_runtime_bench.py``,
``test_tracking_bench.py``, ``test_graph_bench.py``, ``test_pipeline_bench.py``,
``test_planning_bench.py`` and ``test_real_pipelines_bench.py``
(which need funlib.persistence, zarr and scipy in both, and gunpowder
environments of their own: see that file) under this package and under the
published daisy 2.0.0, one after the other, and print a markdown table of
the median times.

Usage (from anywhere)::

    python benchmarks/compare_with_daisy200.py
    python benchmarks/compare_with_daisy200.py --ours /path/to/python --theirs /other/python
    python benchmarks/compare_with_daisy200.py --json-dir /tmp/bench -- -k "a_ or c_"

``--ours`` defaults to ``<repo>/.venv/bin/python`` (this package, installed
editable), ``--theirs`` to ``/work/venvs/daisy200/bin/python`` (a venv with
the daisy 2.0.0 wheel, pytest and pytest-benchmark). Arguments after ``--``
go to pytest.

Each interpreter runs ``python -m pytest <repo>/benchmarks/test_*_bench.py
--benchmark-only --benchmark-json=...`` with a temporary directory as its
working directory, ``-p no:cacheprovider`` and PYTHONDONTWRITEBYTECODE=1,
so nothing is written into the repository and the interpreter imports its
own installed ``daisy`` (never this repository's ``python/`` tree unless it
is installed there). The daisy each run imported is read back from the
benchmark JSON (recorded by ``benchmarks/conftest.py``) and printed; the
script stops if the "theirs" run imported daisy from inside this repository.

The runs are serial, never concurrent. The timings are wall clock on a
shared machine; other load shows up in them (the load average as each run
ended is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BENCH_FILES = [
    HERE / "test_core_bench.py",
    HERE / "test_runtime_bench.py",
    HERE / "test_tracking_bench.py",
    HERE / "test_graph_bench.py",
    HERE / "test_pipeline_bench.py",
    HERE / "test_planning_bench.py",
    HERE / "test_real_pipelines_bench.py",
]
DEFAULT_OURS = REPO / ".venv" / "bin" / "python"
DEFAULT_THEIRS = Path("/work/venvs/daisy200/bin/python")


def run_benchmarks(python: str, json_path: Path, pytest_args: list[str]) -> dict:
    """Run the benchmark file under ``python``; the parsed benchmark JSON."""
    cmd = [
        python,
        "-m",
        "pytest",
        *(str(f) for f in BENCH_FILES),
        "--benchmark-only",
        f"--benchmark-json={json_path}",
        "-p",
        "no:cacheprovider",
        "-q",
        *pytest_args,
    ]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    with tempfile.TemporaryDirectory(prefix="daisy-bench-cwd-") as cwd:
        print(f"$ (cd {cwd} && {' '.join(cmd)})", flush=True)
        result = subprocess.run(cmd, cwd=cwd, env=env)
    if result.returncode != 0:
        sys.exit(f"benchmark run failed under {python} (exit code {result.returncode})")
    return json.loads(json_path.read_text())


def medians(report: dict) -> dict[str, float]:
    return {b["name"]: b["stats"]["median"] for b in report["benchmarks"]}


def describe(label: str, report: dict) -> str:
    info = report["machine_info"]
    load = ", ".join(f"{x:.2f}" for x in info.get("loadavg", []))
    return (
        f"* {label}: daisy {info.get('daisy_version')} from {info.get('daisy_file')} "
        f"(Python {info.get('python_version')}; load average 1/5/15 min as the run ended {load})"
    )


def fmt(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", default=str(DEFAULT_OURS), help="python with this package")
    parser.add_argument("--theirs", default=str(DEFAULT_THEIRS), help="python with daisy 2.0.0")
    parser.add_argument("--json-dir", help="keep the two benchmark JSON files in this directory")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="daisy-bench-json-") as tmp:
        out_dir = Path(args.json_dir) if args.json_dir else Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        ours = run_benchmarks(args.ours, out_dir / "ours.json", args.pytest_args)
        theirs = run_benchmarks(args.theirs, out_dir / "daisy200.json", args.pytest_args)

    theirs_file = Path(theirs["machine_info"].get("daisy_file", "")).resolve()
    if theirs_file.is_relative_to(REPO):
        sys.exit(f"the --theirs run imported daisy from this repository ({theirs_file})")

    ours_t, theirs_t = medians(ours), medians(theirs)
    print()
    print(describe("ours", ours))
    print(describe("daisy 2.0.0", theirs))
    print()
    print("| benchmark | ours (median s) | daisy 2.0.0 (median s) | ratio (theirs/ours) |")
    print("|---|---:|---:|---:|")
    for name in list(ours_t) + [n for n in theirs_t if n not in ours_t]:
        a, b = ours_t.get(name), theirs_t.get(name)
        ratio = "–" if a is None or b is None else f"{b / a:.2f}"
        print(f"| {name} | {fmt(a)} | {fmt(b)} | {ratio} |")

    touched = ours_t.get("test_d_rois_touched_1e5")
    untouched = ours_t.get("test_d_rois_untouched_1e5")
    if touched is not None and untouched is not None:
        per_block_us = (touched - untouched) / 1e5 * 1e6
        print()
        print(f"ROI conversion (ours, d): {per_block_us:.2f} µs per block for read_roi + write_roi")


if __name__ == "__main__":
    main()
