"""Warm starts: local workers forked by a per-task launcher that loaded the
function once, instead of fresh interpreters that import everything again.

Each test runs real workers. What it checks: warm and cold runs give the
same outputs and the same report (but for how workers started); a forked
worker measures its own memory and IO, not its launcher's; a launcher with
a Python thread goes cold and says why; a killed launcher loses no block;
a fully resumed task starts neither a worker nor a launcher; the numerical
libraries' native thread pools work in forked workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import daisy

N_BLOCKS = 12


def _roi_task(task_id: str, process, **kwargs) -> daisy.Task:
    size = 10 * N_BLOCKS
    return daisy.Task(
        task_id,
        daisy.Roi((0,), (size,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        process_function=process,
        max_workers=kwargs.pop("max_workers", 2),
        **kwargs,
    )


def _write_squares(out: Path):
    """A block function writing each block's squares into a memmap."""

    def process(block):
        import numpy

        data = numpy.memmap(out, dtype="int64", mode="r+", shape=(10 * N_BLOCKS,))
        lo, hi = block.write_roi.begin[0], block.write_roi.end[0]
        data[lo:hi] = numpy.arange(lo, hi) ** 2
        data.flush()

    return process


def _pipeline(out_dir: Path, warm: bool) -> list[daisy.Task]:
    first, second = out_dir / "first.dat", out_dir / "second.dat"
    for path in (first, second):
        np.memmap(path, dtype="int64", mode="w+", shape=(10 * N_BLOCKS,)).flush()

    def negate(block):
        import numpy

        src = numpy.memmap(first, dtype="int64", mode="r", shape=(10 * N_BLOCKS,))
        dst = numpy.memmap(second, dtype="int64", mode="r+", shape=(10 * N_BLOCKS,))
        lo, hi = block.write_roi.begin[0], block.write_roi.end[0]
        dst[lo:hi] = -src[lo:hi]
        dst.flush()

    up = _roi_task("square", _write_squares(first), warm_start=warm)
    down = _roi_task("negate", negate, warm_start=warm, upstream_tasks=[up])
    return [up, down]


def _comparable(task_report) -> dict:
    """A task report without what differs between any two runs (times) and
    what warm starts change on purpose."""
    d = task_report.to_dict()
    w = d["workers"]
    return {
        "blocks": {k: d["blocks"][k] for k in ("count", "skipped", "failures", "has_stats")},
        "outcome": d["outcome"],
        "workers": {
            "count": w["count"],
            "exits": w["exits"],
            # which worker took which block is the race it always is
            "blocks": [sum(r[k] for r in w["by_id"]) for k in ("blocks_ok", "blocks_failed")],
            "spawner": w["spawner"],
        },
        "keys": sorted(d),
        "worker_keys": sorted(w),
    }


def test_warm_and_cold_runs_give_the_same_outputs_and_reports(tmp_path, log_dir):
    reports = {}
    outputs = {}
    for warm in (True, False):
        out_dir = tmp_path / ("warm" if warm else "cold")
        out_dir.mkdir()
        assert daisy.run_blockwise(_pipeline(out_dir, warm), progress=False)
        reports[warm] = daisy.last_report()
        outputs[warm] = [
            np.array(np.memmap(out_dir / n, dtype="int64", mode="r")).tolist()
            for n in ("first.dat", "second.dat")
        ]
    expected = [i * i for i in range(10 * N_BLOCKS)]
    assert outputs[True] == outputs[False] == [expected, [-x for x in expected]]
    for task_id in ("square", "negate"):
        warm, cold = reports[True][task_id], reports[False][task_id]
        assert _comparable(warm) == _comparable(cold)
        assert {r.start for r in warm.workers.by_id.values()} == {"warm"}
        assert {r.start for r in cold.workers.by_id.values()} == {"cold"}
        assert warm.workers.warm_starts == warm.workers.count > 0
        assert cold.workers.warm_starts == 0
        assert warm.workers.launcher_startup is not None and warm.workers.launcher_startup > 0
        assert cold.workers.launcher_startup is None
        assert warm.workers.cold_start_reason is None is cold.workers.cold_start_reason
        assert f"starts {warm.workers.count} warm (launcher ready in" in str(reports[True])
        assert f"starts {cold.workers.count} cold" in str(reports[False])
    # the launcher writes its own log beside its workers'
    assert (log_dir / "square" / "launcher.err").exists()


def test_the_global_switch_starts_every_worker_cold(tmp_path, log_dir, monkeypatch):
    monkeypatch.setenv("DAISY_WARM_START", "0")
    assert daisy.run_blockwise(_pipeline(tmp_path, True), progress=False)
    for report in daisy.last_report().tasks.values():
        assert report.workers.warm_starts == 0 and report.workers.launcher_startup is None
    monkeypatch.setenv("DAISY_WARM_START", "maybe")
    with pytest.raises(ValueError, match="DAISY_WARM_START"):
        daisy.run_blockwise(_pipeline(tmp_path, True), progress=False)


def test_warm_start_wants_a_bool():
    with pytest.raises(TypeError, match="warm_start"):
        _roi_task("bad", lambda b: None, warm_start="yes")


class _Ballast:
    """Captured data whose unpickling makes a transient 600 MB peak (as a
    loader that decompresses would), then keeps 100 MB."""

    def __init__(self) -> None:
        self.kept = None

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        transient = np.ones(600 * 2**20 // 8)
        transient += 1
        del transient
        self.kept = np.ones(100 * 2**20 // 8)


def test_a_warm_worker_measures_its_own_peak_memory_and_io(tmp_path, tracking):
    ballast = _Ballast()
    written = tmp_path / "written"

    def process(block):
        import os

        import numpy

        assert ballast.kept is not None
        grown = numpy.ones(40 * 2**20 // 8)  # 40 MB of its own
        grown += 1
        with open(written / f"{block.block_id[1]}.bin", "wb") as f:
            f.write(os.urandom(3 * 2**20))
            f.flush()
            os.fsync(f.fileno())

    written.mkdir()
    task = _roi_task("ballast", process, resource_tracking=True, max_workers=1)
    assert task.warm_start
    assert daisy.run_blockwise(task, progress=False)
    report = daisy.last_report()["ballast"]
    assert report.workers.warm_starts == 1, report.workers
    records = [task.report().block(i) for i in range(N_BLOCKS)]
    peaks = [r.stats.peak_rss_bytes for r in records]
    # each block's peak is the worker's resident memory during that block:
    # the 100 MB it inherited plus the 40 MB it made, never the launcher's
    # 700 MB high-water mark while it loaded the function
    for peak in peaks:
        assert 100 * 2**20 < peak < 400 * 2**20, [p / 2**20 for p in peaks]
    writes = [r.stats.io_write_bytes for r in records]
    for w in writes:
        assert 3 * 2**20 <= w < 4 * 2**20, writes


THREADED_MODULE = """
import threading, time

chatty = threading.Thread(target=time.sleep, args=(3600,), name="chatty-poller", daemon=True)
chatty.start()


def process(block):
    import os
    with open(os.path.join(OUT, f"{block.block_id[1]}"), "w") as f:
        f.write(str(os.getpid()))
"""


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "pipeline.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, "DAISY_PROGRESS_INTERVAL": "3600"}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_launcher_with_a_python_thread_goes_cold_and_says_why(tmp_path):
    (tmp_path / "threaded.py").write_text(THREADED_MODULE.replace("OUT", repr(str(tmp_path))))
    done = _script(
        tmp_path,
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import daisy, threaded
        daisy.logging.set_log_basedir({str(tmp_path / "logs")!r})
        task = daisy.Task("threaded", daisy.Roi((0,), (60,)), daisy.Roi((0,), (10,)),
                          daisy.Roi((0,), (10,)), process_function=threaded.process,
                          max_workers=2)
        assert daisy.run_blockwise(task)
        w = daisy.last_report()["threaded"].workers
        print("STARTS", sorted(r.start for r in w.by_id.values()))
        print("REASON", w.cold_start_reason)
        """,
    )
    assert done.returncode == 0, done.stderr
    # every block ran, in cold workers
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == [
        str(i) for i in range(6)
    ]
    starts = next(line for line in done.stdout.splitlines() if line.startswith("STARTS"))
    assert "warm" not in starts and "cold" in starts, done.stdout
    reason = next(line for line in done.stdout.splitlines() if line.startswith("REASON"))
    assert "chatty-poller" in reason, done.stdout
    # logged once in the driver, naming the thread
    logged = [line for line in done.stderr.splitlines() if "starting its workers cold" in line]
    assert len(logged) == 1 and "chatty-poller" in logged[0], done.stderr
    # and the report says so too
    assert "started cold: the launcher runs 1 other Python thread(s) (chatty-poller)" in (
        done.stderr + done.stdout
    )


def test_a_killed_launcher_loses_no_block(tmp_path, log_dir):
    first = tmp_path / "killed-once"
    out = tmp_path / "out"
    out.mkdir()

    def process(block):
        import os
        import signal
        import time

        if block.block_id[1] == 3 and not first.exists():
            first.touch()
            # in a warm worker the parent is the launcher: kill it (this
            # worker dies with it, its block in hand)
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(30)
        (out / str(block.block_id[1])).write_text(str(os.getpid()))

    task = _roi_task("victim", process, max_workers=2)
    assert daisy.run_blockwise(task, progress=False)
    assert first.exists()
    assert sorted(int(p.name) for p in out.iterdir()) == list(range(N_BLOCKS))
    report = daisy.last_report()["victim"]
    w = report.workers
    starts = [r.start for r in w.by_id.values()]
    assert "warm" in starts and "cold" in starts, starts
    assert w.cold_start_reason is not None and "launcher exited" in w.cold_start_reason
    # the blocks in hand (one per warm worker: they all die with their
    # launcher) failed once each, were retried, and the task completed
    d = report.to_dict()
    assert d["outcome"] == "completed", d["outcome"]
    assert 1 <= d["blocks"]["failures"] <= 2, d["blocks"]
    assert w.exits.get("error", 0) >= 1, w.exits


def test_a_stopped_launcher_is_given_up_for_cold_starts(tmp_path):
    # a launcher that stops answering (SIGSTOP, a frozen cgroup, a process
    # stuck in the kernel) used to stall the run for good: the worker that
    # died was never replaced, as its fork request waited for an answer
    out = tmp_path / "out"
    out.mkdir()
    done = _script(
        tmp_path,
        f"""
        import os, signal
        from pathlib import Path
        import daisy

        OUT = Path({str(out)!r})
        daisy.logging.set_log_basedir({str(tmp_path / "logs")!r})

        def process(block):
            if block.block_id[1] == 3 and not (OUT / "stopped").exists():
                (OUT / "stopped").touch()
                # a warm worker's parent is its launcher: stop it, and die
                # with the block in hand, so that the run needs a new worker
                os.kill(os.getppid(), signal.SIGSTOP)
                os._exit(1)
            (OUT / str(block.block_id[1])).write_text(str(os.getpid()))

        task = daisy.Task("stalled", daisy.Roi((0,), (60,)), daisy.Roi((0,), (10,)),
                          daisy.Roi((0,), (10,)), process_function=process, max_workers=1)
        print("RESULT", daisy.run_blockwise(task, progress=False))
        w = daisy.last_report()["stalled"].workers
        print("STARTS", sorted(r.start for r in w.by_id.values()))
        print("REASON", w.cold_start_reason)
        """,
    )
    assert "RESULT True" in done.stdout, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir() if p.name.isdigit()) == [str(i) for i in range(6)]
    starts = next(line for line in done.stdout.splitlines() if line.startswith("STARTS"))
    assert "warm" in starts and "cold" in starts, done.stdout
    reason = next(line for line in done.stdout.splitlines() if line.startswith("REASON"))
    assert "answered nothing" in reason, done.stdout


def test_a_fully_resumed_task_starts_no_worker_and_no_launcher(tmp_path, tracking, log_dir):
    out = tmp_path / "out"
    out.mkdir()

    def process(block):
        (out / str(block.block_id[1])).touch()

    assert daisy.run_blockwise(_roi_task("resumed", process), progress=False)
    for p in out.iterdir():
        p.unlink()
    (log_dir / "resumed" / "launcher.err").unlink()
    assert daisy.run_blockwise(_roi_task("resumed", process), progress=False)
    w = daisy.last_report()["resumed"].workers
    assert (w.count, w.launcher_startup) == (0, None)
    assert list(out.iterdir()) == []
    assert not (log_dir / "resumed" / "launcher.err").exists()


def test_native_thread_pools_work_in_forked_workers(tmp_path, log_dir):
    """numpy (OpenBLAS) and blosc2, loaded in the launcher, may run native
    thread pools there; those are not a reason to go cold, and the forked
    workers use the libraries correctly."""
    pytest.importorskip("blosc2")
    out = tmp_path / "out"
    out.mkdir()
    # a module the function refers to is imported where it is unpickled:
    # in the launcher, which then runs Blosc's and OpenBLAS's threads
    import blosc2

    def process(block):
        import numpy

        a = numpy.arange(2_000_000, dtype="int64") * block.block_id[1]
        packed = blosc2.compress(a.tobytes(), typesize=8)
        back = numpy.frombuffer(blosc2.decompress(packed), dtype="int64")
        m = numpy.ones((300, 300))
        total = float((m @ m).sum()) + float(back.sum())
        (out / str(block.block_id[1])).write_text(repr(total))
        # the launcher (this worker's parent) loaded the libraries before it
        # forked: whether their native pools still run there depends on
        # the version (OpenBLAS stops its pool before a fork and restarts
        # it on its next call; blosc2 4 starts none on import), so what is
        # checked is that the worker forked from a launcher holding them
        maps = open(f"/proc/{os.getppid()}/maps").read()
        (out / f"libs-{block.block_id[1]}").write_text(
            " ".join(lib for lib in ("openblas", "blosc2") if lib in maps)
        )

    task = _roi_task("native", process, max_workers=2)
    assert daisy.run_blockwise(task, progress=False)
    w = daisy.last_report()["native"].workers
    assert w.warm_starts == w.count and w.cold_start_reason is None
    for i in range(N_BLOCKS):
        expected = 300.0**3 + float(sum(range(2_000_000)) * i)
        assert float((out / str(i)).read_text()) == expected
        assert (out / f"libs-{i}").read_text() == "openblas blosc2"


class _Counted:
    """100 MB of captured data that leaves a mark each time it is
    unpickled (in a launcher or a cold worker)."""

    def __init__(self, marks: Path) -> None:
        self.marks = marks
        self.data = np.zeros(100 * 2**20, dtype=np.uint8)

    def __getstate__(self):
        return {"marks": self.marks, "data": self.data}

    def __setstate__(self, state):
        self.__dict__.update(state)
        (self.marks / f"{os.getpid()}-{id(self)}").touch()


@pytest.mark.parametrize("warm", [True, False])
def test_a_large_capture_is_loaded_once_per_task_when_warm(tmp_path, log_dir, warm):
    marks = tmp_path / "marks"
    marks.mkdir()
    big = _Counted(marks)
    seen = tmp_path / "seen"
    seen.mkdir()

    def process(block):
        import time

        time.sleep(0.4)  # long enough that every worker connects
        (seen / str(block.block_id[1])).write_text(str(int(big.data[block.block_id[1]])))

    task = _roi_task("big", process, max_workers=3, warm_start=warm)
    assert daisy.run_blockwise(task, progress=False)
    assert sorted(int(p.name) for p in seen.iterdir()) == list(range(N_BLOCKS))
    w = daisy.last_report()["big"].workers
    connected = sum(r.startup is not None for r in w.by_id.values())
    loads = len(list(marks.iterdir()))
    if warm:
        assert loads == 1, (loads, connected)  # the launcher's, shared by every fork
        assert connected >= 2
    else:
        assert loads == connected >= 2, (loads, connected)


def _module_noting_its_importers(path: Path, marks: Path) -> None:
    """A module at ``path`` that notes the pid of every process importing it."""
    path.write_text(
        f"import os\nwith open({str(marks)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    )


def test_an_import_the_function_always_runs_is_loaded_once_by_the_launcher(
    tmp_path, log_dir, monkeypatch
):
    """Issue 44: ``import x`` at the top of the function's body, before any
    branch, runs on every call: the launcher imports it once, before the
    first block, and every forked worker has it. (Each worker used to pay
    it in its first block, 10-30x its other blocks for funlib.persistence;
    an import on a branch the function may never take is still left to the
    worker: see the next test.)"""
    marks = tmp_path / "imported-by"
    _module_noting_its_importers(tmp_path / "heavy_module_for_preload.py", marks)
    monkeypatch.syspath_prepend(str(tmp_path))
    pids = tmp_path / "worker-pids"
    pids.mkdir()

    def process(block):
        import os
        import time

        import heavy_module_for_preload  # noqa: F401

        time.sleep(0.2)
        (pids / str(os.getpid())).touch()

    task = _roi_task("preload", process, max_workers=2, warm_start=True)
    assert daisy.run_blockwise(task, progress=False)
    assert daisy.last_report()["preload"].workers.warm_starts == 2
    importers = marks.read_text().split()
    workers = {p.name for p in pids.iterdir()}
    assert len(workers) == 2, workers
    # imported once, by the launcher: no worker imported it again
    assert len(importers) == 1 and importers[0] not in workers, (importers, workers)


def test_the_launcher_imports_what_the_functions_module_imports(tmp_path, log_dir, monkeypatch):
    """What the function's module imports at its top level is imported
    once, in the launcher (unpickling the function imports its module), and
    every forked worker has it."""
    marks = tmp_path / "imported-by"
    _module_noting_its_importers(tmp_path / "toplevel_module_for_warm.py", marks)
    pids = tmp_path / "worker-pids"
    pids.mkdir()
    (tmp_path / "function_module_for_warm.py").write_text(
        textwrap.dedent(
            f"""
            import os
            import time

            import toplevel_module_for_warm  # noqa: F401


            def process(block):
                time.sleep(0.2)
                open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from function_module_for_warm import process

    task = _roi_task("toplevel", process, max_workers=2, warm_start=True)
    assert daisy.run_blockwise(task, progress=False)
    assert daisy.last_report()["toplevel"].workers.warm_starts == 2
    importers = marks.read_text().split()
    workers = {p.name for p in pids.iterdir()}
    assert len(workers) == 2, workers
    # this process, then the launcher: no worker imported it again
    assert len(importers) == 2 and importers[0] == str(os.getpid()), importers
    assert importers[1] not in workers, (importers, workers)


def test_every_tasks_launcher_starts_at_the_runs_start(tmp_path, log_dir, monkeypatch):
    """Issue 44: a downstream task's launcher started only once the task
    before it had begun (its launcher ready), so in a real pipeline the
    downstream task's first block waited for a second import (its launcher
    was ready 4.8 s into the run, the upstream one's 2.2 s). Every task's
    launcher starts when the run does: here the upstream function's module
    takes 1.5 s to import in its launcher, and the downstream launcher
    begins loading its own before that is over."""
    events = tmp_path / "events"
    driver = os.getpid()
    for name, slow in (("up_module_for_warm", True), ("down_module_for_warm", False)):
        (tmp_path / f"{name}.py").write_text(
            textwrap.dedent(
                f"""
                import os
                import time

                def _note(what):
                    with open({str(events)!r}, "a") as f:
                        f.write(f"{{what}} {{time.time()!r}}\\n")

                if os.getpid() != {driver}:  # a launcher, not the driver
                    _note("{name}-start")
                    if {slow}:
                        time.sleep(1.5)  # a heavy first import (torch, funlib)
                    _note("{name}-ready")


                def process(block):
                    time.sleep(0.05)
                """
            )
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    from down_module_for_warm import process as down
    from up_module_for_warm import process as up

    a = _roi_task("up", up, max_workers=1, warm_start=True)
    b = _roi_task("down", down, max_workers=1, warm_start=True)
    assert daisy.run_blockwise(a + b, progress=False)
    assert daisy.last_report()["down"].workers.warm_starts >= 1
    seen = dict(line.split() for line in events.read_text().splitlines())
    assert float(seen["down_module_for_warm-start"]) < float(seen["up_module_for_warm-ready"]), (
        "the downstream launcher waited for the upstream one",
        seen,
    )


def test_warm_starts_run_no_import_on_a_branch_the_function_never_takes(
    tmp_path, log_dir, monkeypatch
):
    """Issue 26, item 15: the launcher imported every module named in the
    function's body, on branches never taken too, so a module's side
    effect ran (a sleep, in the issue) where no cold worker runs it."""
    marker = tmp_path / "sidefx-imported"
    (tmp_path / "sidefx_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    # on the driver's sys.path, which the payload carries to the launcher
    monkeypatch.syspath_prepend(str(tmp_path))
    done = tmp_path / "done"
    done.mkdir()

    def process(block):
        # a branch the function never takes (``if False:`` alone would not
        # do: the compiler drops that import from the bytecode)
        if block.block_id[1] < 0:
            import sidefx_module  # noqa: F401
        if False:
            import sidefx_module  # noqa: F401
        (done / str(block.block_id[1])).touch()

    monkeypatch.delenv("DAISY_WARM_START", raising=False)
    assert daisy.spawners.warm_starts_enabled()
    task = _roi_task("sidefx", process, max_workers=2, warm_start=True)
    assert daisy.run_blockwise(task, progress=False)
    assert len(list(done.iterdir())) == N_BLOCKS
    assert daisy.last_report()["sidefx"].workers.warm_starts >= 1
    assert not marker.exists()


#: modules only the driver needs: a launcher (and a cold worker) that
#: imported them paid about half of ``import daisy`` before its first block
DRIVER_MODULES = (
    "daisy.convenience",
    "daisy.progress",
    "daisy.run_report",
    "daisy.server",
    "daisy.spawners",
    "daisy.task",
)


def fresh_python(code: str) -> str:
    """What ``code`` prints in a new interpreter (its imports its own)."""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout


@pytest.mark.parametrize("entry", ["daisy._launcher", "daisy._worker"])
def test_a_launcher_or_worker_imports_none_of_the_drivers_modules(entry):
    code = (
        f"import sys, {entry}; print(' '.join(m for m in {DRIVER_MODULES!r} if m in sys.modules))"
    )
    imported = fresh_python(code)
    assert imported.split() == [], f"{entry} imported {imported.strip()}"


def test_every_public_name_resolves_and_is_listed():
    # the package imports its names on first use: each one must resolve to
    # the object its module defines, and dir() must list it before that
    import importlib

    fresh = fresh_python("import daisy; print(' '.join(dir(daisy)))").split()
    for name in daisy.__all__:
        assert name in fresh, name
        value = getattr(daisy, name)
        assert value is not None, name
    assert daisy.Task is importlib.import_module("daisy.task").Task
    assert daisy.run_report is importlib.import_module("daisy.run_report")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = daisy.nope


def test_only_the_imports_every_call_runs_are_preloaded():
    """What the launcher imports ahead (issue 44): the imports before the
    function's first branch, and none on a branch it may never take."""
    import functools

    from daisy._launcher import unconditional_imports

    def top(block):
        import os.path  # noqa: F401
        from json import decoder, dumps  # noqa: F401

        if block is None:
            import csv  # noqa: F401
        import wave  # noqa: F401  (after a branch: not every call reaches it)

    assert unconditional_imports(top) == [("os.path", ()), ("json", ("decoder", "dumps"))]

    def guarded(block):
        try:
            import numpy  # noqa: F401
        except ImportError:
            pass

    assert unconditional_imports(guarded) == [("numpy", ())]

    def branch_first(block):
        if block:
            return
        import csv  # noqa: F401

    assert unconditional_imports(branch_first) == []
    assert unconditional_imports(functools.partial(top, None)) == unconditional_imports(top)
    assert unconditional_imports(print) == []  # no bytecode: nothing to read


def test_a_first_block_of_imports_is_called_imports_not_set_up(tmp_path, log_dir, monkeypatch):
    """Issue 44: the warm-up callout advised "move one-off set-up out of the
    block function" for a function that had none: its first block was an
    import. The worker times its first block's imports; where they are most
    of it the report says so, names the package, and says how the launcher
    loads it once (an import on a branch, as here, is not preloaded)."""
    (tmp_path / "slow_import_for_warmup.py").write_text("import time\ntime.sleep(0.6)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def process(block):
        import time

        if block.block_id[1] >= 0:  # a branch: the launcher leaves it to the worker
            import slow_import_for_warmup  # noqa: F401
        time.sleep(0.01)

    task = _roi_task("importer", process, max_workers=1, warm_start=True)
    assert daisy.run_blockwise(task, progress=False, summary=False)
    report = daisy.last_report()["importer"]
    text = report.render()
    assert "(mostly imports: see below)" in text, text
    assert "move one-off set-up" not in text, text
    assert "warm-up: a worker's first block was mostly imports (slow_import_for_warmup)" in text, (
        text
    )


def test_a_function_whose_module_initialises_cuda_gets_cold_workers(tmp_path, log_dir, monkeypatch):
    """Found on a real H200: the on-GPU test's module asks
    ``torch.cuda.is_available()`` at import, which initialises CUDA in the
    launcher, and every forked worker then failed every block with
    "Cannot re-initialize CUDA in forked subprocess". A launcher whose
    loading mapped the CUDA driver library goes cold and says why. Here a
    stand-in ``libcuda.so.1`` (no GPU on CI) is loaded at the module's
    import, as the CUDA runtime loads the real one."""
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the stand-in libcuda.so.1")
    source = tmp_path / "stand_in.c"
    source.write_text("int cuInit(unsigned int flags) { return 0; }\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60
    )
    (tmp_path / "cuda_at_import.py").write_text(
        textwrap.dedent(
            f"""
            import ctypes
            import time

            ctypes.CDLL({str(library)!r})  # what torch.cuda.is_available() does


            def process(block):
                time.sleep(0.01)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from cuda_at_import import process

    task = _roi_task("cuda", process, max_workers=2, warm_start=True)
    assert daisy.run_blockwise(task, progress=False, summary=False)
    workers = daisy.last_report()["cuda"].workers
    assert workers.warm_starts == 0
    assert workers.cold_start_reason is not None
    assert "initialised CUDA in the launcher" in workers.cold_start_reason
