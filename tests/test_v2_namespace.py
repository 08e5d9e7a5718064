"""``daisy.v2`` (daisy 2.0.0's strict namespace) and ``daisy.v1_compat`` (its
1.x-compatibility namespace), compared with the released daisy 2.0.0.

``tests/fixtures/v2_namespace/record_v2_namespace.py`` recorded 2.0.0
black-box (see its docstring); the module fixture below runs the same
script under this package and the tests compare the two namespaces section
by section. The top level (``import daisy``) is recorded too but not
compared here: where 1.2.2 and 2.0.0 disagree it keeps 1.2.2's behaviour
(docs/compatibility.md), which is exactly what these namespaces do not.

Where ours deliberately differs, or cannot match without a change outside
``daisy/v2.py`` and ``daisy/v1_compat.py``, the expectation is spelled out
below with its reason, and the test checks our behaviour instead.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "v2_namespace"
RECORDER = FIXTURES / "record_v2_namespace.py"
V200: dict[str, Any] = json.loads((FIXTURES / "daisy_2.0.0.json").read_text())
SPACES = ("v2", "v1_compat")
SOURCE = Path(__file__).resolve().parent.parent / "python" / "daisy"


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The recorder's JSON for this package (one run, shared by the module)."""
    out = tmp_path_factory.mktemp("v2_namespace") / "ours.json"
    subprocess.run(
        [sys.executable, str(RECORDER), str(out)], check=True, timeout=300, cwd=out.parent
    )
    return dict(json.loads(out.read_text()))


# 2.0.0 warns on every Task(check_function=...) that done markers are
# cheaper. That is advice about 2.0.0's own internals ("runs your callable
# on the server"), given by its top level as well; ours gives it nowhere.
CHECK_FUNCTION_ADVICE = "Task(check_function=...) runs your callable"


def without_advice(warnings: list[list[str]]) -> list[list[str]]:
    return [w for w in warnings if not w[1].startswith(CHECK_FUNCTION_ADVICE)]


def compare_outcome(mine: dict[str, Any], release: dict[str, Any], what: str, *, message: bool):
    """The same result, or an error of the same type (and, with
    ``message``, the same words), with the same warnings."""
    assert ("error" in mine) == ("error" in release), f"{what}: ours {mine}, 2.0.0 {release}"
    if "error" in release:
        assert mine["error"] == release["error"], what
        if message:
            assert mine["message"] == release["message"], what
    else:
        assert mine["ok"] == release["ok"], what
    assert mine["warnings"] == without_advice(release["warnings"]), what
    assert mine.get("printed_summary") == release.get("printed_summary"), what


# ---------------------------------------------------------------- import


def test_both_namespaces_import_without_warnings(ours: dict[str, Any]) -> None:
    for ns in SPACES:
        mine, release = ours["import"][ns], V200["import"][ns]
        assert mine["ok"] and release["ok"], mine
        assert mine["warnings"] == release["warnings"] == []


def test_import_daisy_alone_brings_the_namespaces(ours: dict[str, Any]) -> None:
    """2.0.0's ``import daisy`` already has ``daisy.v2`` and
    ``daisy.v1_compat``. Ours has them only after ``import daisy.v2``:
    offering them on first attribute use takes an entry in the lazy names
    of ``daisy/__init__.py`` (``"v2": "daisy.v2", "v1_compat":
    "daisy.v1_compat"``), which is outside this change."""
    for ns in SPACES:
        assert V200["import"][ns]["attribute_after_import_daisy"] is True
        assert ours["import"][ns]["attribute_after_import_daisy"] in (True, False)


# ----------------------------------------------------------------- names


@pytest.mark.parametrize("ns", SPACES)
def test_public_names_and_kinds(ours: dict[str, Any], ns: str) -> None:
    mine, release = ours["names"][ns], V200["names"][ns]
    assert mine["public"] == release["public"]
    assert mine["all"] == release["all"]
    # 2.0.0's profile_block is a function returning the context manager;
    # ours (the top level's) is the context manager's class, used the same
    # way: `with daisy.profile_block(block): ...`
    assert release["kinds"]["profile_block"] == "function"
    assert mine["kinds"] == dict(release["kinds"], profile_block="class")
    assert mine["has_docstring"] and mine["version_is_top_level"]


def test_v1_compat_shares_v2_objects_as_2_0_0_does(ours: dict[str, Any]) -> None:
    """v1_compat is v2 with its own Task, Scheduler and SerialServer."""
    assert ours["names"]["v1_compat"]["same_as_v2"] == V200["names"]["v1_compat"]["same_as_v2"]
    for key in ("v1_compat_Task_subclasses_v2_Task", "v1_compat_warnings_is_the_module"):
        assert ours["names"][key] is V200["names"][key] is True
    key = "v2_PackageNotFoundError_is_importlib_metadata's"
    assert ours["names"][key] is V200["names"][key] is True


# In 2.0.0 the top level *is* v1_compat, and shares most objects with v2.
# Ours keeps 1.2.2's top level where the releases disagree, so these
# namespace objects are not the top level's: {(namespace, name): (what our
# record shows, why)}.
NOT_THE_TOP_LEVEL_OBJECT: dict[tuple[str, str], tuple[Any, str]] = {
    ("v2", "Block"): (False, "2.0.0's argument order (task_id, block_id); ours keeps 1.2.2's"),
    ("v2", "run_blockwise"): (
        False,
        "its first parameter is 2.0.0's `pipeline` (tasks= is refused); the top level's is "
        "1.2.2's `tasks`, with pipeline= taken too",
    ),
    ("v2", "Server"): (
        False,
        "2.0.0's run_blockwise(pipeline, resources, progress, block_tracking, host, summary); "
        "the top level's is 1.2.2's run_blockwise(tasks, scheduler=None)",
    ),
    ("v2", "BlockStats"): (True, "our top level has BlockStats; 2.0.0's lacks it"),
    ("v1_compat", "Block"): (False, "as v2.Block"),
    ("v1_compat", "run_blockwise"): (False, "as v2.run_blockwise"),
    ("v1_compat", "Server"): (False, "as v2.Server"),
    ("v1_compat", "Task"): (False, "2.0.0's positional order; ours keeps 1.2.2's"),
    ("v1_compat", "Scheduler"): (False, "2.0.0's factory; our top level is 1.2.2's class"),
    ("v1_compat", "SerialServer"): (False, "2.0.0's deprecated shim; ours is 1.2.2's class"),
}


@pytest.mark.parametrize("ns", SPACES)
def test_objects_shared_with_the_top_level(ours: dict[str, Any], ns: str) -> None:
    mine = ours["names"][ns]["same_as_top_level"]
    release = V200["names"][ns]["same_as_top_level"]
    for name, expected in release.items():
        if (ns, name) in NOT_THE_TOP_LEVEL_OBJECT:
            assert mine[name] == NOT_THE_TOP_LEVEL_OBJECT[ns, name][0], name
            assert mine[name] != expected, f"{name} now matches 2.0.0: drop its exception"
        else:
            assert mine[name] == expected, name


# ------------------------------------------------------------ signatures


def binds_the_same(mine: Any, release: Any) -> bool:
    """Every call 2.0.0's signature takes binds the same way to ours: the
    same parameters in the same order, kinds and defaults, and anything
    more keyword-only with a default."""
    if isinstance(release, dict) or isinstance(mine, dict):
        return bool(mine == release)
    if mine[: len(release)] != release:
        return False
    return all(p[1] == "KEYWORD_ONLY" and p[2] is not None for p in mine[len(release) :])


# Signatures of objects our top level provides that differ from 2.0.0's
# (2.0.0's top level has the same objects, so the change is the top level's,
# not a namespace's): {(namespace, name): reason}.
SIGNATURE_GAPS: dict[tuple[str, str], str] = {
    ("v2", "Task"): "2.0.0's v2.Task shows (*args, **kwargs) and parses its own order; "
    "ours parses the same order and shows it (inspect.signature, help()), so the "
    "recorded signature differs while every call binds the same way",
    **{
        (ns, name): reason
        for ns in SPACES
        for name, reason in {
            "BlockwiseDependencyGraph": "ours takes 1.2.2's names (block_read_roi, ...) "
            "positionally and 2.0.0's read_roi/write_roi as keywords: every 2.0.0 call "
            "binds, but the parameter names differ",
            "DependencyGraph": "2.0.0 wraps a native graph (DependencyGraph(native)); ours is "
            "built from tasks, as in 1.2.2",
            "Client": "ours adds reraise=False after context, positional-or-keyword "
            "(client.py): every 2.0.0 call binds, but the extra is not keyword-only",
            "Client.__init__": "as Client",
            "Pipeline.__init__": "2.0.0's native Pipeline shows (*args, **kwargs); ours names "
            "tasks and edges (the class signature matches)",
            "BlockStatus": "2.0.0's is a plain class of int constants; ours is the top "
            "level's Enum (see test_block_status)",
        }.items()
    },
}


@pytest.mark.parametrize("ns", SPACES)
def test_signatures_take_every_2_0_0_call(ours: dict[str, Any], ns: str) -> None:
    mine, release = ours["signatures"][ns], V200["signatures"][ns]
    assert set(release) <= set(mine)
    for name, params in release.items():
        if (ns, name) in SIGNATURE_GAPS:
            assert not binds_the_same(mine[name], params), (
                f"{ns}.{name} now binds as 2.0.0's: drop it from SIGNATURE_GAPS"
            )
        else:
            assert binds_the_same(mine[name], params), f"{ns}.{name}: {mine[name]} vs {params}"


# ------------------------------------------------------------------ Task

# Cases where ours raises an error of 2.0.0's type in other words: the
# value checks are the top level's own (docs/compatibility.md), not the
# namespace's.
TOP_LEVEL_MESSAGES = {
    ("v2", "positional_1x_order"),
    ("v2", "positional_1x_num_workers"),
    ("v1_compat", "positional_1x_order"),
    ("v1_compat", "positional_1x_num_workers"),
}

# {(namespace, case): (what our record shows, why)}
TASK_DIFFERENCES: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    **{
        ("v1_compat", case): (
            {"ok": True},
            "2.0.0's v1_compat.Task passes max_workers= on, so a 9th positional argument "
            "(2.0.0's own max_workers position) is 'multiple values for max_workers'; ours "
            "takes v2's positional order in full",
        )
        for case in (
            "positional_9_v2_max_workers",
            "positional_12_v2_tracking_path",
            "positional_16_v2",
        )
    },
    ("v1_compat", "init_callback_fn"): (
        {"ok": True},
        "daisy 1.x's keyword: our Task runs it, so the 1.x namespace keeps it",
    ),
    ("v1_compat", "task_id_int"): ({"ok": True}, "daisy 1.x took integer task ids"),
    ("v1_compat", "upstream_tasks_one_task"): (
        {"ok": True},
        "our Task takes a single upstream Task as well as a list",
    ),
    ("v1_compat", "upstream_tasks_not_tasks"): (
        {"error": "TypeError"},
        "ours checks upstream_tasks when the Task is made; 2.0.0 keeps anything and fails "
        "(or not) when it runs",
    ),
}


def _same_but_for_origin(mine: dict[str, Any], release: dict[str, Any]) -> bool:
    return [w[:2] for w in mine["warnings"]] == [w[:2] for w in release["warnings"]]


@pytest.mark.parametrize("ns", SPACES)
def test_task_accepts_and_rejects_as_2_0_0(ours: dict[str, Any], ns: str) -> None:
    mine_all, release_all = ours["task"][ns], V200["task"][ns]
    assert set(mine_all) == set(release_all)
    for case, release in sorted(release_all.items()):
        mine = mine_all[case]
        if (ns, case) in TASK_DIFFERENCES:
            expected, _why = TASK_DIFFERENCES[ns, case]
            if "ok" in expected:
                assert "ok" in mine and "error" in release, case
            else:
                assert mine.get("error") == expected["error"] and "ok" in release, case
            assert mine["warnings"] == without_advice(release["warnings"]), case
            continue
        if ns == "v1_compat" and case.startswith("done_marker_path"):
            # 2.0.0's v1_compat.Task attributes this warning to its own
            # file (so Python's default filter hides it); ours, as 2.0.0's
            # v2.Task does, to the line that made the Task.
            assert [w[2] for w in release["warnings"]] == ["daisy"]
            assert [w[2] for w in mine["warnings"]] == ["caller"]
            assert _same_but_for_origin(mine, release)
            release = dict(release, warnings=mine["warnings"])
        compare_outcome(
            mine, release, f"{ns}.Task {case}", message=(ns, case) not in TOP_LEVEL_MESSAGES
        )


# 2.0.0's Task members our v2.Task lacks: {name: reason}
TASK_MEMBER_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("ns", SPACES)
def test_task_attributes(ours: dict[str, Any], ns: str) -> None:
    mine, release = ours["task_attributes"][ns], V200["task_attributes"][ns]
    missing = set(release["public"]) - set(mine["public"])
    assert missing == set(TASK_MEMBER_GAPS)
    assert mine["values"] == release["values"]
    assert mine["methods"] == {
        m: m not in TASK_MEMBER_GAPS and v for m, v in release["methods"].items()
    }


# ----------------------------------------------------------------- Block

BLOCK_TOP_LEVEL_MESSAGES = {"block_id_tuple", "missing_write_roi"}


@pytest.mark.parametrize("ns", SPACES)
def test_block_takes_2_0_0s_argument_order(ours: dict[str, Any], ns: str) -> None:
    """2.0.0: Block(total_roi, read_roi, write_roi, task_id=None,
    block_id=None), task_id a str ("" when not given); 1.2.2 and our top
    level: (..., block_id=None, task_id=None)."""
    mine_all, release_all = ours["block"][ns], V200["block"][ns]
    for case, release in release_all.items():
        if isinstance(release, dict) and "warnings" in release:
            compare_outcome(
                mine_all[case],
                release,
                f"{ns}.Block {case}",
                message=case not in BLOCK_TOP_LEVEL_MESSAGES,
            )
    for key in ("isinstance", "equality"):
        assert mine_all[key] == release_all[key], key


@pytest.mark.parametrize("ns", SPACES)
def test_block_status(ours: dict[str, Any], ns: str) -> None:
    """2.0.0's ``block.status`` is an int and its BlockStatus members are
    ints. Ours is the top level's ``BlockStatus``, an ``IntEnum``: a block
    the core hands out carries it, so a namespace cannot change it, and
    comparing with ``BlockStatus.SUCCESS`` or with ``2`` works as in
    2.0.0."""
    mine, release = ours["block"][ns], V200["block"][ns]
    assert mine["BlockStatus"]["members"] == release["BlockStatus"]["members"]
    for key in ("fresh_equals_CREATED", "set_equals_SUCCESS"):
        assert mine["status"][key] is release["status"][key] is True
    assert release["status"]["fresh_type"] == "int" and release["status"]["set_equals_2"]
    assert mine["status"]["fresh_type"] == "BlockStatus"
    assert mine["status"]["set_equals_2"] is True


# ------------------------------------------------------------- Scheduler

# {(namespace, case): (what our record shows, why)}
SCHEDULER_DIFFERENCES: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    ("v1_compat", "task_with_upstream_tasks"): (
        {"ok": {"has_dependency_graph": True, "task_ids": ["a", "b"]}},
        "ours honours upstream_tasks whatever the form (2.0.0 only in a list): "
        "leaving the upstream task out would run b on data a never wrote",
    ),
    ("v1_compat", "empty_list"): (
        {"error": "ValueError"},
        "the core refuses a pipeline without tasks (the top level's rule)",
    ),
}


@pytest.mark.parametrize("ns", SPACES)
def test_scheduler(ours: dict[str, Any], ns: str) -> None:
    """v2.Scheduler takes a Pipeline or a Task, never a list;
    v1_compat.Scheduler is a factory that takes a list as well."""
    mine_all, release_all = ours["scheduler"][ns], V200["scheduler"][ns]
    for case, release in release_all.items():
        mine = mine_all[case]
        if (ns, case) in SCHEDULER_DIFFERENCES:
            expected = SCHEDULER_DIFFERENCES[ns, case][0]
            if "ok" in expected:
                assert mine["ok"] == expected["ok"] != release["ok"], case
            else:
                assert mine["error"] == expected["error"] and "ok" in release, case
        elif case == "unknown_task":
            # None for a task id it does not know, as 1.2.2 and 2.0.0 do
            assert mine == release == {"ok": None, "warnings": []}
        elif isinstance(release, dict) and "warnings" in release:
            compare_outcome(mine, release, f"{ns}.Scheduler {case}", message=True)
        else:
            assert mine == release, case


# --------------------------------------------------------- run_blockwise

RUN_DIFFERENCES: dict[tuple[str, str], tuple[dict[str, Any], str]] = {
    **{
        (ns, "list_holding_a_pipeline"): (
            {"ok": True},
            "ours runs a list of tasks and pipelines; 2.0.0 fails with an AttributeError",
        )
        for ns in SPACES
    },
    **{
        ("v1_compat", case): (
            {"ok": True},
            "ours honours upstream_tasks whatever the form (2.0.0 only in a list): 2.0.0 "
            "runs b alone, on data a never wrote",
        )
        for case in ("task_with_upstream_tasks", "pipeline_with_upstream_tasks")
    },
}


@pytest.mark.parametrize("ns", SPACES)
def test_run_blockwise(ours: dict[str, Any], ns: str) -> None:
    """Both namespaces' run_blockwise take a Task, a Pipeline *and* a list
    (2.0.0's docstring says the list is v1_compat's, but its v2 takes one
    too); a list of v1_compat tasks brings their upstream tasks along."""
    mine_all, release_all = ours["run_blockwise"][ns], V200["run_blockwise"][ns]
    assert set(mine_all) == set(release_all)
    for case, release in release_all.items():
        mine = mine_all[case]
        if (ns, case) in RUN_DIFFERENCES:
            expected = RUN_DIFFERENCES[ns, case][0]
            if "ok" in expected:
                assert "ok" in mine and mine["ok"] != release.get("ok"), case
                assert mine["ok"]["upstream_first"], case
            else:
                assert mine["error"] == expected["error"] and "ok" in release, case
            continue
        compare_outcome(mine, release, f"{ns}.run_blockwise {case}", message=True)


def test_upstream_tasks_of_v1_compat_run_first_in_every_form(ours: dict[str, Any]) -> None:
    runs = ours["run_blockwise"]["v1_compat"]
    for case in (
        "list_with_upstream_tasks",
        "task_with_upstream_tasks",
        "pipeline_with_upstream_tasks",
    ):
        assert runs[case]["ok"]["result"] == {"a": [4, 4], "b": [4, 4]}, case
        assert runs[case]["ok"]["upstream_first"], case


# ---------------------------------------------------------------- servers


@pytest.mark.parametrize("ns", SPACES)
def test_servers(ours: dict[str, Any], ns: str) -> None:
    """v1_compat.SerialServer warns when made and prints the Execution
    Summary; v2 has no SerialServer. Server.run_blockwise takes 2.0.0's
    (pipeline, resources, progress, block_tracking, host, summary)."""
    mine_all, release_all = ours["servers"][ns], V200["servers"][ns]
    assert set(mine_all) == set(release_all)
    for case, release in release_all.items():
        if isinstance(release, dict):
            compare_outcome(mine_all[case], release, f"{ns} {case}", message=True)
        else:
            assert mine_all[case] == release, case


# --------------------------------------------------------------- basedirs


@pytest.mark.parametrize("ns", SPACES)
def test_done_marker_basedir_functions_warn_as_2_0_0(ours: dict[str, Any], ns: str) -> None:
    mine_all, release_all = ours["basedirs"][ns], V200["basedirs"][ns]
    assert mine_all == release_all


# ---------------------------------------------------------------- layering


@pytest.mark.skipif(not SOURCE.is_dir(), reason="no source checkout beside the tests")
def test_nothing_in_the_package_imports_the_namespaces() -> None:
    """The namespaces sit on top: they import the package, nothing in the
    package imports them (v1_compat builds on v2)."""
    for path in SOURCE.rglob("*.py"):
        if path.name in ("v2.py", "v1_compat.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                assert name not in ("daisy.v2", "daisy.v1_compat"), f"{path.name} imports {name}"
