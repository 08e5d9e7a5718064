"""``BlockwiseDependencyGraph``'s enumeration methods against daisy 1.2.2.

``tests/fixtures/surface/behaviour_1.2.2.json`` holds what the released
1.2.2 answered (recorded black-box by ``record_behaviour.py``) for a 2-D
task with block read ROI (-10,-10)+(30,30), write ROI (0,0)+(10,10), over
total read ROIs (0,0)+(100,100) and (0,0)+(105,105), with and without
read/write conflicts and for every fit. These tests ask ours the same
questions: ``num_levels``, ``level_blocks``, ``root_gen``,
``enumerate_all_dependencies`` (same blocks in the same order, each with
the same upstream blocks; 1.2.2's order inside an upstream list follows its
internal sets, so those lists compare as sets) and ``get_subgraph_blocks``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from funlib.geometry import Roi

import daisy

FIXTURE = Path(__file__).parent / "fixtures" / "surface" / "behaviour_1.2.2.json"
CONFIGS: dict[str, dict[str, Any]] = json.loads(FIXTURE.read_text())["dependency_graph"]["configs"]


def graph(config: str) -> daisy.BlockwiseDependencyGraph:
    rwc = "rwc=True" in config
    fit = re.search(r"fit=(\w+)", config).group(1)  # type: ignore[union-attr]
    size = 105 if "105" in config else 100
    return daisy.BlockwiseDependencyGraph(
        "t",
        Roi((-10, -10), (30, 30)),
        Roi((0, 0), (10, 10)),
        rwc,
        fit,
        Roi((0, 0), (size, size)),
    )


def ids(blocks: Any) -> list[list[Any]]:
    return [[b.block_id[0], b.block_id[1]] for b in blocks]


def recorded(config: str, key: str) -> Any:
    entry = CONFIGS[config][key]
    assert "ok" in entry, entry
    return entry["ok"]


def listed(value: Any) -> tuple[list[Any], int]:
    """A recorded list, possibly trimmed to its first entries: (entries, full count)."""
    if isinstance(value, dict):
        return value["first"], value["count"]
    return value, len(value)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_levels_and_roots_match_1_2_2(config: str) -> None:
    g = graph(config)
    assert g.num_levels == recorded(config, "num_levels")
    assert g.num_blocks == recorded(config, "num_blocks")
    for level, entry in CONFIGS[config]["level_blocks"].items():
        first, count = listed(entry["ok"])
        ours = list(g.level_blocks(int(level)))
        assert len(ours) == count
        assert ids(ours)[: len(first)] == [b[0] for b in first]
        assert [[str(b.read_roi), str(b.write_roi)] for b in ours[: len(first)]] == [
            [_roi_text(r) for r in b[1:]] for b in first
        ]
    first, count = listed(recorded(config, "root_gen"))
    roots = list(g.root_gen())
    assert len(roots) == count and ids(roots)[: len(first)] == first


def _roi_text(text: str) -> str:
    """1.2.2's ``(o,o)+(s,s)`` as funlib's ``str(Roi)`` writes it."""
    offset, shape = (tuple(int(x) for x in part.strip("()").split(",")) for part in text.split("+"))
    return str(Roi(offset, shape))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_enumerate_all_dependencies_matches_1_2_2(config: str) -> None:
    g = graph(config)
    first, count = listed(recorded(config, "enumerate_all_dependencies"))
    ours = list(g.enumerate_all_dependencies())
    assert len(ours) == count
    for (block, upstream), (want, want_up) in zip(ours, first, strict=False):
        assert [block.block_id[0], block.block_id[1]] == want
        assert sorted(ids(upstream)) == sorted(want_up), want
    # every pair agrees with upstream(), and no block comes twice
    assert len({b.block_id for b, _ in ours}) == count
    for block, upstream in ours[:50]:
        assert sorted(ids(upstream)) == sorted(ids(g.upstream(block)))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_get_subgraph_blocks_matches_1_2_2(config: str) -> None:
    g = graph(config)
    sub = Roi((20, 20), (20, 20))
    assert ids(g.get_subgraph_blocks(sub)) == recorded(
        config, "get_subgraph_blocks((20,20)+(20,20))"
    )
    assert ids(g.get_subgraph_blocks(sub, read_roi=True)) == recorded(
        config, "get_subgraph_blocks((20,20)+(20,20),read_roi=True)"
    )
    total = g.get_subgraph_blocks(Roi((0, 0), (200, 200)))
    assert len(total) == recorded(config, "get_subgraph_blocks(total)")


def test_the_2_0_0_keywords_build_the_same_graph() -> None:
    a = daisy.BlockwiseDependencyGraph(
        "t",
        Roi((-10, -10), (30, 30)),
        Roi((0, 0), (10, 10)),
        True,
        "valid",
        Roi((0, 0), (100, 100)),
    )
    b = daisy.BlockwiseDependencyGraph(
        "t",
        read_roi=Roi((-10, -10), (30, 30)),
        write_roi=Roi((0, 0), (10, 10)),
        read_write_conflict=True,
        fit="valid",
        total_read_roi=Roi((0, 0), (100, 100)),
    )
    pairs_a = [(b.block_id, ids(up)) for b, up in a.enumerate_all_dependencies()]
    pairs_b = [(b.block_id, ids(up)) for b, up in b.enumerate_all_dependencies()]
    assert pairs_a == pairs_b and len(pairs_a) == 64
    with pytest.raises(TypeError, match="given twice"):
        daisy.BlockwiseDependencyGraph(
            "t",
            Roi((-10, -10), (30, 30)),
            Roi((0, 0), (10, 10)),
            read_roi=Roi((-10, -10), (30, 30)),
            total_read_roi=Roi((0, 0), (100, 100)),
        )


def test_bad_levels_and_rois_are_named() -> None:
    g = graph("rwc=True,fit=valid")
    assert list(g.level_blocks(g.num_levels)) == []
    with pytest.raises(ValueError, match="level"):
        g.level_blocks(-1)
    with pytest.raises(ValueError, match="roi"):
        g.get_subgraph_blocks(Roi((0, 0, 0), (1, 1, 1)))


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_enumerating_a_million_blocks_streams() -> None:
    """10^6 pairs go by without the process growing: the pairs are made one
    at a time (a list of them would take hundreds of MB)."""
    g = daisy.BlockwiseDependencyGraph(
        "big",
        Roi((0, 0, 0), (10, 10, 10)),
        Roi((0, 0, 0), (10, 10, 10)),
        False,
        "valid",
        Roi((0, 0, 0), (1000, 1000, 1000)),
    )
    assert g.num_blocks == 10**6
    probe = daisy.Block(Roi((0,), (1,)), Roi((0,), (1,)), Roi((0,), (1,)))
    before = resident_bytes()
    with daisy.profile_block(probe):
        n = sum(1 for _ in g.enumerate_all_dependencies())
    assert n == 10**6
    assert probe.stats is not None
    growth = probe.stats.peak_rss_bytes - before
    assert growth < 64 << 20, f"peak grew by {growth >> 20} MiB"


def _coords(value: Any) -> Any:
    if isinstance(value, list | tuple) and value and isinstance(value[0], int):
        return list(value)
    if isinstance(value, list | tuple):
        return [_coords(v) for v in value]
    return value


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_1x_level_computation_matches_1_2_2(config: str) -> None:
    g = graph(config)
    assert list(g.compute_level_stride()) == recorded(config, "compute_level_stride()")
    assert _coords(g.compute_level_offsets()) == recorded(config, "compute_level_offsets()")
    assert _coords(g.compute_level_conflicts()) == recorded(config, "compute_level_conflicts()")
    ours = _coords(g.compute_level_block_offsets())
    want = recorded(config, "compute_level_block_offsets()")
    assert len(ours) == len(want)
    for level, (got, rec) in enumerate(zip(ours, want, strict=True)):
        first, count = listed(rec)  # a long level was recorded trimmed
        assert len(got) == count and got[: len(first)] == first, level
    stride = g.compute_level_stride()
    offsets = g.compute_level_offsets()
    for level, entry in CONFIGS[config]["get_conflict_offsets(level i, level i-1, stride)"].items():
        i = int(level)
        got = g.get_conflict_offsets(offsets[i], offsets[i - 1], stride)
        assert _coords(got) == entry["ok"]


def _roi_1x(roi: Roi) -> str:
    """A ROI as 1.2.2's recording wrote it: ``(o,o)+(s,s)``, an empty one
    ``(None,None)+(0,0)``."""
    if roi.empty:
        return (
            "("
            + ",".join("None" for _ in roi.shape)
            + ")+("
            + ",".join("0" for _ in roi.shape)
            + ")"
        )
    return f"({','.join(map(str, roi.offset))})+({','.join(map(str, roi.shape))})"


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_shrink_matches_1_2_2(config: str) -> None:
    g = graph(config)
    for where, (x, y) in (
        ("edge block at (90, 90)", (90, 90)),
        ("inner block at (40, 40)", (40, 40)),
    ):
        block = daisy.Block(
            Roi((0, 0), (200, 200)),
            Roi((x - 10, y - 10), (30, 30)),
            Roi((x, y), (10, 10)),
            task_id="t",
        )
        possible = g.shrink_possible(block)
        assert possible == recorded(config, f"shrink_possible({where})")
        want = recorded(config, f"shrink({where})")
        if not possible:
            # 1.2.2 returned a block with an empty write ROI; ours cannot
            # be one (docs/compatibility.md)
            assert want["write"].startswith("(None")
            with pytest.raises(ValueError, match="shrink_possible"):
                g.shrink(block)
            continue
        got = g.shrink(block)
        assert [_roi_1x(got.read_roi), _roi_1x(got.write_roi)] == [want["read"], want["write"]]
    assert callable(g.fit_block) and callable(g.inclusion_criteria)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_inclusion_criteria_is_the_rule_the_graph_enumerates_by(config: str) -> None:
    """``inclusion_criteria`` is the core's fit rule (Python no longer
    restates it): every block the graph enumerates is included, and the
    block one write step past the last one on an axis is not."""
    g = graph(config)
    include = g.inclusion_criteria
    blocks = [b for level in range(g.num_levels) for b in g.level_blocks(level)]
    assert blocks and all(include(b) for b in blocks)
    write = blocks[0].write_roi.shape
    for axis in range(2):
        last = max(blocks, key=lambda b: b.write_roi.offset[axis])
        step = [0, 0]
        step[axis] = write[axis]
        beyond = daisy.Block(
            Roi((-10, -10), (300, 300)),
            last.read_roi.shift(daisy.Coordinate(step)),
            last.write_roi.shift(daisy.Coordinate(step)),
            task_id="t",
        )
        assert not include(beyond), (config, axis, beyond)
