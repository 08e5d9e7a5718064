"""Small helpers shared by the daisy test suite."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import daisy


def roi(offset: Sequence[int], shape: Sequence[int]) -> daisy.Roi:
    """A funlib ``Roi`` (``daisy.Roi``) from plain sequences."""
    return daisy.Roi(tuple(offset), tuple(shape))


def noop(block: daisy.Block) -> None:
    """A block function that does nothing (the block succeeds)."""


def make_task(
    task_id: str,
    total: tuple[Sequence[int], Sequence[int]],
    read: tuple[Sequence[int], Sequence[int]],
    write: tuple[Sequence[int], Sequence[int]],
    **kwargs: Any,
) -> daisy.Task:
    """A ``daisy.Task`` from ``(offset, shape)`` pairs, with a no-op block
    function unless ``process_function`` is given."""
    kwargs.setdefault("process_function", noop)
    return daisy.Task(task_id, roi(*total), roi(*read), roi(*write), **kwargs)


def line_task(task_id: str, n: int, size: int = 10, **kwargs: Any) -> daisy.Task:
    """A 1D task of ``n`` independent-looking blocks of ``size`` (read ROI
    equal to the write ROI, so blocks of one task never conflict)."""
    return make_task(task_id, ((0,), (n * size,)), ((0,), (size,)), ((0,), (size,)), **kwargs)


def bid(block: daisy.Block) -> tuple[str, int]:
    """The hashable id of a block: ``(task_id, spatial_id)``."""
    task_id, spatial_id = block.block_id
    return (task_id, spatial_id)


def ids(blocks: Iterable[daisy.Block]) -> set[tuple[str, int]]:
    """The set of block ids of some blocks."""
    return {bid(b) for b in blocks}


def roi_json(r: daisy.Roi) -> list[list[int]]:
    """A ROI as the fixtures store it: ``[offset, shape]``."""
    return [list(r.offset), list(r.shape)]


def transitive_downstream(
    graph: daisy.DependencyGraph, start: Iterable[daisy.Block]
) -> set[tuple[str, int]]:
    """Ids of every block reachable from ``start`` through ``downstream``
    (the start blocks themselves excluded unless reachable again)."""
    seen: set[tuple[str, int]] = set()
    stack = [d for b in start for d in graph.downstream(b)]
    while stack:
        b = stack.pop()
        if bid(b) in seen:
            continue
        seen.add(bid(b))
        stack.extend(graph.downstream(b))
    return seen
