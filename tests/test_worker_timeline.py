"""The worker timeline (RUN_STATS.md, "The worker timeline"): startup,
idle, compute, final wait and teardown of every worker, stamped by the
server; how workers ended; unmanaged clients; and the per-block
``worker_id`` / ``sent_at`` / ``returned_at`` stamps in the tracking store
that let a run's Gantt chart be rebuilt from the store alone.

Functions sent to worker processes are closures made inside the tests
(cloudpickle sends those by value) and use only the standard library and
daisy, so a worker never imports this module.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import zarr
from conftest import line_task, read_records

import daisy

NO_WORKER = 2**32 - 1


def run(tasks, mp: bool = True) -> bool:
    return daisy.run_blockwise(tasks, multiprocessing=mp, progress=False)


def recording(rec_dir: Path, sleep: float = 0.0):
    """A block function that sleeps, then notes ``{id, pid, worker_id}``
    (the worker id from ``daisy.Context.from_env()``) in
    ``<rec_dir>/<pid>.jsonl``."""
    rec_dir = str(rec_dir)

    def process(block):
        if sleep:
            time.sleep(sleep)
        entry = {
            "id": block.block_id[1],
            "pid": os.getpid(),
            "worker_id": daisy.Context.from_env()["worker_id"],
        }
        with open(os.path.join(rec_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    return process


def first_attempt(marker: Path, spatial_id: int, action: str):
    """A block function that, on the first attempt at block
    ``spatial_id`` only, sleeps 60 s (``"hang"``), exits the process
    (``"crash"``) or raises (``"raise"``); every other call returns."""
    marker = str(marker)

    def process(block):
        if block.block_id[1] != spatial_id or os.path.exists(marker):
            return
        open(marker, "w").close()
        if action == "hang":
            time.sleep(60)
        elif action == "crash":
            os._exit(3)
        else:
            raise RuntimeError("first attempt fails")

    return process


# --------------------------------------------------------------------------
# the phases


def test_startup_runs_from_spawn_to_the_first_acquire():
    def slow_start():
        time.sleep(0.3)  # e.g. imports, a queue wait: before the first acquire
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break

    task = line_task("slow_start", 2, process_function=slow_start, max_workers=1)
    assert run([task])
    r = task.report()
    assert r.workers.count == 1
    w = r.worker(0)
    assert w.startup is not None and w.startup >= 0.3, w
    assert r.workers.startup.n == 1 and r.workers.startup.min >= 0.3
    assert w.blocks_ok == 2 and w.exit == "clean"


def test_idle_is_the_gap_before_each_block():
    n_blocks = 4

    def pausing_worker():
        client = daisy.Client()
        done = 0
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                done += 1
            if done < n_blocks:
                time.sleep(0.1)  # a gap before the next block

    task = line_task("pauses", n_blocks, process_function=pausing_worker, max_workers=1)
    assert run([task])
    r = task.report()
    w = r.worker(0)
    assert w.blocks_ok == n_blocks and w.exit == "clean"
    # one idle sample per block: ~0 before the first (sent right after the
    # first acquire), >= 0.1 s before each later one
    assert w.idle.n == n_blocks
    assert w.idle.min < 0.1, w.idle
    assert w.idle.total >= 0.1 * (n_blocks - 1), w.idle
    assert w.idle.mean >= 0.1 * (n_blocks - 1) / n_blocks, w.idle
    assert r.workers.idle.n == n_blocks
    assert abs(r.workers.idle.total - w.idle.total) < 1e-9
    assert w.teardown is not None and w.teardown >= 0


def test_final_wait_is_kept_out_of_idle():
    def process(block):
        if block.block_id[1] == 0:
            time.sleep(0.6)

    # one worker runs the long block; the other ends up waiting for blocks
    # that never come until the long one returns: its final wait
    task = line_task(
        "final_wait",
        2,
        process_function=process,
        max_workers=2,
        read_write_conflict=False,
    )
    assert run([task])
    r = task.report()
    assert r.workers.count == 2, r.workers
    waits = [w.final_wait or 0.0 for w in r.workers.by_id.values()]
    assert max(waits) >= 0.4, r.workers.by_id
    assert r.workers.idle.max < 0.3, r.workers.idle
    for w in r.workers.by_id.values():
        assert w.idle.max < 0.3 and w.exit == "clean", w


def test_compute_is_the_round_trip_of_each_block(tracking, rec_dir):
    task = line_task(
        "compute",
        3,
        process_function=recording(rec_dir, sleep=0.05),
        max_workers=1,
        resource_tracking=True,
    )
    assert run([task])
    r = task.report()
    w = r.worker(0)
    assert w.compute.n == 3 and w.compute.min >= 0.05
    assert r.workers.compute.n == 3
    assert abs(r.workers.compute.total - r.blocks.round_trip.total) < 1e-6
    # compute (server round trip) includes the block's own wall time
    assert w.compute.total >= r.blocks.wall.total


def test_a_failed_block_counts_in_blocks_failed_and_compute(tracking, tmp_path, capsys):
    def fail_slowly(block):
        if block.block_id[1] == 0:
            time.sleep(0.2)
            raise RuntimeError("this block fails")

    task = line_task(
        "fails",
        4,
        process_function=fail_slowly,
        max_workers=1,
        max_retries=0,
        resource_tracking=True,
    )
    assert not run([task])
    r = task.report()
    assert r.outcome == "failed"
    w = r.worker(0)
    assert (w.blocks_ok, w.blocks_failed, w.blocks) == (3, 1, 4)
    assert w.compute.n == 4 and w.compute.max >= 0.2
    assert r.workers.compute.n == 4
    # ...but it stays out of the block-level figures and the trend
    b = r.blocks
    assert b.count == 3 and b.failures == 1
    assert b.round_trip.n == 3 and b.round_trip.max < 0.2, b.round_trip
    assert b.wall.n == 3 and b.wall.max < 0.2
    panel = capsys.readouterr().out
    assert "1 failed attempt(s)" in panel
    row = next(line for line in panel.splitlines() if re.match(r"^ +0 +[\d.]+ [mµ]?s +4 ", line))
    assert row.endswith("clean")


# --------------------------------------------------------------------------
# how workers end


def test_a_timed_out_worker_exits_timeout_without_teardown(tmp_path):
    task = line_task(
        "times_out",
        3,
        process_function=first_attempt(tmp_path / "hung", 0, "hang"),
        max_workers=1,
        timeout=0.5,
        max_retries=1,
    )
    start = time.monotonic()
    assert run([task])
    # the hung worker was killed, not waited for: well before its 60 s sleep ends
    assert time.monotonic() - start < 30
    r = task.report()
    assert r.blocks.count == 3 and r.blocks.failures == 1
    assert r.workers.exits == {"timeout": 1, "clean": 1}
    timed_out = [w for w in r.workers.by_id.values() if w.exit == "timeout"]
    assert len(timed_out) == 1
    assert timed_out[0].teardown is None and timed_out[0].blocks_ok == 0
    clean = [w for w in r.workers.by_id.values() if w.exit == "clean"]
    assert clean[0].teardown is not None and clean[0].blocks_ok == 3
    assert r.workers.teardown.n == 1


def test_a_block_reclaimed_by_the_timeout_counts_in_its_workers_figures(tmp_path):
    """A timed-out block is a failed block of the worker that held it, as a
    failure the worker reports is: in its blocks_failed, its round trip in
    its compute."""
    task = line_task(
        "reclaimed",
        3,
        process_function=first_attempt(tmp_path / "hung", 0, "hang"),
        max_workers=1,
        timeout=0.5,
        max_retries=1,
    )
    assert run([task])
    timed_out = [w for w in task.report().workers.by_id.values() if w.exit == "timeout"]
    assert len(timed_out) == 1
    assert timed_out[0].blocks_failed == 1
    assert timed_out[0].compute.n == 1 and timed_out[0].compute.total >= 0.5


def test_a_run_in_which_nothing_failed_shows_only_clean_exits():
    """Short runs end before every worker has started; a worker the run no
    longer needed is stopped, not counted as a crash."""
    exits: Counter[str] = Counter()
    for i in range(20):

        def short(block):
            time.sleep(0.003)

        task = line_task(f"short{i}", 6, process_function=short, max_workers=3)
        assert run([task])
        report = task.report()
        assert report is not None
        exits.update(report.workers.exits)
    assert set(exits) == {"clean"}, exits


def test_a_crashed_worker_exits_error_without_teardown(tmp_path):
    task = line_task(
        "crashes",
        3,
        process_function=first_attempt(tmp_path / "crashed", 0, "crash"),
        max_workers=1,
        max_retries=1,
    )
    assert run([task])
    r = task.report()
    assert r.blocks.count == 3 and r.blocks.failures == 1
    assert r.workers.exits == {"error": 1, "clean": 1}
    crashed = next(w for w in r.workers.by_id.values() if w.exit == "error")
    assert crashed.startup is not None  # it did connect
    assert crashed.teardown is None and crashed.final_wait is None
    assert crashed.blocks_ok == 0
    assert r.workers.startup.n == 2 and r.workers.teardown.n == 1


def test_a_raising_block_does_not_end_its_worker(tmp_path):
    task = line_task(
        "raises",
        3,
        process_function=first_attempt(tmp_path / "raised", 1, "raise"),
        max_workers=1,
        max_retries=1,
    )
    assert run([task])
    r = task.report()
    assert r.workers.count == 1 and r.workers.exits == {"clean": 1}
    w = r.worker(0)
    assert (w.blocks_ok, w.blocks_failed) == (3, 1)
    assert r.blocks.count == 3 and r.blocks.failures == 1


# --------------------------------------------------------------------------
# who is counted


def test_unmanaged_clients_are_counted_not_timed(tracking, capsys):
    taken: list[int] = []
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def external(context):
        ctx = daisy.Context(
            hostname=context.hostname,
            port=context.port,
            task_id=context.task_id,
            token=context.token,
        )

        def go():
            try:
                client = daisy.Client(ctx)
                while True:
                    with client.acquire_block() as block:
                        if block is None:
                            break
                        time.sleep(0.05)
                        taken.append(block.block_id[1])
                client.close()
            except ConnectionError as e:  # the run may end first
                errors.append(e)

        thread = threading.Thread(target=go, daemon=True)
        thread.start()
        threads.append(thread)

    def managed(block):
        time.sleep(0.05)

    task = line_task(
        "mixed",
        8,
        process_function=managed,
        init_callback_fn=external,
        max_workers=1,
        read_write_conflict=False,
        resource_tracking=True,
    )
    assert run([task])
    for thread in threads:
        thread.join(timeout=10)
    assert taken, f"the external client got no block ({errors})"
    r = task.report()
    assert r.workers.unmanaged_clients == 1
    assert r.blocks.count == 8 and r.blocks.wall.n == 8
    assert r.workers.count == 1  # only daisy's own worker is timed
    managed_blocks = sum(w.blocks_ok for w in r.workers.by_id.values())
    assert managed_blocks + len(taken) == 8
    assert r.workers.compute.n == managed_blocks
    for sid in taken:
        rec = r.block(sid)
        assert rec.done and rec.worker_id is None and rec.stats is not None
    out = capsys.readouterr().out
    assert "(+ 1 unmanaged client(s))" in out


def test_a_panel_for_unmanaged_clients_only():
    t = daisy.TaskReport.from_dict(
        {"task_id": "ext", "blocks": {"count": 2}, "workers": {"unmanaged_clients": 2}}
    )
    assert t.workers.count == 0 and t.workers.unmanaged_clients == 2
    assert "    workers  2 unmanaged client(s)" in t.render().splitlines()
    assert set(daisy.RunReport({"ext": t}).timed) == {"ext"}


def test_serial_runs_have_no_workers(tracking, capsys):
    task = line_task("serial", 3, resource_tracking=True)
    assert run([task], mp=False)
    r = task.report()
    w = r.workers
    assert w.count == 0 and w.unmanaged_clients == 0
    assert w.by_id == {} and w.exits == {}
    for stat in (w.startup, w.idle, w.compute, w.teardown):
        assert stat.n == 0
    assert all(rec.worker_id is None for rec in r.block_records())
    assert "workers" not in capsys.readouterr().out.split("Resource Utilization")[1]


def test_each_task_reports_only_its_own_workers():
    a = line_task("A", 6, process_function=lambda b: time.sleep(0.02), max_workers=2)
    b = line_task(
        "B",
        6,
        process_function=lambda b: time.sleep(0.02),
        max_workers=1,
        upstream_tasks=[a],
    )
    server = daisy.Server()
    server.run_blockwise([a, b], progress=False)
    ra, rb = server.last_report["A"], server.last_report["B"]
    assert 1 <= ra.workers.count <= 2 and rb.workers.count == 1
    assert not set(ra.workers.by_id) & set(rb.workers.by_id)
    assert sum(w.blocks_ok for w in ra.workers.by_id.values()) == 6
    assert sum(w.blocks_ok for w in rb.workers.by_id.values()) == 6


def test_worker_ids_restart_at_zero_every_run():
    task = line_task("again", 2, max_workers=1)
    for _ in range(2):
        assert run([task])
        assert sorted(task.report().workers.by_id) == [0]


# --------------------------------------------------------------------------
# the stamps on disk


def test_worker_id_on_disk_is_the_worker_that_ran_the_block(tracking, rec_dir):
    task = line_task(
        "who",
        9,
        process_function=recording(rec_dir, sleep=0.02),
        max_workers=3,
        read_write_conflict=False,
        resource_tracking=True,
    )
    assert run([task])
    records = read_records(rec_dir)
    assert sorted(r["id"] for r in records) == list(range(9))
    ran_by = {r["id"]: r["worker_id"] for r in records}
    # one process per worker id, one worker id per process
    pids = {}
    for r in records:
        pids.setdefault(r["worker_id"], set()).add(r["pid"])
    assert all(len(p) == 1 for p in pids.values()), pids
    assert len({next(iter(p)) for p in pids.values()}) == len(pids)

    report = task.report()
    assert set(pids) <= set(report.workers.by_id)
    counted = Counter(ran_by.values())
    for wid, w in report.workers.by_id.items():
        assert w.blocks_ok == counted.get(wid, 0), (wid, w)
    records_by_id = {rec.block_id[1]: rec for rec in report.block_records()}
    assert sorted(records_by_id) == list(range(9))
    for sid, rec in records_by_id.items():
        assert rec.worker_id == ran_by[sid], sid
        assert report.started_at <= rec.sent_at <= rec.returned_at <= report.finished_at
        assert rec.round_trip >= rec.stats.wall_seconds >= 0.02

    # the same from the zarr arrays alone (1D grid: cell == spatial id here)
    g = zarr.open_group(str(task.tracking_path), mode="r")
    on_disk = g["worker_id"][...]
    assert on_disk.dtype == np.uint32
    assert [int(v) for v in on_disk] == [ran_by[i] for i in range(9)]
    sent, returned = g["sent_at"][...], g["returned_at"][...]
    # a worker runs one block at a time: its intervals never overlap
    for wid in pids:
        spans = sorted((sent[i], returned[i]) for i in range(9) if ran_by[i] == wid)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start, (wid, spans)


def test_unexecuted_blocks_have_no_worker_on_disk(tracking):
    mask = np.zeros(4, dtype=bool)
    mask[1] = True
    task = line_task("partial", 4, skip_mask=mask, resource_tracking=True, max_workers=1)
    assert run([task])
    g = zarr.open_group(str(task.tracking_path), mode="r")
    worker_id = g["worker_id"][...]
    assert worker_id[1] == NO_WORKER
    assert np.isnan(g["sent_at"][1]) and np.isnan(g["returned_at"][1])
    assert all(int(worker_id[i]) in task.report().workers.by_id for i in (0, 2, 3))
    rec = task.report().block((1,))
    assert (rec.done, rec.stats, rec.worker_id, rec.sent_at, rec.returned_at) == (
        False,
        None,
        None,
        None,
        None,
    )
    assert [r.block_id[1] for r in task.report().block_records()] == [0, 2, 3]


def test_worker_record_json_has_every_phase():
    task = line_task("shape", 2, max_workers=1)
    assert run([task])
    d = task.report().worker(0).to_dict()
    assert set(d) == {
        "worker_id",
        "startup",
        "blocks_ok",
        "blocks_failed",
        "idle",
        "compute",
        "final_wait",
        "teardown",
        "exit",
        "start",
    }
    assert d["exit"] == "clean" and d["blocks_ok"] == 2
    assert daisy.WorkerRecord.from_dict(d) == task.report().worker(0)
