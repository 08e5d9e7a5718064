"""A run nobody else can join or corrupt, tried as an adversary would.

Each test here failed on the code before its fix (see the closing notes of
issue 11): the run token leaked through the local socket's name in the
world-readable ``/proc/net/unix``; a process of another user that had the
token could take blocks through the local socket; Ctrl-C (or sys.exit)
inside a check function was logged as a failed check and the run went on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import children_of, line_task, run_tasks

import daisy
from daisy import _daisy


def wait_for(path: Path, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)


class HeldRun:
    """A distributed run whose blocks wait for a go-ahead, so a test can look
    at the run from outside while it is in flight. The run token comes from
    the task's ``init_callback_fn`` (which the driver calls with the
    workers' context)."""

    def __init__(self, tmp_path: Path, **task_kwargs: Any) -> None:
        self.started = tmp_path / "started"
        self.go = tmp_path / "go"
        started, go = str(self.started), str(self.go)
        self.contexts: list[daisy.Context] = []

        def block_function(block: daisy.Block) -> None:
            Path(started).touch()
            while not os.path.exists(go):
                time.sleep(0.01)

        self.task = line_task(
            "held",
            2,
            process_function=block_function,
            init_callback_fn=self.contexts.append,
            max_workers=1,
            **task_kwargs,
        )
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result["ok"] = daisy.run_blockwise([self.task], progress=False)
        except BaseException as e:
            self.result["error"] = e

    def __enter__(self) -> HeldRun:
        self.thread.start()
        wait_for(self.started, "the first block")
        return self

    def __exit__(self, *exc: object) -> None:
        self.go.touch()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the run did not end"

    @property
    def context(self) -> daisy.Context:
        assert self.contexts, "init_callback_fn was not called"
        return self.contexts[0]


def test_the_token_is_nowhere_another_user_can_read_it(tmp_path: Path, tracking: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    run = HeldRun(tmp_path)
    with run:
        token = run.context["token"]
        assert isinstance(token, str) and len(token) >= 32
        unix = Path("/proc/net/unix").read_text()
        assert "@daisy-" in unix, "the run's local socket is listed (the check means something)"
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        for where, text in (("/proc/net/unix", unix), ("ps", ps)):
            assert token not in text and token[:16] not in text, f"the token is in {where}"
        assert token not in repr(run.context)
    assert run.result.get("ok") is True, run.result
    daisy.run_blockwise([line_task("after", 2)], progress=daisy.JsonProgressObserver(progress))
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    written += [p for p in Path(daisy.logging.get_log_basedir() or tmp_path).rglob("*")]
    assert any(p.name == "runs.jsonl" for p in written)
    for path in written:
        if path.is_file():
            assert token.encode() not in path.read_bytes(), f"the token is in {path}"


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user (CI runs as root)")
def test_a_local_connection_from_another_user_gets_no_block(tmp_path: Path) -> None:
    run = HeldRun(tmp_path)
    with run:
        ctx = run.context
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the other user, who somehow has the token
            os.close(read)
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                client = _daisy.Client(ctx["hostname"], ctx["port"], ctx["token"], "held")
                answer = "BLOCK" if client.acquire_block() is not None else "NONE"
            except BaseException as e:
                answer = f"REFUSED {type(e).__name__}"
            os.write(write, answer.encode())
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        answer = os.read(read, 1000).decode()
        os.close(read)
        assert status == 0
        assert answer.startswith("REFUSED"), answer
    assert run.result.get("ok") is True, run.result


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_check_function_stops_the_run(interrupt: type) -> None:
    """The driver calls check functions; Ctrl-C (or SIGTERM, raised as
    SystemExit by daisy) while one runs must stop the run, kill its workers
    and reach the caller, not be logged as a failed check."""

    def check(block: daisy.Block) -> bool:
        if block.block_id[1] == 3:
            raise interrupt()
        return False

    task = line_task("checked", 8, check_function=check, max_workers=2)
    with pytest.raises(interrupt):
        run_tasks([task], mp=True)
    deadline = time.monotonic() + 10
    while [c for c in children_of(os.getpid()) if c[1] != "Z"]:
        assert time.monotonic() < deadline, "workers outlived the stopped run"
        time.sleep(0.05)


def test_an_ordinary_exception_in_a_check_function_only_fails_the_check() -> None:
    def check(block: daisy.Block) -> bool:
        raise ValueError("cannot tell")

    task = line_task("unsure", 4, check_function=check, max_workers=1)
    states = run_tasks([task], mp=True)
    assert states["unsure"].completed_count == 4, "every block ran"


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"timeout": 1e300}, "timeout"),
        ({"max_retries": 2**40}, "max_retries"),
        ({"max_workers": 2**40}, "max_workers"),
        ({"max_worker_restarts": 2**40}, "max_worker_restarts"),
        ({"requires": {"gpu": 2**70}}, "requires"),
    ],
)
def test_out_of_range_settings_are_refused_at_task_construction(
    kwargs: dict[str, Any], param: str
) -> None:
    with pytest.raises(ValueError, match=param):
        line_task("bad", 2, **kwargs)


@pytest.mark.parametrize("port", [-1, 70000])
def test_an_impossible_port_is_refused(port: int) -> None:
    with pytest.raises(ValueError, match="port"):
        daisy.Server(port=port)


def test_a_task_downstream_of_another_dimension_is_refused_when_the_pipeline_is_built() -> None:
    flat = line_task("flat", 4)
    square = daisy.Task(
        "square",
        daisy.Roi((0, 0), (40, 40)),
        daisy.Roi((0, 0), (10, 10)),
        daisy.Roi((0, 0), (10, 10)),
        process_function=lambda b: None,
        upstream_tasks=[flat],
    )
    with pytest.raises(ValueError, match="upstream_tasks.*axes"):
        daisy.Pipeline.of(square)


def test_a_chain_of_thousands_of_tasks_builds() -> None:
    task = line_task("t0", 1)
    for i in range(1, 2000):
        task = line_task(f"t{i}", 1, upstream_tasks=[task])
    pipeline = daisy.Pipeline.of(task)
    assert len(pipeline) == 2000


def test_a_second_run_on_a_store_in_use_is_refused_before_any_block(
    tmp_path: Path, tracking: Path
) -> None:
    ran: list[int] = []
    with HeldRun(tmp_path) as first:
        second = line_task("held", 2, process_function=lambda b: ran.append(1))
        with pytest.raises(RuntimeError, match="in use by another run") as excinfo:
            run_tasks([second], mp=False)
        assert str(tracking / "held") in str(excinfo.value)
        assert f"pid {os.getpid()}" in str(excinfo.value), "the holder is named"
    assert first.result.get("ok") is True, first.result
    assert ran == [], "the refused run processed nothing"
    # once the first run is over the store is free again
    states = run_tasks([line_task("held", 2)], mp=False)
    assert states["held"].skipped_count == 2


HOLDER = """
import sys, time, daisy
daisy.set_tracking_basedir(sys.argv[1])
def hold(block):
    print("holding", flush=True)
    time.sleep(600)
roi = daisy.Roi((0,), (10,))
daisy.run_blockwise([daisy.Task("held", roi, roi, roi, process_function=hold)],
                    multiprocessing=False)
"""


def test_a_lock_left_by_a_killed_run_does_not_block_the_next(tracking: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tracking)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(RuntimeError, match=f"pid {holder.pid}"):
            run_tasks([line_task("held", 1)], mp=False)
    finally:
        holder.kill()
        holder.wait()
    states = run_tasks([line_task("held", 1)], mp=False)
    assert states["held"].completed_count == 1


def test_two_tasks_on_one_tracking_store_are_refused_when_the_pipeline_is_built(
    tmp_path: Path,
) -> None:
    store = tmp_path / "shared"
    a = line_task("a", 2, tracking_path=store)
    b = line_task("b", 2, tracking_path=tmp_path / "." / "shared")
    with pytest.raises(ValueError, match="same tracking store"):
        daisy.Pipeline.of([a, b])


@pytest.mark.parametrize("task_id", ["./seg", "../seg", "..", "a\\\\b", "/seg", "seg/"])
def test_a_task_id_that_leaves_its_base_or_aliases_another_is_refused(task_id: str) -> None:
    """A task id names directories: one that leaves the base directory or
    names another id's directory is refused (ids that nest, such as
    ``a/b``, are taken: tests/test_path_task_ids.py)."""
    with pytest.raises(ValueError, match="task_id"):
        line_task(task_id, 2)


@pytest.mark.parametrize(
    ("task_id", "why"),
    [
        ("seg\nERROR forged log line", "control character"),
        ("seg\tx", "control character"),
        ("invoice\u202egnp.exe", "bidirectional control"),
        ("a\u2066b", "bidirectional control"),
        ("s" * 300, "300 bytes long"),
        ("\u00e9" * 128, "256 bytes long"),
    ],
    ids=["newline", "tab", "rlo", "isolate", "300-chars", "256-bytes"],
)
def test_a_task_id_that_cannot_name_a_file_or_a_log_line_is_refused_when_built(
    task_id: str, why: str
) -> None:
    """Issue 26, item 16: a 300-character id failed only at run time (its
    log directory could not be made), and a newline or a right-to-left
    override was accepted (a forged log line; an id shown as another). The
    Task constructor refuses each, saying why and suggesting an id."""
    with pytest.raises(ValueError, match=f"task_id: .*{why}.*Use an id such as"):
        line_task(task_id, 2)
    # the longest id a file name can hold is fine
    assert line_task("s" * 255, 2).task_id == "s" * 255


def test_a_worker_that_asks_for_a_block_while_holding_the_last_gets_an_error(
    tmp_path: Path,
) -> None:
    """A worker function taking blocks in pairs: with 3 blocks, the third
    is held while the worker asks for a fourth that can never come. The
    server answers with an error instead of waiting forever."""
    notes = str(tmp_path / "notes.txt")

    def pairs() -> None:
        client = daisy.Client()
        while True:
            with client.acquire_block() as first:
                if first is None:
                    return
                try:
                    with client.acquire_block() as second:
                        if second is None:
                            return
                except RuntimeError as e:
                    with open(notes, "a") as f:
                        f.write(str(e) + "\n")

    states = run_tasks([line_task("pairs", 3, process_function=pairs, max_workers=1)], mp=True)
    assert states["pairs"].completed_count == 3
    text = Path(notes).read_text()
    assert "holds block" in text and "release" in text, text


def test_a_function_that_cannot_be_pickled_is_an_error_naming_the_task() -> None:
    lock = threading.Lock()
    task = line_task("locked", 2, process_function=lambda b: lock.locked(), max_workers=1)
    with pytest.raises(TypeError, match="'locked'.*cannot be sent to worker processes"):
        daisy.run_blockwise([task], progress=False)


def test_a_large_closure_runs_and_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    np = pytest.importorskip("numpy")
    big = np.ones(100 * 2**20 // 8)  # 100 MB captured by the function
    task = line_task("big", 8, process_function=lambda b: big.sum(), max_workers=2)
    with caplog.at_level("WARNING", logger="daisy"):
        states = run_tasks([task], mp=True, timeout=120)
    assert states["big"].completed_count == 8
    assert any("'big'" in r.getMessage() and "MB" in r.getMessage() for r in caplog.records)


def test_an_unwritable_report_path_fails_before_any_block(tmp_path: Path) -> None:
    ran: list[int] = []
    task = line_task("reported", 2, process_function=lambda b: ran.append(1))
    with pytest.raises(ValueError, match="report_html"):
        daisy.run_blockwise(
            [task], multiprocessing=False, report_html=tmp_path / "missing" / "r.html"
        )
    assert ran == []


def test_a_task_without_blocks_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="daisy"):
        daisy.Task(
            "empty",
            daisy.Roi((0,), (10,)),
            daisy.Roi((-5,), (20,)),
            daisy.Roi((0,), (10,)),
            process_function=lambda b: None,
            fit="valid",
        )
    assert any(
        "no blocks" in r.getMessage() and "read_roi" in r.getMessage() for r in caplog.records
    )


def test_the_wildcard_address_is_not_what_workers_are_told(tmp_path: Path) -> None:
    seen = str(tmp_path / "host")

    def note_host(block: daisy.Block) -> None:
        with open(seen, "w") as f:
            f.write(daisy.Context.from_env()["hostname"])

    task = line_task("wild", 1, process_function=note_host, max_workers=1)
    assert daisy.run_blockwise([task], host="0.0.0.0", progress=False)
    assert Path(seen).read_text() not in ("0.0.0.0", "", "::")


def test_a_stranger_gets_a_tiny_frame_allowance_before_hello(tmp_path: Path) -> None:
    """Before hello a frame may be at most a few KiB: a stranger announcing
    a big frame is cut off at once instead of being buffered (1 MiB each
    used to be reserved)."""
    import socket

    with HeldRun(tmp_path) as run:
        ctx = run.context
        with socket.create_connection((ctx["hostname"], int(ctx["port"])), timeout=5) as s:
            s.sendall((2**20 - 1).to_bytes(4, "big") + b"x" * 8192)
            s.settimeout(5)
            try:
                closed = s.recv(16) == b""
            except ConnectionResetError:
                closed = True
            assert closed, "the server waited for the rest of a 1 MiB frame"
    assert run.result.get("ok") is True, run.result


FEW_DESCRIPTORS = """
import logging, os, resource, sys, time
import daisy
import daisy.server  # noqa: F401  (everything imported before the limit)
logging.basicConfig(level=logging.WARNING)
roi, b = daisy.Roi((0,), (400,)), daisy.Roi((0,), (10,))
task = daisy.Task("fds", roi, b, b, process_function=lambda blk: time.sleep(0.02), max_workers=6)
spare = int(sys.argv[1])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + spare, hard))
print("RESULT", daisy.run_blockwise([task], progress=False), flush=True)
"""


def test_running_out_of_descriptors_delays_workers_and_abandons_nothing(tmp_path: Path) -> None:
    """With room for only a few workers, starts that fail for want of file
    descriptors are retried later; the task is not abandoned. Tried with a
    few limits, since what one worker costs in descriptors varies."""
    outcomes = []
    for spare in (14, 17, 20, 24):
        out = subprocess.run(
            [sys.executable, "-c", FEW_DESCRIPTORS, str(spare)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        text = out.stdout + out.stderr
        outcomes.append(("RESULT True" in text, "Too many open files" in text, spare))
    assert all(ok for ok, _, _ in outcomes), outcomes
    assert any(short for _, short, _ in outcomes), f"no limit was tight enough: {outcomes}"


def test_the_summary_shows_a_task_without_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    empty = daisy.Task(
        "empty",
        daisy.Roi((0,), (10,)),
        daisy.Roi((-5,), (20,)),
        daisy.Roi((0,), (10,)),
        process_function=lambda b: None,
    )
    daisy.run_blockwise([empty], multiprocessing=False)
    out = capsys.readouterr().out
    assert "no blocks" in out and "all blocks processed successfully" not in out, out


def test_two_runs_starting_together_on_a_fresh_store_do_not_crash(tracking: Path) -> None:
    """One creates the store, the other is refused by its lock; neither
    fails halfway through creating it (an OSError on a missing chunk)."""
    barrier = threading.Barrier(2)
    results: list[object] = []
    calls: list[int] = []

    def slow(block: daisy.Block) -> None:
        calls.append(block.block_id[1])
        time.sleep(0.2)

    def run() -> None:
        barrier.wait()
        try:
            results.append(run_tasks([line_task("fresh", 3, process_function=slow)], mp=False))
        except BaseException as e:
            results.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, RuntimeError) and "in use" in str(e) for e in errors), errors
    assert len(errors) < 2, "one of them ran"
    assert sorted(calls) == sorted(set(calls)), f"a block ran twice: {sorted(calls)}"


def test_an_interrupt_in_an_init_callback_stops_the_run() -> None:
    def init(context: daisy.Context) -> None:
        raise KeyboardInterrupt

    task = line_task("init", 4, init_callback_fn=init, max_workers=1)
    with pytest.raises(KeyboardInterrupt):
        run_tasks([task], mp=True)


def test_only_so_many_strangers_may_wait_to_say_hello(tmp_path: Path) -> None:
    """Connections that never say hello hold at most MAX_PENDING_HELLOS
    slots (256); the ones past that are told the server is busy (so a
    worker among them tries again) and closed within a moment, not after
    the 10 s hello timeout."""
    import socket

    with HeldRun(tmp_path) as run:
        ctx = run.context
        address = (ctx["hostname"], int(ctx["port"]))
        strangers = [socket.create_connection(address, timeout=5) for _ in range(300)]
        try:
            closed = 0
            # well before the 10 s hello timeout would close them anyway
            deadline = time.monotonic() + 5
            for s in strangers[-40:]:
                try:
                    # a busy answer may come first; then the server closes
                    while True:
                        s.settimeout(max(0.01, deadline - time.monotonic()))
                        if s.recv(4096) == b"":
                            closed += 1
                            break
                except ConnectionResetError:
                    closed += 1
                except TimeoutError:
                    pass
            assert closed >= 30, f"only {closed} of the last 40 strangers were turned away"
        finally:
            for s in strangers:
                s.close()
    assert run.result.get("ok") is True, run.result


FULL_DISK_SCRIPT = """
import sys
import daisy

def mark(block):
    pass

daisy.set_tracking_basedir(sys.argv[1])
task = daisy.Task(
    "t",
    daisy.Roi((0, 0), (4000, 100)),
    daisy.Roi((0, 0), (1, 1)),
    daisy.Roi((0, 0), (1, 1)),
    process_function=mark,
    max_workers=2,
    read_write_conflict=False,
)
try:
    daisy.run_blockwise([task], progress=False, summary=False)
except OSError as e:
    print("OSError:", e)
    sys.exit(3)
"""


def _tmpfs(mount: Path, size: str):
    """A tmpfs of ``size`` mounted at ``mount`` for the test (unmounted
    after it). Mounting needs root, which CI has; elsewhere the test is
    skipped, saying why."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs (CI runs as root)")
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)])
    if made.returncode != 0:
        pytest.skip("this machine cannot mount a tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)])


@pytest.fixture
def nearly_full_disk(tmp_path: Path):
    """A 2 MiB tmpfs with 128 KiB left: too little for the done markers and
    failure counts of 400,000 blocks."""
    for mount in _tmpfs(tmp_path / "small", "2m"):
        (mount / "filler").write_bytes(b"\1" * (2 * 2**20 - 128 * 2**10))
        yield mount


def test_a_tracking_store_on_a_full_disk_is_a_clear_error_not_a_crash(
    tmp_path: Path, nearly_full_disk: Path
) -> None:
    # the store's chunks were sparse files written through a mapping: the
    # first mark on a page the disk could not supply killed the driver with
    # SIGBUS (exit 135, no message, no report)
    script = tmp_path / "full.py"
    script.write_text(FULL_DISK_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(nearly_full_disk / "tracking")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "No space left on device" in out.stdout, out.stdout
    assert "tracking" in out.stdout, out.stdout


def _fails_at_once(block) -> None:
    raise ValueError("x" * 2000)


def test_a_run_of_many_failing_blocks_notes_a_bounded_number_of_attempts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # every attempt used to be kept in the driver (2.5 KB each: 2.5 GB for a
    # million failing blocks); past 10,000 they are counted, not noted
    task = line_task(
        "allfail", 10_100, size=1, process_function=_fails_at_once, max_retries=0, max_workers=2
    )
    server = daisy.Server()
    states = server.run_blockwise([task], progress=False)
    assert states["allfail"].failed_count == 10_100
    assert len(server.failures) == 10_000
    assert server.failures_unnoted == 100
    report = server.last_report["allfail"]
    assert report.blocks.failures == 10_100
    ((message, count),) = report.failure_causes.messages
    assert count == 10_100 and message.startswith("ValueError: xxx")
    notes = "\n".join(server.failure_notes()["allfail"])
    assert "100 more, in all tasks, were counted" in notes, notes


FILLED_MID_RUN_SCRIPT = """
import os, sys
import daisy

store, marks, filler, fill = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "fill"

def process(block):
    done_before = len(os.listdir(marks))
    if fill and done_before == 20:
        # another process fills the node-local disk, and the block fails
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\\1" * 65536)
        except OSError:
            pass
        raise ValueError("the disk is full")
    open(os.path.join(marks, str(block.block_id[1])), "w").close()

task = daisy.Task("t", daisy.Roi((0,), (100,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                  process_function=process, max_workers=1, max_retries=0,
                  tracking_path=store)
try:
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    print("SKIPPED", states["t"].skipped_count, "COMPLETED", states["t"].completed_count)
except OSError as e:
    print("OSError:", e)
    sys.exit(3)
"""


FIGURES_ON_A_FILLED_TMPFS = """
import os, sys
import daisy

store, filler = sys.argv[1], sys.argv[2]
FAR = 140_000  # in the second inner chunk of the 8-byte figure arrays

def process(block):
    if block.block_id[1] == 20:
        # another process fills the node-local disk; this block succeeds
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\\1" * 65536)
        except OSError:
            pass

def skip_between(block):
    # blocks 21 to FAR - 1 were done by an earlier run (as a scientist's
    # check of the output says), so the next block measured is far away
    return 20 < block.block_id[1] < FAR

task = daisy.Task("t", daisy.Roi((0,), (FAR + 5,)), daisy.Roi((0,), (1,)), daisy.Roi((0,), (1,)),
                  process_function=process, check_function=skip_between, max_workers=1,
                  max_retries=0, tracking_path=store, resource_tracking=True)
try:
    states = daisy.run_blockwise([task], progress=False, summary=False, return_states=True)
    print("SKIPPED", states["t"].skipped_count, "COMPLETED", states["t"].completed_count)
except OSError as e:
    print("OSError:", e)
    sys.exit(3)
"""


def test_figures_far_from_the_last_on_a_filled_tmpfs_are_an_oserror(
    tmp_path: Path, small_tmpfs: Path
):
    """Issue 40, item 7 on a full disk: the resource-tracking figures are
    sharded, and the first figure written into an inner chunk never written
    before must reserve it (and fill it) first. The disk filled by another
    process, the next measured block lands in a new inner chunk: an OSError
    naming the disk, never SIGBUS, and the rerun skips what was marked."""
    script = tmp_path / "figures.py"
    script.write_text(FIGURES_ON_A_FILLED_TMPFS)
    store, filler = small_tmpfs / "tracking", small_tmpfs / "filler"
    args = [sys.executable, str(script), str(store), str(filler)]
    out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "No space left on device" in out.stdout and str(store) in out.stdout, out.stdout
    filler.unlink()
    again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, (again.returncode, again.stdout, again.stderr[-2000:])
    skipped = int(again.stdout.split("SKIPPED ")[1].split()[0])
    assert skipped >= 21, again.stdout  # blocks 0 to 20 ran and were marked before
    group = zarr.open_group(str(store), mode="r")
    walls = group["wall_seconds"][...]
    assert not np.isnan(walls[:21]).any()
    assert np.isnan(walls[21:140_000]).all()


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """An empty 16 MiB tmpfs (a node-local /tmp or /dev/shm)."""
    yield from _tmpfs(tmp_path / "shm", "16m")


def test_a_tmpfs_filled_mid_run_is_an_oserror_never_sigbus(tmp_path: Path, small_tmpfs: Path):
    """Issue 40, item 3: the store on a tmpfs that another process fills
    mid-run; the block that fails then makes the driver read its failure
    count, a never-written page of a mapping, which tmpfs answers with
    SIGBUS when it has no page to give (exit -7, no message). Now a hole is
    never read through the mapping: the run ends with an OSError naming the
    disk, the store keeps every mark, and once space is freed the rerun
    redoes none of the blocks it recorded."""
    script = tmp_path / "filled.py"
    script.write_text(FILLED_MID_RUN_SCRIPT)
    marks = tmp_path / "marks"
    marks.mkdir()
    store, filler = small_tmpfs / "tracking", small_tmpfs / "filler"
    args = [sys.executable, str(script), str(store), str(marks), str(filler)]
    out = subprocess.run([*args, "fill"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "No space left on device" in out.stdout and str(store) in out.stdout, out.stdout
    done_before = len(list(marks.iterdir()))
    assert done_before == 20
    filler.unlink()
    for p in marks.iterdir():
        p.unlink()
    again = subprocess.run(
        [*args, "no-fill"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, (again.returncode, again.stdout, again.stderr[-2000:])
    assert f"SKIPPED {done_before} COMPLETED 100" in again.stdout, again.stdout
    assert len(list(marks.iterdir())) == 100 - done_before
