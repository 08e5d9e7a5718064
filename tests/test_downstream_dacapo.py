"""A real client: dacapo-ml 0.3.5 (https://pypi.org/project/dacapo-ml/), a
deep-learning framework of this field that drives daisy for prediction and
post-processing. Its own test suite (from its sdist) runs against this
wheel and against the published daisy 2.0.0 side by side, in one
environment, ``.venv-dacapo``, made by ``make downstream-deps``: 2.0.0 is
installed there as dacapo-ml's own dependency, this wheel in a directory
put first on ``PYTHONPATH``.

Issue 51: it names its tasks after its datasets (``predict_{run}_{dataset}``,
a dataset being a path such as ``0/val``) and 150 of its tests failed here
at ``Task(...)`` ("cannot be a task id: it holds a path separator"), where
2.0.0 passed all 436. Every test that passes with 2.0.0 must pass with this
wheel. The test is skipped only when the environment is missing because
the package index cannot be reached.

dacapo-ml's own suite has a flaky test: ``test_train.py::test_large`` asserts
that a short training moved the summed weights by more than float32's
epsilon, and the sum sometimes cancels (measured 2026-12-06 with daisy
2.0.0 alone: 1 failure in 8 runs; it trains without daisy). So a test that
fails here is run again, alone, three times, and counts as broken when it
fails at least two of them: a deterministic breakage fails all three, a
1-in-8 flake two of three about once in 25. A test failing with 2.0.0 is
run again with it once, and counts as passing with 2.0.0 if it passes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import package_index_reachable

import daisy

DACAPO = "dacapo-ml==0.3.5"
REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("DAISY_DACAPO_VENV", REPO / ".venv-dacapo"))
PYTHON = VENV / "bin" / "python"
UNDER_TEST = VENV / "daisy-under-test"
SUITE = VENV / "sdist" / "dacapo_ml-0.3.5" / "tests"
#: what dacapo-ml 0.3.5's suite gave with daisy 2.0.0 (issue 51, measured
#: 2026-12-05, and again by this test)
PASSED_WITH_200 = 436


def package_files(root: Path) -> dict[str, str]:
    """Every file of an installed package (its bytecode caches left out),
    by path below ``root``, with its SHA-256."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def dacapo_env() -> dict[str, str]:
    if not PYTHON.exists() or not SUITE.is_dir():
        if not package_index_reachable(DACAPO):
            pytest.skip("dacapo-ml's environment is missing and the package index is unreachable")
        pytest.fail(f"{VENV} is missing or incomplete: `make downstream-deps` makes it")
    # the daisy under test is the one this suite tests, not an older build
    assert package_files(Path(daisy.__file__).parent) == package_files(UNDER_TEST / "daisy"), (
        f"{UNDER_TEST} holds another build of daisy than .venv: run `make downstream-deps` again"
    )
    return {k: v for k, v in os.environ.items() if k not in ("DAISY_CONTEXT", "PYTHONPATH")}


def run_suite(env: dict[str, str], where: Path, pythonpath: str | None) -> dict[str, str]:
    """dacapo-ml's suite in a copy of its tests under ``where``: each test
    id's outcome (passed, failed, error, skipped)."""
    tests = where / "tests"
    shutil.copytree(SUITE, tests)
    run_env = dict(env)
    if pythonpath is not None:
        run_env["PYTHONPATH"] = pythonpath
    probe = subprocess.run(
        [str(PYTHON), "-c", "import daisy; print(daisy.__file__)"],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    expected = str(UNDER_TEST) if pythonpath else "site-packages"
    assert expected in probe.stdout, probe.stdout
    junit = where / "junit.xml"
    proc = subprocess.run(
        [
            str(PYTHON),
            "-m",
            "pytest",
            "tests",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
        ],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=where,
        timeout=1500,
    )
    assert junit.is_file(), proc.stdout[-4000:] + proc.stderr[-4000:]
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        outcomes[name] = outcome
    return outcomes


def node_id(name: str) -> str:
    """A junit test name (``tests.operations.test_train::test_large[x]``) as
    the pytest node id that runs it alone."""
    module, test = name.split("::", 1)
    return module.replace(".", "/") + ".py::" + test


def rerun_failures(
    env: dict[str, str], where: Path, name: str, pythonpath: str | None, times: int = 3
) -> int:
    """How many of ``times`` lone runs of test ``name`` fail (with this wheel
    when ``pythonpath`` is given, else with daisy 2.0.0)."""
    run_env = dict(env)
    if pythonpath is not None:
        run_env["PYTHONPATH"] = pythonpath
    failures = 0
    for _ in range(times):
        proc = subprocess.run(
            [str(PYTHON), "-m", "pytest", node_id(name), "-q", "-p", "no:cacheprovider"],
            capture_output=True,
            text=True,
            env=run_env,
            cwd=where,
            timeout=600,
        )
        failures += proc.returncode != 0
    return failures


def test_dacapos_own_suite_passes_as_with_daisy_200(dacapo_env, tmp_path):
    ours = run_suite(dacapo_env, tmp_path / "ours", str(UNDER_TEST))
    v200 = run_suite(dacapo_env, tmp_path / "v200", None)
    passed = {k for k, v in ours.items() if v == "passed"}
    passed_200 = {k for k, v in v200.items() if v == "passed"}
    # 2.0.0's own flakes, passing when run again, count as passed with it
    passed_200 |= {
        k
        for k, v in v200.items()
        if v in ("failure", "error")
        and rerun_failures(dacapo_env, tmp_path / "v200", k, None, times=1) == 0
    }
    assert len(passed_200) >= PASSED_WITH_200, len(passed_200)
    failed_here = sorted(k for k, v in ours.items() if v in ("failure", "error"))
    # more than a handful failing here is a breakage, not flakes: no reruns
    assert len(failed_here) <= 5, (
        f"{len(failed_here)} tests fail here ({len(passed_200 - passed)} of them pass "
        f"with daisy 2.0.0): {failed_here[:20]}"
    )
    reruns = {
        name: rerun_failures(dacapo_env, tmp_path / "ours", name, str(UNDER_TEST))
        for name in failed_here
    }
    broken = sorted(name for name, failures in reruns.items() if failures >= 2)
    assert not broken, f"tests fail here again on reruns (failures of 3): {reruns}"
    assert not passed_200 - passed - set(failed_here)
    assert len(passed) + len(failed_here) >= PASSED_WITH_200
