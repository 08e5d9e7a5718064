"""A real client: volara-metrics 0.1.1 (https://pypi.org/project/volara-metrics/),
whose blockwise tasks (``SliceMetricTask``) run on volara and so on daisy.
Its own test suite, from its sdist, runs against this package in the test
environment (``make downstream-deps`` installs it and fetches the suite);
skipped only when that could not happen because the package index cannot
be reached."""

from __future__ import annotations

import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import package_index_reachable

VOLARA_METRICS = "volara-metrics==0.1.1"
SUITE = Path(sys.prefix) / "downstream-suites" / "volara_metrics-0.1.1" / "tests"
#: the tests of its suite (all of them drive volara's tasks or its kernels)
TESTS = 7


def test_volara_metrics_own_suite_passes(tmp_path):
    if not SUITE.is_dir():
        if not package_index_reachable(VOLARA_METRICS):
            pytest.skip("volara-metrics' suite is missing and the package index is unreachable")
        pytest.fail(f"{SUITE} is missing: `make downstream-deps` fetches it")
    shutil.copytree(SUITE, tmp_path / "tests")
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [
            sys.executable,
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
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    passed = [c for c in cases if not list(c)]
    assert len(passed) == len(cases) == TESTS, proc.stdout[-4000:]
