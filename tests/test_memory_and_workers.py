"""Workers that fit the node (issue 53): the memory budget, the gate that lets blocks in by
their measured memory, the guard that stops a worker before the kernel's OOM killer would,
and ``max_workers="auto"``.

The runs that need a memory limit make one, as a SLURM job with ``--mem`` gets one: a fresh
v1 memory cgroup (``/sys/fs/cgroup/memory``) or v2 one (``/sys/fs/cgroup``) with a limit, a
child interpreter moved into it, and the kernel's own ``oom_kill`` count read afterwards.
They need root; elsewhere they skip, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import daisy

HERE = Path(__file__).resolve().parent
V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")


def region_block(block):  # type: ignore[no-untyped-def]
    """A block function whose memory varies by region, written as scientists write them:
    numpy imported on the first block, an array whose every page is touched, held for a
    moment. ``MEM_T_MIB`` maps block indices to MiB (``"5:700"``), ``MEM_T_LIGHT`` is the
    rest's; each start and each finish leaves a line in ``MEM_T_DIR``."""
    import numpy as np

    index = block.write_roi.begin[0] // block.write_roi.shape[0]
    where = Path(os.environ["MEM_T_DIR"])
    with open(where / f"start-{index:03d}", "a") as f:
        f.write(f"{os.getpid()}\n")
    sizes = dict(item.split(":") for item in os.environ.get("MEM_T_MIB", "").split(",") if item)
    mib = int(sizes.get(str(index), os.environ.get("MEM_T_LIGHT", "60")))
    held = np.ones(mib << 20, dtype=np.uint8)
    time.sleep(float(os.environ.get("MEM_T_SLEEP", "0.3")))
    del held
    with open(where / f"done-{index:03d}", "a") as f:
        f.write(f"{os.getpid()}\n")


CHILD = textwrap.dedent(
    """
    import json, sys
    import daisy
    import test_memory_and_workers as m

    blocks, workers = int(sys.argv[1]), sys.argv[2]
    task = daisy.Task(
        "region",
        total_roi=daisy.Roi((0,), (blocks,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=m.region_block,
        max_workers=workers if workers == "auto" else int(workers),
        max_retries=0,
        max_worker_restarts=0,
    )
    states = daisy.run_blockwise([task], progress=True, summary=False, return_states=True)
    state = states["region"]
    report = task.report()
    print("RESULT " + json.dumps({
        "completed": state.completed_count,
        "failed": state.failed_count,
        "orphaned": state.orphaned_count,
        "abandoned": bool(state.abandoned),
        "held_back": report.memory.held_back if report.memory else None,
        "source": report.memory.budget_source if report.memory else None,
        "restarts": state.worker_restart_count,
        "state_held_back": state.held_back_count,
        "failures": state.worker_failure_count,
        "causes": [m for m, _ in report.failure_causes.messages][:3],
        "notices": report.notices,
    }))
    """
)


@contextmanager
def memory_cgroup(limit_mib: int) -> Iterator[Path]:
    """A fresh memory cgroup limited to ``limit_mib`` (skips where none can be made)."""
    name = f"daisy-test-{os.getpid()}-{time.monotonic_ns()}"
    v2_controllers = V2_ROOT / "cgroup.controllers"
    if (V1_ROOT / "memory.limit_in_bytes").exists():
        path, limit_file = V1_ROOT / name, "memory.limit_in_bytes"
    elif v2_controllers.exists() and "memory" in v2_controllers.read_text():
        path, limit_file = V2_ROOT / name, "memory.max"
    else:
        pytest.skip("no memory cgroup hierarchy under /sys/fs/cgroup")
    try:
        path.mkdir()
    except PermissionError:
        pytest.skip(f"cannot make a memory cgroup under {path.parent} (not root)")
    try:
        (path / limit_file).write_text(str(limit_mib << 20))
        yield path
    finally:
        for _ in range(100):
            pids = (path / "cgroup.procs").read_text().split()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        path.rmdir()


def kernel_oom_kills(group: Path) -> int:
    """The cgroup's own count of the kernel's OOM kills."""
    name = "memory.oom_control" if (group / "memory.oom_control").exists() else "memory.events"
    for line in (group / name).read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def run_in_cgroup(
    tmp_path: Path, limit_mib: int, blocks: int, workers: str, env: dict[str, str]
) -> tuple[dict[str, Any], int, Path]:
    """Run ``blocks`` region blocks with ``workers`` in a fresh cgroup; the run's result,
    the kernel's OOM kills and the evidence directory."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    full_env = dict(os.environ)
    full_env.update(env)
    full_env["MEM_T_DIR"] = str(evidence)
    full_env["PYTHONPATH"] = os.pathsep.join([str(HERE), full_env.get("PYTHONPATH", "")])
    with memory_cgroup(limit_mib) as group:
        enter = lambda: (group / "cgroup.procs").write_text(str(os.getpid()))  # noqa: E731
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(blocks), workers],
            cwd=tmp_path,
            env=full_env,
            preexec_fn=enter,
            capture_output=True,
            text=True,
            timeout=300,
        )
        kills = kernel_oom_kills(group)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the run printed no result (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])
    result["progress"] = [line for line in proc.stderr.splitlines() if line.startswith("daisy: ")]
    return result, kills, evidence


def lines_of(evidence: Path, prefix: str) -> dict[int, int]:
    """How many lines each block's ``prefix`` file holds, by block index."""
    return {
        int(p.name.split("-")[1]): len(p.read_text().splitlines())
        for p in evidence.glob(f"{prefix}-*")
    }


def test_a_block_stopped_for_memory_is_held_back_not_retried_nor_a_restart(tmp_path):
    # 1 GiB for 4 workers of 200 MiB blocks, where block 6 grows to 700 MiB while the others
    # hold theirs: beside them and their interpreters it would pass the limit, so the guard
    # stops its worker
    # and holds it back. With max_retries=0 and max_worker_restarts=0, a stop counted as a
    # failed attempt would fail the block, and one counted as a worker death would abandon
    # the task.
    result, kills, evidence = run_in_cgroup(
        tmp_path,
        limit_mib=1024,
        blocks=12,
        workers="4",
        env={"MEM_T_MIB": "6:700", "MEM_T_LIGHT": "200", "MEM_T_SLEEP": "1.5"},
    )
    assert kills == 0, f"the kernel's OOM killer struck {kills} times: {result}"
    assert result["completed"] == 12 and result["failed"] == 0, result
    assert result["orphaned"] == 0 and not result["abandoned"], result
    assert result["restarts"] == 0 and result["failures"] == 0, result
    assert result["held_back"] >= 1, f"the guard never had to stop a worker: {result}"
    assert result["state_held_back"] == result["held_back"], result
    # the progress line's last word on the task names them
    last = [line for line in result["progress"] if "finished in" in line][-1]
    assert f", {result['held_back']} held back (memory)," in last, last
    assert result["source"].startswith("the memory cgroup limit"), result
    done = lines_of(evidence, "done")
    assert sorted(done) == list(range(12)), f"blocks never finished: {result}"
    assert all(n == 1 for n in done.values()), f"a block finished twice: {done}"
    starts = lines_of(evidence, "start")
    # every start of a block beyond its first was a hold-back, each counted by the report
    assert sum(starts.values()) - 12 == result["held_back"], (starts, result)


def test_a_block_too_big_for_the_budget_fails_once_with_its_figure(tmp_path):
    # block 2 alone needs 900 MiB of a 640 MiB limit: no count of workers makes it fit
    result, kills, evidence = run_in_cgroup(
        tmp_path,
        limit_mib=640,
        blocks=4,
        workers="2",
        env={"MEM_T_MIB": "2:900", "MEM_T_LIGHT": "40", "MEM_T_SLEEP": "0.2"},
    )
    assert kills == 0, f"the kernel's OOM killer struck {kills} times: {result}"
    assert result["completed"] == 3 and result["failed"] == 1, result
    assert not result["abandoned"], result
    cause = " ".join(result["causes"])
    assert "memory budget" in cause and "640 MiB" in cause, cause
    assert "smaller blocks" in cause, cause
    starts = lines_of(evidence, "start")
    assert 2 not in lines_of(evidence, "done")
    # it ran beside others at most once, and alone once: then it failed, for good
    assert starts[2] <= 2, starts


def test_auto_chooses_from_the_cores_and_the_budget_and_says_why(tmp_path):
    result, kills, _ = run_in_cgroup(
        tmp_path,
        limit_mib=1024,
        blocks=12,
        workers="auto",
        env={"MEM_T_LIGHT": "60", "MEM_T_SLEEP": "0.1"},
    )
    assert kills == 0 and result["completed"] == 12, result
    (chosen,) = [n for n in result["notices"] if n.startswith('max_workers="auto" chose')]
    cores = len(os.sched_getaffinity(0))
    expected = min(3 * cores, 1024 // 256)
    assert chosen.startswith(f'max_workers="auto" chose {expected} worker'), chosen
    assert "the memory cgroup limit" in chosen, chosen


def test_the_budget_declared_is_the_one_reported(tmp_path):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    os.environ["MEM_T_DIR"] = str(evidence)
    try:
        task = daisy.Task(
            "declared",
            total_roi=daisy.Roi((0,), (4,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=region_block,
            max_workers=2,
        )
        ok = daisy.run_blockwise([task], memory_budget=2 << 30, progress=False, summary=False)
    finally:
        del os.environ["MEM_T_DIR"]
    assert ok is True
    memory = task.report().memory
    assert memory is not None
    assert (memory.budget_bytes, memory.budget_source) == (2 << 30, "memory_budget")
    assert "2.0 GB from memory_budget" in memory.describe(), memory.describe()


def test_the_default_count_is_still_one_worker(tmp_path):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    os.environ.update({"MEM_T_DIR": str(evidence), "MEM_T_LIGHT": "1", "MEM_T_SLEEP": "0.05"})
    try:
        task = daisy.Task(
            "default_count",
            total_roi=daisy.Roi((0,), (6,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=region_block,
        )
        assert task.max_workers == 1
        assert daisy.run_blockwise([task], progress=False, summary=False) is True
    finally:
        for key in ("MEM_T_DIR", "MEM_T_LIGHT", "MEM_T_SLEEP"):
            del os.environ[key]
    pids = {line for p in evidence.glob("done-*") for line in p.read_text().split()}
    assert len(pids) == 1, f"blocks ran on {len(pids)} workers: {pids}"


@pytest.mark.parametrize(
    ("budget", "error", "words"),
    [
        (100, ValueError, ["memory_budget", "100 bytes", "3 * 2**30"]),
        (-1, ValueError, ["memory_budget", "-1"]),
        ("3G", TypeError, ["memory_budget", "'3G'", "3 * 2**30"]),
        (2.5e9, TypeError, ["memory_budget", "2500000000.0"]),
    ],
)
def test_a_bad_budget_names_the_figure_and_the_fix(budget, error, words):
    task = daisy.Task(
        "bad_budget",
        total_roi=daisy.Roi((0,), (2,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=region_block,
    )
    with pytest.raises(error) as caught:
        daisy.run_blockwise([task], memory_budget=budget, progress=False, summary=False)
    for word in words:
        assert word in str(caught.value), str(caught.value)


def test_max_workers_takes_a_count_or_auto_and_names_anything_else():
    roi = daisy.Roi((0,), (2,))
    unit = daisy.Roi((0,), (1,))
    assert daisy.Task("a", roi, unit, unit, region_block, max_workers="auto").max_workers == "auto"
    with pytest.raises(TypeError, match="max_workers: expected a count of workers or 'auto'"):
        daisy.Task("a", roi, unit, unit, region_block, max_workers="eight")
    with pytest.raises(ValueError, match="max_workers: must be at least 1, got 0"):
        daisy.Task("a", roi, unit, unit, region_block, max_workers=0)


def burn_cpu(block):  # type: ignore[no-untyped-def]
    """A CPU-bound block function: 0.2 s of the process's CPU time."""
    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass


CORE_WAIT_CHILD = textwrap.dedent(
    """
    import os, sys
    import daisy
    import test_memory_and_workers as m

    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:2]))
    task = daisy.Task(
        "burn",
        total_roi=daisy.Roi((0,), (36,)),
        read_roi=daisy.Roi((0,), (1,)),
        write_roi=daisy.Roi((0,), (1,)),
        process_function=m.burn_cpu,
        max_workers=int(sys.argv[1]),
        tracking_path="store",
        resource_tracking=True,
    )
    assert daisy.run_blockwise([task], progress=False, summary=False)
    print(task.report().render())
    """
)


@pytest.mark.parametrize(("workers", "waits"), [(6, True), (1, False)])
def test_cpu_bound_blocks_on_too_few_cores_are_told_waiting_for_a_core(tmp_path, workers, waits):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores to pin the run to")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", CORE_WAIT_CHILD, str(workers)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [line for line in proc.stdout.splitlines() if "cpu per block-second" in line]
    if waits:
        # six busy workers on two cores: about two thirds of each block on the run queue
        assert "waiting for a core:" in line, line
        share = int(line.split("per block (")[1].split("%")[0])
        assert 40 <= share <= 80, line
        assert "fewer max_workers" in line, line
    else:
        assert "(CPU-bound)" in line, line
    (memory,) = [line for line in proc.stdout.splitlines() if "peak memory per block" in line]
    assert " p50 " in memory and " p95 " in memory and " max " in memory, memory
