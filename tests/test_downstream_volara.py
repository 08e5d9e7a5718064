"""A real client: volara (https://pypi.org/project/volara/), written for
daisy 1.x, runs a ``LambdaTask`` with two ``LocalWorker`` workers on a
small zarr volume against this package and writes the right output.

Its workers are ``volara-cli`` processes that read ``logdir`` from the
worker context (``daisy.Client().context["logdir"]``) to find the task's
state; before ours carried that key, every worker failed and the task was
abandoned. ``make downstream-deps`` installs volara next to our daisy
(``--no-deps``, since volara pins ``daisy<2``); the test is skipped only when
volara is missing because the package index cannot be reached.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import package_index_reachable

VOLARA = "volara==1.0.5"

SCRIPT = """
import sys
import numpy as np
from pathlib import Path
from funlib.geometry import Coordinate
from funlib.persistence import open_ds, prepare_ds
from volara.blockwise import LambdaTask
from volara.datasets import Raw
from volara.workers import LocalWorker

base = Path(sys.argv[1])
raw = prepare_ds(base / "data.zarr" / "raw", shape=(64, 64, 64), dtype=np.uint8,
                 voxel_size=(1, 1, 1), mode="w")
data = (np.arange(64**3) % 100).astype(np.uint8).reshape(64, 64, 64)
raw[:] = data


def double(x):
    return x * 2


task = LambdaTask(
    in_data=Raw(store=base / "data.zarr" / "raw"),
    out_data=Raw(store=base / "data.zarr" / "doubled"),
    lambda_func=double,
    block_size=Coordinate(16, 16, 16),
    num_workers=2,
    worker_config=LocalWorker(),
)
ok = task.run_blockwise(multiprocessing=True)
out = open_ds(base / "data.zarr" / "doubled")
print("RESULT", ok, bool((out[:] == data * 2).all()))
import daisy
print("DAISY", daisy.__version__)
"""


@pytest.fixture(scope="module")
def volara() -> None:
    try:
        import volara.blockwise  # noqa: F401
    except ImportError as e:
        if not package_index_reachable(VOLARA):
            pytest.skip(f"volara is not installed and the package index is unreachable ({e})")
        pytest.fail(f"volara is not installed ({e}): `make downstream-deps` installs it")


def test_a_volara_lambda_task_with_local_workers(volara: None, tmp_path: Path) -> None:
    import daisy

    env = dict(os.environ)
    # volara's LocalWorker starts the volara-cli script installed beside python
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("DAISY_CONTEXT", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    logs = "\n".join(
        p.read_text()[-2000:] for p in sorted(tmp_path.glob("volara_logs/*/worker_*.err"))
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + logs
    assert "RESULT True True" in proc.stdout, proc.stdout[-4000:] + logs
    # the run went through this daisy, with two workers, none of them crashed
    assert f"DAISY {daisy.__version__}" in proc.stdout
    assert "exits 2 clean" in proc.stdout, proc.stdout[-4000:]
