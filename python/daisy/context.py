"""`Context`: what a worker needs to find its server (``daisy.context`` in
daisy 1.x), passed through the ``DAISY_CONTEXT`` environment variable."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daisy import _v1_names
from daisy.logging import get_log_basedir


class Context:
    """A small set of named values (host, port, task id, worker id, ...)
    that travels to worker processes in ``DAISY_CONTEXT``.

    A context built with values while a log base directory is set (see
    `daisy.logging.set_log_basedir`) also carries it, absolute, as
    ``logdir``, as daisy 1.x and 2.0 contexts do: libraries find per-task
    state through ``daisy.Client().context["logdir"]``. A ``logdir`` given
    explicitly wins."""

    ENV_VARIABLE = "DAISY_CONTEXT"

    def __init__(self, /, **kwargs: Any) -> None:
        if kwargs and "logdir" not in kwargs:
            base = get_log_basedir()
            if base is not None:
                kwargs["logdir"] = str(Path(base).absolute())
        self.__dict__.update(kwargs)

    @classmethod
    def _of(cls, values: dict[str, Any]) -> Context:
        """A context holding exactly ``values`` (a parsed or copied one:
        nothing is added)."""
        context = cls()
        context.__dict__.update(values)
        return context

    def copy(self) -> Context:
        """A copy with the same values."""
        return Context._of(self.__dict__)

    def to_env(self) -> str:
        """The value to put in ``DAISY_CONTEXT``."""
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_env() -> Context:
        """The context of this process, parsed from ``DAISY_CONTEXT`` (either
        form `from_env_string` reads); KeyError if it is not set."""
        raw = os.environ.get(Context.ENV_VARIABLE)
        if raw is None:
            raise KeyError(
                f"{Context.ENV_VARIABLE} is not set: this process was not started by a daisy "
                "server; start it through a task's worker function or set the variable"
            )
        return Context.from_env_string(raw)

    @staticmethod
    def from_env_string(env: str) -> Context:
        """Parse a context string without touching the environment: the JSON
        object `to_env` writes (values keep their types), or daisy 2.0's
        ``key=value:key=value`` form (values are strings; ``%3A``, ``%3D``
        and ``%25`` stand for ``:``, ``=`` and ``%``; empty entries are
        skipped, a later key wins). ValueError for anything else."""
        if not isinstance(env, str):
            raise TypeError(
                f"env: expected the str value of {Context.ENV_VARIABLE}, got {type(env).__name__}"
            )
        if env.lstrip().startswith("{"):
            try:
                values = json.loads(env)
            except json.JSONDecodeError as e:
                raise ValueError(f"{Context.ENV_VARIABLE} is not a daisy context: {e}") from None
            if not isinstance(values, dict):
                raise ValueError(f"{Context.ENV_VARIABLE} is not a daisy context: {env!r}")
            return Context._of(values)
        context = Context._of({})
        for token in env.split(":"):
            if not token:
                continue
            key, sep, value = token.partition("=")
            if not sep:
                raise ValueError(f"invalid context token: {token}")
            context[_unescape(key)] = _unescape(value)
        return context

    def get(self, /, k: str, default: Any = None) -> Any:
        """The value of ``k``, or ``default`` if it is not set."""
        return self.__dict__.get(k, default)

    def keys(self, /) -> list[str]:
        """The names set, in the order they were set."""
        return list(self.__dict__)

    def values(self, /) -> list[Any]:
        """The values, in the order of `keys`."""
        return list(self.__dict__.values())

    def items(self, /) -> list[tuple[str, Any]]:
        """``(name, value)`` pairs, in the order of `keys`."""
        return list(self.__dict__.items())

    def __contains__(self, k: object) -> bool:
        return k in self.__dict__

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.__dict__))

    def __len__(self) -> int:
        return len(self.__dict__)

    def __bool__(self) -> bool:
        # a context is never false, empty or not (as in daisy 1.x and 2.0)
        return True

    def __delitem__(self, k: str) -> None:
        del self.__dict__[k]

    def __getitem__(self, k: str) -> Any:
        return self.__dict__[k]

    def __setitem__(self, k: str, v: Any) -> None:
        self.__dict__[k] = v

    def __repr__(self) -> str:
        # the run token is a secret: a repr ends up in logs and tracebacks
        shown = {k: ("<hidden>" if k == "token" else v) for k, v in sorted(self.__dict__.items())}
        return "Context(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


_ESCAPES = {"%3A": ":", "%3D": "=", "%25": "%"}
_ESCAPE = re.compile("%(?:3[aAdD]|25)")


def _unescape(text: str) -> str:
    """Undo daisy 2.0's escaping of ``:``, ``=`` and ``%`` in one pass."""
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(0).upper()], text)


__getattr__ = _v1_names.lazy_names(__name__)
