"""Enumerating a task's block dependencies: ``BlockwiseDependencyGraph
.enumerate_all_dependencies()`` over 100^3 blocks, without read/write
conflicts (one level, no upstream blocks) and with them (8 levels, each
block waiting for its conflicting neighbours on the level before).

Runs under this package and under the published daisy 2.0.0 alike (the
positional constructor is the same in both): ``compare_with_daisy200.py
-- -k graph`` sets them side by side. Issue 12's target: at least 4× faster
than 2.0.0 (5.0 s and 14.7 s there), with memory flat in the number of
blocks (ours streams the pairs; ``extra_info`` records the pairs and, for
ours, the peak-RSS growth measured by ``daisy.profile_block``).
"""

from __future__ import annotations

import pytest
from funlib.geometry import Roi

import daisy

N = 100  # blocks per axis


def graph(conflicts: bool) -> daisy.BlockwiseDependencyGraph:
    size = 10 * N + 2  # (size - 12) / 10 + 1 == N blocks per axis
    context = 1 if conflicts else 0
    return daisy.BlockwiseDependencyGraph(
        "bench",
        Roi((-context,) * 3, (10 + 2 * context,) * 3),
        Roi((0, 0, 0), (10, 10, 10)),
        conflicts,
        "valid",
        Roi((0, 0, 0), (size,) * 3) if conflicts else Roi((1, 1, 1), (10 * N,) * 3),
    )


@pytest.mark.parametrize("conflicts", [False, True], ids=["no_conflicts", "conflicts"])
def test_graph_enumerate_all_dependencies_1e6(benchmark, conflicts):
    g = graph(conflicts)
    assert g.num_blocks == N**3

    def enumerate_all():
        pairs = edges = 0
        for _block, upstream in g.enumerate_all_dependencies():
            pairs += 1
            edges += len(upstream)
        return pairs, edges

    pairs, edges = benchmark.pedantic(enumerate_all, rounds=3, iterations=1)
    assert pairs == N**3
    assert (edges > 0) == conflicts
    benchmark.extra_info.update(pairs=pairs, upstream_edges=edges)
