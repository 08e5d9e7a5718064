"""`Pipeline`: tasks and the edges between them.

``a + b`` runs ``b`` after ``a`` (every sink of ``a`` becomes upstream of
every source of ``b``); ``a | b`` runs them side by side. Tasks also bring
their ``upstream_tasks`` along, as in daisy 1.x. The edges are checked by
the Rust core when the pipeline is built: a cycle or two different tasks
with one id is a ``ValueError`` right there, not at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from daisy._daisy import DependencyGraph, TaskSpec, check_distinct_stores, reset_tracking


class Composable:
    """A task as a pipeline sees it, and its ``+`` / ``|`` operators:
    `daisy.Task` is one. Defined here, so the module of tasks imports the
    module of pipelines and not the other way round."""

    task_id: str

    @property
    def _spec(self) -> TaskSpec:
        """The core's view of the task."""
        raise NotImplementedError

    @property
    def upstream(self) -> Sequence[Composable]:
        """The tasks this one brings along as upstream tasks."""
        raise NotImplementedError

    @property
    def tracking_path(self) -> Path | None:
        """The task's tracking store, or None."""
        return None

    def reset(self, history: bool = False) -> None:
        """Forget which blocks are done, so the next run processes every
        block again: the task's done markers, failure counts and per-block
        statistics are deleted from its tracking store (only from a
        directory that is a daisy store). Its run history (``runs.jsonl``)
        stays, with a reset record, so ``daisy compare`` can still set the
        runs after a code change against those before it; ``history=True``
        deletes the history too (the whole store). Raises ``OSError`` for a
        directory that is not a store, or one a running run holds."""
        path = self.tracking_path
        if path is not None:
            reset_tracking(str(path), keep_history=not history)

    def __add__(self, other: Any) -> Pipeline:
        return Pipeline.of(self) + Pipeline.of(other)

    def __radd__(self, other: Any) -> Pipeline:
        return Pipeline.of(other) + Pipeline.of(self)

    def __or__(self, other: Any) -> Pipeline:
        return Pipeline.of(self) | Pipeline.of(other)

    def __ror__(self, other: Any) -> Pipeline:
        return Pipeline.of(other) | Pipeline.of(self)


class Pipeline:
    """A validated set of tasks with their dependencies.

    ``Pipeline(tasks, edges)`` takes the tasks and ``(upstream, downstream)``
    pairs, each a task or a task id (daisy 2.0.0 takes tasks); tasks also
    bring their ``upstream_tasks`` along. ``edges``, ``sources`` and
    ``outputs`` give the tasks back, as 2.0.0 does."""

    def __init__(
        self,
        tasks: Iterable[Composable] | None = None,
        edges: Iterable[tuple[Composable | str, Composable | str]] | None = None,
    ) -> None:
        self._tasks: dict[str, Composable] = {}
        self._edges: set[tuple[str, str]] = set()  # (upstream id, downstream id)
        # tasks given directly, as opposed to brought along as upstream tasks
        self._explicit: set[str] = set()
        # what joining this pipeline to another needs, kept by `_validate`
        self._stores: list[tuple[str, Any]] = []
        self._sink_ids: list[str] = []
        for t in tasks or ():
            self._add(t)
            self._explicit.add(t.task_id)
        for edge in edges or ():
            up, down = (self._edge_end(e) for e in edge)
            self._edges.add((up, down))
        self._validate()

    def _edge_end(self, end: Composable | str) -> str:
        """The id of one end of an edge, which must be a task of this
        pipeline (the very task, where a task is given)."""
        tid = end.task_id if isinstance(end, Composable) else end
        if not isinstance(tid, str) or tid not in self._tasks:
            raise ValueError(f"edges: {tid!r} is not a task of this pipeline; add the Task first")
        if isinstance(end, Composable) and self._tasks[tid] is not end:
            raise ValueError(
                f"edges: another task is called {tid!r} in this pipeline; give every task "
                "its own task_id"
            )
        return tid

    @staticmethod
    def from_task(task: Composable) -> Pipeline:
        """A pipeline of one task (and the upstream tasks it brings
        along)."""
        if not isinstance(task, Composable):
            raise TypeError(f"task: expected a daisy.Task, got {type(task).__name__}")
        return Pipeline([task])

    def _edge_ids(self) -> list[tuple[str, str]]:
        """The edges as id pairs, in the order of their tasks."""
        order = {tid: i for i, tid in enumerate(self._tasks)}
        return sorted(self._edges, key=lambda e: (order[e[0]], order[e[1]]))

    @property
    def edges(self) -> list[tuple[Any, Any]]:
        """``(upstream task, downstream task)`` pairs."""
        return [(self._tasks[u], self._tasks[d]) for u, d in self._edge_ids()]

    @property
    def sources(self) -> list[Any]:
        """The tasks that wait for no other task of the pipeline."""
        return [self._tasks[t] for t in self._sources()]

    @property
    def outputs(self) -> list[Any]:
        """The tasks no other task of the pipeline waits for."""
        return [self._tasks[t] for t in self._sinks()]

    def run_blockwise(self, *args: Any, **kwargs: Any) -> Any:
        """Run the pipeline: ``daisy.run_blockwise(pipeline, ...)``, with the
        same arguments and return value."""
        # the package's own name, found when called: the module that runs
        # pipelines (daisy.convenience) imports this one
        import daisy

        return daisy.run_blockwise(self, *args, **kwargs)

    @classmethod
    def of(cls, tasks: Any) -> Pipeline:
        """A pipeline from a Task, a Pipeline or an iterable of those."""
        if isinstance(tasks, Pipeline):
            return tasks
        if isinstance(tasks, Composable):
            return cls([tasks])
        if isinstance(tasks, str | bytes) or not isinstance(tasks, Iterable):
            raise TypeError(
                f"tasks: expected a daisy.Task, a list of tasks or a Pipeline, "
                f"got {type(tasks).__name__}"
            )
        # one pipeline grown in place and checked once: folding ``|`` would
        # copy and re-check the growing pipeline per task (1,000 tasks took
        # 4 s, quadratic)
        p = cls()
        for t in tasks:
            if isinstance(t, Pipeline):
                p._absorb(t)
            elif isinstance(t, Composable):
                p._add(t)
                p._explicit.add(t.task_id)
            else:
                p._absorb(cls.of(t))  # a nested list, or the TypeError naming it
        p._validate()
        return p

    def _add(self, first: Composable) -> None:
        """Add a task and, depth first, the upstream tasks it brings along
        (with a stack, not recursion: a chain of thousands of tasks is
        fine)."""
        stack = [first]
        while stack:
            task = stack.pop()
            if not isinstance(task, Composable):
                raise TypeError(f"tasks: expected daisy.Task objects, got {type(task).__name__}")
            if self._tasks.get(task.task_id) is task:
                continue
            self._put(task.task_id, task)
            for up in task.upstream:
                self._edges.add((up.task_id, task.task_id))
            stack.extend(reversed(task.upstream))

    def _put(self, tid: str, task: Composable) -> None:
        """Keep `task` under its id: the one place two different task
        objects with one id are refused (Python objects, which the core's
        own check, on the specs, never sees: one would replace the other
        here first)."""
        if self._tasks.get(tid, task) is not task:
            raise ValueError(
                f"task_id: two different tasks are both called {tid!r}; give every "
                "task of a pipeline its own task_id"
            )
        self._tasks[tid] = task

    def _validate(self) -> None:
        """Check the whole pipeline, and keep what joining it to another
        needs (its stores and its sinks)."""
        if self._tasks:
            DependencyGraph(self.specs())
        # a store records one task's blocks: two tasks on one store would
        # take each other's blocks for done, and one inside another's would
        # lose its marks to the other's reset (the core's rule; a run
        # checks it again when it starts, with the paths of that moment)
        self._stores = [
            (t.task_id, t.tracking_path) for t in self._tasks.values() if t.tracking_path
        ]
        check_distinct_stores(self._stores)
        self._sink_ids = self._find_sinks()

    @property
    def tasks(self) -> list[Any]:
        """The tasks, in the order they were added."""
        return list(self._tasks.values())

    def reset(self, history: bool = False) -> None:
        """`Task.reset` every task of the pipeline (``history=True``: their
        run histories too)."""
        for t in self._tasks.values():
            t.reset(history=history)

    def upstream_ids(self, task_id: str) -> list[str]:
        """Ids of the tasks ``task_id`` waits for."""
        return sorted(u for u, d in self._edges if d == task_id)

    def specs(self) -> list[TaskSpec]:
        """The core specs, with every edge of this pipeline."""
        ups: dict[str, list[str]] = {}
        for u, d in self._edges:
            ups.setdefault(d, []).append(u)
        return [t._spec.with_upstream(sorted(ups.get(tid, ()))) for tid, t in self._tasks.items()]

    def _sources(self) -> list[str]:
        downs = {d for _, d in self._edges}
        return [t for t in self._tasks if t not in downs]

    def _sinks(self) -> list[str]:
        return self._sink_ids

    def _find_sinks(self) -> list[str]:
        ups = {u for u, _ in self._edges}
        return [t for t in self._tasks if t not in ups]

    def _absorb(self, other: Pipeline) -> None:
        """Take ``other``'s tasks and edges into this pipeline, unchecked
        (the caller checks the whole once)."""
        for tid, t in other._tasks.items():
            self._put(tid, t)
        self._edges |= other._edges
        self._explicit |= other._explicit

    def _merged(self, other: Pipeline, extra: Iterable[tuple[str, str]]) -> Pipeline:
        """``self`` and ``other`` (both checked) with the edges ``extra``
        between them, checked. Where they share no task only what is new
        is checked: the edges between them (no cycle can pass through
        those, as none leads back) and the stores of both sides; checking
        the whole each time made a chain built with ``+`` quadratic (1,000
        tasks took 4.2 s)."""
        joins = list(extra)
        p = Pipeline.__new__(Pipeline)
        p._tasks = dict(self._tasks)
        p._edges = set(self._edges)
        p._edges.update(joins)
        p._explicit = set(self._explicit)
        shared = not self._tasks.keys().isdisjoint(other._tasks.keys())
        p._absorb(other)
        if shared:
            p._validate()
        else:
            p._validate_joins(joins, self, other)
        return p

    def _validate_joins(
        self, joins: list[tuple[str, str]], left: Pipeline, right: Pipeline
    ) -> None:
        """Check the edges ``joins`` between two checked pipelines with no
        task in common, ``left`` and ``right``, and their stores together;
        keep the stores and the sinks."""
        self._stores = left._stores + right._stores
        if left._stores and right._stores:
            check_distinct_stores(self._stores)
        joined = {u for u, _ in joins}
        self._sink_ids = [t for t in left._sinks() if t not in joined] + right._sinks()
        if joins:
            ups: dict[str, list[str]] = {}
            for u, d in joins:
                ups.setdefault(d, []).append(u)
            # upstream ends (the left's) first, as the whole's order has them
            ends = list(dict.fromkeys([u for u, _ in joins] + [d for _, d in joins]))
            DependencyGraph(
                [self._tasks[t]._spec.with_upstream(sorted(ups.get(t, ()))) for t in ends]
            )

    def __add__(self, other: Any) -> Pipeline:
        other = Pipeline.of(other)
        # an upstream task the right side only brought along, and that the
        # left side already has, is not an entry point of the right side
        sources = [d for d in other._sources() if d in other._explicit or d not in self._tasks]
        return self._merged(other, [(u, d) for u in self._sinks() for d in sources])

    def __radd__(self, other: Any) -> Pipeline:
        return Pipeline.of(other) + self

    def __or__(self, other: Any) -> Pipeline:
        return self._merged(Pipeline.of(other), [])

    def __ror__(self, other: Any) -> Pipeline:
        return Pipeline.of(other) | self

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.tasks)

    def __repr__(self) -> str:
        def names(ids: Iterable[str]) -> str:
            return "[" + ", ".join(f'"{t}"' for t in ids) + "]"

        edges = ", ".join(f'("{u}", "{d}")' for u, d in self._edge_ids())
        return (
            f"Pipeline(tasks={names(self._tasks)}, sources={names(self._sources())}, "
            f"outputs={names(self._sinks())}, edges=[{edges}])"
        )
