"""`Freezable` (``daisy.freezable`` in daisy 1.x): an object that refuses
new attributes once frozen."""

from __future__ import annotations

from typing import Any


class Freezable:
    """After `freeze`, setting an attribute the object does not have yet
    raises ``TypeError`` (a typo then fails loudly); existing attributes
    can still be changed. `thaw` lifts it."""

    __frozen = False

    def freeze(self) -> None:
        """Refuse new attributes from now on."""
        object.__setattr__(self, "_Freezable__frozen", True)

    def thaw(self) -> None:
        """Accept new attributes again."""
        object.__setattr__(self, "_Freezable__frozen", False)

    def __setattr__(self, key: str, value: Any) -> None:
        if self.__frozen and not hasattr(self, key):
            raise TypeError(f"{self!r} is frozen, you can't add attributes to it")
        object.__setattr__(self, key, value)
