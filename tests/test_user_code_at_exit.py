"""What a block function leaves for its worker's exit is kept (issue 39).

Scientists keep a results file open across blocks and let the interpreter
close it, count in a module global and write the count from an ``atexit``
handler, or hand results to a non-daemon thread. A worker that leaves with
``os._exit`` loses all of it while the run says every block succeeded. The
block functions here are `shared/workloads/blockfns.py`'s, run on cold
workers (fresh interpreters) and warm ones (forked by the task's launcher),
each in a run of 40 blocks on 2 workers as the issue measured; an h5py file
opened at module level and closed only at exit is readable afterwards.
The SLURM variants are in ``test_spawners.py`` (they need its cluster).
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

import daisy

WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"
N_BLOCKS = 40


@pytest.fixture
def blockfns(tmp_path, monkeypatch):
    """The shared workloads module, with its evidence directory set for
    every worker (the driver's environment is the workers')."""
    if not (WORKLOADS / "blockfns.py").exists():
        pytest.fail(f"the shared workloads are missing: {WORKLOADS / 'blockfns.py'}")
    monkeypatch.syspath_prepend(str(WORKLOADS))
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    monkeypatch.setenv("DAISY_WL_DIR", str(evidence))
    import blockfns

    return blockfns, evidence


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``make(name, source)``: the module ``name`` written from ``source``
    into a directory on the path (workers get the driver's path) and
    imported, with an empty evidence directory in ``EVIDENCE`` for every
    worker; the module and that directory. Forgotten after the test."""
    import importlib

    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    monkeypatch.setenv("EVIDENCE", str(evidence))
    monkeypatch.syspath_prepend(str(module_dir))
    made = []

    def make(name, source):
        (module_dir / f"{name}.py").write_text(textwrap.dedent(source))
        made.append(name)
        return importlib.import_module(name), evidence

    yield make
    for name in made:
        sys.modules.pop(name, None)


def task_of(task_id, function, warm, workers=2, **kwargs):
    return daisy.Task(
        task_id,
        daisy.Roi((0,), (N_BLOCKS,)),
        daisy.Roi((0,), (1,)),
        daisy.Roi((0,), (1,)),
        process_function=function,
        max_workers=workers,
        warm_start=warm,
        **kwargs,
    )


def lines_in(evidence: Path, pattern: str) -> list[str]:
    return [line for p in sorted(evidence.glob(pattern)) for line in p.read_text().splitlines()]


def blocks_written(evidence: Path, pattern: str) -> list[int]:
    return sorted(int(line) for line in lines_in(evidence, pattern))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_results_file_kept_open_until_exit_holds_every_block(blockfns, warm):
    module, evidence = blockfns
    assert daisy.run_blockwise([task_of("results", module.per_worker_results, warm)])
    assert blocks_written(evidence, "results-*.csv") == list(range(N_BLOCKS))
    report = daisy.last_report()["results"]
    assert report.workers.warm_starts == (report.workers.count if warm else 0)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_atexit_handlers_of_the_block_function_run(blockfns, warm):
    module, evidence = blockfns
    assert daisy.run_blockwise([task_of("summary", module.atexit_summary, warm)])
    counts = [int(p.read_text()) for p in evidence.glob("summary-*.txt")]
    assert sum(counts) == N_BLOCKS, counts
    # one summary per worker that ran a block (the other may have had none)
    workers = daisy.last_report()["summary"].workers.by_id.values()
    assert len(counts) == sum(1 for w in workers if w.blocks_ok > 0), counts


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_non_daemon_writer_thread_finishes_its_writes(blockfns, warm):
    module, evidence = blockfns
    assert daisy.run_blockwise([task_of("threaded", module.threaded_writer, warm)])
    assert blocks_written(evidence, "threaded-*.csv") == list(range(N_BLOCKS))
    assert daisy.last_report()["threaded"].workers.exits == {"clean": 2}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_logging_handler_of_the_user_is_flushed(user_module, warm):
    """A buffered logging handler (MemoryHandler with a file target, the
    way results are batched) is flushed by the logging module's own exit
    hook."""
    buffered_log, evidence = user_module(
        "buffered_log",
        """
            import logging, logging.handlers, os

            _log = None

            def process(block):
                global _log
                if _log is None:
                    target = logging.FileHandler(
                        os.path.join(os.environ["EVIDENCE"], f"log-{os.getpid()}.txt"))
                    handler = logging.handlers.MemoryHandler(10_000, flushLevel=logging.CRITICAL,
                                                             target=target)
                    _log = logging.getLogger("results")
                    _log.addHandler(handler)
                    _log.setLevel(logging.INFO)
                    _log.propagate = False
                _log.info("%d", block.block_id[1])
            """,
    )
    assert daisy.run_blockwise([task_of("logged", buffered_log.process, warm)])
    assert blocks_written(evidence, "log-*.txt") == list(range(N_BLOCKS))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_file_held_by_an_object_in_a_reference_cycle_from_import_holds_every_block(
    user_module, warm
):
    """A results file opened when the module is imported, held by an
    object in a reference cycle (only the garbage collector frees it, at
    the interpreter's exit) and written at every block: every line is in
    the file after the run. A worker's exit may skip collecting what its
    launcher loaded (`daisy._worker.freeze_loaded`), but never the data
    of a file."""
    cyclic, evidence = user_module(
        "cyclic_results",
        """
            import os

            class Results:
                def __init__(self, path):
                    self.file = open(path, "a")
                    self.me = self  # freed only by the garbage collector

                def add(self, n):
                    self.file.write(f"{n}\\n")

            # opened at import: in the launcher for forked workers (who share
            # its file description, appending), in each cold worker for itself
            _results = Results(os.path.join(os.environ["EVIDENCE"], f"cyc-{os.getpid()}.csv"))

            def process(block):
                _results.add(block.block_id[1])
            """,
    )
    assert daisy.run_blockwise([task_of("cyclic", cyclic.process, warm)])
    assert blocks_written(evidence, "cyc-*.csv") == list(range(N_BLOCKS))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_an_h5py_file_opened_at_module_level_is_readable_after_the_run(user_module, warm):
    h5py = pytest.importorskip("h5py", reason="h5py is in the test extra")
    h5_results, evidence = user_module(
        "h5_results",
        """
            import os
            import h5py
            import numpy as np

            _file = None

            def process(block):
                global _file
                if _file is None:
                    path = os.path.join(os.environ["EVIDENCE"], f"w-{os.getpid()}.h5")
                    _file = h5py.File(path, "w")
                    _file.create_dataset("ids", shape=(0,), maxshape=(None,), dtype="i8",
                                         chunks=(64,))
                ids = _file["ids"]
                ids.resize((ids.shape[0] + 1,))
                ids[-1] = block.block_id[1]
            """,
    )
    assert daisy.run_blockwise([task_of("h5", h5_results.process, warm)])
    seen = []
    for path in sorted(evidence.glob("w-*.h5")):
        with h5py.File(path, "r") as f:
            seen.extend(int(i) for i in f["ids"][:])
    assert sorted(seen) == list(range(N_BLOCKS))


def test_a_worker_function_keeps_its_open_file_too(tmp_path):
    """A worker function (no arguments, its own `daisy.Client` loop) that
    keeps a file open in a global: the same exit."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    path = str(evidence)

    def worker():

        global _worker_results
        _worker_results = open(os.path.join(path, f"w-{os.getpid()}.csv"), "a")
        client = daisy.Client()
        while True:
            with client.acquire_block() as block:
                if block is None:
                    break
                _worker_results.write(f"{block.block_id[1]}\n")

    assert daisy.run_blockwise([task_of("own_loop", worker, warm=False)])
    assert blocks_written(evidence, "w-*.csv") == list(range(N_BLOCKS))


def test_a_worker_exit_code_set_by_the_user_code_is_not_taken_for_a_failure(blockfns):
    """The ordinary exit runs the user's finalisers; one that raises is
    printed by the interpreter and the worker still exits clean (CPython
    prints an atexit handler's exception and exits 0)."""
    module, evidence = blockfns

    def process(block):
        import atexit

        def broken():
            raise RuntimeError("a broken atexit handler")

        if not getattr(process, "registered", False):
            process.registered = True
            atexit.register(broken)
        module.per_worker_results(block)

    assert daisy.run_blockwise([task_of("broken_atexit", process, warm=False, workers=1)])
    assert blocks_written(evidence, "results-*.csv") == list(range(N_BLOCKS))
    report = daisy.last_report()["broken_atexit"]
    assert report.workers.exits == {"clean": 1}, report.workers.exits


def test_the_launcher_runs_no_user_finaliser_of_its_own(user_module):
    """A module that writes a line when it is imported and keeps its file
    open: the forked worker inherits the unflushed line and writes it
    once, as a cold worker does; the launcher itself, which ran no block,
    adds no copy (one worker, so that it certainly starts)."""
    import_header, evidence = user_module(
        "import_header",
        """
            import os
            _out = open(os.path.join(os.environ["EVIDENCE"], "header.txt"), "a")
            _out.write("imported\\n")

            def process(block):
                pass
            """,
    )
    # the driver's own import wrote one (unflushed) line: flush it now
    import_header._out.flush()
    driver_lines = (evidence / "header.txt").read_text().count("imported")
    task = task_of("header", import_header.process, warm=True, workers=1)
    assert daisy.run_blockwise([task])
    assert daisy.last_report()["header"].workers.warm_starts == 1
    lines = (evidence / "header.txt").read_text().count("imported")
    assert lines == driver_lines + 1, (lines, driver_lines)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_results_file_beside_zarr_writes_through_funlib_holds_every_block(user_module, warm):
    """The benchmark's threshold step, as a scientist writes it: each block
    writes its part of a zarr array through funlib.persistence (zarr's and
    dask's threads start in the worker) and appends a line to a results
    file kept open in a module global. A forked worker whose launcher still
    held the function at exit kept the module's dictionary from being
    cleared at interpreter exit, and lost every line (0 of 8)."""
    funlib = pytest.importorskip("funlib.persistence")
    import numpy as np

    funlib_results, evidence = user_module(
        "funlib_results",
        """
            import os

            _results = None

            def process(block):
                global _results
                import numpy as np
                from funlib.persistence import open_ds

                base = os.environ["EVIDENCE"]
                out = open_ds(os.path.join(base, "mask.zarr"), mode="r+")
                out[block.write_roi] = np.ones(out[block.write_roi].shape, dtype=np.uint8)
                if _results is None:
                    _results = open(os.path.join(base, f"results-{os.getpid()}.csv"), "a")
                _results.write(f"{block.block_id[1]}\\n")
            """,
    )
    funlib.prepare_ds(
        str(evidence / "mask.zarr"), shape=(64, 64, 64), dtype=np.uint8, chunk_shape=(32,) * 3
    )
    task = daisy.Task(
        "masked",
        daisy.Roi((0, 0, 0), (64, 64, 64)),
        daisy.Roi((0, 0, 0), (32, 32, 32)),
        daisy.Roi((0, 0, 0), (32, 32, 32)),
        process_function=funlib_results.process,
        max_workers=1,
        warm_start=warm,
    )
    assert daisy.run_blockwise([task])
    assert len(blocks_written(evidence, "results-*.csv")) == 8
