"""The distributed runtime end to end: block and worker functions on real
worker processes (``python -m daisy._worker``) served by the Rust server.

Block functions record what they did in files under ``tmp_path`` (one file
per worker process, so no two processes append to the same file); the
tests read those records back and check that every block ran exactly once,
where and when it ran, and what it wrote.

The functions sent to workers are closures or lambdas made inside the
tests (cloudpickle sends those by value); one test checks that a function
defined at module level of this test module works too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import threading
import time
from collections import Counter

import numpy as np
import pytest
from conftest import read_records, worker_logs

import daisy

BLOCK = 10


# --------------------------------------------------------------------------
# helpers (these run in the test process only)


def line_task(task_id, n, process_function, **kwargs):
    """A 1D task of ``n`` blocks of size 10 whose read ROI is the write ROI
    (blocks of one task never conflict)."""
    return daisy.Task(
        task_id,
        daisy.Roi((0,), (n * BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        process_function=process_function,
        **kwargs,
    )


def block_ids(*tasks):
    """Every ``(task_id, spatial_id)`` of a pipeline."""
    graph = daisy.DependencyGraph(list(tasks))
    return sorted((t, b.block_id[1]) for t in graph.task_ids for b in graph.blocks(t))


def recorder(rec_dir, sleep=0.0):
    """A block function that records ``{task, id, pid, start, end}`` as a
    JSON line in ``<rec_dir>/<pid>.jsonl`` (after sleeping ``sleep``)."""
    rec_dir = str(rec_dir)

    def record(block):
        start = time.time()
        if sleep:
            time.sleep(sleep)
        entry = {
            "task": block.task_id,
            "id": block.block_id[1],
            "pid": os.getpid(),
            "start": start,
            "end": time.time(),
        }
        with open(os.path.join(rec_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    return record


def assert_each_block_once(records, expected_ids, log_dir=None):
    counts = Counter((r["task"], r["id"]) for r in records)
    twice = {k: v for k, v in counts.items() if v > 1}
    assert not twice, f"blocks ran more than once: {twice}"
    missing = sorted(set(expected_ids) - set(counts))
    extra = sorted(set(counts) - set(expected_ids))
    context = worker_logs(log_dir) if log_dir is not None and missing else ""
    assert not missing, f"blocks never ran: {missing}\n{context}"
    assert not extra, f"unknown blocks ran: {extra}"


def max_concurrency(intervals):
    """The largest number of ``(start, end)`` intervals open at once."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def assert_all_completed(states):
    for tid, s in states.items():
        assert s.completed_count == s.total_block_count, (tid, s)
        assert s.failed_count == 0 and s.orphaned_count == 0, (tid, s)


def module_level_process(block):
    """A block function defined at module level of the test module: the
    worker must be able to import this module to unpickle it."""
    import json
    import os

    with open(os.path.join(os.environ["DAISY_TEST_RECORDS"], f"{os.getpid()}.jsonl"), "a") as f:
        entry = {"task": block.task_id, "id": block.block_id[1], "pid": os.getpid()}
        f.write(json.dumps(entry) + "\n")


# --------------------------------------------------------------------------
# block functions on processes


def test_every_block_runs_once_and_writes_its_output(tmp_path, rec_dir, log_dir):
    n = 20
    size = n * BLOCK
    in_path, out_path, hits_path = (str(tmp_path / f) for f in ("in.dat", "out.dat", "hits.dat"))
    np.memmap(in_path, dtype=np.float64, mode="w+", shape=(size,))[:] = np.arange(size)
    np.memmap(out_path, dtype=np.float64, mode="w+", shape=(size,))[:] = -1
    np.memmap(hits_path, dtype=np.int64, mode="w+", shape=(size,))[:] = 0
    record = recorder(rec_dir)

    def process(block):
        s = slice(block.write_roi.begin[0], block.write_roi.end[0])
        src = np.memmap(in_path, dtype=np.float64, mode="r", shape=(size,))
        dst = np.memmap(out_path, dtype=np.float64, mode="r+", shape=(size,))
        hits = np.memmap(hits_path, dtype=np.int64, mode="r+", shape=(size,))
        dst[s] = src[s] * 2 + 1
        hits[s] += 1
        dst.flush()
        hits.flush()
        record(block)

    task = line_task("double", n, process, max_workers=3)
    assert daisy.run_blockwise([task], progress=False, summary=False), worker_logs(log_dir)

    assert_each_block_once(read_records(rec_dir), block_ids(task), log_dir)
    out = np.memmap(out_path, dtype=np.float64, mode="r", shape=(size,))
    hits = np.memmap(hits_path, dtype=np.int64, mode="r", shape=(size,))
    np.testing.assert_array_equal(out, np.arange(size) * 2 + 1)
    np.testing.assert_array_equal(hits, np.ones(size))
    # the blocks really ran in other processes
    assert os.getpid() not in {r["pid"] for r in read_records(rec_dir)}


def test_lambda_block_function(tmp_path, log_dir):
    out = tmp_path / "lambda"
    out.mkdir()
    d = str(out)
    task = line_task(
        "lam",
        8,
        lambda b: open(os.path.join(d, f"{b.block_id[1]}.{os.getpid()}"), "x").close(),
        max_workers=2,
    )
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)
    names = [p.name.split(".") for p in out.iterdir()]
    assert sorted(int(i) for i, _ in names) == [b for _, b in block_ids(task)]
    assert all(int(pid) != os.getpid() for _, pid in names)


def test_closure_over_local_state(rec_dir, log_dir):
    scale = np.arange(8) * 10  # captured array
    record = recorder(rec_dir)  # captured closure

    def offset(block):  # a local helper the block function calls
        return int(scale[block.block_id[1] % len(scale)]) + 1

    def process(block):
        assert offset(block) == block.block_id[1] * 10 + 1
        record(block)

    task = line_task("closure", 8, process, max_workers=2)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)
    assert_each_block_once(read_records(rec_dir), block_ids(task), log_dir)


def test_function_defined_in_test_module(rec_dir, log_dir, monkeypatch):
    monkeypatch.setenv("DAISY_TEST_RECORDS", str(rec_dir))
    task = line_task("module_fn", 6, module_level_process, max_workers=2, max_worker_restarts=1)
    ok = daisy.run_blockwise(task, progress=False, summary=False)
    assert ok, worker_logs(log_dir)
    assert_each_block_once(read_records(rec_dir), block_ids(task), log_dir)


def test_max_workers_is_respected(rec_dir, log_dir):
    max_workers = 2
    task = line_task("limited", 16, recorder(rec_dir, sleep=0.08), max_workers=max_workers)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)

    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    pids = {r["pid"] for r in records}
    assert len(pids) == max_workers, f"expected both workers to take blocks, got pids {pids}"
    assert max_concurrency([(r["start"], r["end"]) for r in records]) <= max_workers
    # the server started no more workers than allowed (one log pair each)
    outs = sorted(p.name for p in (log_dir / "limited").glob("worker_*.out"))
    assert 1 <= len(outs) <= max_workers, outs


def test_max_workers_one_runs_blocks_one_at_a_time(rec_dir, log_dir):
    task = line_task("serial", 6, recorder(rec_dir, sleep=0.02), max_workers=1)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)
    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    assert len({r["pid"] for r in records}) == 1
    assert max_concurrency([(r["start"], r["end"]) for r in records]) == 1


def test_pipeline_runs_downstream_blocks_after_their_upstream_blocks(rec_dir, log_dir):
    record = recorder(rec_dir)

    def upstream_process(block):
        time.sleep(0.015 * (block.block_id[1] % 4))  # finish out of order
        record(block)

    n = 10
    a = line_task("A", n, upstream_process, max_workers=2)
    # B's blocks read one block of A on each side of the block they write
    b = daisy.Task(
        "B",
        daisy.Roi((-BLOCK,), ((n + 2) * BLOCK,)),
        daisy.Roi((-BLOCK,), (3 * BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        process_function=recorder(rec_dir),
        upstream_tasks=[a],
        read_write_conflict=False,
        max_workers=2,
    )
    assert daisy.run_blockwise([a, b], progress=False, summary=False), worker_logs(log_dir)

    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(a, b), log_dir)
    by_id = {(r["task"], r["id"]): r for r in records}
    graph = daisy.DependencyGraph([a, b])
    checked = 0
    for block in graph.blocks("B"):
        down = by_id[("B", block.block_id[1])]
        ups = graph.upstream(block)
        assert any(u.task_id == "A" for u in ups), block
        for up in ups:
            up_rec = by_id[(up.task_id, up.block_id[1])]
            assert up_rec["end"] <= down["start"], (
                f"B block {block.block_id[1]} started at {down['start']} before its upstream "
                f"{up.block_id} finished at {up_rec['end']}"
            )
            checked += 1
    assert checked >= 2 * n - 2


# --------------------------------------------------------------------------
# worker functions with daisy.Client


def test_worker_function_takes_every_block_once(rec_dir, tmp_path, log_dir):
    record = recorder(rec_dir)
    starts = tmp_path / "starts"
    starts.mkdir()
    starts_dir = str(starts)

    def worker():
        # called once per worker process
        open(os.path.join(starts_dir, str(os.getpid())), "x").close()
        client = daisy.Client()
        assert client.worker_id is not None
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                record(block)

    task = line_task("wf", 12, worker, max_workers=2)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)
    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    started = {int(p.name) for p in starts.iterdir()}
    assert {r["pid"] for r in records} <= started
    assert 1 <= len(started) <= 2


def test_worker_function_exception_fails_block_which_is_retried(rec_dir, tmp_path, log_dir):
    record = recorder(rec_dir)
    marker = str(tmp_path / "raised")

    def worker():
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                if block.block_id[1] == 3 and not os.path.exists(marker):
                    open(marker, "x").close()
                    raise ValueError("first attempt of block 3 fails")
                record(block)

    task = line_task("wf_raise", 8, worker, max_workers=1)
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)

    assert_all_completed(states)
    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    # the exception was swallowed: the one worker went on with other blocks
    assert len({r["pid"] for r in records}) == 1
    # one worker's logs (the task's run report, runs.jsonl, and its warm
    # launcher's logs beside them)
    assert sorted(p.name for p in (log_dir / "wf_raise").iterdir()) == [
        "launcher.err",
        "launcher.out",
        "runs.jsonl",
        "worker_0.err",
        "worker_0.out",
    ]
    assert [(t, i) for t, i, _, _ in server.failures] == [("wf_raise", 3)]
    assert "ValueError: first attempt of block 3 fails" in server.failures[0][3]
    assert states["wf_raise"].failed_attempts == 1
    err = (log_dir / "wf_raise" / "worker_0.err").read_text()
    assert "ValueError: first attempt of block 3 fails" in err


def test_worker_function_runs_a_cluster_style_subprocess(rec_dir, tmp_path, log_dir):
    script = tmp_path / "cluster_worker.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, sys
            import daisy

            client = daisy.Client()  # from the inherited DAISY_CONTEXT
            while True:
                with client.acquire_block() as block:
                    if block is None:
                        break
                    entry = {{"task": block.task_id, "id": block.block_id[1],
                             "pid": os.getpid(), "parent": os.getppid()}}
                    with open(os.path.join({str(rec_dir)!r}, f"{{os.getpid()}}.jsonl"), "a") as f:
                        f.write(json.dumps(entry) + "\\n")
            client.close()
            """
        )
    )
    script_path = str(script)

    def worker():
        import subprocess
        import sys

        assert "DAISY_CONTEXT" in os.environ
        subprocess.run([sys.executable, script_path], check=True)

    task = line_task("cluster", 10, worker, max_workers=2)
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)
    assert_all_completed(states)
    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    # the blocks ran in the scripts, children of the worker processes
    assert all(r["pid"] != r["parent"] for r in records)
    assert os.getpid() not in {r["parent"] for r in records}
    assert server.unmanaged_clients == 0


def test_external_unmanaged_client_is_accepted_and_counted(rec_dir, log_dir):
    contexts = []
    taken = []
    errors = []
    listening = threading.Event()

    def external_client():
        try:
            listening.wait(10)
            ctx = contexts[0]
            client = daisy.Client(
                daisy.Context(
                    hostname=ctx["hostname"],
                    port=ctx["port"],
                    task_id=ctx["task_id"],
                    token=ctx["token"],
                )
            )
            assert client.worker_id is None
            while True:
                with client.acquire_block() as block:
                    if block is None:
                        break
                    time.sleep(0.03)
                    taken.append((block.task_id, block.block_id[1]))
            client.close()
        except BaseException as e:  # reported by the test
            errors.append(e)

    def on_start(context):
        contexts.append(context)
        listening.set()

    thread = threading.Thread(target=external_client, daemon=True)
    thread.start()
    task = line_task(
        "ext",
        10,
        recorder(rec_dir, sleep=0.03),
        max_workers=1,
        init_callback_fn=on_start,
    )
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)
    thread.join(10)
    assert not thread.is_alive()
    assert not errors, errors

    assert_all_completed(states)
    assert server.unmanaged_clients == 1
    assert len(taken) >= 1, "the external client got no block"
    records = read_records(rec_dir)
    all_runs = [{"task": t, "id": i} for t, i in taken] + records
    assert_each_block_once(all_runs, block_ids(task), log_dir)
    ctx = contexts[0]
    assert ctx["task_id"] == "ext" and ctx["port"] > 0 and ctx["token"]


# --------------------------------------------------------------------------
# logs, failures, summary, progress


def test_worker_logs_capture_print_and_subprocess_output(log_dir):
    def process(block):
        print(f"hello-from-block {block.block_id[1]}")
        print(f"oops-from-block {block.block_id[1]}", file=sys.stderr)
        os.system("echo hello-from-subprocess")
        os.system("echo error-from-subprocess >&2")

    task = line_task("chatty", 4, process, max_workers=2)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)

    outs = sorted((log_dir / "chatty").glob("worker_*.out"))
    errs = sorted((log_dir / "chatty").glob("worker_*.err"))
    assert outs and len(outs) == len(errs)
    out = "".join(p.read_text() for p in outs)
    err = "".join(p.read_text() for p in errs)
    for i in range(4):
        assert f"hello-from-block {i}\n" in out
        assert f"oops-from-block {i}\n" in err
    assert out.count("hello-from-subprocess") == 4
    assert err.count("error-from-subprocess") == 4


def test_status_failed_without_exception_is_retried_then_failed(rec_dir, log_dir):
    record = recorder(rec_dir)

    def process(block):
        record(block)
        if block.block_id[1] == 2:
            block.status = daisy.BlockStatus.FAILED

    task = line_task("status", 5, process, max_workers=2, max_retries=2)
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)

    s = states["status"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (4, 1, 0)
    attempts = Counter(r["id"] for r in read_records(rec_dir))
    assert attempts == {0: 1, 1: 1, 2: 3, 3: 1, 4: 1}
    assert [(t, i) for t, i, _, _ in server.failures] == [("status", 2)] * 3
    assert all("FAILED" in reason for *_, reason in server.failures)


def test_failed_run_returns_false_and_summary_lists_failures(log_dir, capsys):
    def process(block):
        if block.block_id[1] == 1:
            raise RuntimeError(f"boom in block {block.block_id[1]}")

    task = line_task("failing", 4, process, max_workers=1, max_retries=1)
    assert daisy.run_blockwise(task, progress=False) is False

    out = capsys.readouterr().out
    assert "Execution Summary" in out
    assert "Task failing: ✗" in out
    assert "completed ✔: 3" in out
    assert "failed    ✗: 1" in out
    assert "Failed Blocks:" in out
    # one line for the block, with both attempts, not one per attempt
    assert out.count("block 1 [10:20]: failed 2 of 2 attempts: RuntimeError: boom in block 1") == 1
    # that line, the first traceback and the panel's "failed because"
    assert out.count("RuntimeError: boom in block 1") == 3
    assert f"worker logs: {log_dir.absolute() / 'failing' / 'worker_0.err'}" in out
    err = (log_dir / "failing" / "worker_0.err").read_text()
    assert "RuntimeError: boom in block 1" in err
    assert "Traceback" in err


def test_a_servers_failure_notes_name_the_logs_of_its_own_run(log_dir, tmp_path):
    """The worker logs a run's notes name are where that run wrote them,
    though the log base directory was changed since (a notebook's next
    cell, or another run of the process): the run keeps its own."""

    def process(block):
        if block.block_id[1] == 1:
            raise RuntimeError("boom")

    server = daisy.Server()
    server.run_blockwise(line_task("failing", 4, process, max_workers=1), progress=False)
    daisy.logging.set_log_basedir(tmp_path / "elsewhere")
    notes = "\n".join(server.failure_notes()["failing"])
    assert f"worker logs: {log_dir.absolute() / 'failing' / 'worker_0.err'}" in notes, notes


def test_a_servers_rerun_advice_names_the_store_its_run_marked(log_dir, tmp_path):
    """The store a run's rerun advice names is the one the run marked its
    done blocks in, though the tracking base directory was changed since."""

    def process(block):
        if block.block_id[1] == 1:
            raise RuntimeError("boom")

    daisy.set_tracking_basedir(tmp_path / "marks")
    server = daisy.Server()
    server.run_blockwise(line_task("failing", 4, process, max_workers=1), progress=False)
    daisy.set_tracking_basedir(tmp_path / "elsewhere")
    notes = "\n".join(server.failure_notes()["failing"])
    assert f"tracking store at {tmp_path / 'marks' / 'failing'}" in notes, notes


def test_successful_run_returns_true_and_summary_says_so(log_dir, capsys):
    task = line_task("fine", 3, lambda b: None)
    assert daisy.run_blockwise(task, progress=False) is True
    out = capsys.readouterr().out
    assert "Task fine: ✔" in out
    assert "all blocks processed successfully" in out
    assert "Failed Blocks" not in out


def test_json_progress_observer_writes_counts(tmp_path, log_dir):
    path = tmp_path / "progress" / "run.jsonl"
    a = line_task("A", 6, lambda b: time.sleep(0.02), max_workers=2)
    b = line_task("B", 6, lambda b: None, upstream_tasks=[a])
    observer = daisy.JsonProgressObserver(path)
    assert daisy.run_blockwise([a, b], progress=observer, summary=False), worker_logs(log_dir)

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 2
    keys = {"task_id", "time", "total", "pending", "processing", "completed", "failed"}
    keys |= {"orphaned", "skipped", "workers"}
    for rec in lines:
        assert keys <= set(rec), rec
        assert rec["task_id"] in ("A", "B")
        assert rec["total"] == 6
        counts = [rec[k] for k in ("pending", "processing", "completed", "failed", "orphaned")]
        assert all(c >= 0 for c in counts), rec
        assert sum(counts) == rec["total"], rec
        assert isinstance(rec["workers"], int) and rec["workers"] >= 0
    last = {rec["task_id"]: rec for rec in lines}
    assert set(last) == {"A", "B"}
    for rec in last.values():
        assert rec["completed"] == 6 and rec["failed"] == 0 and rec["orphaned"] == 0
    times = [rec["time"] for rec in lines]
    assert times == sorted(times)
    assert max(rec["workers"] for rec in lines if rec["task_id"] == "A") >= 1


def test_progress_false_writes_nothing_and_true_writes_lines(log_dir, capsys):
    # stderr is not a terminal under pytest: progress comes as lines
    task = line_task("quiet", 3, lambda b: None)
    assert daisy.run_blockwise(task, progress=False, summary=False)
    assert "daisy: quiet" not in capsys.readouterr().err

    task = line_task("loud", 3, lambda b: None)
    assert daisy.run_blockwise(task, progress=True, summary=False)
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("daisy: loud 3/3 done, 0 failed") for line in lines), lines


# --------------------------------------------------------------------------
# resources


def test_resources_cap_workers_across_tasks(tmp_path, rec_dir, log_dir):
    record = recorder(rec_dir, sleep=0.02)
    lifetimes = tmp_path / "lifetimes"
    lifetimes.mkdir()
    lifetimes_dir = str(lifetimes)

    def worker():
        start = time.time()
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                record(block)
        client.close()
        with open(os.path.join(lifetimes_dir, str(os.getpid())), "w") as f:
            json.dump({"task": client.task_id, "start": start, "end": time.time()}, f)

    a = line_task("gpu_a", 5, worker, max_workers=2, requires={"gpu": 1})
    b = line_task("gpu_b", 5, worker, max_workers=2, requires={"gpu": 1})
    progress = tmp_path / "progress.jsonl"
    ok = daisy.run_blockwise(
        [a, b],
        resources={"gpu": 1},
        progress=daisy.JsonProgressObserver(progress),
        summary=False,
    )
    assert ok, worker_logs(log_dir)
    assert_each_block_once(read_records(rec_dir), block_ids(a, b), log_dir)

    lives = [json.loads(p.read_text()) for p in lifetimes.iterdir()]
    assert {life["task"] for life in lives} == {"gpu_a", "gpu_b"}
    assert max_concurrency([(life["start"], life["end"]) for life in lives]) == 1, lives
    # the server's own count of live workers, tick by tick
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert len(lines) % 2 == 0
    for first, second in zip(lines[::2], lines[1::2], strict=True):
        assert (first["task_id"], second["task_id"]) == ("gpu_a", "gpu_b")
        assert first["workers"] + second["workers"] <= 1, (first, second)


def test_requires_more_than_resources_raises_at_start(log_dir):
    ran = []
    task = line_task(
        "greedy",
        3,
        lambda b: None,
        requires={"gpu": 2},
        init_callback_fn=lambda ctx: ran.append(ctx),
    )
    with pytest.raises(ValueError, match="requires"):
        daisy.run_blockwise(task, resources={"gpu": 1}, progress=False, summary=False)
    assert not ran
    assert not (log_dir / "greedy").exists()


# --------------------------------------------------------------------------
# check functions


def test_check_function_skips_done_blocks(rec_dir, log_dir):
    task = line_task(
        "checked",
        10,
        recorder(rec_dir),
        max_workers=2,
        check_function=lambda b: b.block_id[1] % 2 == 0,
    )
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)

    s = states["checked"]
    assert s.completed_count == 10 and s.total_block_count == 10
    assert s.skipped_count == 5
    ran = [r["id"] for r in read_records(rec_dir)]
    assert sorted(ran) == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("multiprocessing", [False, True], ids=["serial", "processes"])
def test_post_check_returning_false_fails_the_block(multiprocessing, rec_dir, log_dir):
    """``check_function=(pre, post)``: a block whose post-check returns
    False after it ran is failed (and retried), in both modes alike."""
    task = line_task(
        "post",
        5,
        recorder(rec_dir),
        max_workers=2,
        max_retries=1,
        check_function=(lambda b: False, lambda b: b.block_id[1] != 2),
    )
    ok = daisy.run_blockwise(task, multiprocessing=multiprocessing, progress=False, summary=False)
    assert ok is False, "block 2 failed its post-check, so the run did not succeed"
    attempts = Counter(r["id"] for r in read_records(rec_dir))
    assert attempts == {0: 1, 1: 1, 2: 2, 3: 1, 4: 1}


def test_check_function_error_runs_the_block(rec_dir, log_dir):
    def check(block):
        if block.block_id[1] == 1:
            raise OSError("cannot tell")
        return False

    task = line_task("check_err", 3, recorder(rec_dir), check_function=check)
    assert daisy.run_blockwise(task, progress=False, summary=False), worker_logs(log_dir)
    assert sorted(r["id"] for r in read_records(rec_dir)) == [0, 1, 2]


# --------------------------------------------------------------------------
# host, port, init callback


def test_explicit_host_and_port(log_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    contexts = []
    task = line_task("ported", 3, lambda b: None, init_callback_fn=contexts.append)
    assert daisy.run_blockwise(task, host="127.0.0.1", port=port, progress=False, summary=False)
    assert [(c["hostname"], c["port"], c["task_id"]) for c in contexts] == [
        ("127.0.0.1", port, "ported")
    ]


def test_port_in_use_raises(log_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        task = line_task("clash", 3, lambda b: None)
        with pytest.raises(OSError):
            daisy.run_blockwise(task, port=port, progress=False, summary=False)
    assert not (log_dir / "clash").exists()


def test_init_callback_error_stops_the_run_before_workers_start(log_dir):
    def explode(context):
        raise LookupError("init failed")

    task = line_task("init_err", 3, lambda b: None, init_callback_fn=explode)
    with pytest.raises(LookupError, match="init failed"):
        daisy.run_blockwise(task, progress=False, summary=False)
    assert not list((log_dir / "init_err").glob("worker_*"))  # no worker started


def test_init_callback_called_once_per_task_with_context(log_dir):
    seen = []
    a = line_task("A", 2, lambda b: None, init_callback_fn=seen.append)
    b = line_task("B", 2, lambda b: None, upstream_tasks=[a], init_callback_fn=seen.append)
    assert daisy.run_blockwise([a, b], progress=False, summary=False)
    assert sorted(c["task_id"] for c in seen) == ["A", "B"]
    assert len({(c["hostname"], c["port"], c["token"]) for c in seen}) == 1


def test_check_function_all_done_runs_nothing(rec_dir, log_dir):
    a = line_task("all_done", 4, recorder(rec_dir), check_function=lambda b: True)
    b = line_task("next", 4, recorder(rec_dir), upstream_tasks=[a])
    server = daisy.Server()
    states = server.run_blockwise([a, b], progress=False)
    assert_all_completed(states)
    assert states["all_done"].skipped_count == 4
    assert states["next"].skipped_count == 0
    ran = sorted((r["task"], r["id"]) for r in read_records(rec_dir))
    assert ran == [(t, i) for t, i in block_ids(a, b) if t == "next"]


# --------------------------------------------------------------------------
# more worker-function behaviour


def test_reraise_reports_the_block_once_and_the_worker_is_replaced(rec_dir, tmp_path, log_dir):
    record = recorder(rec_dir)
    marker = str(tmp_path / "raised")

    def worker():
        client = daisy.Client(reraise=True)
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                if block.block_id[1] == 0 and not os.path.exists(marker):
                    open(marker, "x").close()
                    raise KeyError("raised out of the worker function")
                record(block)

    task = line_task("reraise", 4, worker, max_workers=1)
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)

    assert_all_completed(states)
    records = read_records(rec_dir)
    assert_each_block_once(records, block_ids(task), log_dir)
    # one failure: the report, not a second one for the worker's death
    assert [(t, i) for t, i, _, _ in server.failures] == [("reraise", 0)]
    assert "KeyError" in server.failures[0][3]
    assert not server.abandoned
    err = (log_dir / "reraise" / "worker_0.err").read_text()
    assert "raised out of the worker function" in err
    assert (log_dir / "reraise" / "worker_1.out").exists()  # the replacement


def test_the_same_tasks_run_twice(rec_dir, log_dir):
    a = line_task("again_a", 3, recorder(rec_dir))
    b = line_task("again_b", 3, recorder(rec_dir), upstream_tasks=[a])
    assert daisy.run_blockwise([a, b], progress=False, summary=False)
    assert daisy.run_blockwise([a, b], progress=False, summary=False)
    counts = Counter((r["task"], r["id"]) for r in read_records(rec_dir))
    assert counts == {k: 2 for k in block_ids(a, b)}


def test_worker_function_that_returns_after_some_blocks_is_replaced(rec_dir, log_dir):
    """A worker function may leave after a few blocks (e.g. to bound its
    memory); that is progress, not a crash, so it must not count against
    ``max_worker_restarts`` ("how many times a worker may die unexpectedly
    (crash, kill)")."""
    record = recorder(rec_dir)

    def two_blocks_then_leave():
        client = daisy.Client()
        for _ in range(2):
            with client.acquire_block() as block:
                if block is None:
                    return
                record(block)
        client.close()

    task = line_task("short_lived", 12, two_blocks_then_leave, max_worker_restarts=2)
    server = daisy.Server()
    states = server.run_blockwise(task, progress=False)
    assert not server.abandoned, server.abandoned
    assert_all_completed(states)
    assert_each_block_once(read_records(rec_dir), block_ids(task), log_dir)
