"""Every public module, name, class member and signature of daisy 1.2.2 and
daisy 2.0.0 exists in ours, compatibly, except the deliberate omissions
listed with their reasons in ``tests/fixtures/surface/OMISSIONS.json``.

The releases' surfaces were recorded black-box by
``tests/fixtures/surface/record_surface.py`` (``dir``, ``inspect``; no
source read) into ``daisy_1.2.2.json`` and ``daisy_2.0.0.json``. This test
records ours the same way, in a fresh interpreter, compares with
``diff_surface.py``'s rules (a missing module, name or member; a
constructor or method that would refuse a call the release accepts; a
different kind), and splits every finding into single items. An item not
in the omissions list fails the test, and so does an omission that no
longer matches anything: the list is always exactly what is left out.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SURFACE = Path(__file__).parent / "fixtures" / "surface"
RELEASES = ("1.2.2", "2.0.0")


def _diff_module() -> Any:
    spec = importlib.util.spec_from_file_location("diff_surface", SURFACE / "diff_surface.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def items_of(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``diff_surface`` rows split into single items ``(module, name,
    detail)``: one per missing module, name or member; other findings
    whole. Notes that are not gaps (members ours sets on instances) are
    dropped."""
    out = []
    for module, name, text in rows:
        if text.startswith("instance attributes in ours"):
            continue
        if text.startswith("module missing"):
            out.append((module, "*", "module missing"))
        elif name == "names" and text.startswith("missing names"):
            listed = text.split(": ", 1)[1]
            for entry in re.findall(r"(\w+) \[(\w+)\]", listed):
                out.append((module, entry[0], f"missing {entry[1]}"))
        elif text.startswith("missing members"):
            listed = text.split(": ", 1)[1]
            for member, kind in re.findall(r"(\w+) \[(\w+)\]", listed):
                out.append((module, f"{name}.{member}", f"missing {kind}"))
        else:
            out.append((module, name, text))
    return out


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("surface") / "ours.json"
    proc = subprocess.run(
        [sys.executable, str(SURFACE / "record_surface.py"), str(out)],
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def omissions() -> dict[str, Any]:
    return json.loads((SURFACE / "OMISSIONS.json").read_text())


def _noop(block: Any) -> None:
    pass


def _instance(module: str, cls: str) -> Any:
    """A small instance of ``module.cls`` (Task or Block), for members an
    instance sets rather than its class."""
    mod = importlib.import_module(module)
    roi = mod.Roi((0,), (10,))
    if cls == "Task":
        return mod.Task("t", total_roi=roi, read_roi=roi, write_roi=roi, process_function=_noop)
    if cls == "Block":
        return mod.Block(roi, roi, roi)
    return None


def present(item: tuple[str, str, str]) -> bool:
    """Whether a name the recorded ``dir()`` did not list is there all the
    same: a module or name resolved on first use (PEP 562, the 1.x names
    that would slow ``import daisy`` down), or a member an instance sets."""
    module, name, detail = item
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return False
    if detail == "module missing":
        return True
    if not detail.startswith("missing "):
        return False
    if "." in name:
        cls, member = name.split(".", 1)
        obj = getattr(mod, cls, None)
        if obj is not None and hasattr(obj, member):
            return True
        inst = _instance(module, cls) if cls in ("Task", "Block") else None
        return inst is not None and hasattr(inst, member)
    return hasattr(mod, name)


def found(ours: dict[str, Any], release: str) -> set[tuple[str, str, str]]:
    rel = json.loads((SURFACE / f"daisy_{release}.json").read_text())
    rows, _counts = _diff_module().compare(rel, ours, {})
    return {item for item in items_of(rows) if not present(item)}


@pytest.mark.parametrize("release", RELEASES)
def test_everything_of_the_release_is_here_but_the_listed_omissions(
    ours: dict[str, Any], release: str
) -> None:
    listed = omissions()
    reasons = listed["reasons"]
    allowed = set()
    for entry in listed["omissions"][release]:
        assert entry["reason"] in reasons, entry
        allowed.add((entry["module"], entry["name"], entry["detail"]))
    gaps = found(ours, release)
    unexplained = sorted(gaps - allowed)
    stale = sorted(allowed - gaps)
    assert not unexplained, (
        f"daisy {release} has these and ours lacks them (build them, or list them in "
        f"OMISSIONS.json with a reason): {unexplained}"
    )
    assert not stale, f"these omissions no longer apply; remove them from OMISSIONS.json: {stale}"


def test_every_reason_is_used_and_explained() -> None:
    listed = omissions()
    used = {e["reason"] for r in RELEASES for e in listed["omissions"][r]}
    assert used == set(listed["reasons"])
    assert all(len(text) > 40 for text in listed["reasons"].values())
