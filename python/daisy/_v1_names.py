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

#: per daisy module, the names daisy 1.x exported from it only because it
#: imported them, and where each now lives (see `lazy_names`)
V1_ONLY_NAMES: dict[str, dict[str, str]] = {
    "daisy.block": {
        "cantor_number": "funlib.math:cantor_number",
        "Freezable": "daisy.freezable:Freezable",
    },
    "daisy.blocks": {
        "Block": "daisy.block:Block",
    },
    "daisy.cl_monitor": {
        "tqdm": "tqdm",
        "tqdm_auto": "tqdm.auto:tqdm",
        "daisy_logging": "daisy.logging",
    },
    "daisy.client": {
        "AcquireBlock": "daisy.messages:AcquireBlock",
        "BlockFailed": "daisy.messages:BlockFailed",
        "ReleaseBlock": "daisy.messages:ReleaseBlock",
        "RequestShutdown": "daisy.messages:RequestShutdown",
        "SendBlock": "daisy.messages:SendBlock",
        "UnexpectedMessage": "daisy.messages:UnexpectedMessage",
        "StreamClosedError": "daisy.tcp:StreamClosedError",
        "TCPClient": "daisy.tcp:TCPClient",
        "set_log_basedir": "daisy.logging:set_log_basedir",
    },
    "daisy.context": {
        "get_log_basedir": "daisy.logging:get_log_basedir",
    },
    "daisy.convenience": {
        "CLMonitor": "daisy.cl_monitor:CLMonitor",
        "Event": "multiprocessing:Event",
        "IOLooper": "daisy.tcp:IOLooper",
        "ThreadPool": "multiprocessing.pool:ThreadPool",
    },
    "daisy.scheduler": {
        "BlockStatus": "daisy.block:BlockStatus",
        "DependencyGraph": "daisy.dependency_graph:DependencyGraph",
        "Task": "daisy.task:Task",
    },
    "daisy.serial_server": {
        "BlockStatus": "daisy.block:BlockStatus",
        "Task": "daisy.task:Task",
    },
    "daisy.server": {
        "AcquireBlock": "daisy.messages:AcquireBlock",
        "BlockFailed": "daisy.messages:BlockFailed",
        "ClientException": "daisy.messages:ClientException",
        "ReleaseBlock": "daisy.messages:ReleaseBlock",
        "RequestShutdown": "daisy.messages:RequestShutdown",
        "SendBlock": "daisy.messages:SendBlock",
        "UnexpectedMessage": "daisy.messages:UnexpectedMessage",
        "BlockStatus": "daisy.block:BlockStatus",
        "StreamClosedError": "daisy.tcp:StreamClosedError",
        "TCPServer": "daisy.tcp:TCPServer",
    },
    "daisy.task": {
        "Client": "daisy.client:Client",
    },
    "daisy.worker": {
        "dill": "dill",
        "daisy_logging": "daisy.logging",
    },
}


def lazy_names(module: str, names: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``module`` that resolves each
    key of ``names`` (by default the module's `V1_ONLY_NAMES`) on first
    access and keeps it in the module (later accesses are plain attribute
    lookups); values are ``"package.module"`` (the module itself) or
    ``"package.module:attribute"``."""
    if names is None:
        names = V1_ONLY_NAMES[module]

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
