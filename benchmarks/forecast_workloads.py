"""Block functions of the forecast accuracy benchmark (issue 54): each
sleeps (so its time does not depend on the machine's cores) and holds
memory, by where its block is on a 20 x 20 grid of 10 x 10 blocks.

- ``uniform``: every block 60 ms and 40 MiB;
- ``disk``: the 113 blocks within 6 blocks of cell (10, 10) 200 ms and 200 MiB,
  the rest 40 ms and 40 MiB (tissue in the middle, background around);
- ``rare``: 8 blocks (2 %) of 1.5 s, scattered, the rest 50 ms (and 40 MiB).
"""

from __future__ import annotations

import time

import numpy as np

BLOCK = 10
GRID = 20
MIB = 1 << 20
#: the scattered costly blocks of ``rare``: cells (x, y)
RARE = {(1, 3), (4, 15), (7, 8), (9, 18), (12, 2), (14, 11), (17, 6), (18, 17)}


def cell(block) -> tuple[int, int]:
    """The block's (x, y) cell on the grid."""
    off = block.write_roi.offset
    return int(off[0]) // BLOCK, int(off[1]) // BLOCK


def in_disk(x: int, y: int) -> bool:
    """Within 6 blocks of cell (10, 10), the middle (113 of the 400 cells)."""
    return (x - 10) ** 2 + (y - 10) ** 2 <= 36


def hold(seconds: float, mib: int) -> None:
    """Touch ``mib`` MiB and keep it for ``seconds``."""
    buf = np.ones(mib * MIB // 8, dtype=np.float64)
    time.sleep(seconds)
    del buf


def uniform(block) -> None:
    hold(0.060, 40)


def disk(block) -> None:
    if in_disk(*cell(block)):
        hold(0.200, 200)
    else:
        hold(0.040, 40)


def rare(block) -> None:
    if cell(block) in RARE:
        hold(1.5, 40)
    else:
        hold(0.050, 40)


WORKLOADS = {"uniform": uniform, "disk": disk, "rare": rare}
