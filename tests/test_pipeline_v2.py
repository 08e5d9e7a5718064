"""``Pipeline``'s daisy 2.0.0 surface: ``edges``, ``sources``, ``outputs``
(tasks, not ids), ``from_task``, ``run_blockwise(**kwargs)``, ``reset``
and ``Pipeline(tasks, edges)`` with task objects or ids in the edges.
Observed in 2.0.0 (``/tmp/pp.py``-style probe): for ``(a + b) | c``,
``edges == [(a, b)]``, ``sources == [a, c]``, ``outputs == [b, c]``; the
repr is ``Pipeline(tasks=["a"], sources=["a"], outputs=["a"], edges=[])``
for ``Pipeline.from_task(a)``; an edge naming a task outside the pipeline
is a ``ValueError``; ``run_blockwise`` forwards to ``daisy.run_blockwise``."""

from __future__ import annotations

import pytest
from conftest import line_task

import daisy


def noop(block):
    pass


def tasks():
    return [line_task(t, 2, process_function=noop) for t in "abc"]


def test_edges_sources_and_outputs_are_tasks():
    a, b, c = tasks()
    p = (a + b) | c
    assert p.edges == [(a, b)]
    assert p.sources == [a, c]
    assert p.outputs == [b, c]
    assert daisy.Pipeline().edges == [] and daisy.Pipeline().sources == []


def test_from_task_and_repr():
    a, _, _ = tasks()
    p = daisy.Pipeline.from_task(a)
    assert isinstance(p, daisy.Pipeline) and p.tasks == [a]
    assert repr(p) == 'Pipeline(tasks=["a"], sources=["a"], outputs=["a"], edges=[])'
    assert repr(daisy.Pipeline()) == "Pipeline(tasks=[], sources=[], outputs=[], edges=[])"
    with pytest.raises(TypeError, match="task"):
        daisy.Pipeline.from_task("a")


def test_edges_may_name_tasks_or_ids():
    a, b, c = tasks()
    by_task = daisy.Pipeline([a, b, c], [(a, b), (b, c)])
    by_id = daisy.Pipeline([a, b, c], [("a", "b"), ("b", "c")])
    assert by_task.edges == by_id.edges == [(a, b), (b, c)]
    assert repr(by_task) == (
        'Pipeline(tasks=["a", "b", "c"], sources=["a"], outputs=["c"], '
        'edges=[("a", "b"), ("b", "c")])'
    )
    with pytest.raises(ValueError, match="not a task of this pipeline"):
        daisy.Pipeline([a], [(a, b)])
    assert daisy.Pipeline(None, None).tasks == []


def test_run_blockwise_forwards_to_daisy_run_blockwise(capsys):
    a, b, c = tasks()
    p = a + b + c
    assert p.run_blockwise(multiprocessing=False, progress=False) is True
    assert "Execution Summary" in capsys.readouterr().out
    states = p.run_blockwise(multiprocessing=False, progress=False, return_states=True)
    assert list(states) == ["a", "b", "c"]
