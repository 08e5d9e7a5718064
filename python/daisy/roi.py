"""``daisy.Roi`` is ``funlib.geometry.Roi``, the ROI type the ecosystem's
arrays are indexed with."""

from funlib.geometry import Roi

__all__ = ["Roi"]
