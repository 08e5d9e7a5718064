"""A real client: gunpowder 1.4.4 (https://pypi.org/project/gunpowder/), its
``DaisyRequestBlocks`` node inside daisy workers, with one and two daisy
workers and one and two gunpowder workers each, output checked against
numpy (``tests/gunpowder_pipeline.py``).

gunpowder 1.4.4 needs zarr 2 and funlib.persistence 0.6, so it runs in an
environment of its own, ``.venv-gunpowder``, which ``make downstream-deps``
makes with gunpowder and this package's wheel; the test is skipped only
when that environment is missing because the package index cannot be
reached."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import package_index_reachable

GUNPOWDER = "gunpowder==1.4.4"
REPO = Path(__file__).resolve().parent.parent
PYTHON = Path(os.environ.get("DAISY_GUNPOWDER_PYTHON", REPO / ".venv-gunpowder/bin/python"))
SCRIPT = Path(__file__).resolve().parent / "gunpowder_pipeline.py"


@pytest.fixture(scope="module")
def gunpowder_python() -> Path:
    if not PYTHON.exists():
        if not package_index_reachable(GUNPOWDER):
            pytest.skip("gunpowder's environment is missing and the package index is unreachable")
        pytest.fail(f"{PYTHON} is missing: `make downstream-deps` makes it")
    probe = subprocess.run(
        [str(PYTHON), "-c", "import daisy, gunpowder; print(daisy.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert "site-packages" in probe.stdout, "gunpowder's daisy must be the installed wheel"
    return PYTHON


@pytest.mark.parametrize(("workers", "gp_workers"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_daisy_request_blocks_in_daisy_workers(gunpowder_python, tmp_path, workers, gp_workers):
    env = {k: v for k, v in os.environ.items() if k != "DAISY_CONTEXT"}
    proc = subprocess.run(
        [str(gunpowder_python), str(SCRIPT), str(tmp_path), str(workers), str(gp_workers)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    logs = "\n".join(
        p.read_text()[-2000:] for p in sorted(tmp_path.glob("daisy_logs/*/worker_*.err"))
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + logs
    assert "RESULT True True 0.0" in proc.stdout, proc.stdout[-3000:] + logs
    # every block was processed once, by as many workers as asked for
    assert "completed ✔: 64" in proc.stdout, proc.stdout[-3000:]
