"""Block functions from modules loaded by file path (issue 51). Frameworks
load a user's config or model script with ``SourceFileLoader`` or
``importlib.util.spec_from_file_location`` (dacapo-ml loads its worker
files so), and the module sits in ``sys.modules`` under a name no fresh
interpreter can import. daisy 1.2.2 forked its workers, so they had it;
daisy 2.0.0 and this daisy, before, started workers that each failed with
``ModuleNotFoundError`` until the task was abandoned. Such a module now
travels by value (`daisy.function_payload`); Dask and SLURM workers:
tests/test_spawners.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import check_user_script_outputs, line_task, load_user_script, run_tasks

HOWS = ["source_file_loader", "spec_from_file_location", "deleted_after_loading", "from_a_string"]


@pytest.fixture
def forget_user_modules():
    """Drop the modules a test loaded: each test loads its own."""
    yield
    for name in ("user_worker", "shadowed"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("how", HOWS)
def test_a_function_from_a_module_loaded_by_file_runs_on_two_workers(
    tmp_path: Path, how: str, forget_user_modules: None
) -> None:
    module = load_user_script(tmp_path / "user_code", how)
    out = tmp_path / "out"
    out.mkdir()
    task = line_task(
        "fileload",
        8,
        process_function=module.spawn_worker(str(out), 15),
        max_workers=2,
        max_retries=0,
    )
    states = run_tasks([task], mp=True)
    assert states["fileload"].completed_count == 8, states["fileload"]
    check_user_script_outputs(out, 8, module)


def test_a_module_loaded_by_file_under_an_importable_name_runs_the_file_it_was_loaded_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_user_modules: None
) -> None:
    """A script loaded under a name that a worker *can* import, from another
    file (a ``config.py`` of the user's beside one on ``sys.path``): sent by
    reference, the worker would import the other file and compute
    something else."""
    other = tmp_path / "on_path"
    other.mkdir()
    # what a worker would import by the name: the same names, other code
    (other / "shadowed.py").write_text(
        "class Threshold:\n"
        "    def __init__(self, level):\n"
        "        self.level = level\n"
        "    def apply(self, values):\n"
        "        return values < 0\n"
    )
    monkeypatch.syspath_prepend(str(other))
    module = load_user_script(tmp_path / "user_code", "spec_from_file_location", name="shadowed")
    assert "user_code" in module.SOURCE
    out = tmp_path / "out"
    out.mkdir()
    task = line_task(
        "shadow",
        4,
        process_function=module.spawn_worker(str(out), 15),
        max_workers=2,
        max_retries=0,
    )
    states = run_tasks([task], mp=True)
    assert states["shadow"].completed_count == 4
    check_user_script_outputs(out, 4, module)


def test_an_importable_module_still_travels_by_reference(tmp_path: Path) -> None:
    """Only what a worker cannot import goes by value: a function of an
    importable module stays a reference (a small payload, the worker's own
    import), as before."""
    import pickle

    import conftest

    from daisy.function_payload import dumps, importable_by_name

    assert importable_by_name(conftest)
    pickled, _ = dumps(conftest.noop)
    assert len(pickled) < 200 and b"conftest" in pickled
    assert pickle.loads(pickled) is conftest.noop
