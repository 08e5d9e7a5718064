"""Small helpers shared by the daisy test suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import daisy


def wait_until(condition: Any, what: str, timeout: float = 30.0, interval: float = 0.01) -> None:
    """Poll `condition` every `interval` seconds (10 ms; more where asking
    costs, as a SLURM query does) until it holds, instead of sleeping a
    fixed time and hoping: as fast as the machine allows, and sturdy on a
    loaded one. Fails naming `what` after `timeout` seconds (a generous
    deadline: only a hang misses it)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not so after {timeout:.0f} s")
        time.sleep(interval)


def roi(offset: Sequence[int], shape: Sequence[int]) -> daisy.Roi:
    """A funlib ``Roi`` (``daisy.Roi``) from plain sequences."""
    return daisy.Roi(tuple(offset), tuple(shape))


def noop(block: daisy.Block) -> None:
    """A block function that does nothing (the block succeeds)."""


def make_task(
    task_id: str,
    total: tuple[Sequence[int], Sequence[int]],
    read: tuple[Sequence[int], Sequence[int]],
    write: tuple[Sequence[int], Sequence[int]],
    **kwargs: Any,
) -> daisy.Task:
    """A ``daisy.Task`` from ``(offset, shape)`` pairs, with a no-op block
    function unless ``process_function`` is given."""
    kwargs.setdefault("process_function", noop)
    return daisy.Task(task_id, roi(*total), roi(*read), roi(*write), **kwargs)


def line_task(task_id: str, n: int, size: int = 10, **kwargs: Any) -> daisy.Task:
    """A 1D task of ``n`` independent-looking blocks of ``size`` (read ROI
    equal to the write ROI, so blocks of one task never conflict)."""
    return make_task(task_id, ((0,), (n * size,)), ((0,), (size,)), ((0,), (size,)), **kwargs)


def bid(block: daisy.Block) -> tuple[str, int]:
    """The hashable id of a block: ``(task_id, spatial_id)``."""
    task_id, spatial_id = block.block_id
    return (task_id, spatial_id)


def ids(blocks: Iterable[daisy.Block]) -> set[tuple[str, int]]:
    """The set of block ids of some blocks."""
    return {bid(b) for b in blocks}


def roi_json(r: daisy.Roi) -> list[list[int]]:
    """A ROI as the fixtures store it: ``[offset, shape]``."""
    return [list(r.offset), list(r.shape)]


def transitive_downstream(
    graph: daisy.DependencyGraph, start: Iterable[daisy.Block]
) -> set[tuple[str, int]]:
    """Ids of every block reachable from ``start`` through ``downstream``
    (the start blocks themselves excluded unless reachable again)."""
    seen: set[tuple[str, int]] = set()
    stack = [d for b in start for d in graph.downstream(b)]
    while stack:
        b = stack.pop()
        if bid(b) in seen:
            continue
        seen.add(bid(b))
        stack.extend(graph.downstream(b))
    return seen


@pytest.fixture(autouse=True)
def _isolated_daisy_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test starts with worker logs (and the run reports of untracked
    tasks) in a fresh temporary directory, never the repository, and with
    no tracking base directory; the previous settings come back after."""
    old_log = daisy.logging.get_log_basedir()
    old_mode = daisy.logging.get_log_mode()
    old_tracking = daisy.get_tracking_basedir()
    daisy.logging.set_log_basedir(tmp_path_factory.mktemp("daisy_logs"))
    daisy.set_tracking_basedir(None)
    yield
    daisy.logging.set_log_basedir(old_log)
    if old_log is not None:
        daisy.logging.set_log_mode(old_mode)
    daisy.set_tracking_basedir(old_tracking)


@pytest.fixture
def log_dir() -> Path:
    """The worker log directory of the running test (a fresh temporary one,
    set by the autouse fixture above)."""
    path = daisy.logging.get_log_basedir()
    assert path is not None
    return Path(path)


def run_tasks(tasks: Any, mp: bool, timeout: float = 60.0) -> dict[str, daisy.TaskState]:
    """Run ``tasks`` serially (``mp=False``) or on worker processes, the
    latter on a thread with a time limit so a hung run fails its test
    instead of stalling the suite; the task states."""
    if not mp:
        return daisy.SerialServer().run_blockwise(tasks)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["states"] = daisy.Server().run_blockwise(tasks, progress=False)
        except BaseException as e:  # re-raised in the test's thread
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"the run did not end within {timeout} s"
    if "error" in result:
        raise result["error"]
    return result["states"]


def offsets_of(task: daisy.Task) -> list[tuple[int, ...]]:
    """Write offsets of every block of ``task``."""
    graph = daisy.DependencyGraph([task])
    return [tuple(int(c) for c in b.write_roi.offset) for b in graph.blocks(task.task_id)]


@pytest.fixture
def calls(tmp_path: Path) -> Path:
    """A directory where `recorder` block functions note their calls."""
    path = tmp_path / "calls"
    path.mkdir()
    return path


def recorder(calls_dir: Path, body: Any = None) -> Any:
    """A block function that notes its call (task id and write offset, one
    file per process, so worker processes can use it), then runs
    ``body(block)`` (which may fail the block)."""
    calls_path = str(calls_dir)

    def process(block: daisy.Block) -> None:
        offset = " ".join(str(int(c)) for c in block.write_roi.offset)
        with open(os.path.join(calls_path, f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{block.task_id} {offset}\n")
        if body is not None:
            body(block)

    return process


def take_calls(calls_dir: Path) -> Counter[tuple[str, tuple[int, ...]]]:
    """Counter of ``(task_id, write offset)`` of the calls noted so far;
    forgets them (the next run starts from zero)."""
    out = Counter()
    for path in sorted(Path(calls_dir).glob("*.txt")):
        for line in path.read_text().splitlines():
            task_id, *offset = line.split()
            out[(task_id, tuple(int(c) for c in offset))] += 1
        path.unlink()
    return out


@pytest.fixture
def tracking(tmp_path: Path) -> Path:
    """A tracking base directory for this test."""
    path = tmp_path / "tracking"
    daisy.set_tracking_basedir(path)
    return path


@pytest.fixture
def rec_dir(tmp_path: Path) -> Path:
    """An empty directory where worker-side block functions write records."""
    path = tmp_path / "records"
    path.mkdir()
    return path


def read_records(rec_dir: Path, suffix: str = ".jsonl") -> list[dict[str, Any]]:
    """Every JSON line of every ``*<suffix>`` file in ``rec_dir``, file by file."""
    records: list[dict[str, Any]] = []
    for path in sorted(Path(rec_dir).glob(f"*{suffix}")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def worker_logs(log_dir: Path) -> str:
    """The tail of every worker log under ``log_dir``, for assertion messages."""
    parts = []
    for path in sorted(Path(log_dir).glob("*/worker_*")):
        parts.append(f"--- {path} ---\n{path.read_text(errors='replace')[-3000:]}")
    return "\n".join(parts) or "(no worker logs)"


def children_of(pid: int) -> list[tuple[int, str]]:
    """``(pid, state letter)`` of every process whose parent is ``pid``."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(pid):
            children.append((int(entry.name), fields[0]))
    return children


def proc_state(pid: int) -> str | None:
    """The state letter of a process (``R``, ``S``, ``Z``...), None if it
    does not exist."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def package_index_reachable(requirement: str) -> bool:
    """Whether pip can fetch ``requirement`` from the package index: the
    downstream tests skip only when it cannot (no network), never when
    ``make downstream-deps`` merely was not run."""
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", d, requirement],
            capture_output=True,
            timeout=120,
        )
    return proc.returncode == 0


#: a user's worker script, as frameworks load one from a file path (a
#: config or model script; dacapo-ml's worker files): a heavy import, a
#: class whose instance the block function captures, a helper at module
#: level, and a ``spawn_worker`` that returns the block function
USER_SCRIPT = """\
import json
import os

import numpy as np

SOURCE = "{source}"


class Threshold:
    def __init__(self, level):
        self.level = level

    def apply(self, values):
        return values > self.level


def offset_of(block):
    return int(block.write_roi.offset[0])


def spawn_worker(out_dir, level):
    threshold = Threshold(level)

    def process(block):
        values = np.arange(10) + offset_of(block)
        with open(os.path.join(out_dir, f"{{offset_of(block)}}.json"), "w") as f:
            json.dump(
                {{
                    "pid": os.getpid(),
                    "module": __name__,
                    "source": SOURCE,
                    "above": int(threshold.apply(values).sum()),
                }},
                f,
            )

    return process
"""


def load_user_script(directory: Path, how: str, name: str = "user_worker") -> Any:
    """A module made from `USER_SCRIPT` the way ``how`` says, from a file in
    ``directory`` (which is not on ``sys.path``): ``"source_file_loader"``
    (``SourceFileLoader(name, path).load_module()``, dacapo-ml's way),
    ``"spec_from_file_location"`` (the documented recipe, registered in
    ``sys.modules``), ``"deleted_after_loading"`` (the same, from a file
    removed once loaded) or ``"from_a_string"`` (no file at all)."""
    import importlib.util
    import types
    from importlib.machinery import SourceFileLoader

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(USER_SCRIPT.format(source=f"{how} {path}"))
    if how == "source_file_loader":
        return SourceFileLoader(name, str(path)).load_module()
    if how == "from_a_string":
        module = types.ModuleType(name)
        exec(compile(USER_SCRIPT.format(source=how), f"<{name}>", "exec"), module.__dict__)
        sys.modules[name] = module
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if how == "deleted_after_loading":
        path.unlink()
    else:
        assert how == "spec_from_file_location", how
    return module


def check_user_script_outputs(out_dir: Path, n: int, module: Any) -> list[dict[str, Any]]:
    """Every block of a `USER_SCRIPT` task of ``n`` blocks of 10 wrote what
    the module loaded in this process computes, from a worker process."""
    records = [json.loads((out_dir / f"{10 * i}.json").read_text()) for i in range(n)]
    for i, r in enumerate(records):
        assert r["module"] == module.__name__, r
        assert r["source"] == module.SOURCE, r
        assert r["above"] == int(
            module.Threshold(15).apply(__import__("numpy").arange(10) + 10 * i).sum()
        )
        assert r["pid"] != os.getpid(), r
    return records
