"""Run statistics (RUN_STATS.md): what every block cost, measured by
whoever ran it, written into the tracking store, summarised in the run
report (``task.report()``, ``runs.jsonl``) and printed as the Resource
Utilization panel.

Covered here: the spec's example run and its panel, the same populated
fields in every worker kind (serial, worker processes, worker functions),
what each figure measures (peak RSS per block, CPU, IO, GPU reserved),
``daisy.profile_block``, persistence across processes and runs, resumed,
interrupted and abandoned runs, enforcement, the store read back with
zarr-python, and the panel's rules and number formats.

Functions sent to worker processes are closures made inside the tests
(cloudpickle sends those by value) and use only the standard library and
daisy, so a worker never imports this module.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import line_task, read_records, roi

import daisy
from daisy._daisy import Client as NativeClient

MODES = pytest.mark.parametrize("mp", [False, True], ids=["serial", "processes"])
NO_WORKER = 2**32 - 1
MiB = 2**20
REPORT_KEYS = {"task_id", "started_at", "finished_at", "tracked", "blocks", "workers"}


# --------------------------------------------------------------------------
# helpers (test process only)


def recording(rec_dir: Path, body=None):
    """A block function that runs ``body(block)`` (if given) and then notes
    ``{id, pid, worker_id, kind}`` as a JSON line in ``<rec_dir>/<pid>.jsonl``;
    ``body`` may return a ``kind`` string describing what it did."""
    rec_dir = str(rec_dir)

    def process(block):
        kind = body(block) if body is not None else None
        raw = os.environ.get("DAISY_CONTEXT")
        worker_id = json.loads(raw).get("worker_id") if raw else None
        entry = {
            "id": block.block_id[1],
            "pid": os.getpid(),
            "worker_id": worker_id,
            "kind": kind,
        }
        with open(os.path.join(rec_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    return process


def fields(rec: daisy.BlockRecord | None) -> tuple | None:
    """A block record as plain values (BlockStats has no ``==``)."""
    if rec is None:
        return None
    s = rec.stats
    stats = None
    if s is not None:
        stats = (
            s.wall_seconds,
            s.cpu_seconds,
            s.peak_rss_bytes,
            s.io_read_bytes,
            s.io_write_bytes,
            s.gpu_mem_bytes,
        )
    return (
        rec.block_id,
        rec.done,
        rec.failures,
        rec.worker_id,
        rec.sent_at,
        rec.returned_at,
        stats,
    )


def sleeper(seconds: float):
    def process(block):
        time.sleep(seconds)

    return process


def run(tasks, mp: bool) -> bool:
    return daisy.run_blockwise(tasks, multiprocessing=mp, progress=False)


def runs_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def populated(blocks: daisy.BlockSummary) -> set[str]:
    """Names of the block Stats that hold samples."""
    names = ("round_trip", "wall", "cpu", "peak_rss", "io_read", "io_write", "overhead")
    return {n for n in names if getattr(blocks, n).n > 0}


def panel_of(out: str) -> str:
    assert "Resource Utilization" in out, out
    return out[out.index("Resource Utilization") :]


# --------------------------------------------------------------------------
# the spec's example


def started_together(barrier_dir: Path, workers: int, seconds: float):
    """A worker function that waits until ``workers`` workers have started
    (each leaves its id in ``barrier_dir``) before taking blocks, then
    sleeps ``seconds`` in each block: the spec example's condition that the
    workers start together, which makes the even split certain rather than
    typical (a worker that starts one block late loses a block to the
    others, as it should)."""
    barrier = str(barrier_dir)

    def worker():
        client = daisy.Client()
        Path(barrier, str(client.worker_id)).touch()
        deadline = time.monotonic() + 60
        while len(os.listdir(barrier)) < workers and time.monotonic() < deadline:
            time.sleep(0.001)
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                time.sleep(seconds)

    return worker


@pytest.mark.parametrize("kind", ["block_function", "started_together"])
def test_spec_example_twelve_sleeping_blocks_on_three_workers(kind, tracking, tmp_path, capsys):
    if kind == "block_function":
        process = sleeper(0.05)
    else:
        (tmp_path / "barrier").mkdir()
        process = started_together(tmp_path / "barrier", 3, 0.05)
    task = line_task(
        "seg",
        12,
        process_function=process,
        max_workers=3,
        read_write_conflict=False,
        resource_tracking=True,
    )
    assert run([task], True)
    out = capsys.readouterr().out

    # one counter: the report's blocks agree with the Execution Summary
    assert re.search(r"completed ✔: 12\b", out), out
    assert out.index("Execution Summary") < out.index("Resource Utilization")
    r = task.report()
    assert isinstance(r, daisy.TaskReport)
    assert r.task_id == "seg" and r.outcome == "completed" and r.tracked
    b = r.blocks
    assert b.count == 12 and b.skipped == 0 and b.failures == 0 and b.has_stats
    for name in ("round_trip", "wall", "cpu", "peak_rss", "io_read", "io_write", "overhead"):
        assert getattr(b, name).n == 12, name
    # what the figures mean, not how fast this machine is (that is
    # benchmarks/test_profiling_bench.py's): each wall is the block's 50 ms
    # sleep (the upper bound, 10 times that, only catches a wall that is not
    # the block's own), the overhead is the rest of the round trip, and a
    # sleep costs next to no CPU
    assert 0.05 <= b.wall.min <= b.wall.mean <= b.wall.max < 0.5, b.wall
    assert 0 <= b.wall.std <= b.wall.max - b.wall.min, b.wall
    assert abs(b.wall.total - 12 * b.wall.mean) < 1e-6
    assert b.round_trip.mean >= b.wall.mean and b.round_trip.min >= 0.05
    assert b.overhead.min > 0, b.overhead
    assert abs(b.overhead.mean - (b.round_trip.mean - b.wall.mean)) < 1e-9, b.overhead
    assert b.cpu.mean < b.wall.mean / 2, (b.cpu, b.wall)
    assert b.peak_rss.min > 0
    for rec in r.block_records():
        assert rec.done and rec.stats is not None
        assert rec.round_trip >= rec.stats.wall_seconds, rec

    w = r.workers
    assert w.count == 3 and w.unmanaged_clients == 0
    assert w.exits == {"clean": 3}
    assert sorted(w.by_id) == [0, 1, 2]
    per_worker = {i: r.worker(i).blocks for i in w.by_id}
    if kind == "started_together":
        assert per_worker == {0: 4, 1: 4, 2: 4}, per_worker
    else:
        # workers that start up to a block apart (three Python start-ups
        # sharing the CPUs) split the blocks first come, first served
        assert sum(per_worker.values()) == 12 and min(per_worker.values()) >= 1, per_worker
    assert sum(rec.blocks_ok for rec in w.by_id.values()) == 12
    for rec in w.by_id.values():
        assert rec.startup is not None and rec.startup > 0, rec
        assert rec.teardown is not None and rec.teardown >= 0, rec
        assert rec.exit == "clean" and rec.blocks_failed == 0
        assert rec.compute.n == rec.blocks_ok == rec.idle.n
    assert w.startup.n == 3 and w.teardown.n == 3
    assert w.idle.n == 12 and w.compute.n == 12

    panel = panel_of(out)
    lines = panel.splitlines()
    assert lines[1] == "--------------------"
    assert re.search(r"^  seg  12 blocks, 3 workers, [\d.]+ m?s wall$", panel, re.M), panel
    assert re.search(r"^    blocks   round trip [56]\d\.\d ms ± \d+\.\d ms$", panel, re.M), panel
    size = r"[\d.]+ (?:B|KB|MB|GB)"
    secs = r"[\d.]+ (?:µs|ms|s)"
    assert re.search(
        rf"^ +wall [56]\d\.\d ms ± \d\.\d ms   cpu {secs} ± {secs}   peak RSS {size} ± {size}$",
        panel,
        re.M,
    ), panel
    assert re.search(
        rf"^ +io read {size}  write {size}   overhead {secs} ± {secs}"
        r"   trend ∠ [+-]\d+\.\d{4} ms/block$",
        panel,
        re.M,
    ), panel
    assert re.search(
        rf"^    workers  startup {secs} ± {secs}   idle {secs} ± {secs}"
        rf"   teardown {secs} ± {secs}$",
        panel,
        re.M,
    ), panel
    assert re.search(r"^ +exits 3 clean$", panel, re.M), panel
    header = next(line for line in lines if line.strip().startswith("id "))
    assert re.split(r"\s{2,}", header.strip()) == [
        "id",
        "startup",
        "blocks",
        "idle",
        "idle / block",
        "compute",
        "compute / block",
        "teardown",
        "exit",
    ]
    rows = lines[lines.index(header) + 1 :]
    rows = [row for row in rows if row.strip()]
    assert len(rows) == 3, panel
    table = {}
    for row in rows:
        m = re.match(rf"^ +(\d+) +({secs}) +(\d+) +.*  clean$", row)
        assert m, row
        table[int(m.group(1))] = int(m.group(3))
    assert table == per_worker


# --------------------------------------------------------------------------
# every worker kind measures the same fields


def _io_body(scratch: str):
    def body(block):
        time.sleep(0.01)
        path = os.path.join(scratch, f"{block.block_id[1]}.bin")
        with open(path, "wb") as f:
            f.write(b"x" * 4096)
        with open(path, "rb") as f:
            f.read()

    return body


def _worker_function(body):
    def worker():
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                body(block)

    return worker


@pytest.mark.parametrize("kind", ["serial", "processes", "worker_function"])
def test_every_worker_kind_populates_the_same_fields(kind, tracking, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    body = _io_body(str(scratch))
    fn = _worker_function(body) if kind == "worker_function" else body
    task = line_task(
        "same",
        6,
        process_function=fn,
        max_workers=2,
        read_write_conflict=False,
        resource_tracking=True,
    )
    assert run([task], kind != "serial")
    r = task.report()
    b = r.blocks
    assert b.count == 6 and b.has_stats
    measured = {"wall", "cpu", "peak_rss", "io_read", "io_write"}
    timed = {"round_trip", "overhead"}
    if kind == "serial":
        assert populated(b) == measured
        assert r.workers.count == 0 and r.workers.by_id == {}
        assert not r.workers.startup and not r.workers.idle
    else:
        assert populated(b) == measured | timed
        assert r.workers.count >= 1
        assert sum(w.blocks_ok for w in r.workers.by_id.values()) == 6
    for name in measured:
        assert getattr(b, name).n == 6, name
    assert b.wall.min >= 0.01
    assert b.io_write.min >= 4096 and b.io_read.min >= 4096
    for rec in r.block_records():
        assert rec.stats is not None and rec.stats.wall_seconds >= 0.01
        assert rec.sent_at is not None and rec.returned_at is not None
        if kind == "serial":
            assert rec.worker_id is None
        else:
            assert rec.worker_id in r.workers.by_id


# --------------------------------------------------------------------------
# what the figures measure


def _resource_body(scratch: str):
    """By execution order in this process: a block touching 100 MiB, then
    a small one, then a CPU-bound one, then one writing 5 MiB to a file."""
    state = {"n": 0}

    def body(block):
        state["n"] += 1
        n = state["n"]
        if n == 1:
            big = b"\x01" * (100 * 2**20)
            assert big[-1] == 1
            del big
            return "memory"
        if n == 2:
            time.sleep(0.01)
            return "small"
        if n == 3:
            start = time.process_time()
            x = 0
            while time.process_time() - start < 0.2:
                x += 1
            return "cpu"
        if n == 4:
            path = os.path.join(scratch, "io.bin")
            with open(path, "wb") as f:
                f.write(b"y" * (5 * 2**20))
            with open(path, "rb") as f:
                assert len(f.read()) == 5 * 2**20
            return "io"
        return "other"

    return body


@MODES
def test_peak_rss_cpu_and_io_are_per_block(mp, tracking, tmp_path, rec_dir):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    task = line_task(
        "res",
        4,
        process_function=recording(rec_dir, _resource_body(str(scratch))),
        max_workers=1,
        resource_tracking=True,
    )
    assert run([task], mp)
    records = read_records(rec_dir)
    assert len({r["pid"] for r in records}) == 1, records  # one process ran them all
    by_kind = {r["kind"]: r["id"] for r in records}
    assert set(by_kind) == {"memory", "small", "cpu", "io"}
    report = task.report()
    stats = {k: report.block(sid).stats for k, sid in by_kind.items()}

    # peak RSS: the block's own peak, then reset for the next block
    assert stats["memory"].peak_rss_bytes >= 100 * MiB, stats
    assert stats["small"].peak_rss_bytes > 0
    # the small block's peak starts from the mark reset at its start: below the big
    # block's peak (by how much depends on what the allocator gave back to the OS)
    assert stats["small"].peak_rss_bytes < stats["memory"].peak_rss_bytes, stats
    # CPU: process-wide user + system time
    assert stats["cpu"].cpu_seconds >= 0.15, stats["cpu"]
    assert stats["small"].cpu_seconds < stats["cpu"].cpu_seconds / 2, stats  # it slept
    # IO: bytes through read/write syscalls
    assert stats["io"].io_write_bytes >= 5 * MiB, stats["io"]
    assert stats["io"].io_read_bytes >= 5 * MiB, stats["io"]
    assert stats["small"].io_write_bytes < MiB, stats["small"]
    # GPU: reserved, never a fake zero utilisation
    for s in stats.values():
        assert math.isnan(s.gpu_util_pct) and s.gpu_mem_bytes == 0, s
    assert report.blocks.peak_rss.max >= 100 * MiB
    assert report.blocks.cpu.max >= 0.15
    assert report.blocks.io_write.total >= 5 * MiB

    group = zarr.open_group(str(task.tracking_path), mode="r")
    assert np.isnan(group["gpu_util_pct"][...]).all()
    assert (group["gpu_mem_bytes"][...] == 0).all()


# --------------------------------------------------------------------------
# profile_block


def test_profile_block_on_a_bare_block_first_measurement_wins():
    block = daisy.Block(roi((0,), (10,)), roi((0,), (10,)), roi((0,), (10,)))
    assert block.stats is None
    with daisy.profile_block(block) as inside:
        time.sleep(0.05)
    assert inside.stats is not None
    first = block.stats
    assert isinstance(first, daisy.BlockStats)
    assert 0.05 <= first.wall_seconds < 0.5
    assert math.isnan(first.gpu_util_pct) and first.gpu_mem_bytes == 0
    with daisy.profile_block(block):
        time.sleep(0.01)
    assert block.stats.wall_seconds == first.wall_seconds  # not overwritten

    nested = daisy.Block(roi((0,), (10,)), roi((0,), (10,)), roi((0,), (10,)))
    with daisy.profile_block(nested):
        time.sleep(0.1)
        inner_start = time.perf_counter()
        with daisy.profile_block(nested):
            time.sleep(0.02)
        inner = time.perf_counter() - inner_start
    # the inner scope wins: its measurement fits in the inner scope's time,
    # which leaves out the outer scope's 0.1 s
    assert 0.02 <= nested.stats.wall_seconds <= inner, (nested.stats, inner)


def _io_in_forked_child(path: str, conn) -> None:
    block = daisy.Block(roi((0,), (10,)), roi((0,), (10,)), roi((0,), (10,)))
    with daisy.profile_block(block):
        with open(path, "wb") as f:
            f.write(b"x" * MiB)
    conn.send(block.stats.io_write_bytes)


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/io is Linux's")
def test_profile_block_in_a_forked_child_measures_the_child(tmp_path):
    """The profiler's /proc/self files are opened once per process; a child
    forked after the parent opened them must measure itself, not its
    parent (which writes nothing meanwhile)."""
    import multiprocessing

    parent_block = daisy.Block(roi((0,), (10,)), roi((0,), (10,)), roi((0,), (10,)))
    with daisy.profile_block(parent_block):  # the parent's files are open now
        pass
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_io_in_forked_child, args=(str(tmp_path / "out.bin"), send))
    child.start()
    assert receive.poll(30), "the forked child did not report"
    written = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert written >= MiB, written


def _narrowed(setup: float, inner: float):
    def process(block):
        time.sleep(setup)  # not measured
        with daisy.profile_block(block):
            time.sleep(inner)

    return process


@MODES
def test_profile_block_narrows_the_measured_region(mp, tracking):
    task = line_task(
        "narrow",
        2,
        process_function=_narrowed(0.2, 0.05),
        max_workers=2,
        read_write_conflict=False,
        resource_tracking=True,
    )
    assert run([task], mp)
    r = task.report()
    assert r.blocks.wall.n == 2
    # the 0.2 s setup is not measured: with it, a wall would be 0.25 s or more
    assert 0.05 <= r.blocks.wall.min and r.blocks.wall.max < 0.25, r.blocks.wall
    for rec in r.block_records():
        assert 0.05 <= rec.stats.wall_seconds < 0.25, rec
    if mp:
        # the server's round trip still sees the whole block
        assert r.blocks.round_trip.min >= 0.25, r.blocks.round_trip
        assert r.blocks.overhead.min >= 0.15, r.blocks.overhead


# --------------------------------------------------------------------------
# persistence: task.report() and runs.jsonl

READER = """
import json, sys
import daisy

tracking, logs = sys.argv[1], sys.argv[2]
daisy.set_tracking_basedir(None if tracking == "-" else tracking)
daisy.logging.set_log_basedir(None if logs == "-" else logs)
out = {}
for arg in sys.argv[3:]:
    task_id, _, store = arg.partition(":")
    task = daisy.Task(
        task_id, daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
        process_function=lambda b: None, tracking_path=False if store == "none" else None,
    )
    r = task.report()
    if r is None:
        out[task_id] = None
        continue
    entry = {"report": r.to_dict(), "blocks": {}}
    for i in range(4):
        rec = r.block((i,))
        if rec is not None:
            entry["blocks"][i] = [rec.done, rec.worker_id, rec.sent_at, rec.returned_at,
                                  None if rec.stats is None else rec.stats.wall_seconds]
    out[task_id] = entry
print(json.dumps(out))
"""


def read_in_new_process(tmp_path: Path, tracking, logs, *task_ids) -> dict:
    """``task.report()`` of each task in a new Python process, with the
    given tracking and log base directories (``"<id>:none"`` opts a task
    out of tracking)."""
    script = tmp_path / "reader.py"
    script.write_text(READER)
    args = [str(tracking) if tracking else "-", str(logs) if logs else "-", *task_ids]
    proc = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@MODES
def test_report_persists_across_processes(mp, tracking, tmp_path, log_dir):
    logs = log_dir
    tracked = line_task(
        "persist",
        4,
        process_function=sleeper(0.01),
        max_workers=2,
        read_write_conflict=False,
        resource_tracking=True,
    )
    untracked = line_task(
        "untracked", 4, process_function=sleeper(0.0), tracking_path=False, max_workers=2
    )
    assert tracked.report() is None and untracked.report() is None  # before any run
    assert run([tracked, untracked], mp)
    mine = tracked.report()
    assert mine.blocks.count == 4 and mine.blocks.wall.n == 4
    # the untracked task's line is next to its worker logs
    path = Path(logs).absolute() / "untracked" / "runs.jsonl"
    assert path.is_file()
    assert not (tracking / "untracked").exists()
    assert len(runs_lines(path)) == 1
    fresh = line_task("untracked", 4, tracking_path=False)
    assert fresh.report().to_dict() == untracked.report().to_dict()
    assert untracked.report().blocks.count == 4 and not untracked.report().tracked

    theirs = read_in_new_process(tmp_path, tracking, logs, "persist", "untracked:none")
    assert theirs["persist"]["report"] == mine.to_dict()
    assert theirs["untracked"]["report"] == untracked.report().to_dict()
    for i in range(4):
        rec = mine.block((i,))
        assert rec.done and rec.stats is not None
        assert theirs["persist"]["blocks"][str(i)] == [
            True,
            rec.worker_id,
            rec.sent_at,
            rec.returned_at,
            rec.stats.wall_seconds,
        ]
    assert theirs["untracked"]["blocks"] == {}  # no store: no block records


@MODES
def test_console_logging_without_a_store_keeps_the_report_in_memory(mp, tmp_path):
    daisy.logging.set_log_basedir(None)
    task = line_task("console", 4, max_workers=2)
    assert task.report() is None
    assert run([task], mp)
    r = task.report()
    assert r is not None and r.blocks.count == 4 and not r.tracked
    assert task.report() is r  # the in-memory copy
    assert line_task("console", 4).report() is None  # another Task object has none
    assert read_in_new_process(tmp_path, None, None, "console") == {"console": None}


def test_runs_jsonl_gets_one_line_per_run(tracking, log_dir):
    tracked = line_task("hist", 3, resource_tracking=True, max_workers=2)
    untracked = line_task("hist_untracked", 3, tracking_path=False)
    for mp in (True, False, True):
        assert run([tracked, untracked], mp)
    for path in (
        tracking / "hist" / "runs.jsonl",
        log_dir.absolute() / "hist_untracked" / "runs.jsonl",
    ):
        lines = path.read_text().splitlines()
        assert len(lines) == 3, path
        started = []
        for line in lines:
            d = json.loads(line)
            assert REPORT_KEYS <= set(d), d.keys()
            assert d["finished_at"] >= d["started_at"] > 0
            assert d["blocks"]["count"] == 3
            started.append(d["started_at"])
        assert started == sorted(started)
    hist = runs_lines(tracking / "hist" / "runs.jsonl")
    assert [d["tracked"] for d in hist] == [True, True, True]
    assert [d["blocks"]["skipped"] for d in hist] == [0, 3, 3]  # later runs resume


def test_the_run_report_and_the_runs_jsonl_line_are_the_same(tracking):
    task = line_task("same_json", 4, resource_tracking=True, max_workers=2)
    server = daisy.Server()
    server.run_blockwise([task], progress=False)
    assert isinstance(server.last_report, daisy.RunReport)
    assert list(server.last_report) == ["same_json"]
    line = runs_lines(tracking / "same_json" / "runs.jsonl")[-1]
    assert server.last_report["same_json"].to_dict() == line
    again = daisy.RunReport.from_json(server.last_report.to_json())
    assert again.to_dict() == server.last_report.to_dict()
    assert set(again.measured) == {"same_json"} and set(again.timed) == {"same_json"}
    # a report rebuilt from JSON has no task to read the store through
    with pytest.raises(RuntimeError, match="no task attached"):
        again["same_json"].block((0,))
    with pytest.raises(RuntimeError, match="no task attached"):
        again["same_json"].block_records()

    serial = daisy.SerialServer()
    serial.run_blockwise([line_task("serial_json", 2, resource_tracking=True)])
    r = serial.last_report["serial_json"]
    assert r.blocks.count == 2 and r.blocks.has_stats and r.workers.count == 0
    assert runs_lines(tracking / "serial_json" / "runs.jsonl")[-1] == r.to_dict()


def test_block_lookup_forms(tracking):
    task = line_task("lookup", 4, resource_tracking=True, max_workers=2)
    assert run([task], True)
    r = task.report()
    blocks = daisy.DependencyGraph([task]).blocks("lookup")
    for block in blocks:
        sid = block.block_id[1]
        cell = (int(block.write_roi.offset[0]) // 10,)
        by_block, by_cell, by_id = r.block(block), r.block(cell), r.block(sid)
        assert fields(by_block) == fields(by_cell) == fields(by_id)
        assert by_block.block_id == ("lookup", sid) and by_block.done
    assert r.block((7,)) is None  # outside the grid
    records = r.block_records()
    assert [rec.block_id[1] for rec in records] == sorted(b.block_id[1] for b in blocks)
    with pytest.raises(ValueError):
        r.block((0, 0))


# --------------------------------------------------------------------------
# resumed, interrupted and abandoned runs


@MODES
def test_a_resumed_run_reports_its_skips_and_keeps_the_first_stamps(mp, tracking):
    def make():
        return line_task(
            "resume",
            4,
            process_function=sleeper(0.01),
            max_workers=2,
            read_write_conflict=False,
            resource_tracking=True,
        )

    first_task = make()
    assert run([first_task], mp)
    first = {
        rec.block_id: (rec.sent_at, rec.returned_at, rec.worker_id, rec.stats.wall_seconds)
        for rec in first_task.report().block_records()
    }
    assert len(first) == 4
    task = make()
    assert run([task], mp)
    r = task.report()
    b = r.blocks
    assert b.skipped == 4 and b.count == 4
    for name in ("round_trip", "wall", "cpu", "peak_rss", "io_read", "io_write", "overhead"):
        assert getattr(b, name).n == 0, name
    again = {
        rec.block_id: (rec.sent_at, rec.returned_at, rec.worker_id, rec.stats.wall_seconds)
        for rec in r.block_records()
    }
    assert again == first
    assert r.block((0,)).sent_at == first[("resume", 0)][0]
    assert r.block((0,)).sent_at < r.started_at  # stamped by the first run
    lines = runs_lines(tracking / "resume" / "runs.jsonl")
    assert [d["blocks"]["skipped"] for d in lines] == [0, 4]


DRIVER = """
import json, os, sys, time
import daisy

base = sys.argv[1]
daisy.logging.set_log_basedir(os.path.join(base, "logs"))
daisy.set_tracking_basedir(os.path.join(base, "tracking"))
marks = os.path.join(base, "marks")


def process(block):
    time.sleep(0.1)
    open(os.path.join(marks, str(block.block_id[1])), "w").close()


task = daisy.Task(
    "sig", daisy.Roi((0,), (400,)), daisy.Roi((0,), (10,)), daisy.Roi((0,), (10,)),
    process_function=process, max_workers=2, read_write_conflict=False,
    resource_tracking=True,
)
try:
    daisy.run_blockwise([task], progress=False)
except KeyboardInterrupt as e:
    rr = getattr(e, "daisy_run_report", None)
    t = rr["sig"] if isinstance(rr, daisy.RunReport) else None
    print(json.dumps({
        "type": type(rr).__name__,
        "tasks": sorted(rr.tasks) if t else None,
        "count": t.blocks.count if t else None,
        "outcome": t.outcome if t else None,
    }))
    sys.exit(3)
print("finished")
"""


def test_sigint_to_a_driver_leaves_an_interrupted_report(tmp_path):
    (tmp_path / "marks").mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while len(list((tmp_path / "marks").iterdir())) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the driver made no progress"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, (out, err)
    said = json.loads(out.strip().splitlines()[-1])
    assert said["type"] == "RunReport" and said["tasks"] == ["sig"]
    assert said["outcome"] == "interrupted"
    assert 3 <= said["count"] < 40
    lines = runs_lines(tmp_path / "tracking" / "sig" / "runs.jsonl")
    assert len(lines) == 1
    assert lines[0]["outcome"] == "interrupted"
    assert lines[0]["blocks"]["count"] == said["count"]
    assert lines[0]["blocks"]["wall"]["n"] == said["count"]


class InterruptAfter:
    """A progress observer that raises KeyboardInterrupt (as Ctrl-C would)
    once ``n`` blocks of a task completed."""

    def __init__(self, n: int) -> None:
        self.n = n

    def update(self, task_id, state, workers):
        if state.completed_count >= self.n:
            raise KeyboardInterrupt

    def close(self):
        pass


def test_an_interrupted_run_attaches_its_report_to_the_exception(tracking):
    task = line_task(
        "intr",
        30,
        process_function=sleeper(0.05),
        max_workers=1,
        resource_tracking=True,
    )
    server = daisy.Server()
    with pytest.raises(KeyboardInterrupt) as e:
        server.run_blockwise([task], progress=InterruptAfter(2))
    rr = e.value.daisy_run_report
    assert isinstance(rr, daisy.RunReport)
    assert rr is server.last_report
    t = rr.tasks["intr"]
    assert t.outcome == "interrupted"
    assert 2 <= t.blocks.count < 30
    assert t.blocks.wall.n == t.blocks.count
    assert t.workers.exits == {"interrupted": 1}
    line = runs_lines(tracking / "intr" / "runs.jsonl")[-1]
    assert line["outcome"] == "interrupted"
    assert line == t.to_dict()
    assert task.report().outcome == "interrupted"
    assert task.report().blocks.count == t.blocks.count


def _interrupt_third_call():
    calls = {"n": 0}

    def process(block):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # what Ctrl-C raises inside a serial block

    return process


def test_ctrl_c_in_a_serial_run_attaches_its_report_to_the_exception(tracking):
    task = line_task(
        "serial_intr", 5, process_function=_interrupt_third_call(), resource_tracking=True
    )
    server = daisy.SerialServer()
    with pytest.raises(KeyboardInterrupt) as e:
        server.run_blockwise([task])
    # the partial report is kept and appended...
    assert server.last_report is not None
    assert server.last_report["serial_intr"].blocks.count == 2
    assert runs_lines(tracking / "serial_intr" / "runs.jsonl")[-1]["blocks"]["count"] == 2
    # ...and, as for a distributed run, rides on the interrupting exception
    rr = getattr(e.value, "daisy_run_report", None)
    assert isinstance(rr, daisy.RunReport), "KeyboardInterrupt has no daisy_run_report"
    assert rr["serial_intr"].blocks.count == 2


def test_ctrl_c_in_a_serial_run_is_reported_as_interrupted(tracking):
    task = line_task(
        "serial_outcome", 5, process_function=_interrupt_third_call(), resource_tracking=True
    )
    with pytest.raises(KeyboardInterrupt):
        daisy.SerialServer().run_blockwise([task])
    line = runs_lines(tracking / "serial_outcome" / "runs.jsonl")[-1]
    assert line["blocks"]["count"] == 2
    assert line["outcome"] == "interrupted", line["outcome"]
    assert task.report().outcome == "interrupted"


def _crash(block):
    os._exit(1)


def test_an_abandoned_run_is_reported_as_abandoned(tracking):
    task = line_task(
        "aband",
        4,
        process_function=_crash,
        max_workers=1,
        max_worker_restarts=1,
        resource_tracking=True,
    )
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    assert states["aband"].completed_count == 0
    assert [tid for tid, _ in server.abandoned] == ["aband"]
    line = runs_lines(tracking / "aband" / "runs.jsonl")[-1]
    assert line["outcome"] == "abandoned"
    r = task.report()
    assert r.outcome == "abandoned" and r.blocks.count == 0
    assert r.workers.count == 2  # the first worker and its one replacement
    assert r.workers.exits == {"error": 2}
    assert all(w.teardown is None for w in r.workers.by_id.values())


# --------------------------------------------------------------------------
# enforcement


@MODES
def test_resource_tracking_without_a_store_is_refused_at_run_start(mp, rec_dir):
    task = line_task("nostore", 3, process_function=recording(rec_dir), resource_tracking=True)
    with pytest.raises(ValueError, match="tracking_path"):
        run([task], mp)
    assert read_records(rec_dir) == []  # nothing ran
    assert task.report() is None


def hand_written_client(profile_seconds: float | None = None):
    """A worker function that speaks the protocol through a client that
    does not measure, as a hand-written one would not; with
    ``profile_seconds`` it measures each block itself, with
    ``daisy.profile_block`` around a sleep of that length."""

    def worker():
        ctx = daisy.Context.from_env()
        client = NativeClient(
            ctx["hostname"],
            int(ctx["port"]),
            ctx["token"],
            ctx["task_id"],
            ctx["worker_id"],
            measure=False,
        )
        while (block := client.acquire_block()) is not None:
            if profile_seconds is not None:
                with daisy.profile_block(block):
                    time.sleep(profile_seconds)
            client.release_block(block)

    return worker


def test_an_unmeasured_block_from_a_worker_function_fails_the_run(tracking):
    task = line_task(
        "unmeasured", 4, process_function=hand_written_client(), resource_tracking=True
    )
    with pytest.raises(RuntimeError, match=r"daisy\.profile_block") as e:
        run([task], True)
    assert "resource_tracking" in str(e.value)
    assert isinstance(e.value.daisy_run_report, daisy.RunReport)


def test_an_unmeasured_block_from_an_external_client_fails_the_run(tracking):
    outcome: dict = {}
    threads: list[threading.Thread] = []

    def connect(context):
        def go():
            try:
                client = NativeClient(
                    context.hostname, context.port, context.token, context.task_id, measure=False
                )
                block = client.acquire_block()
                outcome["block"] = block
                if block is not None:
                    client.release_block(block)
            except Exception as exc:  # the server may close first
                outcome["error"] = exc

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        threads.append(thread)

    def idle_worker():
        time.sleep(30)  # never connects: the external client gets the blocks

    task = line_task(
        "external",
        3,
        process_function=idle_worker,
        init_callback_fn=connect,
        resource_tracking=True,
    )
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"daisy\.profile_block"):
        run([task], True)
    assert time.monotonic() - start < 20  # the idle worker was not waited for
    for thread in threads:
        thread.join(timeout=10)
    assert outcome.get("block") is not None, outcome


def test_a_hand_written_client_that_uses_profile_block_is_accepted(tracking):
    task = line_task(
        "handmade", 3, process_function=hand_written_client(0.02), resource_tracking=True
    )
    assert run([task], True)
    r = task.report()
    assert r.blocks.count == 3 and r.blocks.wall.n == 3
    assert r.blocks.wall.min >= 0.02


# --------------------------------------------------------------------------
# the store, read back with zarr-python


@MODES
def test_every_stats_array_reads_back_with_zarr(mp, tmp_path, rec_dir):
    path = tmp_path / "store"
    mask = np.zeros((3, 4), dtype=bool)
    mask[0, 1] = mask[2, 3] = True  # skipped: never executed
    task = daisy.Task(
        "zarr2d",
        roi((0, 0), (30, 40)),
        roi((0, 0), (10, 10)),
        roi((0, 0), (10, 10)),
        process_function=recording(rec_dir),
        read_write_conflict=False,
        max_workers=2,
        tracking_path=path,
        skip_mask=mask,
        resource_tracking=True,
    )
    assert task.block_grid_shape == (3, 4)
    assert run([task], mp)
    report = task.report()
    records = read_records(rec_dir)
    assert len(records) == 10

    g = zarr.open_group(str(path), mode="r")
    expected = {
        "done": np.uint8,
        "failures": np.uint32,
        "wall_seconds": np.float32,
        "cpu_seconds": np.float32,
        "peak_rss_bytes": np.uint64,
        "io_read_bytes": np.uint64,
        "io_write_bytes": np.uint64,
        "gpu_util_pct": np.float32,
        "gpu_mem_bytes": np.uint64,
        "worker_id": np.uint32,
        "sent_at": np.float64,
        "returned_at": np.float64,
    }
    a = {}
    for name, dtype in expected.items():
        arr = g[name]
        assert arr.dtype == dtype, name
        assert arr.shape == (3, 4), name
        a[name] = arr[...]
    done = a["done"] == 1
    np.testing.assert_array_equal(done, ~mask)
    assert (a["failures"] == 0).all()
    assert np.isnan(a["gpu_util_pct"]).all()
    assert (a["gpu_mem_bytes"] == 0).all()
    assert (a["wall_seconds"][done] >= 0).all() and (a["cpu_seconds"][done] >= 0).all()
    assert (a["peak_rss_bytes"][done] > 0).all()
    assert (a["io_write_bytes"][done] > 0).all()  # each block wrote its record line
    for name in ("wall_seconds", "cpu_seconds", "sent_at", "returned_at"):
        assert np.isnan(a[name][~done]).all(), name
    assert (a["worker_id"][~done] == NO_WORKER).all()
    sent, returned = a["sent_at"][done], a["returned_at"][done]
    assert np.isfinite(sent).all() and np.isfinite(returned).all()
    assert (sent <= returned).all()
    assert (sent >= report.started_at - 1).all() and (returned <= report.finished_at + 1).all()
    if mp:
        assert set(np.unique(a["worker_id"][done])) <= set(report.workers.by_id)
        # the ids on disk are those of the workers that ran each block
        by_sid = {r["id"]: r["worker_id"] for r in records}
        for rec in report.block_records():
            assert rec.worker_id == by_sid[rec.block_id[1]]
    else:
        assert (a["worker_id"] == NO_WORKER).all()
    assert report.blocks.skipped == 2 and report.blocks.count == 12
    assert report.blocks.wall.n == 10


# --------------------------------------------------------------------------
# the panel's rules and formats


def test_no_panel_for_a_serial_run_without_resource_tracking(capsys):
    assert run([line_task("plain", 3)], False)
    out = capsys.readouterr().out
    assert "Execution Summary" in out
    assert "Resource Utilization" not in out


def test_serial_run_with_resource_tracking_shows_measurements_but_no_workers(tracking, capsys):
    assert run(
        [line_task("serial_rt", 3, process_function=sleeper(0.01), resource_tracking=True)], False
    )
    panel = panel_of(capsys.readouterr().out)
    assert re.search(r"^  serial_rt  3 blocks, [\d.]+ m?s wall$", panel, re.M), panel
    assert re.search(r"^    blocks   wall \d", panel, re.M), panel
    assert "peak RSS" in panel and "io read" in panel
    assert "round trip" not in panel and "overhead" not in panel
    assert "workers" not in panel


def test_distributed_run_without_resource_tracking_shows_round_trip_and_workers(capsys):
    assert run([line_task("plain_mp", 4, process_function=sleeper(0.01), max_workers=2)], True)
    panel = panel_of(capsys.readouterr().out)
    assert "round trip" in panel
    assert re.search(r"^    workers  startup ", panel, re.M), panel
    assert re.search(r"^ +exits \d+ clean$", panel, re.M), panel
    assert not re.search(r"^ +wall ", panel, re.M), panel
    for absent in ("cpu", "peak RSS", "io read", "overhead", "trend"):
        assert absent not in panel, absent


def _worker_dict(i: int) -> dict:
    return {
        "worker_id": i,
        "startup": 0.06 + i * 1e-3,
        "blocks_ok": 2,
        "blocks_failed": 0,
        "idle": {"n": 2, "mean": 1e-5, "std": 0.0, "min": 1e-5, "max": 1e-5, "sum": 2e-5},
        "compute": {"n": 2, "mean": 0.05, "std": 0.0, "min": 0.05, "max": 0.05, "sum": 0.1},
        "final_wait": 0.001,
        "teardown": 0.02,
        "exit": "clean",
    }


def test_the_worker_table_stops_at_ten_rows_and_points_at_the_report():
    stat = {"n": 12, "mean": 0.06, "std": 0.001, "min": 0.05, "max": 0.07, "sum": 0.72}
    t = daisy.TaskReport.from_dict(
        {
            "task_id": "wide",
            "started_at": 100.0,
            "finished_at": 101.5,
            "tracked": False,
            "blocks": {"count": 24, "round_trip": stat},
            "workers": {
                "count": 12,
                "startup": stat,
                "idle": stat,
                "compute": stat,
                "teardown": stat,
                "exits": {"clean": 12},
                "by_id": [_worker_dict(i) for i in range(12)],
            },
        }
    )
    assert t.workers.count == 12 and len(t.workers.by_id) == 12
    text = t.render()
    lines = text.splitlines()
    assert lines[0] == "  wide  24 blocks, 12 workers, 1.50 s wall"
    rows = [line for line in lines if re.match(r"^ +\d+ +[\d.]+ ms +2 ", line)]
    assert [int(r.split()[0]) for r in rows] == list(range(10))
    assert lines[-1].strip() == '… +2 more; see report.tasks["wide"].workers.by_id'
    rr = daisy.RunReport({"wide": t})
    panel = rr.render()
    assert panel.splitlines()[1:3] == ["Resource Utilization", "--------------------"]
    assert 'report.tasks["wide"].workers.by_id' in panel
    assert len(t.render(max_workers=12).splitlines()) == len(lines) + 1  # 12 rows, no pointer
    assert "more; see" not in t.render(max_workers=12)


def test_stat_formats():
    assert daisy.Stat().format() == "—"
    assert str(daisy.Stat()) == "—" and not daisy.Stat()
    assert daisy.Stat().format("B") == "—"
    assert daisy.Stat(n=3, mean=1.234, std=0.5).format() == "1.23 s ± 0.50 s"
    assert daisy.Stat(n=3, mean=12.0, std=1.0).format() == "12.00 s ± 1.00 s"
    assert daisy.Stat(n=12, mean=0.0505, std=0.0001).format() == "50.5 ms ± 0.1 ms"
    assert daisy.Stat(n=12, mean=60.1e-6, std=13.6e-6).format() == "60.1 µs ± 13.6 µs"
    assert daisy.Stat(n=1, mean=0.001, std=0.0).format() == "1.0 ms ± 0.0 ms"
    assert str(daisy.Stat(n=2, mean=0.25, std=0.01)) == "250.0 ms ± 10.0 ms"
    assert daisy.Stat(n=12, mean=25.5 * MiB, std=0.0).format("B") == "25.5 MB ± 0.0 B"
    assert daisy.Stat(n=2, mean=1126.0, std=512.0).format("B") == "1.1 KB ± 512.0 B"
    assert daisy.Stat(n=2, mean=3 * 2**30, std=MiB).format("B") == "3.0 GB ± 1.0 MB"
    assert daisy.Stat(n=1, mean=1023.0).format("B") == "1023.0 B ± 0.0 B"
    s = daisy.Stat.from_dict({"n": 2, "mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0, "sum": 2.0})
    assert s.total == 2.0 and s.to_dict()["sum"] == 2.0
    assert daisy.Stat.from_dict(None) == daisy.Stat()


def test_the_panel_shows_a_trend_only_over_enough_blocks(tmp_path):
    """Issue 41: a slope fitted to 7 blocks ("trend ∠ -726 ms/block") is
    noise read as a finding. The core says when a trend means something
    (`trend_shown`: 10 measured blocks or more; the specification's own
    example has 12) and the panel shows it only then."""
    import daisy

    def run(n):
        task = daisy.Task(
            f"trend{n}",
            total_roi=daisy.Roi((0,), (n,)),
            read_roi=daisy.Roi((0,), (1,)),
            write_roi=daisy.Roi((0,), (1,)),
            process_function=lambda b: None,
            resource_tracking=True,
            tracking_path=tmp_path / f"trend{n}",
        )
        assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
        return daisy.last_report()[f"trend{n}"]

    few, many = run(7), run(40)
    assert few.blocks.has_stats and not few.blocks.trend_shown
    assert "trend ∠" not in few.render()
    assert many.blocks.trend_shown
    assert "trend ∠" in many.render()
