"""Names and helpers that code written for daisy 1.x imports from daisy.

Expected values below were recorded by running daisy 1.2.2."""

from __future__ import annotations

import pytest

import daisy
from daisy.blocks import expand_request_roi_to_grid, expand_roi_to_grid, expand_write_roi_to_grid
from daisy.freezable import Freezable

R = daisy.Roi

TOP_LEVEL_1X = [
    "Block",
    "BlockStatus",
    "BlockwiseDependencyGraph",
    "Client",
    "Context",
    "Coordinate",
    "DependencyGraph",
    "Roi",
    "Scheduler",
    "SerialServer",
    "Server",
    "Task",
    "TaskState",
    "block",
    "blocks",
    "client",
    "context",
    "convenience",
    "coordinate",
    "dependency_graph",
    "expand_roi_to_grid",
    "expand_write_roi_to_grid",
    "freezable",
    "get_worker_log_basename",
    "logging",
    "redirect_stdouterr",
    "roi",
    "run_blockwise",
    "scheduler",
    "serial_server",
    "server",
    "task",
    "task_state",
]


@pytest.mark.parametrize("name", TOP_LEVEL_1X)
def test_top_level_name_of_daisy_1x_exists(name):
    assert hasattr(daisy, name)


def test_roi_and_coordinate_are_funlib_geometry():
    import funlib.geometry

    assert daisy.Roi is funlib.geometry.Roi
    assert daisy.Coordinate is funlib.geometry.Coordinate
    assert daisy.roi.Roi is funlib.geometry.Roi
    assert daisy.coordinate.Coordinate is funlib.geometry.Coordinate


@pytest.mark.parametrize(
    "roi, write, expected",
    [
        (R((3, 5), (10, 10)), R((0, 0), (4, 4)), R((0, 4), (16, 12))),
        (R((-3, 5), (1, 1)), R((2, 2), (4, 4)), R((-4, 4), (4, 4))),
    ],
)
def test_expand_write_roi_to_grid_matches_1x(roi, write, expected):
    assert expand_write_roi_to_grid(roi, write) == expected


@pytest.mark.parametrize(
    "sub, total, read, write, grid, requested",
    [
        (
            R((3, 5), (10, 10)),
            R((0, 0), (100, 100)),
            R((-2, -2), (8, 8)),
            R((0, 0), (4, 4)),
            R((2, 2), (12, 16)),
            R((0, 0), (16, 20)),
        ),
        (
            R((13, 25), (1, 1)),
            R((-7, 1), (100, 100)),
            R((-2, -1), (8, 7)),
            R((0, 0), (4, 4)),
            R((11, 22), (4, 4)),
            R((9, 21), (8, 7)),
        ),
    ],
)
def test_expand_roi_to_grid_matches_1x(sub, total, read, write, grid, requested):
    assert expand_roi_to_grid(sub, total, read, write) == grid
    assert expand_request_roi_to_grid(sub, total, read, write) == requested


def test_freezable_refuses_new_attributes_once_frozen():
    f = Freezable()
    f.a = 1
    f.freeze()
    f.a = 2
    assert f.a == 2
    with pytest.raises(TypeError, match="frozen"):
        f.b = 3
    f.thaw()
    f.b = 3
    assert f.b == 3


def test_worker_log_basename(tmp_path):
    daisy.logging.set_log_basedir(tmp_path)
    assert daisy.get_worker_log_basename(3, "seg") == tmp_path / "seg" / "worker_3"
    daisy.logging.set_log_basedir(None)
    assert daisy.get_worker_log_basename(3, "seg") is None
