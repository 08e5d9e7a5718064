"""How long a worker's first block spends in ``import`` statements.

A worker's first block is often its slowest: the function imports what it
needs there. `ImportClock` times the outermost ``import`` statements that
run while it is entered (through ``builtins.__import__``, swapped in only
for the worker's first block) and which top-level packages they cost; the
worker sends the figures to the core, which decides what the run report
says of them (``run_report::warmup``). Nothing is timed after the first
block.
"""

from __future__ import annotations

import builtins
import threading
import time
from typing import Any

#: a package named only where its imports took at least this long (s):
#: what was imported before costs a dictionary lookup
NAMED_AFTER = 0.005


class ImportClock:
    """Times the ``import`` statements run while entered (see the module
    docstring); nested imports count within the outermost one."""

    def __init__(self) -> None:
        #: seconds spent in outermost imports
        self.seconds = 0.0
        self._costs: dict[str, float] = {}
        self._local = threading.local()
        self._original: Any = None

    def __enter__(self) -> ImportClock:
        original = self._original = builtins.__import__
        clock = self

        def timed_import(
            name: str,
            globals: Any = None,
            locals: Any = None,
            fromlist: Any = (),
            level: int = 0,
        ) -> Any:
            depth = getattr(clock._local, "depth", 0)
            if depth:
                return original(name, globals, locals, fromlist, level)
            clock._local.depth = 1
            start = time.perf_counter()
            try:
                return original(name, globals, locals, fromlist, level)
            finally:
                clock._local.depth = 0
                spent = time.perf_counter() - start
                clock.seconds += spent
                top = name.partition(".")[0] if level == 0 else "(relative)"
                clock._costs[top] = clock._costs.get(top, 0.0) + spent

        builtins.__import__ = timed_import
        return self

    def __exit__(self, *exc: object) -> None:
        builtins.__import__ = self._original

    def packages(self) -> list[str]:
        """The top-level packages whose imports took time, costliest first."""
        costly = [(t, name) for name, t in self._costs.items() if t >= NAMED_AFTER]
        return [name for _, name in sorted(costly, reverse=True)]
