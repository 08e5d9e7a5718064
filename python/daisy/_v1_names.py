"""Names that daisy 1.x modules exported only because they imported them
(``daisy.client.TCPClient``, ``daisy.worker.dill``, ...), kept for code
that imports them from there, and imported on first use: most of them
(tornado, dill, funlib.math) would add about 100 ms to every
``import daisy``, and so to every worker's start-up."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``module`` that resolves each
    key of ``names`` on first access and keeps it in the module (later
    accesses are plain attribute lookups); values are ``"package.module"``
    (the module itself) or ``"package.module:attribute"``."""

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        path, _, attribute = target.partition(":")
        value = importlib.import_module(path)
        if attribute:
            value = getattr(value, attribute)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
