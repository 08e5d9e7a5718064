"""Faults in the distributed runtime: workers that die, hang, crash or
fail every block, Ctrl-C in the driver, and hostile connections.

Every test ends the same way: each block was completed, failed or orphaned
exactly once (the task counts balance), and no worker process survives the
run. Worker processes write their pid to ``<tmp_path>/pids/<pid>`` when they
take a block, before anything can go wrong, so the test knows them all;
the test process must also have no child process left.

Runs are started on a thread and joined with a timeout, so a run that hangs
fails its test instead of hanging the suite.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import children_of, proc_state, read_records, worker_logs

import daisy

BLOCK = 10
RUN_TIMEOUT = 30.0


# --------------------------------------------------------------------------
# helpers (these run in the test process only)


@pytest.fixture
def pid_dir(tmp_path):
    path = tmp_path / "pids"
    path.mkdir()
    return path


def line_task(task_id, n, process_function, **kwargs):
    return daisy.Task(
        task_id,
        daisy.Roi((0,), (n * BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        process_function=process_function,
        **kwargs,
    )


def reader_task(task_id, upstream, n, process_function, **kwargs):
    """A task whose block ``i`` reads blocks ``i-1..i+1`` of ``upstream``."""
    return daisy.Task(
        task_id,
        daisy.Roi((-BLOCK,), ((n + 2) * BLOCK,)),
        daisy.Roi((-BLOCK,), (3 * BLOCK,)),
        daisy.Roi((0,), (BLOCK,)),
        process_function=process_function,
        upstream_tasks=[upstream],
        read_write_conflict=False,
        **kwargs,
    )


def block_ids(*tasks):
    graph = daisy.DependencyGraph(list(tasks))
    return sorted((t, b.block_id[1]) for t in graph.task_ids for b in graph.blocks(t))


def tracked(pid_dir, rec_dir, body=None):
    """A block function that first notes its worker's pid, then runs
    ``body(block)`` (which may die), then records the block as done in
    ``<rec_dir>/<pid>.jsonl``."""
    pid_dir, rec_dir = str(pid_dir), str(rec_dir)

    def process(block):
        open(os.path.join(pid_dir, str(os.getpid())), "a").close()
        if body is not None:
            body(block)
        entry = {"task": block.task_id, "id": block.block_id[1], "pid": os.getpid()}
        with open(os.path.join(rec_dir, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")

    return process


def run_guarded(fn, timeout=RUN_TIMEOUT):
    """``fn()`` on a thread; fails the test if it is not done in time."""
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # re-raised below
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the run did not end within {timeout} s"
    if "error" in result:
        raise result["error"]
    return result["value"], time.monotonic() - start


class RecordingServer(daisy.Server):
    """A Server that keeps what ``run_blockwise`` returned, so tests of
    ``daisy.run_blockwise`` can look at the task states too."""

    last: RecordingServer | None = None

    def run_blockwise(self, *args, **kwargs):
        RecordingServer.last = self
        self.states = super().run_blockwise(*args, **kwargs)
        return self.states


@pytest.fixture
def recording_server(monkeypatch):
    RecordingServer.last = None
    monkeypatch.setattr(daisy.convenience, "Server", RecordingServer)
    return RecordingServer


def known_pids(pid_dir):
    return sorted(int(p.name) for p in Path(pid_dir).iterdir())


def assert_no_worker_survives(pids, allow_zombies=False):
    """Every pid is gone (``os.kill(pid, 0)`` raises ProcessLookupError) and
    this process has no children left. ``allow_zombies``: a process
    re-parented to PID 1 of this sandbox, which does not reap, may be left
    as a zombie (dead, not running)."""
    assert pids, "no worker pids were recorded"
    alive = {}
    for pid in pids:
        state = proc_state(pid)
        if state is None or (allow_zombies and state == "Z"):
            continue
        alive[pid] = state
    assert not alive, f"worker processes survived the run: {alive}"
    children = children_of(os.getpid())
    assert not children, f"child processes of the test survived the run: {children}"


def assert_counts_balance(states, expected_ids, records, log_dir):
    """Each task's blocks are completed, failed or orphaned, adding up to
    its block count; and each completed block was recorded done exactly
    once."""
    total_completed = 0
    for tid, s in states.items():
        n = sum(1 for t, _ in expected_ids if t == tid)
        assert s.total_block_count == n, (tid, s)
        assert s.completed_count + s.failed_count + s.orphaned_count == n, (tid, s)
        assert s.processing_count == 0 and s.ready_count == 0 and s.pending_count == 0, (tid, s)
        total_completed += s.completed_count
    done = Counter((r["task"], r["id"]) for r in records)
    twice = {k: v for k, v in done.items() if v > 1}
    assert not twice, f"blocks completed more than once: {twice}"
    assert set(done) <= set(expected_ids)
    assert len(done) == total_completed, worker_logs(log_dir)


# --------------------------------------------------------------------------
# dying and hanging workers


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV], ids=["sigkill", "sigsegv"])
def test_worker_killed_mid_block_is_replaced_and_block_retried(
    sig, tmp_path, pid_dir, rec_dir, log_dir
):
    marker = str(tmp_path / "died")

    def die_once(block):
        if block.block_id[1] == 3:
            try:
                with open(marker, "x") as f:
                    f.write(str(os.getpid()))
            except FileExistsError:
                return
            os.kill(os.getpid(), sig)
            time.sleep(10)  # never reached

    task = line_task("dies", 8, tracked(pid_dir, rec_dir, die_once), max_workers=2)
    server = daisy.Server()
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))

    s = states["dies"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (8, 0, 0), worker_logs(log_dir)
    records = read_records(rec_dir)
    assert_counts_balance(states, block_ids(task), records, log_dir)
    assert len(server.failures) == 1
    tid, spatial_id, worker_id, reason = server.failures[0]
    assert (tid, spatial_id) == ("dies", 3)
    assert "died" in reason or "connection to its worker closed" in reason, reason
    assert not server.abandoned
    # the retry ran on a replacement, not on the process that died
    killed = int(Path(marker).read_text())
    assert next(r["pid"] for r in records if r["id"] == 3) != killed
    assert proc_state(killed) is None
    assert len(list((log_dir / "dies").glob("worker_*.out"))) >= 2
    assert_no_worker_survives(known_pids(pid_dir))


def test_hung_block_is_reclaimed_after_timeout(tmp_path, pid_dir, rec_dir, log_dir):
    marker = str(tmp_path / "hung")
    hung_pid = str(tmp_path / "hung_pid")

    def hang_once(block):
        if block.block_id[1] == 2:
            try:
                open(marker, "x").close()
            except FileExistsError:
                return
            # a grandchild too: the timeout kills the worker's process group
            child = subprocess.Popen(["sleep", "60"])
            with open(hung_pid, "w") as f:
                f.write(f"{os.getpid()} {child.pid}")
            time.sleep(60)

    task = line_task("hangs", 6, tracked(pid_dir, rec_dir, hang_once), max_workers=2, timeout=1)
    server = daisy.Server()
    # ending within run_guarded's 30 s (ten times a typical run, half the
    # hung block's 60 s) shows the hung worker was killed, not waited for
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False), timeout=30)

    s = states["hangs"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (6, 0, 0), worker_logs(log_dir)
    records = read_records(rec_dir)
    assert_counts_balance(states, block_ids(task), records, log_dir)
    assert [(t, i) for t, i, _, _ in server.failures] == [("hangs", 2)]
    assert "timed out" in server.failures[0][3]
    hung, grandchild = (int(p) for p in Path(hung_pid).read_text().split())
    assert next(r["pid"] for r in records if r["id"] == 2) != hung
    assert proc_state(hung) is None, "the hung worker was not killed"
    assert_no_worker_survives(known_pids(pid_dir))
    # re-parented to PID 1 when its worker died: gone or a zombie
    assert_no_worker_survives([grandchild], allow_zombies=True)


class DetachedSpawner(daisy.Spawner):
    """Each worker is started by a handle process in a new session, out of
    reach of the server's process-group kill: a stand-in for a worker whose
    handle is local and whose work is remote (a Dask task)."""

    def commands(self, run_tag, payload, payload_file):
        # the worker inherits the handle's stdin, where its payload comes
        worker = [sys.executable, "-m", "daisy._worker"]
        handle = (
            "import subprocess, sys; "
            f"sys.exit(subprocess.run({worker!r}, start_new_session=True).returncode)"
        )
        return daisy.spawners.WorkerCommands(sys.executable, ["-c", handle], stdin=payload)


def test_a_detached_worker_stuck_in_a_timed_out_block_exits_on_the_hang_up(
    tmp_path, pid_dir, rec_dir, log_dir
):
    hung_pid = tmp_path / "hung_pid"
    gone = tmp_path / "gone_during_run"

    def hang_once(block):
        if block.block_id[1] != 2:
            return
        if not hung_pid.exists():
            hung_pid.write_text(str(os.getpid()))
            time.sleep(60)
            return
        # the retry, while the run goes on: the stuck worker must be gone
        # (or a zombie: its handle was killed, and PID 1 here does not reap)
        pid, deadline = int(hung_pid.read_text()), time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                state = "gone"
            if state in ("gone", "Z"):
                gone.touch()
                return
            time.sleep(0.05)

    task = line_task(
        "detached",
        6,
        tracked(pid_dir, rec_dir, hang_once),
        max_workers=2,
        timeout=1,
        spawner=DetachedSpawner(),
    )
    server = daisy.Server()
    states, elapsed = run_guarded(lambda: server.run_blockwise(task, progress=False), timeout=30)

    s = states["detached"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (6, 0, 0), worker_logs(log_dir)
    assert [(t, i) for t, i, _, _ in server.failures] == [("detached", 2)]
    # the kill reached only its handle; the worker itself left on the
    # server's hang-up, before the run ended, saying why in its log
    assert gone.exists(), "the stuck worker outlived its timeout"
    assert proc_state(int(hung_pid.read_text())) in (None, "Z")
    assert "closed this worker's connection while it held a block" in worker_logs(log_dir)
    assert_no_worker_survives(known_pids(pid_dir), allow_zombies=True)


def test_every_block_raising_fails_all_and_orphans_downstream(
    pid_dir, rec_dir, log_dir, recording_server
):
    attempts_dir = str(rec_dir)

    def always_raise(block):
        with open(os.path.join(attempts_dir, f"{os.getpid()}.attempts"), "a") as f:
            f.write(f"{block.block_id[1]}\n")
        raise RuntimeError(f"block {block.block_id[1]} always fails")

    a = line_task("A", 4, tracked(pid_dir, rec_dir, always_raise), max_workers=2, max_retries=1)
    b = reader_task("B", a, 4, tracked(pid_dir, rec_dir), max_workers=2)
    ok, _ = run_guarded(lambda: daisy.run_blockwise([a, b], progress=False, summary=False))

    assert ok is False
    server = recording_server.last
    states = server.states
    assert (states["A"].completed_count, states["A"].failed_count) == (0, 4)
    assert (states["B"].completed_count, states["B"].orphaned_count) == (0, 4)
    records = read_records(rec_dir)
    assert records == []
    assert_counts_balance(states, block_ids(a, b), records, log_dir)
    attempts = Counter()
    for path in rec_dir.glob("*.attempts"):
        attempts.update(int(line) for line in path.read_text().split())
    assert attempts == {0: 2, 1: 2, 2: 2, 3: 2}  # max_retries + 1 each
    assert Counter((t, i) for t, i, _, _ in server.failures) == {("A", i): 2 for i in range(4)}
    assert all("always fails" in reason for *_, reason in server.failures)
    assert_no_worker_survives(known_pids(pid_dir))


def test_workers_exiting_abandon_task_after_max_worker_restarts(
    pid_dir, rec_dir, log_dir, recording_server, capsys
):
    def exit_now(block):
        os._exit(1)

    a = line_task("A", 6, tracked(pid_dir, rec_dir, exit_now), max_workers=2, max_worker_restarts=2)
    b = reader_task("B", a, 6, tracked(pid_dir, rec_dir), max_workers=2)
    # a task restarted forever would not end within run_guarded's deadline;
    # an abandoned task is an error, as in daisy 2.0.0
    with pytest.raises(RuntimeError, match="max_worker_restarts"):
        run_guarded(lambda: daisy.run_blockwise([a, b], progress=False))

    summary = capsys.readouterr().out
    assert "abandoned: its workers" in summary
    assert 'abandoned: upstream task "A" was abandoned' in summary
    server = recording_server.last
    states = server.states
    assert states["A"].completed_count == 0
    assert states["A"].failed_count + states["A"].orphaned_count == 6
    assert (states["B"].completed_count, states["B"].orphaned_count) == (0, 6)
    records = read_records(rec_dir)
    assert records == []
    assert_counts_balance(states, block_ids(a, b), records, log_dir)
    abandoned = dict(server.abandoned)
    assert set(abandoned) == {"A", "B"}
    assert "max_worker_restarts=2" in abandoned["A"]
    assert "upstream" in abandoned["B"]
    # more than max_worker_restarts deaths, each a worker that took a block
    pids = known_pids(pid_dir)
    assert len(pids) >= 3
    assert len(list((log_dir / "A").glob("worker_*.out"))) >= len(pids)
    for *_, reason in server.failures:
        assert "died" in reason or "connection to its worker closed" in reason, reason
    assert not list((log_dir / "B").glob("worker_*"))  # no worker was ever started for B
    assert_no_worker_survives(pids)


def test_timeouts_do_not_count_as_worker_deaths(pid_dir, rec_dir, log_dir, caplog):
    """Workers killed for a timeout are the server's doing: with
    ``max_worker_restarts=0`` the task is not abandoned; each block fails
    after ``max_retries + 1`` timed-out attempts."""

    def hang(block):
        time.sleep(60)

    task = line_task(
        "slow",
        3,
        tracked(pid_dir, rec_dir, hang),
        max_workers=3,
        timeout=0.5,
        max_retries=1,
        max_worker_restarts=0,
    )
    server = daisy.Server()
    # ending within run_guarded's 30 s (the blocks sleep 60 s) shows every
    # timed-out worker was killed, not waited for
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))

    s = states["slow"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (0, 3, 0)
    assert not server.abandoned, server.abandoned
    assert Counter((t, i) for t, i, _, _ in server.failures) == {("slow", i): 2 for i in range(3)}
    assert all("timed out" in reason for *_, reason in server.failures)
    assert_counts_balance(states, block_ids(task), read_records(rec_dir), log_dir)
    # the log says which worker, in words, and whether the block is retried
    said = [r.getMessage() for r in caplog.records if "timed out in" in r.getMessage()]
    pattern = re.compile(
        r'^block \d of task "slow" timed out in worker \d+; '
        r"(retrying it|it has no retries left and failed)$"
    )
    assert all(pattern.match(m) for m in said), said
    assert sum("retrying it" in m for m in said) == 3, said
    assert sum("no retries left" in m for m in said) == 3, said
    assert len(known_pids(pid_dir)) == 6  # a fresh worker for every attempt
    assert_no_worker_survives(known_pids(pid_dir))


# --------------------------------------------------------------------------
# Ctrl-C


def test_ctrl_c_stops_the_driver_and_kills_every_worker(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, time
            import daisy

            PIDS = {str(pids)!r}
            daisy.logging.set_log_basedir({str(tmp_path / "logs")!r})

            def process(block):
                # a grandchild too: killing a worker must kill what it started
                child = subprocess.Popen(["sleep", "30"])
                open(os.path.join(PIDS, str(child.pid) + ".child"), "w").close()
                open(os.path.join(PIDS, str(os.getpid())), "w").close()
                time.sleep(30)

            def roi(offset, shape):
                return daisy.Roi((offset,), (shape,))

            a = daisy.Task("A", roi(0, 80), roi(0, 10), roi(0, 10), process_function=process,
                           max_workers=2)
            b = daisy.Task("B", roi(0, 80), roi(0, 10), roi(0, 10), process_function=process,
                           upstream_tasks=[a], max_workers=2)
            daisy.run_blockwise([a, b], progress=False)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(driver)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            workers = [p for p in pids.iterdir() if not p.name.endswith(".child")]
            if len(workers) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("the workers did not start their blocks")
        time.sleep(0.1)
        # Ctrl-C in a terminal: SIGINT to the whole foreground process group
        # (the workers are in groups of their own and must not get it).
        # Exiting within 10 s (the blocks sleep 30 s) shows the driver did
        # not wait for its workers; how fast it exits is measured by
        # benchmarks/test_faults_bench.py
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("the driver did not exit within 10 s of Ctrl-C")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert "KeyboardInterrupt" in err, err
    assert proc.returncode != 0
    worker_pids = [int(p.name) for p in pids.iterdir() if not p.name.endswith(".child")]
    grandchild_pids = [int(p.name[: -len(".child")]) for p in pids.iterdir() if ".child" in p.name]
    assert len(worker_pids) == 2 and len(grandchild_pids) == 2
    # the driver reaped its workers before it exited: they are gone
    assert_no_worker_survives(worker_pids)
    # the grandchildren were killed with their worker's process group; their
    # parent died first, so PID 1 inherits them, which in this sandbox does
    # not reap: dead means gone or a zombie
    assert_no_worker_survives(grandchild_pids, allow_zombies=True)


def _driver_with_two_sleeping_workers(
    tmp_path: Path, pids: Path, tracking: bool = False, timeout: float = 20.0
) -> subprocess.Popen[str]:
    """A driver in a process group of its own (as a shell job) whose task's
    blocks each sleep 30 s on two workers, returned once both workers hold a
    block (each notes its pid in ``pids``); with ``tracking``, the task has
    a tracking store under ``tmp_path / "tracking"``."""
    store = f"daisy.set_tracking_basedir({str(tmp_path / 'tracking')!r})" if tracking else ""
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(
            f"""
            import os, time
            import daisy

            PIDS = {str(pids)!r}
            daisy.logging.set_log_basedir({str(tmp_path / "logs")!r})
            {store}

            def process(block):
                open(os.path.join(PIDS, str(os.getpid())), "w").close()
                time.sleep(30)

            task = daisy.Task("A", daisy.Roi((0,), (40,)), daisy.Roi((0,), (10,)),
                              daisy.Roi((0,), (10,)), process_function=process, max_workers=2)
            daisy.run_blockwise(task, progress=False)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(driver)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while len(list(pids.iterdir())) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers did not start their blocks"
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def test_sigterm_to_the_driver_kills_every_worker(tmp_path):
    """``kill <driver>`` (SIGTERM: ``timeout``, systemd, a batch system)
    must not leave workers behind, running blocks for a run that is gone."""
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = _driver_with_two_sleeping_workers(tmp_path, pids, timeout=20)
    worker_pids = []
    try:
        worker_pids = [int(p.name) for p in pids.iterdir()]
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("the driver did not exit within 10 s of SIGTERM")
        # the workers may take a moment to notice
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if all(proc_state(pid) in (None, "Z") for pid in worker_pids):
                break
            time.sleep(0.05)
        assert_no_worker_survives(worker_pids, allow_zombies=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in worker_pids:  # do not leave them running
            if proc_state(pid) not in (None, "Z"):
                os.kill(pid, signal.SIGKILL)


def test_error_in_a_progress_observer_stops_the_run_and_kills_workers(
    tmp_path, pid_dir, rec_dir, log_dir
):
    """An exception from the driver's side of a run (here a progress
    observer) stops it like Ctrl-C: raised, workers killed at once."""
    started = str(pid_dir)

    class Exploding:
        closed = False

        def update(self, task_id, state, workers):
            if len(os.listdir(started)) >= 2:
                raise ArithmeticError("observer broke")

        def close(self):
            Exploding.closed = True

    task = line_task(
        "observed", 6, tracked(pid_dir, rec_dir, lambda b: time.sleep(30)), max_workers=2
    )
    server = daisy.Server()
    start = time.monotonic()
    with pytest.raises(ArithmeticError, match="observer broke"):
        run_guarded(lambda: server.run_blockwise(task, progress=Exploding()))
    # well before the blocks' 30 s sleeps end: the workers were killed, not waited for
    assert time.monotonic() - start < 20
    assert Exploding.closed
    assert read_records(rec_dir) == []
    assert_no_worker_survives(known_pids(pid_dir))


def test_huge_error_text_is_capped_and_the_run_goes_on(pid_dir, rec_dir, log_dir):
    def raise_huge(block):
        if block.block_id[1] == 1:
            raise ValueError("é" * 3_000_000)  # 6 MB of two-byte characters

    task = line_task("huge", 4, tracked(pid_dir, rec_dir, raise_huge), max_retries=0)
    server = daisy.Server()
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))

    s = states["huge"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (3, 1, 0), worker_logs(log_dir)
    assert [(t, i) for t, i, _, _ in server.failures] == [("huge", 1)]
    reason = server.failures[0][3]
    assert "ValueError" in reason
    assert len(reason.encode()) <= 64 * 1024 + 1024
    assert_counts_balance(states, block_ids(task), read_records(rec_dir), log_dir)
    assert_no_worker_survives(known_pids(pid_dir))


# --------------------------------------------------------------------------
# hostile connections


def test_hostile_connections_do_not_disturb_a_run(tmp_path, pid_dir, rec_dir, log_dir):
    done = str(tmp_path / "hostile_done")
    context = {}
    results = {}
    listening = threading.Event()

    def wait_for_the_attack(block):
        # every block waits until the hostile thread is through, so all of
        # it happens while the run goes on
        deadline = time.time() + 15
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(0.02)

    def server_closes(sock, timeout=5.0):
        sock.settimeout(timeout)
        try:
            return sock.recv(16) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def attack():
        try:
            assert listening.wait(10)
            host, port, token = context["hostname"], context["port"], context["token"]
            silent = socket.create_connection((host, port))  # never says hello

            s = socket.create_connection((host, port))
            s.sendall(b"GARBAGE! \x00\x01\x02\x03 not a daisy frame at all" * 10)
            results["garbage closed"] = server_closes(s)
            s.close()

            s = socket.create_connection((host, port))
            s.sendall(b"\xff\xff\xff\xff")
            results["huge length closed"] = server_closes(s)
            s.close()

            s = socket.create_connection((host, port))
            s.sendall(b"\x00\x00\x00\x05hello")  # a whole frame, not a message
            results["bad payload closed"] = server_closes(s)
            s.close()

            s = socket.create_connection((host, port))
            s.sendall(b"\x00\x00\x01\x00" + b"x" * 10)  # truncated frame, then close
            s.close()

            def connect(**overrides):
                ctx = dict(hostname=host, port=port, task_id="victim", token=token)
                ctx.update(overrides)
                try:
                    daisy.Client(daisy.Context(**ctx))
                except Exception as e:
                    return e
                return None

            results["wrong token"] = connect(token="wrong")
            results["unknown task"] = connect(task_id="no-such-task")
            results["fake worker"] = connect(worker_id=999)
            silent.close()
        except BaseException as e:
            results["attack error"] = e
        finally:
            open(done, "w").close()

    def on_start(ctx):
        context.update(hostname=ctx["hostname"], port=ctx["port"], token=ctx["token"])
        listening.set()

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    task = line_task(
        "victim",
        12,
        tracked(pid_dir, rec_dir, wait_for_the_attack),
        max_workers=2,
        init_callback_fn=on_start,
    )
    server = daisy.Server()
    states, elapsed = run_guarded(lambda: server.run_blockwise(task, progress=False))
    attacker.join(10)
    assert not attacker.is_alive()

    assert "attack error" not in results, results["attack error"]
    assert results["garbage closed"]
    assert results["huge length closed"]
    assert results["bad payload closed"]
    assert isinstance(results["wrong token"], ConnectionError), results["wrong token"]
    assert isinstance(results["unknown task"], Exception), results["unknown task"]
    assert "no-such-task" in str(results["unknown task"])
    assert isinstance(results["fake worker"], ConnectionError), results["fake worker"]

    s = states["victim"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (12, 0, 0), worker_logs(log_dir)
    assert not server.failures
    assert server.unmanaged_clients == 0  # refused clients are not counted
    records = read_records(rec_dir)
    assert_counts_balance(states, block_ids(task), records, log_dir)
    assert len(records) == 12
    assert_no_worker_survives(known_pids(pid_dir))


def test_worker_function_returning_early_is_abandoned_not_replaced_forever(
    pid_dir, rec_dir, log_dir, recording_server
):
    pids = str(pid_dir)

    def lazy_worker():
        # returns without asking for a single block
        open(os.path.join(pids, str(os.getpid())), "w").close()

    a = line_task("lazy", 4, lazy_worker, max_workers=1, max_worker_restarts=2)
    b = reader_task("after", a, 4, tracked(pid_dir, rec_dir))
    # a worker replaced forever would not end within run_guarded's deadline
    with pytest.raises(RuntimeError, match="abandoned"):
        run_guarded(lambda: daisy.run_blockwise([a, b], progress=False, summary=False))

    states = recording_server.last.states
    # no block was ever taken: none failed, all orphaned (as 2.0.0 counts them)
    lazy = states["lazy"]
    assert (lazy.completed_count, lazy.failed_count, lazy.orphaned_count) == (0, 0, 4)
    assert (states["after"].completed_count, states["after"].orphaned_count) == (0, 4)
    assert_counts_balance(states, block_ids(a, b), read_records(rec_dir), log_dir)
    assert set(dict(recording_server.last.abandoned)) == {"lazy", "after"}
    assert len(known_pids(pid_dir)) == 3  # max_worker_restarts + 1 workers
    assert_no_worker_survives(known_pids(pid_dir))


# --------------------------------------------------------------------------
# unmanaged clients that misbehave


def external(body):
    """A thread that connects an unmanaged client once the server listens
    and runs ``body(client)``; exceptions are kept in ``thread.errors``.
    Pass ``thread.on_start`` as the task's ``init_callback_fn`` (it notes
    where the server listens); ``thread.connect()`` opens another client."""
    context = {}
    listening = threading.Event()

    def on_start(ctx):
        context.update(ctx.__dict__)
        listening.set()

    def connect():
        return daisy.Client(
            daisy.Context(**{k: context[k] for k in ("hostname", "port", "task_id", "token")})
        )

    def target():
        try:
            assert listening.wait(10)
            body(connect())
        except BaseException as e:  # checked by the test
            thread.errors.append(e)

    thread = threading.Thread(target=target, daemon=True)
    thread.errors = []
    thread.on_start = on_start
    thread.connect = connect
    return thread


def test_unmanaged_client_disconnecting_with_a_block_loses_it_to_a_retry(
    tmp_path, pid_dir, rec_dir, log_dir
):
    held = []
    released = str(tmp_path / "disconnected")

    def take_one_and_leave(client):
        try:
            block = client.acquire_block().__enter__()
            held.append(block.block_id[1])
            client.close()  # goes away holding the block
        finally:
            open(released, "w").close()

    thread = external(take_one_and_leave)

    def wait_for_the_client(block):
        deadline = time.time() + 10
        while not os.path.exists(released) and time.time() < deadline:
            time.sleep(0.02)

    thread.start()
    task = line_task(
        "left",
        6,
        tracked(pid_dir, rec_dir, wait_for_the_client),
        max_workers=2,
        init_callback_fn=thread.on_start,
    )
    server = daisy.Server()
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))
    thread.join(10)
    assert not thread.errors, thread.errors

    s = states["left"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (6, 0, 0), worker_logs(log_dir)
    assert server.unmanaged_clients == 1
    assert len(held) == 1
    assert [(t, i, w) for t, i, w, _ in server.failures] == [("left", held[0], None)]
    assert "connection" in server.failures[0][3]
    records = read_records(rec_dir)
    assert_counts_balance(states, block_ids(task), records, log_dir)
    assert len(records) == 6
    assert_no_worker_survives(known_pids(pid_dir))


def test_late_release_after_timeout_is_refused(tmp_path, pid_dir, rec_dir, log_dir, caplog):
    """A client that holds a block past ``timeout`` loses it: the block is
    retried elsewhere and the late release is refused (the client logs the
    refusal), so the block still counts once."""
    held_file = tmp_path / "held"
    attempted = str(tmp_path / "late_release_attempted")

    def hold_past_the_timeout(client):
        try:
            with client.acquire_block() as block:
                held_file.write_text(str(block.block_id[1]))
                time.sleep(1.6)  # timeout=1: the block is reclaimed meanwhile
            client.close()  # reads the server's answer to the release
        finally:
            open(attempted, "w").close()

    thread = external(hold_past_the_timeout)
    held_path = str(held_file)

    def retry_waits_for_the_late_release(block):
        # only the reclaimed block's retry waits (well under the timeout),
        # so that the late release reaches a server that still runs
        if os.path.exists(held_path) and open(held_path).read() == str(block.block_id[1]):
            deadline = time.time() + 10
            while not os.path.exists(attempted) and time.time() < deadline:
                time.sleep(0.02)

    thread.start()
    task = line_task(
        "late",
        4,
        tracked(pid_dir, rec_dir, retry_waits_for_the_late_release),
        max_workers=1,
        timeout=1,
        init_callback_fn=thread.on_start,
    )
    server = daisy.Server()
    caplog.set_level(logging.WARNING, logger="daisy")
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))
    thread.join(10)
    assert not thread.errors, thread.errors

    held = int(held_file.read_text())
    s = states["late"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (4, 0, 0), worker_logs(log_dir)
    assert [(t, i, w) for t, i, w, _ in server.failures] == [("late", held, None)]
    assert "timed out" in server.failures[0][3]
    assert "not out with this worker" in caplog.text
    records = read_records(rec_dir)
    assert_counts_balance(states, block_ids(task), records, log_dir)
    assert sorted(r["id"] for r in records) == [0, 1, 2, 3]  # the late one counted once
    assert_no_worker_survives(known_pids(pid_dir))


def test_release_from_another_connection_is_refused(pid_dir, rec_dir, log_dir, caplog):
    """One block, one owner: a block handed to one connection cannot be
    released by another (even with the run's token); the owner's release
    counts, once."""
    outcome = {}

    def two_clients(first):
        second = thread.connect()
        with first.acquire_block() as block:
            outcome["held"] = block.block_id[1]
            second.release_block(block)  # not its block
            second.close()  # reads the server's answer
        first.close()

    thread = external(two_clients)

    thread.start()
    task = line_task(
        "owned",
        4,
        tracked(pid_dir, rec_dir, lambda b: time.sleep(0.2)),
        max_workers=1,
        init_callback_fn=thread.on_start,
    )
    server = daisy.Server()
    caplog.set_level(logging.WARNING, logger="daisy")
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))
    thread.join(10)
    assert not thread.errors, thread.errors

    s = states["owned"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (4, 0, 0)
    assert not server.failures
    assert server.unmanaged_clients == 2
    assert "not out with this worker" in caplog.text
    records = read_records(rec_dir)
    assert sorted(r["id"] for r in records) == sorted(
        i for _, i in block_ids(task) if i != outcome["held"]
    )
    assert_counts_balance(
        states, block_ids(task), records + [{"task": "owned", "id": outcome["held"]}], log_dir
    )
    assert_no_worker_survives(known_pids(pid_dir))


def test_blocks_cut_short_by_ctrl_c_are_not_failed_attempts(tmp_path):
    """The user stopped the run: the blocks in flight did not fail, so the
    report and the tracking store count no failed attempt for them (they
    used to count one each, "the connection to its worker closed"), and
    the next run runs them again with their retries whole."""
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = _driver_with_two_sleeping_workers(tmp_path, pids, tracking=True, timeout=60)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "KeyboardInterrupt" in err, err
    from daisy.run_report import read_runs

    (report,) = read_runs(tmp_path / "tracking" / "A" / "runs.jsonl")
    assert report.outcome == "interrupted", report.outcome
    assert report.blocks.failures == 0, report.failure_causes
    import zarr

    failures = zarr.open_array(str(tmp_path / "tracking" / "A" / "failures"), mode="r")[:]
    assert int(failures.sum()) == 0, failures


def test_a_worker_that_crashes_says_how_and_where(tmp_path, log_dir):
    """A block that segfaults its worker: the failure names the signal (it
    used to say only that the connection closed, whichever the server saw
    first), and the worker's log has the Python traceback of the crash."""
    marker = tmp_path / "crashed"

    def crash_once(block):
        import ctypes

        if block.block_id[1] == 1 and not marker.exists():
            marker.touch()
            ctypes.string_at(0)  # SIGSEGV

    task = line_task("crashes", 4, crash_once, max_workers=1, max_retries=1)
    server = daisy.Server()
    states, _ = run_guarded(lambda: server.run_blockwise(task, progress=False))
    assert states["crashes"].completed_count == 4
    (failure,) = server.failures
    assert "SIGSEGV" in failure[3] or "signal: 11" in failure[3], failure
    # and the task state's worker errors (daisy 2.0.0's figures) say so too
    assert "SIGSEGV" in states["crashes"].last_worker_error, states["crashes"].last_worker_error
    report = daisy.last_report()["crashes"]
    assert any("SIGSEGV" in message for message, _ in report.failure_causes.messages), (
        report.failure_causes
    )
    errs = "".join(p.read_text() for p in (log_dir / "crashes").glob("worker_*.err"))
    assert "Fatal Python error: Segmentation fault" in errs, errs
    assert "in crash_once" in errs, errs
