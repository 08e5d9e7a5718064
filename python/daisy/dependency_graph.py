"""Block dependencies of a pipeline (``daisy.dependency_graph`` in daisy
1.x), computed by the Rust core."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from funlib.geometry import Coordinate, Roi

from daisy._daisy import Block
from daisy._daisy import DependencyGraph as _NativeGraph
from daisy.pipeline import Pipeline
from daisy.task import Task

Dependency = tuple[Block, list[Block]]


class Dependencies(Sequence[Dependency]):
    """Every block of some tasks with the blocks it waits for, as
    ``(block, [upstream blocks])``, in daisy 1.x's order: what
    ``enumerate_all_dependencies()`` returns. A sequence, as daisy 2.0.0's
    list was (``len()``, indexing, slicing, iterating more than once), that
    is computed as it is walked, so memory stays flat in the number of
    blocks (an index walks up to it)."""

    def __init__(self, native: _NativeGraph, task_ids: list[str]) -> None:
        self._native = native
        self._task_ids = task_ids
        self._len = sum(native.num_blocks(t) for t in task_ids)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Dependency]:
        for task_id in self._task_ids:
            yield from self._native.dependencies(task_id)

    @overload
    def __getitem__(self, index: int) -> Dependency: ...

    @overload
    def __getitem__(self, index: slice) -> list[Dependency]: ...

    def __getitem__(self, index: int | slice) -> Dependency | list[Dependency]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError(f"dependency index {index} out of range for {self._len} blocks")
        return next(itertools.islice(iter(self), i, None))

    def __repr__(self) -> str:
        return f"<Dependencies of {self._len} blocks of {', '.join(map(repr, self._task_ids))}>"


class DependencyGraph:
    """Which blocks of a pipeline wait for which.

    ``upstream(block)`` lists the blocks a block waits for: the blocks of
    its own task on the previous level around it (read/write conflicts) and
    the upstream tasks' blocks whose write ROI overlaps its read ROI.
    ``downstream(block)`` is the exact inverse.
    """

    def __init__(self, tasks: Any) -> None:
        self._pipeline = Pipeline.of(tasks)
        self._native = _NativeGraph(self._pipeline.specs())

    @property
    def task_ids(self) -> list[str]:
        """Task ids in pipeline (topological) order."""
        return self._native.task_ids

    def num_blocks(self, task_id: str) -> int:
        """How many blocks a task has."""
        return self._native.num_blocks(task_id)

    def num_roots(self, task_id: str) -> int:
        """How many blocks of a task wait for no other block."""
        return self._native.num_roots(task_id)

    def blocks(self, task_id: str) -> list[Block]:
        """Every block of a task."""
        return self._native.blocks(task_id)

    def root_gen(self, task_id: str) -> Iterator[Block]:
        """The blocks of a task that wait for no other block."""
        return iter(self._native.roots(task_id))

    def roots(self) -> dict[str, tuple[int, Iterator[Block]]]:
        """Per task: ``(number of roots, iterator over them)``."""
        return {t: (self.num_roots(t), self.root_gen(t)) for t in self.task_ids}

    def root_tasks(self) -> list[str]:
        """Tasks without upstream tasks."""
        return [t for t in self.task_ids if not self._pipeline.upstream_ids(t)]

    def enumerate_all_dependencies(self) -> Dependencies:
        """Every block with the blocks it waits for, as ``(block,
        [upstream blocks])``: task by task in pipeline order, and within a
        task level by level, row-major within a level (daisy 1.x's order).
        A `Dependencies` sequence, computed as it is walked."""
        return Dependencies(self._native, self.task_ids)

    def upstream(self, block: Block) -> list[Block]:
        """The blocks ``block`` waits for."""
        return self._native.upstream(block)

    def downstream(self, block: Block) -> list[Block]:
        """The blocks that wait for ``block``."""
        return self._native.downstream(block)


class BlockwiseDependencyGraph(DependencyGraph):
    """The dependency graph of a single task (daisy 1.x signature)."""

    def __init__(
        self,
        task_id: str,
        block_read_roi: Roi | None = None,
        block_write_roi: Roi | None = None,
        read_write_conflict: bool = True,
        fit: str = "valid",
        total_read_roi: Roi | None = None,
        total_write_roi: Roi | None = None,
        *,
        read_roi: Roi | None = None,
        write_roi: Roi | None = None,
    ) -> None:
        # daisy 2.0.0 names the block ROIs read_roi / write_roi
        block_read_roi = _one_of(block_read_roi, read_roi, "block_read_roi", "read_roi")
        block_write_roi = _one_of(block_write_roi, write_roi, "block_write_roi", "write_roi")
        if total_read_roi is None:
            if total_write_roi is None:
                raise ValueError(
                    "total_read_roi: give total_read_roi or total_write_roi to say what to tile"
                )
            context_lo = block_write_roi.begin - block_read_roi.begin
            context_hi = block_read_roi.end - block_write_roi.end
            total_read_roi = total_write_roi.grow(context_lo, context_hi)
        task = Task(
            task_id,
            total_read_roi,
            block_read_roi,
            block_write_roi,
            process_function=None,
            read_write_conflict=read_write_conflict,
            fit=fit,
        )
        super().__init__([task])
        self.task_id = task_id
        self._task = task

    @property
    def num_blocks(self) -> int:  # type: ignore[override]
        """How many blocks the task has."""
        return self._native.num_blocks(self.task_id)

    def num_roots(self) -> int:  # type: ignore[override]
        """How many blocks wait for no other block."""
        return self._native.num_roots(self.task_id)

    def root_gen(self) -> Iterator[Block]:  # type: ignore[override]
        """The blocks that wait for no other block."""
        return iter(self._native.roots(self.task_id))

    @property
    def num_levels(self) -> int:
        """Number of levels: blocks of one level never conflict, and a
        block waits for the conflicting blocks of the level before its
        own (1 without read/write conflicts)."""
        return self._native.num_levels(self.task_id)

    def level_blocks(self, level: int) -> Iterator[Block]:
        """The blocks of one level, row-major; lazily (none for a level
        the task does not have)."""
        if not isinstance(level, int) or isinstance(level, bool) or level < 0:
            raise ValueError(
                f"level: expected a level number 0..{self.num_levels - 1}, got {level!r}"
            )
        return iter(self._native.walk(self.task_id, level))

    def enumerate_all_dependencies(self) -> Dependencies:
        """Every block with the blocks it waits for, as ``(block,
        [upstream blocks])``, level by level and row-major within a level
        (daisy 1.x's order; 2.0.0 returned the same pairs as a list). A
        `Dependencies` sequence, computed as it is walked."""
        return Dependencies(self._native, [self.task_id])

    def get_subgraph_blocks(self, sub_roi: Roi, read_roi: bool = False) -> list[Block]:
        """The blocks whose write ROI (``read_roi=True``: read ROI)
        intersects ``sub_roi``, row-major over the block grid."""
        return self._native.blocks_touching(self.task_id, sub_roi, read_roi)

    # -- daisy 1.x's level computation, kept for code that calls it --------

    def compute_level_stride(self) -> Coordinate:
        """How far apart (in world units) two blocks of one level are."""
        return _coordinate(self._native.level_layout(self.task_id)[0])

    def compute_level_offsets(self) -> list[Coordinate]:
        """Per level: the read offset of its first block, relative to the
        total read ROI's."""
        return [_coordinate(o) for o in self._native.level_layout(self.task_id)[1]]

    def compute_level_conflicts(self) -> list[list[Coordinate]]:
        """Per level: the offsets (world units) to the blocks of the
        previous level it waits for (none for level 0)."""
        return [
            [_coordinate(c) for c in level] for level in self._native.level_layout(self.task_id)[2]
        ]

    def compute_level_block_offsets(self) -> list[list[Coordinate]]:
        """Per level: the write offsets of its blocks, row-major."""
        return [
            [b.write_roi.offset for b in self.level_blocks(level)]
            for level in range(self.num_levels)
        ]

    def get_conflict_offsets(
        self, level_offset: Coordinate, prev_level_offset: Coordinate, level_stride: Coordinate
    ) -> list[Coordinate]:
        """The offsets from a block at ``level_offset`` to the blocks of the
        level at ``prev_level_offset`` it conflicts with, levels repeating
        every ``level_stride``: per axis the nearest on each side (one where
        they line up), all combinations."""
        return [
            _coordinate(c)
            for c in _NativeGraph.conflict_offsets(
                list(level_offset), list(prev_level_offset), list(level_stride)
            )
        ]

    def shrink_possible(self, block: Block) -> bool:
        """Whether ``block``'s write ROI keeps something inside the total
        write ROI."""
        return self._task._spec.cut_to_task(block.read_roi, block.write_roi) is not None

    def shrink(self, block: Block) -> Block:
        """``block`` cut to the task: its write ROI the part inside the
        total write ROI, its read ROI the part inside the total ROI (the
        core's cut). A block with nothing inside is a ``ValueError`` (daisy
        1.x returned one with an empty write ROI, which a daisy block
        cannot be): ask `shrink_possible` first."""
        cut = self._task._spec.cut_to_task(block.read_roi, block.write_roi)
        if cut is None:
            raise ValueError(
                f"block: {block} writes nothing inside the task's total write ROI "
                f"{self._task.total_write_roi}; check shrink_possible(block) first"
            )
        read, write = cut
        return Block(
            self._task.total_roi, read, write, block_id=block.block_id[1], task_id=self.task_id
        )

    @property
    def inclusion_criteria(self) -> Callable[[Block], bool]:
        """Whether a block at some place belongs to the task under its fit
        (the core's rule): ``valid``, its read ROI inside the total ROI;
        ``overhang``, its write ROI starting inside the total write ROI;
        ``shrink``, some of its write ROI inside it."""
        spec = self._task._spec
        return lambda b: spec.includes(b.read_roi, b.write_roi)

    @property
    def fit_block(self) -> Callable[[Block], Block]:
        """What the fit does to a block: ``shrink`` cuts it to the total
        write ROI (`shrink`); ``valid`` and ``overhang`` leave it as is."""
        if self._task.fit == "shrink":
            return self.shrink
        return lambda b: b


def _coordinate(values: Any) -> Coordinate:
    """A funlib ``Coordinate`` (its constructor carries no type hints)."""
    return Coordinate(values)  # type: ignore[no-untyped-call]


def _one_of(old: Roi | None, new: Roi | None, old_name: str, new_name: str) -> Roi:
    """The ROI given under one of its two names (daisy 1.x's or 2.0.0's)."""
    if old is not None and new is not None:
        raise TypeError(f"{old_name}: given twice (also as {new_name}); pass one of them")
    roi = old if old is not None else new
    if roi is None:
        raise TypeError(f"{old_name}: missing (the block's ROI; daisy 2.0.0 calls it {new_name})")
    return roi
