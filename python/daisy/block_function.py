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
