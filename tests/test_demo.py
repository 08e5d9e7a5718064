"""The demo, as a new user runs it: ``python examples/demo.py DIR`` prints
the summary and the panel and checks its result; run again on the same
directory, it resumes (every block already done) and its result still
checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "demo.py"


def _demo(workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEMO), str(workdir)],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_demo_runs_and_a_second_run_on_its_directory_resumes(tmp_path):
    first = _demo(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "checked: blockwise output equals the whole-volume computation" in first.stdout
    assert "Resource Utilization" in first.stdout
    second = _demo(tmp_path)
    assert second.returncode == 0, second.stderr
    assert "checked: blockwise output equals the whole-volume computation" in second.stdout
    # the second run found every block done
    assert "64 skipped" in second.stdout or "skipped: 64" in second.stdout.lower(), second.stdout


def test_the_demo_leaves_its_output_where_daisy_report_finds_it(tmp_path):
    # run as the README says, with no directory: it writes daisy_demo/ here
    run = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr
    out = tmp_path / "daisy_demo"
    assert (out / "demo.zarr").is_dir()
    assert "The output is in daisy_demo/" in run.stdout
    assert "daisy report daisy_demo/tracking" in run.stdout
    report = subprocess.run(
        [sys.executable, "-m", "daisy", "report", "daisy_demo/tracking"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert "smooth" in report.stdout and "threshold" in report.stdout


def test_make_demo_installs_only_what_the_demo_needs():
    makefile = (DEMO.parent.parent / "Makefile").read_text()
    recipe = makefile[makefile.index("\ndemo:") + 1 :].split("\n\n")[0]
    assert "[demo]" in recipe and "[test" not in recipe, recipe
    assert "install" not in recipe.splitlines()[0].split(":", 1)[1], "demo must not need install"


def test_the_demos_hint_is_a_command_that_runs_from_the_users_shell(tmp_path):
    """Issue 41: the demo said "daisy report daisy_demo/tracking", which a
    shell whose PATH lacks the virtualenv (``make demo`` does not activate
    it) cannot find. The hint names a command that runs as printed."""
    import os
    import re
    import shlex

    env = dict(os.environ, PATH="/usr/bin:/bin")
    run = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    hint = re.search(r"Where the time went: (.+)", run.stdout)
    assert hint, run.stdout
    report = subprocess.run(
        shlex.split(hint.group(1)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert report.returncode == 0, (hint.group(1), report.stderr)
    assert "smooth" in report.stdout and "threshold" in report.stdout
