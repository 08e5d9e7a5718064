"""daisy 2.0.0's Python-level additions: the new ``daisy.logging`` functions,
``Context`` as a mapping (``keys``/``values``/``items``/``get(k, default)``
and ``from_env_string``) and ``JsonProgressObserver(path=None,
stream=None)`` with ``on_start``/``on_progress``/``on_finish``.

``tests/fixtures/v2_python/record_v2_python.py`` recorded the released
daisy 2.0.0 and 1.2.2 black-box (see its docstring); the module fixture
below runs the same script under this package and the tests compare,
section by section. Where this package deliberately differs, the test
says so and checks our behaviour instead.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import daisy
import daisy.logging as daisy_logging
from daisy.progress import default_observers

FIXTURES = Path(__file__).parent / "fixtures" / "v2_python"
RECORDER = FIXTURES / "record_v2_python.py"
V200: dict[str, Any] = json.loads((FIXTURES / "daisy_2.0.0.json").read_text())
V122: dict[str, Any] = json.loads((FIXTURES / "daisy_1.2.2.json").read_text())
V200_RICH: dict[str, Any] = json.loads((FIXTURES / "daisy_2.0.0_rich.json").read_text())["rich"]


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recorder's JSON for this package (one run, shared by the module)."""
    out = tmp_path_factory.mktemp("v2_python") / "ours.json"
    subprocess.run(
        [sys.executable, str(RECORDER), str(out)], check=True, timeout=180, cwd=out.parent
    )
    return dict(json.loads(out.read_text()))


@pytest.fixture(scope="module")
def ours_rich(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("v2_python_rich") / "ours.json"
    subprocess.run(
        [sys.executable, str(RECORDER), str(out), "--only", "rich"],
        check=True,
        timeout=120,
        cwd=out.parent,
    )
    return dict(json.loads(out.read_text())["rich"])


# ------------------------------------------------------------ daisy.logging


def test_logging_has_the_2_0_0_names(ours: dict[str, Any]) -> None:
    assert ours["logging_names"] == V200["logging_names"]
    assert all(V200["logging_names"].values())


def test_logging_signatures(ours: dict[str, Any]) -> None:
    assert ours["logging"]["signatures"] == V200["logging"]["signatures"]


def test_logging_logger_is_the_daisy_logger(ours: dict[str, Any]) -> None:
    assert ours["logging"]["logger"] == V200["logging"]["logger"]
    assert daisy_logging.logger is logging.getLogger("daisy")


def test_set_log_level(ours: dict[str, Any]) -> None:
    """Levels as `logging.Logger.setLevel` takes them, on the "daisy" logger."""
    assert ours["logging"]["log_level"] == V200["logging"]["log_level"]


def test_set_traceback_style(ours: dict[str, Any]) -> None:
    assert ours["logging"]["traceback_style"] == V200["logging"]["traceback_style"]


@pytest.mark.parametrize("case", sorted(V200["logging"]["format_traceback"]))
def test_format_traceback(ours: dict[str, Any], case: str) -> None:
    assert ours["logging"]["format_traceback"][case] == V200["logging"]["format_traceback"][case]


def test_format_traceback_rich(ours_rich: dict[str, Any]) -> None:
    """The "rich" style, byte for byte, where rich is importable."""
    if not ours_rich["rich_importable"]:
        pytest.skip("rich is not installed here")
    assert ours_rich == V200_RICH


def test_format_traceback_never_raises() -> None:
    """2.0.0's docstring promises it never raises; where 2.0.0's own fallback
    does (an exc_type without ``__name__``), ours still answers."""
    text = daisy_logging.format_traceback(1, 2, 3)  # type: ignore[arg-type]
    assert isinstance(text, str) and "daisy failed to format the traceback" in text


def test_clear_logs(ours: dict[str, Any]) -> None:
    assert ours["logging"]["clear_logs"] == V200["logging"]["clear_logs"]


def test_emit_failure(ours: dict[str, Any]) -> None:
    assert ours["logging"]["emit_failure"] == V200["logging"]["emit_failure"]


def test_slots_outside_a_worker(ours: dict[str, Any]) -> None:
    assert ours["logging"]["slots_outside_a_worker"] == V200["logging"]["slots_outside_a_worker"]


def _as_worker(
    monkeypatch: pytest.MonkeyPatch, log_dir: Path | None, key: str = "log_dir"
) -> Path | None:
    """Make this process look like worker 3 of task "seg", as the server
    starts it: ``DAISY_CONTEXT`` names the log directory, and (file or both
    mode) the server has created the worker's log files."""
    context = {"hostname": "h", "port": 1, "task_id": "seg", "worker_id": 3, "token": "x"}
    context[key] = None if log_dir is None else str(log_dir)
    monkeypatch.setenv("DAISY_CONTEXT", json.dumps(context))
    if log_dir is None:
        return None
    base = log_dir / "seg" / "worker_3"
    base.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (".out", ".err"):
        Path(str(base) + suffix).touch()
    return base


@pytest.mark.parametrize("key", ["log_dir", "logdir"])
def test_current_slot_files_in_a_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str
) -> None:
    """In a worker process, the slot files are that worker's log files
    (appended to), until `close_all_log_files`."""
    base = _as_worker(monkeypatch, tmp_path / "logs", key)
    try:
        files = daisy_logging.current_slot_files()
        assert files is not None
        out, err = files
        assert daisy_logging.current_slot_files() == (out, err)
        out.write("to out\n")
        err.write("to err\n")
    finally:
        daisy_logging.close_all_log_files()
    assert out.closed and err.closed
    assert Path(f"{base}.out").read_text() == "to out\n"
    assert Path(f"{base}.err").read_text() == "to err\n"


def test_current_slot_files_without_worker_log_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No log directory (console only), or the server made no log files for
    the worker (console mode): no slot files."""
    _as_worker(monkeypatch, None)
    assert daisy_logging.current_slot_files() is None
    monkeypatch.setenv(
        "DAISY_CONTEXT", json.dumps({"task_id": "seg", "worker_id": 3, "log_dir": str(tmp_path)})
    )
    assert daisy_logging.current_slot_files() is None


def test_emit_failure_in_a_worker_reaches_its_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a worker process the server routes stderr by the log mode, so the
    message always goes there, whatever this process's own mode says."""
    _as_worker(monkeypatch, None)
    daisy_logging.set_log_mode("file")
    cap = io.StringIO()
    monkeypatch.setattr(sys, "__stderr__", cap)
    daisy_logging.emit_failure("block ('seg', 1) failed: boom")
    assert cap.getvalue() == "block ('seg', 1) failed: boom\n"


# ------------------------------------------------------------ Context


@pytest.mark.parametrize(
    "case",
    sorted(set(V200["context"]) - {"from_env_string"}),
)
def test_context(ours: dict[str, Any], case: str) -> None:
    assert ours["context"][case] == V200["context"][case]


@pytest.mark.parametrize("text", sorted(V200["context"]["from_env_string"]))
def test_context_from_env_string(ours: dict[str, Any], text: str) -> None:
    got = ours["context"]["from_env_string"][text]
    assert got == V200["context"]["from_env_string"][text]


def test_context_where_the_releases_agree(ours: dict[str, Any]) -> None:
    """Behaviour 1.2.2 and 2.0.0 share stays (both compare by identity, both
    raise KeyError for a missing key)."""
    for case in ("eq_same_values", "getitem_missing"):
        assert V122["context"][case] == V200["context"][case]
        assert ours["context"][case] == V200["context"][case]


def test_context_from_env_string_reads_our_to_env() -> None:
    """Our ``to_env`` is JSON (what the server puts in ``DAISY_CONTEXT``):
    ``from_env_string`` reads it back with its types, and reads 2.0.0's
    ``key=value:...`` form as strings."""
    c = daisy.Context(hostname="h", port=5, task_id="t", worker_id=3, logdir="/tmp/x")
    back = daisy.Context.from_env_string(c.to_env())
    assert sorted(back.items()) == sorted(c.items())
    assert back["port"] == 5
    assert daisy.Context.from_env_string("port=5:logdir=/tmp/x").items() == [
        ("port", "5"),
        ("logdir", "/tmp/x"),
    ]
    with pytest.raises(ValueError, match="invalid context token"):
        daisy.Context.from_env_string('["a"]')
    with pytest.raises(ValueError, match="not a daisy context"):
        daisy.Context.from_env_string("{broken")


def test_context_from_env_reads_both_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAISY_CONTEXT", "hostname=h:port=5")
    assert daisy.Context.from_env().items() == [("hostname", "h"), ("port", "5")]
    monkeypatch.setenv("DAISY_CONTEXT", '{"hostname": "h", "port": 5}')
    assert daisy.Context.from_env()["port"] == 5
    monkeypatch.setenv("DAISY_CONTEXT", "bad")
    with pytest.raises(ValueError, match="invalid context token: bad"):
        daisy.Context.from_env()
    monkeypatch.delenv("DAISY_CONTEXT")
    with pytest.raises(KeyError):
        daisy.Context.from_env()


def test_context_mapping_carries_every_key() -> None:
    """keys/values/items, len, ``in`` and copies carry every entry, a
    ``logdir`` (set by the server) included; the token stays out of repr."""
    c = daisy.Context(hostname="h", port=5, token="secret", logdir="/logs")
    assert c.keys() == ["hostname", "port", "token", "logdir"]
    assert c.values() == ["h", 5, "secret", "/logs"]
    assert c.items() == list(zip(c.keys(), c.values(), strict=True))
    assert len(c) == 4 and "logdir" in c and list(c) == c.keys()
    assert c.copy().items() == c.items()
    assert c.get("logdir") == "/logs" and c.get("nope", default=1) == 1
    assert "secret" not in repr(c)
    del c["logdir"]
    assert "logdir" not in c.keys()


# ------------------------------------------------------------ JsonProgressObserver


PROGRESS_CASES = sorted(set(V200["progress"]) - {"path_in_missing_dir", "run"})
#: what each line also carries for the readers of this package's earlier
#: lines: ``task_id``, ``time`` and ``pending`` always, ``workers`` in a run
LEGACY_KEYS = ("task_id", "time", "pending", "workers")


def without_legacy(value: Any) -> Any:
    """A progress record with our extra line keys taken out: from each line
    (a dict with an "event") and from each list of key names."""
    if isinstance(value, dict):
        drop = LEGACY_KEYS if "event" in value else ()
        return {k: without_legacy(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value) and "task" in value:
            return [v for v in value if v not in LEGACY_KEYS]
        return [without_legacy(v) for v in value]
    return value


@pytest.mark.parametrize("case", PROGRESS_CASES)
def test_json_progress_observer(ours: dict[str, Any], case: str) -> None:
    """2.0.0's lines, key order included; ours carry extra keys after them."""
    assert without_legacy(ours["progress"][case]) == V200["progress"][case]


def test_json_progress_observer_extra_keys(ours: dict[str, Any]) -> None:
    v200_order = V200["progress"]["stream_key_orders"][0]
    for order in ours["progress"]["stream_key_orders"]:
        assert order == v200_order + ["task_id", "time", "pending"]
    for line in ours["progress"]["stream_lines"]:
        assert line["task_id"] == line["task"] and line["time"] == "same as t"
    assert ours["progress"]["run"]["keys"] == sorted(
        V200["progress"]["run"]["keys"] + ["pending", "task_id", "time", "workers"]
    )
    last = ours["progress"]["run"]["last"]
    # the last tick may come before the worker has exited
    assert last["pending"] == 0 and last["workers"] in (0, 1)


def test_json_progress_observer_in_a_run(ours: dict[str, Any]) -> None:
    """A real run, observed through ``run_blockwise(task, progress=obs)``."""
    assert without_legacy(ours["progress"]["run"]) == V200["progress"]["run"]


def test_json_progress_observer_creates_missing_directories(
    ours: dict[str, Any], tmp_path: Path
) -> None:
    """2.0.0 raises FileNotFoundError for a path in a missing directory; ours
    creates it, as it always has."""
    assert V200["progress"]["path_in_missing_dir"]["error"] == "FileNotFoundError"
    assert ours["progress"]["path_in_missing_dir"] == {"ok": None}
    obs = daisy.JsonProgressObserver(tmp_path / "a" / "b" / "p.jsonl")
    obs.on_finish({})
    assert (tmp_path / "a" / "b" / "p.jsonl").exists()


def _state(**counts: int) -> SimpleNamespace:
    names = ("total_block_count", "ready_count", "processing_count", "completed_count")
    names += ("skipped_count", "failed_count", "orphaned_count", "pending_count")
    return SimpleNamespace(**{n: counts.get(n, 0) for n in names})


def test_2_0_0_style_observers_are_driven_by_the_server_ticks() -> None:
    """`default_observers` turns an observer with on_start/on_progress/
    on_finish into one the server's ticks drive: on_start at the first tick,
    on_progress when any count changed since, on_finish at close; every call
    gets all tasks' states, in pipeline order."""
    calls: list[tuple[str, dict[str, int]]] = []

    class Observer:
        def on_start(self, states: dict[str, Any]) -> None:
            calls.append(("start", {t: s.completed_count for t, s in states.items()}))

        def on_progress(self, states: dict[str, Any]) -> None:
            calls.append(("progress", {t: s.completed_count for t, s in states.items()}))

        def on_finish(self, states: dict[str, Any]) -> None:
            calls.append(("finish", {t: s.completed_count for t, s in states.items()}))

    (obs,) = default_observers(["a", "b"], Observer())
    for done_a, done_b in ((0, 0), (0, 0), (1, 0), (1, 0), (2, 1)):
        obs.update("a", _state(completed_count=done_a), 1)  # type: ignore[arg-type]
        obs.update("b", _state(completed_count=done_b), 1)  # type: ignore[arg-type]
    obs.close()
    assert calls == [
        ("start", {"a": 0, "b": 0}),
        ("progress", {"a": 1, "b": 0}),
        ("progress", {"a": 2, "b": 1}),
        ("finish", {"a": 2, "b": 1}),
    ]
    assert [list(c[1]) for c in calls] == [["a", "b"]] * 4


def test_observers_with_only_some_methods_and_lists() -> None:
    """Missing on_* methods are skipped (as 2.0.0 does); a list may mix
    2.0.0-style observers with update/close ones."""
    seen: list[str] = []

    class OnlyProgress:
        def on_progress(self, states: dict[str, Any]) -> None:
            seen.append("progress")

    class Ours:
        def update(self, task_id: str, state: Any, workers: int) -> None:
            seen.append("update")

        def close(self) -> None:
            seen.append("close")

    observers = default_observers(["a"], [OnlyProgress(), Ours()])
    for done in (0, 1):
        for o in observers:
            o.update("a", _state(completed_count=done), 1)  # type: ignore[arg-type]
    for o in observers:
        o.close()
    assert seen == ["update", "progress", "update", "close"]
    with pytest.raises(TypeError, match="progress"):
        default_observers(["a"], object())


def test_json_progress_observer_without_a_tick_still_closes(tmp_path: Path) -> None:
    """A run that stops before its first tick still closes the file."""
    json_obs = daisy.JsonProgressObserver(path=tmp_path / "p.jsonl")
    (obs,) = default_observers(["a"], [json_obs])
    obs.close()
    assert (tmp_path / "p.jsonl").read_text() == ""
    with pytest.raises(ValueError, match="closed file"):
        json_obs.on_progress({})


def test_tick_states_carry_workers() -> None:
    """What a 2.0.0-style observer gets is a dict (task id to state, in
    pipeline order) with each task's live workers in ``.workers``, and the
    JSON lines say them."""
    got: list[Any] = []

    class Observer:
        def on_start(self, states: dict[str, Any]) -> None:
            got.append(states)

    (obs,) = default_observers(["a", "b"], Observer())
    obs.update("a", _state(total_block_count=2), 2)  # type: ignore[arg-type]
    obs.update("b", _state(total_block_count=1), 0)  # type: ignore[arg-type]
    (states,) = got
    assert isinstance(states, dict) and list(states) == ["a", "b"]
    assert states.workers == {"a": 2, "b": 0}
    stream = io.StringIO()
    daisy.JsonProgressObserver(stream=stream).on_progress(states)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["task"], line["workers"]) for line in lines] == [("a", 2), ("b", 0)]


def test_json_progress_observer_in_a_list(tmp_path: Path) -> None:
    """Ours also takes a list of observers (2.0.0 silently ignores a list)."""
    stream = io.StringIO()
    task = daisy.Task(
        "L",
        total_roi=daisy.Roi((0,), (20,)),
        read_roi=daisy.Roi((0,), (10,)),
        write_roi=daisy.Roi((0,), (10,)),
        process_function=lambda b: None,
        max_workers=1,
    )
    assert daisy.run_blockwise([task], progress=[daisy.JsonProgressObserver(stream=stream)])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "finish"
    assert {line["task"] for line in lines} == {"L"}
    assert lines[-1]["completed"] == 2
    assert not stream.closed


def test_json_progress_observer_docstrings() -> None:
    for obj in (
        daisy.JsonProgressObserver,
        daisy.JsonProgressObserver.on_start,
        daisy.JsonProgressObserver.on_progress,
        daisy.JsonProgressObserver.on_finish,
        daisy.Context.keys,
        daisy.Context.values,
        daisy.Context.items,
        daisy.Context.get,
        daisy.Context.from_env_string,
        *(getattr(daisy_logging, n) for n in V200["logging_names"] if n != "logger"),
    ):
        assert obj.__doc__ and obj.__doc__.strip(), obj


def test_recorder_leaves_no_files(ours: dict[str, Any]) -> None:
    """The recorder works in its own temporary directory."""
    assert not os.path.exists(FIXTURES / "logs")
