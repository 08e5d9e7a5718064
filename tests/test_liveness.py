"""Liveness over real TCP to another host (issue 26, "A week on a shared
cluster"): a peer that vanishes without a word (power loss, a network
partition) must not stall the other side forever.

The other host is a network namespace (`netns_host`), joined to this one
by a veth pair; cutting it drops every packet both ways, so a worker
killed in there after the cut sends nothing, not even its FIN or RST, and
a driver killed here reaches nothing in there. With
``liveness_timeout=`` (seconds) on ``daisy.Server`` and
``daisy.run_blockwise``, the server watches every TCP connection (TCP
keepalive and TCP_USER_TIMEOUT) and requeues the block of a worker that
vanished; the timeout travels to the workers in their context, so a
``daisy.Client`` watches its server the same way and exits once it is
unreachable.

Deadlines here only catch hangs; the times measured are printed
(``pytest -rA`` shows them) and kept with ``record_property``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import line_task, recorder, take_calls, worker_logs
from netns_host import NetnsHost, other_host

import daisy

#: the liveness timeout the runs use (seconds)
LIVENESS = 3.0

#: how long a run may take before it counts as hung
RUN_DEADLINE = 90.0

#: how long an idle worker may outlive its server before it counts as hung
EXIT_DEADLINE = 60.0

#: the worker on the other host: ``hold`` takes a block and keeps it (the
#: test then cuts the host and kills it); ``wait`` asks for a block while
#: the task's only block is out with a local worker, and reports what came
#: back. stdout: its own progress; stderr: daisy's log and any traceback.
REMOTE = """
import json, logging, os, sys, time

logging.basicConfig(
    level=logging.INFO, format="%(asctime)s remote %(levelname)s %(name)s: %(message)s"
)
import daisy

mode, signals = sys.argv[1], sys.argv[2]


def note(name, text=""):
    path = os.path.join(signals, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


client = daisy.Client()  # the context comes from DAISY_CONTEXT
print("remote: connected:", client.connected, flush=True)
if mode == "hold":
    block = client.acquire_block().__enter__()
    if block is None:
        note("took", "null")
    else:
        offset = [int(c) for c in block.write_roi.offset]
        note("took", json.dumps({"id": block.block_id[1], "offset": offset}))
    print("remote: holding", block, flush=True)
    time.sleep(3600)
else:
    note("acquiring")
    with client.acquire_block() as block:
        print("remote: acquire returned", block, flush=True)
    note("returned", repr(block))
print("remote: exiting", flush=True)
"""

#: a driver on this host, in a process of its own (so that the test can
#: kill it as a power loss would): one task of one block, whose local
#: worker holds it until the file ``go`` appears; where the server listens
#: goes to ``context`` (it holds the run's token: owner-only), the states
#: to stdout when the run ends.
DRIVER = """
import json, os, sys, time
import daisy

signals, host = sys.argv[1], sys.argv[2]
daisy.logging.set_log_basedir(os.path.join(signals, "logs"))


def note(name, text=""):
    path = os.path.join(signals, name)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def on_start(context):
    note("context", context.to_env())


def hold_until_go(block):
    note("local_took", str(os.getpid()))
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(signals, "go")) and time.time() < deadline:
        time.sleep(0.05)


roi = daisy.Roi((0,), (10,))
task = daisy.Task(
    "idle", roi, roi, roi, process_function=hold_until_go, max_workers=1, init_callback_fn=on_start
)
states = daisy.run_blockwise(
    task, host=host, return_states=True, summary=False, progress=False, liveness_timeout={liveness}
)
s = states["idle"]
print(json.dumps({{"completed": s.completed_count, "total": s.total_block_count,
                  "failed": s.failed_count}}), flush=True)
"""


@pytest.fixture
def netns_host() -> Iterator[NetnsHost]:
    """Another host for the test (a network namespace), removed after."""
    with other_host() as host:
        yield host


@pytest.fixture
def signals(tmp_path: Path) -> Path:
    """A directory where the processes of a test leave their signals."""
    path = tmp_path / "signals"
    path.mkdir()
    return path


def wait_for(path: Path, timeout: float, *alive: Any) -> bool:
    """Wait until ``path`` exists (True), ``timeout`` passes or one of the
    ``alive`` processes / threads has ended (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        for p in alive:
            ended = (not p.is_alive()) if isinstance(p, threading.Thread) else p.poll() is not None
            if ended:
                return path.exists()
        time.sleep(0.02)
    return path.exists()


def start_remote(
    host: NetnsHost, tmp_path: Path, signals: Path, mode: str, context: str
) -> subprocess.Popen[bytes]:
    """The worker on the other host, joined with ``context`` (the value of
    ``DAISY_CONTEXT``); its output goes to ``remote.out`` / ``remote.err``."""
    script = tmp_path / "remote.py"
    script.write_text(REMOTE)
    env = {**os.environ, daisy.Context.ENV_VARIABLE: context}
    with open(tmp_path / "remote.out", "wb") as out, open(tmp_path / "remote.err", "wb") as err:
        return host.popen(
            [sys.executable, "-u", str(script), mode, str(signals)],
            env=env,
            stdout=out,
            stderr=err,
            cwd=tmp_path,
        )


def output(tmp_path: Path, name: str) -> str:
    """What a process of the test wrote to ``<name>.out`` and ``.err``."""
    parts = []
    for suffix in ("out", "err"):
        path = tmp_path / f"{name}.{suffix}"
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        parts.append(f"--- {name} {suffix} ---\n{text[-4000:]}")
    return "\n".join(parts)


def session_members(sid: int) -> list[int]:
    """Pids of the processes of session ``sid`` (a driver started with
    ``start_new_session`` and every worker it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (what a power loss does to
    a host's processes)."""
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_driver(tmp_path: Path, signals: Path, host: str) -> subprocess.Popen[bytes]:
    """`DRIVER` in a session of its own, listening on ``host``."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(liveness=LIVENESS))
    with open(tmp_path / "driver.out", "wb") as out, open(tmp_path / "driver.err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-u", str(script), str(signals), host],
            stdout=out,
            stderr=err,
            cwd=tmp_path,
            start_new_session=True,
        )


def idle_remote_worker(
    host: NetnsHost, tmp_path: Path, signals: Path
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A driver here whose only block is out with its local worker, and a
    worker on the other host that has asked for a block and waits; the
    driver and the remote worker."""
    driver = start_driver(tmp_path, signals, host.root_addr)
    started = wait_for(signals / "context", 60, driver) and wait_for(
        signals / "local_took", 60, driver
    )
    assert started, "the driver did not start its run:\n" + output(tmp_path, "driver")
    context = (signals / "context").read_text()
    remote = start_remote(host, tmp_path, signals, "wait", context)
    asking = wait_for(signals / "acquiring", 30, remote)
    assert asking, "the remote worker did not connect:\n" + output(tmp_path, "remote")
    time.sleep(1.0)  # its request reaches the server
    assert remote.poll() is None, "the remote worker got an answer:\n" + output(tmp_path, "remote")
    assert host.root_connections(), "no TCP connection from the other host"
    return driver, remote


def wait_exit(proc: subprocess.Popen[bytes], until: float) -> float | None:
    """Wait until ``proc`` exits (its exit time, monotonic) or ``until``
    passes (None)."""
    while time.monotonic() < until:
        if proc.poll() is not None:
            return time.monotonic()
        time.sleep(0.05)
    return time.monotonic() if proc.poll() is not None else None


# --------------------------------------------------------------------------
# a worker's host dies: its block comes back


def test_block_of_a_worker_whose_host_lost_power_is_retried(
    netns_host, tmp_path, signals, calls, log_dir, record_property
):
    """A worker on another machine takes a block, then its machine loses
    power: no FIN, no RST, nothing ever arrives again. The other workers
    finish every other block; the run must notice the dead connection
    within about ``liveness_timeout``, count the attempt as failed, have a
    local worker redo the block and finish, instead of waiting for it
    forever."""
    took = signals / "took"
    remote: dict[str, subprocess.Popen[bytes]] = {}

    def join_from_the_other_host(context: daisy.Context) -> None:
        remote["proc"] = start_remote(netns_host, tmp_path, signals, "hold", context.to_env())

    def wait_for_the_remote_worker(block: daisy.Block) -> None:
        # the local worker does not drain the task before the remote one
        # has its block
        deadline = time.time() + 30
        while not took.exists() and time.time() < deadline:
            time.sleep(0.02)

    n = 6
    task = line_task(
        "powerloss",
        n,
        process_function=recorder(calls, wait_for_the_remote_worker),
        max_workers=1,
        init_callback_fn=join_from_the_other_host,
    )
    stop = threading.Event()
    server = daisy.Server(host=netns_host.root_addr, stop_event=stop, liveness_timeout=LIVENESS)
    result: dict[str, Any] = {}

    def drive() -> None:
        try:
            result["states"] = server.run_blockwise(task, progress=False)
        except BaseException as e:  # re-raised in the test's thread
            result["error"] = e

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    try:
        assert wait_for(took, 60, thread), (
            "the remote worker took no block:\n" + output(tmp_path, "remote") + str(result)
        )
        held = json.loads(took.read_text())
        assert held is not None, "the remote worker got no block:\n" + output(tmp_path, "remote")
        # the power goes: nothing leaves the host from now on, then its
        # processes die
        netns_host.cut()
        remote["proc"].kill()
        remote["proc"].wait(10)
        cut_at = time.monotonic()
        thread.join(RUN_DEADLINE)
        elapsed = time.monotonic() - cut_at
        hung = thread.is_alive()
        if hung:
            stop.set()  # ends the run with the states so far
            thread.join(30)
    finally:
        stop.set()
    if hung:
        so_far = result.get("states", {}).get("powerloss")
        figures = (
            None
            if so_far is None
            else f"{so_far.completed_count} of {so_far.total_block_count} blocks completed"
        )
        pytest.fail(
            f"the run still waited for the dead worker's block {held} {elapsed:.0f} s after its "
            f"host lost power (stopped then: {figures}; blocks done here: "
            f"{sorted(take_calls(calls))})\n" + worker_logs(log_dir)
        )
    print(f"run ended {elapsed:.1f} s after the cut (liveness_timeout={LIVENESS})")
    record_property("run_end_after_cut_s", round(elapsed, 2))
    if "error" in result:
        raise result["error"]
    s = result["states"]["powerloss"]
    assert (s.completed_count, s.failed_count, s.orphaned_count) == (n, 0, 0), worker_logs(log_dir)
    assert server.unmanaged_clients == 1
    # the lost attempt counts as a failed attempt of that block, of no
    # managed worker
    assert [(t, i, w) for t, i, w, _ in server.failures] == [("powerloss", held["id"], None)]
    # the local worker did every block, the lost one included
    done = take_calls(calls)
    assert set(done) == {("powerloss", (10 * i,)) for i in range(n)}, done
    assert done[("powerloss", tuple(held["offset"]))] == 1, done


# --------------------------------------------------------------------------
# the driver's host goes away: idle remote workers exit


def test_idle_remote_worker_exits_when_the_driver_host_dies(
    netns_host, tmp_path, signals, record_property
):
    """A worker on another machine waits for a block (none is ready: the
    task's only block is out with a local worker) when the driver's
    machine loses power: the driver and its local workers die and nothing
    they send reaches the worker. It must give up and exit (with a log
    line saying why) within about ``liveness_timeout``, not hold its
    cluster slot for the rest of the week."""
    driver, remote = idle_remote_worker(netns_host, tmp_path, signals)
    try:
        netns_host.cut()
        kill_session(driver.pid)
        driver.wait(10)
        cut_at = time.monotonic()
        exited = wait_exit(remote, cut_at + EXIT_DEADLINE)
    finally:
        kill_session(driver.pid)
        (signals / "go").touch()
    shown = output(tmp_path, "remote")
    if exited is not None:
        print(
            f"remote worker exited {exited - cut_at:.1f} s after the driver's host died "
            f"(liveness_timeout={LIVENESS}), status {remote.returncode}\n{shown}"
        )
        record_property("remote_exit_after_cut_s", round(exited - cut_at, 2))
    assert exited is not None, (
        f"the remote worker still waited {EXIT_DEADLINE:.0f} s after the driver's host died "
        "(its context must carry the run's liveness_timeout)\n" + shown
    )
    err = (tmp_path / "remote.err").read_text(errors="replace")
    assert err.strip(), "the remote worker exited without a word about why\n" + shown


def test_idle_remote_worker_exits_after_a_partition_at_the_end_of_the_run(
    netns_host, tmp_path, signals, record_property
):
    """A worker on another machine waits for a block when the network
    between it and the driver is cut; meanwhile the run's last block
    finishes here, so the driver's "no more blocks" and its close are lost,
    and the driver exits. When the network comes back the driver's machine
    has long forgotten the connection (it gives up retransmitting to an
    unreachable peer; the test has its kernel forget at once). The run
    must end, and the worker must exit within about ``liveness_timeout``,
    not wait for an answer that will never come."""
    driver, remote = idle_remote_worker(netns_host, tmp_path, signals)
    try:
        netns_host.cut()
        cut_at = time.monotonic()
        (signals / "go").touch()  # the local worker finishes the last block
        ended = wait_exit(driver, cut_at + RUN_DEADLINE)
        assert ended is not None, (
            "the run did not end while an idle remote worker was cut off\n"
            + output(tmp_path, "driver")
        )
        print(f"the run ended {ended - cut_at:.1f} s after the cut")
        record_property("run_end_after_cut_s", round(ended - cut_at, 2))
        assert driver.returncode == 0, output(tmp_path, "driver")
        states = json.loads((tmp_path / "driver.out").read_text().splitlines()[-1])
        assert states == {"completed": 1, "total": 1, "failed": 0}, states
        # the driver's kernel forgets the connection, then the network heals
        try:
            forgotten = netns_host.forget_root_connections()
        except RuntimeError as e:
            pytest.skip(f"cannot make this kernel forget a connection: {e}")
        print("forgotten on the driver's side:", forgotten)
        exited = wait_exit(remote, cut_at + 10)
        netns_host.heal()
        healed_at = time.monotonic()
        if exited is None:
            exited = wait_exit(remote, cut_at + EXIT_DEADLINE)
    finally:
        kill_session(driver.pid)
    shown = output(tmp_path, "remote")
    if exited is not None:
        when = "before" if exited <= healed_at else "after"
        print(
            f"remote worker exited {exited - cut_at:.1f} s after the cut ({when} the heal at "
            f"{healed_at - cut_at:.1f} s; liveness_timeout={LIVENESS}), "
            f"status {remote.returncode}\n{shown}"
        )
        record_property("remote_exit_after_cut_s", round(exited - cut_at, 2))
    assert exited is not None, (
        f"the remote worker still waited {EXIT_DEADLINE:.0f} s after the cut, "
        f"{EXIT_DEADLINE - (healed_at - cut_at):.0f} s after the network came back (its context "
        "must carry the run's liveness_timeout)\n" + shown
    )
    err = (tmp_path / "remote.err").read_text(errors="replace")
    assert err.strip(), "the remote worker exited without a word about why\n" + shown


# --------------------------------------------------------------------------
# the option itself


def build_server(bad: Any) -> None:
    """Build a server with ``liveness_timeout=bad``."""
    daisy.Server(liveness_timeout=bad)


def run_one_task(bad: Any) -> None:
    """Run a small task with ``liveness_timeout=bad``."""
    daisy.run_blockwise(line_task("t", 2), liveness_timeout=bad, summary=False, progress=False)


@pytest.mark.parametrize("bad", [0, -1, "x", math.nan], ids=["zero", "negative", "str", "nan"])
@pytest.mark.parametrize("entry", [build_server, run_one_task], ids=["Server", "run_blockwise"])
def test_liveness_timeout_must_be_a_positive_number(entry, bad):
    """A typo in a driver script (``liveness_timeout=0``, a negative
    number, a string, NaN) is refused, by ``daisy.Server(...)`` as it is
    built and by ``daisy.run_blockwise(...)`` before any run starts, with
    an error that names the parameter, rather than a run whose dead peers
    are never noticed or are dropped at once."""
    # a string is the wrong type, as for Task(timeout="x")
    with pytest.raises(TypeError if isinstance(bad, str) else ValueError, match="liveness_timeout"):
        entry(bad)
