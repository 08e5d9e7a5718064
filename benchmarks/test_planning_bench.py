"""Planning a run of many tasks (pytest-benchmark): ``run_blockwise`` on a
list of 100, 1,000 and 10,000 one-block tasks, serially, so what grows is
the composition, the checks and the scheduler's set-up and accounting,
not block work. The time per task should stay flat across the three
sizes: composing a list through ``Pipeline.of`` used to re-check the
growing pipeline once per task (1,000 tasks: 4 s; 10,000 would take
minutes).

Only API daisy 2.0.0 has is used, so ``compare_with_daisy200.py`` can run
it under either."""

from __future__ import annotations

import pytest

import daisy


def _noop(block: daisy.Block) -> None:
    pass


def _tasks(n: int, chained: bool) -> list[daisy.Task]:
    roi = daisy.Roi((0,), (4,))
    out: list[daisy.Task] = []
    for i in range(n):
        out.append(
            daisy.Task(
                f"t{i}",
                total_roi=roi,
                read_roi=roi,
                write_roi=roi,
                process_function=_noop,
                upstream_tasks=[out[-1]] if chained and out else None,
            )
        )
    return out


@pytest.mark.parametrize("n", [100, 1_000, 10_000])
@pytest.mark.parametrize("shape", ["independent", "chain"])
def test_run_blockwise_many_tasks(benchmark, tmp_path, monkeypatch, n, shape):
    monkeypatch.chdir(tmp_path)  # worker logs and histories of untracked tasks
    benchmark.extra_info["tasks"] = n

    def setup():
        return (_tasks(n, shape == "chain"),), {}

    def run(tasks):
        assert daisy.run_blockwise(tasks, multiprocessing=False)

    benchmark.pedantic(run, setup=setup, rounds=1, iterations=1)


@pytest.mark.parametrize("n", [100, 1_000, 10_000])
def test_compose_many_tasks(benchmark, n):
    """A chain of ``n`` tasks composed into one checked pipeline."""
    of = getattr(getattr(daisy, "Pipeline", None), "of", None)
    if of is None:
        pytest.skip("this daisy has no Pipeline.of")
    tasks = _tasks(n, chained=True)
    pipeline = benchmark(of, tasks)
    assert len(pipeline.tasks) == n


@pytest.mark.parametrize("n", [100, 1_000])
def test_chain_built_with_plus(benchmark, n):
    """A chain of ``n`` tasks built with ``+``, one task at a time, as a
    user writes ``p = p + t`` in a loop (issue 56: 1,000 tasks took 7.3 s
    when each ``+`` checked the whole; the target is under 0.1 s)."""
    tasks = _tasks(n, chained=False)

    def build():  # type: ignore[no-untyped-def]
        p = tasks[0]
        for t in tasks[1:]:
            p = p + t
        return p

    pipeline = benchmark.pedantic(build, rounds=3, iterations=1)
    assert len(pipeline.tasks) == n
