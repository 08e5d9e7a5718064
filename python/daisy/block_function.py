"""How a block function is called: the one place that knows the kinds of
callables a scientist hands daisy, for the workers and the serial runner
alike.

- A plain function is called with the block; what it returns is ignored,
  unless it is a generator, a coroutine or another awaitable: then nothing
  of its body ran, and the block fails with the reason instead of being
  counted done (a plain function that *returns* ``some_async_fn(block)``).
- An ``async def`` function is run to completion on an event loop of this
  process, kept for the worker's life (its awaits count as the block's
  time; a client opened on the loop by one block is there for the next).
- A generator function (a ``yield`` left from debugging) is refused when
  the ``Task`` is made (`refuse_generator`): calling it runs nothing, and
  daisy 2.0.0 counted its blocks done.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

#: why a generator function cannot be a block function
GENERATOR_WORDS = (
    "is a generator function (it has a `yield`): calling it only makes a generator, so its body "
    "would never run and no block would be processed; remove the `yield`, or call it inside a "
    "function that consumes it, e.g. `def process(block): list({name}(block))`"
)


def refuse_generator(function: Callable[..., Any]) -> None:
    """A ``TypeError`` naming ``function`` when it is a generator function
    (or an async generator function)."""
    target = getattr(function, "__func__", function)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        name = getattr(function, "__qualname__", repr(function))
        raise TypeError(f"process_function: {name} " + GENERATOR_WORDS.format(name=name))


def _is_coroutine_function(function: Callable[..., Any]) -> bool:
    """An ``async def`` function, method, partial of one, or an object
    whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        type(function).__call__
    )


class _Loop:
    """This process's event loop for ``async def`` block functions, made on
    first use and kept (a forked child makes its own)."""

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, awaitable: Any) -> Any:
        if cls.loop is None or cls.loop.is_closed():
            cls.loop = asyncio.new_event_loop()
        return cls.loop.run_until_complete(awaitable)


def _unran(function: Callable[..., Any], result: Any) -> str | None:
    """Why ``result`` of ``function`` means its body never ran, or None."""
    name = getattr(function, "__qualname__", repr(function))
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        return (
            f"the block function {name} returned a generator: nothing of it ran; iterate it "
            "inside the block function, or remove its `yield`"
        )
    if inspect.isawaitable(result):
        return (
            f"the block function {name} returned {type(result).__name__} (an awaitable) without "
            "awaiting it: nothing of it ran; make the block function `async def` and await it, "
            "or return nothing"
        )
    return None


class BlockCall:
    """``function`` as the runners call it with a block (see the module's
    doc). Picklable where ``function`` is."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.is_async = _is_coroutine_function(function)

    def __call__(self, block: Any) -> None:
        if self.is_async:
            _Loop.run(self.function(block))
            return
        result = self.function(block)
        if result is None:
            return
        why = _unran(self.function, result)
        if why is not None:
            close = getattr(result, "close", None)
            if callable(close):
                close()  # no "never awaited" warning for what we refuse
            raise TypeError(why)


def block_call(function: Callable[..., Any]) -> Callable[[Any], None]:
    """``function`` wrapped for the runners, unless it already is."""
    return function if isinstance(function, BlockCall) else BlockCall(function)


def _canonical(value: Any) -> bytes:
    """A code object or constant as bytes that depend only on what it is:
    ``marshal`` is not that (its output for one object changes with the
    object's reference count), nor is a frozenset's ``repr`` (its order
    changes with the string hash seed of the process)."""
    import types

    if isinstance(value, types.CodeType):
        parts = [value.co_code, *(_canonical(c) for c in value.co_consts)]
        for names in (value.co_names, value.co_varnames, value.co_freevars, value.co_cellvars):
            parts.append(repr(names).encode())
        return b"code(" + b"\0".join(parts) + b")"
    if isinstance(value, tuple):
        return b"(" + b",".join(_canonical(v) for v in value) + b")"
    if isinstance(value, frozenset):
        return b"{" + b",".join(sorted(_canonical(v) for v in value)) + b"}"
    return repr(value).encode()


def code_sha256(function: Any) -> str | None:
    """A SHA-256 of a block function's code: its bytecode, constants and
    names (nested functions' too), not what it captured, so a run over new
    data keeps the hash and an edited function changes it. A
    ``functools.partial`` is its function's code and its bound arguments'
    ``repr``; a callable object its class's ``__call__``. None
    for a callable without Python code (a builtin). The forecast uses only
    blocks measured with the code that will run (see `daisy.forecast`)."""
    import functools
    import hashlib

    parts: list[bytes] = []
    target = function
    while isinstance(target, functools.partial):
        parts.append(repr((target.args, sorted(target.keywords.items()))).encode())
        target = target.func
    target = inspect.unwrap(target)
    code = getattr(target, "__code__", None)
    if code is None:
        # a callable object: its class's __call__ (a builtin's has no code)
        call = inspect.getattr_static(type(target), "__call__", None)
        code = getattr(call, "__code__", None)
    if code is None:
        return None
    parts.insert(0, _canonical(code))
    return hashlib.sha256(b"\0".join(parts)).hexdigest()
