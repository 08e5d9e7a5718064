"""The ``daisy`` command line: ``daisy report`` and ``daisy compare`` on
stores and run histories from real runs, and on synthetic histories where
the expected verdict is known."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import line_task

import daisy
from daisy.cli import SUMMARY_COLUMNS, compare_runs, main
from daisy.run_report import BlockSummary, Stat, TaskReport, WorkerSummary, read_runs


def append_run(path, report: TaskReport) -> None:
    """A synthetic history line, as the core writes one (Python itself
    never writes history: these tests make histories of figures no run
    would produce)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(report.to_dict()) + "\n")


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def sleepy(block):
    time.sleep(0.005)


def failing_once(marker_dir):
    def f(block):
        marker = marker_dir / f"{block.block_id[1]}"
        if block.block_id[1] == 1 and not marker.exists():
            marker.touch()
            raise RuntimeError("first attempt fails")

    return f


@pytest.mark.parametrize("multiprocessing", [False, True], ids=["serial", "workers"])
def test_report_on_a_store_prints_the_panel_and_the_table(tmp_path, capsys, multiprocessing):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("seg", 6, process_function=sleepy, resource_tracking=True, max_workers=2)
    assert daisy.run_blockwise([task], multiprocessing=multiprocessing, progress=False)
    capsys.readouterr()

    code, out = run_cli(capsys, "report", str(tmp_path / "tracking" / "seg"))
    assert code == 0
    assert "Resource Utilization" in out
    assert "seg  6 blocks" in out
    assert "wall" in out and "peak RSS" in out
    assert ("workers  startup" in out) == multiprocessing

    code, out = run_cli(capsys, "report", str(tmp_path / "tracking"), "--format", "json")
    rows = json.loads(out)
    assert [r["task_id"] for r in rows] == ["seg"]
    row = rows[0]
    assert set(row) == set(SUMMARY_COLUMNS)
    assert row["blocks"] == 6 and row["failures"] == 0 and row["outcome"] == "completed"
    assert 0.005 <= row["wall_p50_s"] <= row["wall_p95_s"] < 1.0
    assert row["wall_total_s"] >= 6 * 0.005
    assert row["peak_rss_max_bytes"] > 0
    if multiprocessing:
        assert row["workers"] >= 1 and 0 < row["utilisation"] <= 1
    else:
        assert row["workers"] == 0 and row["utilisation"] is None

    code, out = run_cli(capsys, "report", str(tmp_path / "tracking"), "--format", "csv")
    table = list(csv.DictReader(io.StringIO(out)))
    assert list(table[0]) == SUMMARY_COLUMNS
    assert table[0]["blocks"] == "6"


def test_report_of_a_resumed_run_and_of_an_earlier_run(tmp_path, capsys):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 5, process_function=sleepy, resource_tracking=True)
    for _ in range(2):
        assert daisy.run_blockwise([task], multiprocessing=False, summary=False)

    code, out = run_cli(capsys, "report", str(tmp_path / "seg"), "--format", "json")
    (last,) = json.loads(out)
    assert last["run"] == 1 and last["skipped"] == 5 and last["wall_total_s"] is None
    code, out = run_cli(capsys, "report", str(tmp_path / "seg"), "--run", "0", "--format", "json")
    (first,) = json.loads(out)
    assert first["run"] == 0 and first["skipped"] == 0 and first["wall_total_s"] > 0
    code, out = run_cli(capsys, "report", str(tmp_path / "seg"))
    assert "5 blocks (5 skipped)" in out
    # the panel of a run that only skipped says where the work was measured
    assert "every block was skipped: --run 0 is the last run that processed blocks" in out, out
    code, out = run_cli(capsys, "report", str(tmp_path / "seg"), "--run", "0")
    assert "every block was skipped" not in out, out
    assert main(["report", str(tmp_path / "seg"), "--run", "7"]) == 2
    assert "--run 7 is not one" in capsys.readouterr().err


def test_report_of_a_run_with_failures(tmp_path, capsys, log_dir):
    daisy.set_tracking_basedir(tmp_path / "tracking")
    (tmp_path / "marks").mkdir()
    task = line_task("flaky", 4, process_function=failing_once(tmp_path / "marks"))
    assert daisy.run_blockwise([task], progress=False, summary=False)
    code, out = run_cli(capsys, "report", str(tmp_path / "tracking" / "flaky" / "runs.jsonl"))
    assert code == 0 and "1 failed attempt(s)" in out
    code, out = run_cli(capsys, "report", str(tmp_path / "tracking"), "--format", "json")
    assert json.loads(out)[0]["failures"] == 1


def test_report_of_untracked_tasks_from_the_log_directory(capsys, log_dir):
    a = line_task("a", 3, process_function=sleepy)
    b = line_task("b", 3, process_function=sleepy, upstream_tasks=[a])
    assert daisy.run_blockwise([b], progress=False, summary=False)
    code, out = run_cli(capsys, "report", str(log_dir), "--format", "json")
    assert sorted(r["task_id"] for r in json.loads(out)) == ["a", "b"]


def test_report_on_a_path_without_runs(tmp_path, capsys):
    code, _ = run_cli(capsys, "report", str(tmp_path))
    assert code == 2


def test_python_dash_m_daisy_works(tmp_path):
    daisy.set_tracking_basedir(tmp_path)
    task = line_task("seg", 3, process_function=sleepy, resource_tracking=True)
    assert daisy.run_blockwise([task], multiprocessing=False, summary=False)
    proc = subprocess.run(
        [sys.executable, "-m", "daisy", "report", str(tmp_path / "seg")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "seg  3 blocks" in proc.stdout


def synthetic(wall_total: float, round_trip: float, failures: int = 0) -> TaskReport:
    """A report with the given figures (a run of 100 blocks)."""
    return TaskReport(
        task_id="seg",
        blocks=BlockSummary(
            count=100,
            failures=failures,
            has_stats=True,
            wall=Stat(n=100, mean=wall_total / 100, total=wall_total),
            cpu=Stat(n=100, mean=wall_total / 200, total=wall_total / 2),
            peak_rss=Stat(n=100, mean=1e8, max=1e8, total=1e10),
            round_trip=Stat(n=100, mean=round_trip, total=100 * round_trip),
        ),
        workers=WorkerSummary(),
        started_at=0.0,
        finished_at=wall_total,
        first_block_at=0.0,
        last_block_at=wall_total,
    )


def test_compare_flags_a_threefold_slowdown_and_exits_1(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    for wall in [10.0, 10.4, 9.7, 10.1, 9.9, 10.2, 10.0, 30.5]:
        append_run(path, synthetic(wall, round_trip=wall / 100))
    rows = compare_runs(read_runs(path), history=7, factor=2.0)
    flagged = {r["figure"] for r in rows if r["flagged"]}
    assert {"span_s", "wall_total_s", "cpu_total_s", "round_trip_mean_s"} <= flagged
    assert "peak_rss_max_bytes" not in flagged
    code, out = run_cli(capsys, "compare", str(path))
    assert code == 1
    assert "✗ worse" in out


def test_compare_stays_quiet_on_noise(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    for wall in [10.0, 11.5, 9.1, 10.8, 9.4, 12.0, 10.3, 13.1]:
        append_run(path, synthetic(wall, round_trip=wall / 100))
    code, out = run_cli(capsys, "compare", str(path), "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert rows and not any(r["flagged"] for r in rows)


def test_compare_flags_new_failures_and_ignores_fully_resumed_runs(tmp_path):
    path = tmp_path / "runs.jsonl"
    for _ in range(3):
        append_run(path, synthetic(10.0, 0.1))
    resumed = synthetic(0.0, 0.0)
    resumed.blocks = BlockSummary(count=100, skipped=100)
    append_run(path, resumed)
    append_run(path, synthetic(10.0, 0.1, failures=4))
    rows = {r["figure"]: r for r in compare_runs(read_runs(path), history=7, factor=2.0)}
    assert rows["failures"]["flagged"]
    assert rows["wall_total_s"]["runs"] == 3  # the resumed run is not a baseline
    assert not rows["wall_total_s"]["flagged"]


@pytest.mark.parametrize(
    ("option", "value"), [("--history", "0"), ("--history", "-2"), ("--factor", "0")]
)
def test_compare_refuses_a_history_or_factor_that_means_nothing(tmp_path, capsys, option, value):
    # --history 0 used to compare with every earlier run ([-0:] is all)
    path = tmp_path / "runs.jsonl"
    for wall in [10.0, 10.0, 30.0]:
        append_run(path, synthetic(wall, round_trip=wall / 100))
    code = main(["compare", str(path), option, value])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and option in err, err


def test_compare_needs_two_runs(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    append_run(path, synthetic(10.0, 0.1))
    code, out = run_cli(capsys, "compare", str(path))
    assert code == 0 and "nothing to compare" in out


def test_a_fully_resumed_runs_row_is_consistent(tmp_path, capsys):
    """A rerun that skipped every block measured nothing: no wall total and
    no wall percentiles either (they came from the earlier run's stamps)."""
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("again", 4, process_function=sleepy, resource_tracking=True)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False)
    capsys.readouterr()
    code, out = run_cli(capsys, "report", str(tmp_path / "tracking"), "--format", "json")
    row = json.loads(out)[0]
    assert row["skipped"] == 4
    assert row["wall_total_s"] is None
    assert row["wall_p50_s"] is None and row["wall_p95_s"] is None


def run_daisy(*argv, **kw):
    return subprocess.run(
        [sys.executable, "-m", "daisy", *argv], capture_output=True, text=True, timeout=120, **kw
    )


def test_cli_errors_are_one_line_on_stderr_with_exit_2(tmp_path):
    """Issue 14: every CLI error is one line on stderr, exit status 2, no
    traceback."""
    path = tmp_path / "runs.jsonl"
    append_run(path, synthetic(10.0, 0.1))
    for argv in (("report", str(path), "--run", "7"), ("report", str(tmp_path / "none"))):
        out = run_daisy(*argv)
        assert out.returncode == 2, (argv, out)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("daisy: "), out.stderr
        assert "Traceback" not in out.stderr


def test_report_refuses_a_negative_worker_table(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    append_run(path, synthetic(10.0, 0.1))
    code = main(["report", str(path), "--max-workers", "-3"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--max-workers" in err, err


def test_an_html_report_that_cannot_be_written_is_one_line_with_exit_2(tmp_path):
    pytest.importorskip("bokeh")
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("t", 2, process_function=sleepy, resource_tracking=True)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = run_daisy("report", str(tmp_path / "tracking"), "--html", str(blocker / "r.html"))
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("daisy: "), out.stderr
    assert str(blocker / "r.html") in lines[0]


def _tear(path: Path) -> None:
    """Cut the last line of ``path`` in half, as a full disk leaves it."""
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])


def test_a_torn_history_line_is_skipped_and_the_next_run_starts_a_new_line(
    tmp_path, capsys, caplog, log_dir
):
    # an untracked task's history, next to its logs
    path = log_dir / "untorn" / "runs.jsonl"
    untracked = line_task("untorn", 3, process_function=sleepy)
    for _ in range(2):
        assert daisy.run_blockwise([untracked], progress=False, summary=False)
    _tear(path)
    assert daisy.run_blockwise([untracked], progress=False, summary=False)
    assert [r.blocks.count for r in read_runs(path)] == [3, 3]
    assert any("damaged" in r.getMessage() for r in caplog.records), caplog.records
    code, out = run_cli(capsys, "report", str(path), "--format", "json")
    assert code == 0
    assert json.loads(out)[0]["blocks"] == 3
    # written by the core (a tracked task's history is in its store)
    daisy.set_tracking_basedir(tmp_path / "tracking")
    task = line_task("torn", 2, process_function=sleepy, resource_tracking=True)
    store_runs = tmp_path / "tracking" / "torn" / "runs.jsonl"
    assert daisy.run_blockwise([task], progress=False, summary=False)
    _tear(store_runs)
    task.reset()
    assert daisy.run_blockwise([task], progress=False, summary=False)
    assert [r.blocks.count for r in read_runs(store_runs)] == [2]
    assert task.report().blocks.count == 2
    assert run_cli(capsys, "report", str(tmp_path / "tracking"))[0] == 0


def test_a_closed_pipe_ends_the_output_quietly(tmp_path):
    """``daisy report ... | head -1``: no BrokenPipeError."""
    line = json.dumps(synthetic(10.0, 0.1).to_dict())
    for i in range(3000):
        d = tmp_path / f"t{i}"
        d.mkdir()
        (d / "runs.jsonl").write_text(line.replace('"seg"', f'"t{i}"') + "\n")
    out = subprocess.run(
        f"{sys.executable} -m daisy report {tmp_path} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("Resource Utilization")
    assert "BrokenPipeError" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_the_html_report_without_bokeh_is_one_line_with_exit_2(tmp_path):
    """``daisy report --html`` where bokeh is not installed: one line that
    says what to install, exit status 2, no traceback and no file."""
    path = tmp_path / "runs.jsonl"
    append_run(path, synthetic(10.0, 0.1))
    # a bokeh whose import fails, first on the path of the child process
    shim = tmp_path / "no_bokeh"
    (shim / "bokeh").mkdir(parents=True)
    (shim / "bokeh" / "__init__.py").write_text("raise ImportError(\"No module named 'bokeh'\")\n")
    pythonpath = [str(shim), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    out = run_daisy("report", str(path), "--html", str(tmp_path / "out.html"), env=env)
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [
        'the HTML report needs bokeh: pip install "daisy[report]"'
    ], out.stderr
    assert not (tmp_path / "out.html").exists()


def test_runs_without_a_tracking_store_give_no_warnings(tmp_path, log_dir):
    """The panel and the HTML report of a run without a tracking store (its
    runs.jsonl in the log directory) say nothing on stderr: no bokeh
    warnings about the figures such a run has no data for."""
    task = line_task("plain", 3, process_function=sleepy)
    assert daisy.run_blockwise([task], multiprocessing=False, progress=False, summary=False)
    for argv in ((), ("--html", str(tmp_path / "out.html"))):
        out = run_daisy("report", str(log_dir), *argv)
        assert out.returncode == 0, out
        assert "warning" not in out.stderr.lower(), out.stderr
    assert (tmp_path / "out.html").exists()


def option_help(text: str) -> dict[str, str]:
    """The help of each option of an argparse ``--help`` text, by its first
    flag, with the line breaks of the layout taken out."""
    helps: dict[str, list[str]] = {}
    flag = None
    for line in text.splitlines():
        if line.startswith("  -"):  # an option's first line: its flags, maybe its help
            flags, _, first = line.strip().partition("  ")
            flag = flags.split()[0].rstrip(",")
            helps[flag] = [first]
        elif flag is not None and line.startswith("    "):  # its help, continued
            helps[flag].append(line)
        else:
            flag = None
    return {f: " ".join(" ".join(h).split()) for f, h in helps.items()}


@pytest.mark.parametrize(
    "command", [(), ("report",), ("compare",)], ids=["daisy", "report", "compare"]
)
def test_help_is_plain_text_and_shows_every_default(command):
    """``--help`` shows no reStructuredText markup, and the help of every
    option says what its default is."""
    out = run_daisy(*command, "--help")
    assert out.returncode == 0, out
    for markup in ("``", "::", ":func:", ":class:", ":mod:", "`"):
        assert markup not in out.stdout, (markup, out.stdout)
    helps = option_help(out.stdout)
    assert helps, out.stdout
    for flag, text in helps.items():
        if flag not in ("-h", "--version"):
            assert "default" in text, (flag, text)


def test_compare_help_gives_its_exit_status(tmp_path):
    """``daisy compare --help`` says it exits with status 1 on a regression,
    and so it does (0 where nothing got worse)."""
    out = run_daisy("compare", "--help")
    text = " ".join(out.stdout.split()).lower()
    assert "exits with status 1 when it finds a regression" in text, out.stdout
    path = tmp_path / "runs.jsonl"
    for wall in [10.0, 10.1, 30.0]:
        append_run(path, synthetic(wall, round_trip=0.1))
    assert run_daisy("compare", str(path)).returncode == 1
    assert run_daisy("compare", str(path), "--history", "1", "--factor", "4").returncode == 0


def test_run_help_says_how_runs_are_numbered(tmp_path):
    """``--run``: 0 is the first run, -1 the last, as the help says."""
    out = run_daisy("report", "--help")
    text = option_help(out.stdout)["--run"]
    assert "0 is the first" in text and "-1 the last" in text, text
    path = tmp_path / "runs.jsonl"
    for wall in [1.0, 2.0, 3.0]:
        append_run(path, synthetic(wall, round_trip=0.1))

    def wall_total(*run):
        out = run_daisy("report", str(path), *run, "--format", "json")
        (row,) = json.loads(out.stdout)
        return row["run"], row["wall_total_s"]

    assert wall_total() == wall_total("--run", "-1") == (2, 3.0)
    assert wall_total("--run", "0") == wall_total("--run", "-3") == (0, 1.0)
