"""Block dependencies of a pipeline (``daisy.dependency_graph`` in daisy
1.x), computed by the Rust core."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from funlib.geometry import Roi

from daisy import _v1_names
from daisy._daisy import Block
from daisy._daisy import DependencyGraph as _NativeGraph
from daisy.pipeline import Pipeline
from daisy.task import Task


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
        block_read_roi: Roi,
        block_write_roi: Roi,
        read_write_conflict: bool,
        fit: str,
        total_read_roi: Roi | None = None,
        total_write_roi: Roi | None = None,
    ) -> None:
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


# names daisy 1.x exported from this module, imported on first use
__getattr__ = _v1_names.lazy_names(
    __name__,
    {
        "Coordinate": "funlib.geometry:Coordinate",
    },
)
