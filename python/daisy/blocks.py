"""Aligning ROIs to a task's block grid (``daisy.blocks`` in daisy 1.x)."""

from __future__ import annotations

from funlib.geometry import Coordinate, Roi

from daisy import _v1_names


def expand_write_roi_to_grid(roi: Roi, write_roi: Roi) -> Roi:
    """``roi`` grown to whole multiples of ``write_roi``'s shape (a grid
    anchored at 0)."""
    return roi.snap_to_grid(write_roi.shape, mode="grow")


def _anchor(total_roi: Roi, read_roi: Roi, write_roi: Roi) -> Coordinate:
    """Where the task's first block writes: the write grid's anchor."""
    return total_roi.offset + (write_roi.offset - read_roi.offset)


def expand_roi_to_grid(sub_roi: Roi, total_roi: Roi, read_roi: Roi, write_roi: Roi) -> Roi:
    """``sub_roi`` grown to the write regions of the blocks of a task (total
    ``total_roi``, block ``read_roi``/``write_roi``) that cover it."""
    anchor = _anchor(total_roi, read_roi, write_roi)
    return sub_roi.shift(-anchor).snap_to_grid(write_roi.shape, mode="grow").shift(anchor)


def expand_request_roi_to_grid(req_roi: Roi, total_roi: Roi, read_roi: Roi, write_roi: Roi) -> Roi:
    """Like `expand_roi_to_grid`, then grown by the blocks' read context:
    what the blocks covering ``req_roi`` read."""
    lower = write_roi.offset - read_roi.offset
    upper = read_roi.end - write_roi.end
    return expand_roi_to_grid(req_roi, total_roi, read_roi, write_roi).grow(lower, upper)


__all__ = ["expand_request_roi_to_grid", "expand_roi_to_grid", "expand_write_roi_to_grid"]


__getattr__ = _v1_names.lazy_names(__name__)
