"""`Context`: what a worker needs to find its server (``daisy.context`` in
daisy 1.x), passed through the ``DAISY_CONTEXT`` environment variable."""

from __future__ import annotations

import json
import os
from typing import Any

from daisy import _v1_names


class Context:
    """A small set of named values (host, port, task id, worker id, ...)
    that travels to worker processes in ``DAISY_CONTEXT``."""

    ENV_VARIABLE = "DAISY_CONTEXT"

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    def copy(self) -> Context:
        """A copy with the same values."""
        return Context(**self.__dict__)

    def to_env(self) -> str:
        """The value to put in ``DAISY_CONTEXT``."""
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_env() -> Context:
        """The context of this process, parsed from ``DAISY_CONTEXT``."""
        raw = os.environ.get(Context.ENV_VARIABLE)
        if raw is None:
            raise KeyError(
                f"{Context.ENV_VARIABLE} is not set: this process was not started by a daisy "
                "server; start it through a task's worker function or set the variable"
            )
        try:
            values = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{Context.ENV_VARIABLE} is not a daisy context: {e}") from None
        if not isinstance(values, dict):
            raise ValueError(f"{Context.ENV_VARIABLE} is not a daisy context: {raw!r}")
        return Context(**values)

    def get(self, k: str, v: Any = None) -> Any:
        """The value of ``k``, or ``v`` if it is not set."""
        return self.__dict__.get(k, v)

    def __getitem__(self, k: str) -> Any:
        return self.__dict__[k]

    def __setitem__(self, k: str, v: Any) -> None:
        self.__dict__[k] = v

    def __repr__(self) -> str:
        # the run token is a secret: a repr ends up in logs and tracebacks
        shown = {k: ("<hidden>" if k == "token" else v) for k, v in sorted(self.__dict__.items())}
        return "Context(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


# names daisy 1.x exported from this module, imported on first use
__getattr__ = _v1_names.lazy_names(
    __name__,
    {
        "get_log_basedir": "daisy.logging:get_log_basedir",
    },
)
