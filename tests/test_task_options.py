"""A task's run options have one set of rules, the core's
(``daisy._daisy.TaskOptions``): checked when the task is made, and again
when a run starts, from the task's attributes as they are then (code may
change ``task.timeout`` or ``task.max_workers`` after construction; before,
such a change reached the run unchecked or checked by a second, different
rule in the bindings)."""

from __future__ import annotations

import pytest

import daisy
from daisy._daisy import TaskOptions


def noop(block: daisy.Block) -> None:
    pass


def task(**kwargs: object) -> daisy.Task:
    return daisy.Task(
        "t",
        daisy.Roi((0,), (20,)),
        daisy.Roi((0,), (10,)),
        daisy.Roi((0,), (10,)),
        noop,
        **kwargs,  # type: ignore[arg-type]
    )


def options(**kwargs: object) -> TaskOptions:
    given: dict[str, object] = dict(
        max_workers=1,
        max_retries=2,
        max_worker_restarts=10,
        timeout=None,
        requires={},
        resource_tracking=False,
        gpu_tracking=None,
    )
    given.update(kwargs)
    return TaskOptions("t", **given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_workers": 0},
        {"max_retries": -1},
        {"max_worker_restarts": 2**32},
        {"timeout": 0},
        {"timeout": 10 * 365 * 24 * 3600.0},
        {"requires": {"gpu": -1}},
    ],
    ids=str,
)
def test_the_task_refuses_with_the_cores_own_message(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError) as core:
        options(**kwargs)
    with pytest.raises(ValueError) as made:
        task(**kwargs)
    assert str(made.value) == str(core.value)
    assert str(core.value).startswith(next(iter(kwargs)))


def test_gpu_figures_default_to_a_gpu_request_by_the_cores_rule() -> None:
    assert options(requires={"gpu": 1}, resource_tracking=True).gpu_tracking
    assert not options(requires={"gpu": 1}).gpu_tracking
    with pytest.raises(ValueError, match='gpu_tracking: task "t" asks for GPU figures'):
        options(gpu_tracking=True)


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("timeout", 1e12, "timeout: must be a positive, finite number of seconds"),
        ("timeout", 0, "timeout: must be a positive, finite number of seconds"),
        ("max_workers", 0, "max_workers: must be at least 1, got 0"),
        ("max_worker_restarts", -1, "max_worker_restarts: must be at least 0"),
        ("required_resources", {"gpu": -2}, 'requires["gpu"]: must be at least 0'),
    ],
)
def test_an_option_changed_after_construction_is_checked_when_the_run_starts(
    tmp_path, attribute: str, value: object, message: str
) -> None:
    daisy.logging.set_log_basedir(tmp_path / "logs")
    t = task()
    setattr(t, attribute, value)
    with pytest.raises(ValueError) as refused:
        daisy.run_blockwise([t], multiprocessing=True)
    assert str(refused.value).startswith(message), refused.value


def test_a_run_caps_resources_by_the_same_rule(tmp_path) -> None:
    daisy.logging.set_log_basedir(tmp_path / "logs")
    with pytest.raises(ValueError, match=r'resources\["gpu"\]: must be at most'):
        daisy.run_blockwise([task()], resources={"gpu": 2**64})


def test_the_run_plans_rules_refuse_before_the_run_starts_anything(tmp_path, capfd) -> None:
    """A measuring task without a store (or a run without stores) is the
    core's run-plan rule, checked before any view or worker starts: no
    dashboard is served, no progress is drawn."""
    import socket

    daisy.logging.set_log_basedir(tmp_path / "logs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    measured = task(resource_tracking=True, tracking_path=False)
    with pytest.raises(ValueError, match='resource_tracking: task "t" measures its blocks'):
        daisy.run_blockwise([measured], dashboard_port=port)
    stored = task(resource_tracking=True, tracking_path=tmp_path / "t.store")
    with pytest.raises(ValueError, match="block_tracking: False runs without tracking stores"):
        daisy.run_blockwise([stored], block_tracking=False, dashboard_port=port)
    err = capfd.readouterr().err
    assert "dashboard at" not in err, err
    assert not (tmp_path / "t.store").exists(), "no store was made for a refused run"
