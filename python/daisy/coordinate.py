"""``daisy.Coordinate`` is ``funlib.geometry.Coordinate``."""

from funlib.geometry import Coordinate

__all__ = ["Coordinate"]
