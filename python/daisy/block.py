"""Blocks and their status (``daisy.block`` in daisy 1.x).

`Block` is implemented in the Rust core (``daisy._daisy.Block``): its ROIs
are ``funlib.geometry.Roi`` objects, built the first time user code reads
them. `BlockStatus` is a Python enum with the 1.x members and values.
"""

from __future__ import annotations

from enum import IntEnum

from daisy import _v1_names


class BlockStatus(IntEnum):
    """Where a block is in its life; set ``block.status`` to ``SUCCESS`` or
    ``FAILED`` in a worker to report the outcome. An ``IntEnum``: daisy 1.x
    code compares members, daisy 2.0.0 code compares the numbers (2 is
    ``SUCCESS``), and both work."""

    CREATED = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3

    def __str__(self) -> str:
        # ``BlockStatus.CREATED``, as daisy 1.x printed it (and its
        # tutorials show); an IntEnum would print the number
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


from daisy._daisy import Block  # noqa: E402  (Block's status getter imports BlockStatus)

__all__ = ["Block", "BlockStatus"]


__getattr__ = _v1_names.lazy_names(__name__)
