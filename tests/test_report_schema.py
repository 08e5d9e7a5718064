"""One report schema: the core writes the report, Python parses exactly
what it writes, and every figure a reader shows (utilisation, the trend
line, the store's arrays) is the core's.

These run real pipelines (serially and on worker processes) and compare
the raw ``runs.jsonl`` line the core appended with what Python makes of it,
so a key renamed on either side fails here instead of reading as a silent
default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import line_task, run_tasks

import daisy
from daisy._daisy import read_history, read_tracking_array
from daisy.report.stores import stat_array
from daisy.run_report import TaskReport, read_runs, report_schema


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value (lists contribute their items' keys)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(prefix + k)
            out |= key_paths(v, prefix + k + ".")
    elif isinstance(value, list):
        for item in value:
            out |= key_paths(item, prefix + "[].")
    return out


def last_line(tracking: Path, task_id: str) -> dict[str, Any]:
    lines = (tracking / task_id / "runs.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


@pytest.mark.parametrize("mp", [False, True], ids=["serial", "workers"])
def test_python_reads_back_exactly_what_the_core_wrote(tracking: Path, mp: bool) -> None:
    task = line_task("schema", 6, resource_tracking=True, max_workers=2)
    run_tasks([task], mp=mp)
    raw = last_line(tracking, "schema")
    # read back through the core's reader of histories, as every view reads
    parsed = read_runs(tracking / "schema" / "runs.jsonl")[-1]
    # the same keys on both sides, at every depth, and the same values
    assert key_paths(parsed.to_dict()) == key_paths(raw)
    assert parsed.to_dict() == raw
    assert TaskReport.from_dict(raw).to_dict() == raw
    assert raw["outcome"] == "completed"


def test_a_line_missing_a_key_the_core_always_wrote_is_skipped_naming_it(
    tracking: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A history is read by the core's report types: a line that lacks a
    key every version wrote is no report, and a history reader skips it
    with a warning naming the key (issue 26, item 10: one odd line broke
    every view of the history)."""
    run_tasks([line_task("strict", 3)], mp=False)
    raw = last_line(tracking, "strict")
    del raw["blocks"]["wall"]["sum"]
    path = tracking / "strict" / "runs.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    assert read_runs(path) == []
    assert "blocks.wall: missing field `sum`" in caplog.text and str(path) in caplog.text
    # a dict a user wrote by hand is read leniently: the spec's behaviour
    lenient = TaskReport.from_dict(raw)
    assert lenient.blocks.wall.total == 0.0


def optional_keys() -> dict[str, Any]:
    """Every key the schema does not require (added after the report's
    first release, or optional), with its default where it gives one."""
    schema = report_schema()
    out: dict[str, Any] = {}
    for spec in [schema, *schema["$defs"].values()]:
        required = set(spec.get("required", ()))
        for key, inner in spec.get("properties", {}).items():
            if key not in required:
                out[key] = inner.get("default")
    return out


def without_optional(value: Any, spec: dict[str, Any]) -> Any:
    """``value`` without the keys its schema does not require, at every
    depth."""
    spec = _resolve(spec)
    for key in ("anyOf", "oneOf"):
        for alt in spec.get(key, ()):
            if _resolve(alt).get("type") == "object" and isinstance(value, dict):
                return without_optional(value, alt)
    if isinstance(value, dict) and "properties" in spec:
        required = set(spec.get("required", ()))
        return {
            k: without_optional(v, spec["properties"][k]) for k, v in value.items() if k in required
        }
    if isinstance(value, list) and isinstance(spec.get("items"), dict):
        return [without_optional(v, spec["items"]) for v in value]
    return value


def test_only_keys_the_core_added_later_may_be_missing(tracking: Path) -> None:
    """A line written before a key was added reads as that key's default,
    filled in by the core's reader (its types' ``serde(default)``, which
    the schema publishes as not required)."""
    run_tasks([line_task("older", 3, max_workers=1)], mp=True)
    raw = last_line(tracking, "older")
    optional = optional_keys()
    assert {"utilisation", "start", "notices", "gpu_util"} <= set(optional)
    raw = without_optional(raw, report_schema())
    assert "utilisation" not in raw and "start" not in raw["workers"]["by_id"][0]
    path = tracking / "older" / "runs.jsonl"
    path.write_text(json.dumps(raw) + "\n")
    (old,) = read_runs(path)
    assert old.utilisation is None and old.workers.spawner == ""
    # workers of lines written before warm starts started cold
    assert old.workers.warm_starts == 0 and old.workers.launcher_startup is None
    assert {r.start for r in old.workers.by_id.values()} <= {"cold"}
    # the core hands the line on with every key, each at its default
    ((_, _, text),), skipped = read_history(path)
    assert not skipped
    filled = json.loads(text)
    assert filled["utilisation"] is None and filled["notices"] == []
    assert all(r["start"] == optional["start"] == "cold" for r in filled["workers"]["by_id"])


def test_utilisation_is_the_cores(tracking: Path) -> None:
    task = line_task("busy", 8, max_workers=2)
    run_tasks([task], mp=True)
    raw = last_line(tracking, "busy")
    u = raw["utilisation"]
    assert isinstance(u, float) and 0.0 < u <= 1.0
    w = raw["workers"]
    available = sum(
        (r["startup"] or 0.0)
        + r["idle"]["sum"]
        + r["compute"]["sum"]
        + (r["final_wait"] or 0.0)
        + (r["teardown"] or 0.0)
        for r in w["by_id"]
    )
    assert u == pytest.approx(w["compute"]["sum"] / available)
    assert task.report() is not None and task.report().utilisation == u
    # a serial run has no workers: nothing to say
    serial = line_task("alone", 3)
    run_tasks([serial], mp=False)
    assert last_line(tracking, "alone")["utilisation"] is None


def test_the_trend_line_is_the_cores_least_squares_line() -> None:
    walls = np.array([10.0, 12.0, 11.0, 15.0, 14.0, 18.0])  # ms
    slope = float(np.polyfit(np.arange(walls.size), walls, 1)[0])
    stat = {
        "n": walls.size,
        "mean": walls.mean() / 1e3,
        "std": 0.0,
        "min": 0.0,
        "max": 0.0,
        "sum": walls.sum() / 1e3,
    }
    blocks = daisy.BlockSummary.from_dict({"wall": stat, "trend_slope_ms": slope})
    fit = np.polyfit(np.arange(walls.size), walls, 1)
    for x in (0, walls.size - 1, 2.5):
        assert blocks.trend_ms(x) == pytest.approx(fit[0] * x + fit[1])


def test_store_arrays_come_through_the_binding_as_zarr_reads_them(tracking: Path) -> None:
    task = line_task("arrays", 5, resource_tracking=True)
    run_tasks([task], mp=False)
    store = tracking / "arrays"
    group = zarr.open_group(str(store), mode="r")
    for name in ("done", "failures", "wall_seconds", "worker_id", "sent_at"):
        ours = stat_array(store, name)
        theirs = np.asarray(group[name][...]).ravel()
        assert ours is not None and ours.dtype == theirs.dtype, name
        np.testing.assert_array_equal(ours, theirs)
    dtype, shape, data = read_tracking_array(str(store), "done") or ("", [], b"")
    assert (dtype, shape, len(data)) == ("uint8", [5], 5)
    assert read_tracking_array(str(store), "gpu_mem_bytes") is not None
    with pytest.raises(ValueError, match='no tracking array "nonsense"'):
        read_tracking_array(str(store), "nonsense")
    assert stat_array(tracking / "nowhere", "done") is None


def test_every_stat_prints_in_its_own_unit(tracking: Path) -> None:
    task = line_task("units", 3, resource_tracking=True)
    run_tasks([task], mp=False)
    blocks = task.report().blocks
    for name in ("peak_rss", "io_read", "io_write"):
        text = str(getattr(blocks, name))
        assert text.endswith("B") and " s" not in text, (name, text)
    assert str(blocks.wall).endswith("s"), str(blocks.wall)


def test_block_records_come_in_grid_order(tracking: Path) -> None:
    task = daisy.Task(
        "grid",
        daisy.Roi((0, 0), (30, 30)),
        daisy.Roi((0, 0), (10, 10)),
        daisy.Roi((0, 0), (10, 10)),
        process_function=lambda b: None,
    )
    run_tasks([task], mp=False)
    ids = [r.block_id[1] for r in task.block_records()]
    graph = daisy.DependencyGraph([task])
    by_offset = {
        tuple(int(c) for c in b.write_roi.offset): b.block_id[1] for b in graph.blocks("grid")
    }
    row_major = [by_offset[o] for o in sorted(by_offset)]
    assert ids == row_major and ids != sorted(ids), ids


def _resolve(spec: dict[str, Any]) -> dict[str, Any]:
    ref = spec.get("$ref")
    return report_schema()["$defs"][ref.rsplit("/", 1)[-1]] if ref else spec


def maximal(spec: dict[str, Any]) -> Any:
    """A value of ``spec`` with every key the schema knows, at every depth
    (one item per list, one entry per map; the first choice of a union
    that is not null)."""
    spec = _resolve(spec)
    for key in ("anyOf", "oneOf"):
        if key in spec:
            alts = [a for a in spec[key] if _resolve(a).get("type") != "null"]
            return maximal(alts[0])
    if "const" in spec:
        return spec["const"]
    kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
    kind = next(k for k in kinds if k != "null")
    if kind == "object":
        if "properties" in spec:
            return {k: maximal(v) for k, v in spec["properties"].items()}
        return {"clean": maximal(spec["additionalProperties"])}
    if kind == "array":
        return [maximal(spec["items"])]
    return {"integer": 3, "number": 1.5, "string": "text", "boolean": True}[kind]


def test_python_knows_every_key_of_the_published_schema_and_no_other() -> None:
    """The report's schema is the core's (``report_schema.json``, generated
    from its types; a Rust test fails when the file is stale). Python's
    report classes read and write exactly its keys: a key added on one
    side only fails here, before any run writes it."""
    line = maximal(report_schema())
    assert "gpu_util" in line["blocks"] and "start" in line["workers"]["by_id"][0]
    parsed = TaskReport.from_dict(line)
    assert key_paths(parsed.to_dict()) == key_paths(line)
    assert parsed.to_dict() == line


def test_the_cores_reader_takes_every_key_of_the_schema_and_names_a_wrong_one(
    tmp_path: Path,
) -> None:
    """The reader of histories is the schema's own types (no second copy of
    the rules): the maximal line is a report, read back whole, and a key of
    the wrong type is named with its path."""
    line = maximal(report_schema())
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(line) + "\n")
    ((_, _, text),), skipped = read_history(path)
    assert not skipped and json.loads(text) == line
    line["workers"]["by_id"][0]["blocks_ok"] = "many"
    path.write_text(json.dumps(line) + "\n")
    reports, ((number, why),) = read_history(path)
    assert not reports and number == 1
    assert why.startswith("workers.by_id[0].blocks_ok: a string"), why
