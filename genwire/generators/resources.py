"""``self.resources``: a generator's bound resources and nothing else."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from genwire.errors import UndeclaredResourceError


class Resources:
    """Attribute and item access to bound slots; any other name raises
    UndeclaredResourceError. Only bound resources are ever stored here, so there is
    nothing else to reach through ``vars()`` or private attributes."""

    __slots__ = ("_bound", "_column", "_generator")

    def __init__(self, generator: str, column: str, bound: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_generator", generator)
        object.__setattr__(self, "_column", column)
        object.__setattr__(self, "_bound", dict(bound))

    def _missing(self, slot: str) -> UndeclaredResourceError:
        return UndeclaredResourceError(self._generator, self._column, slot, list(self._bound))

    def __getattr__(self, slot: str) -> Any:  # only called when normal lookup fails
        if slot.startswith("__"):
            raise AttributeError(slot)
        raise self._missing(slot)

    def __getitem__(self, slot: str) -> Any:
        try:
            return self._bound[slot]
        except KeyError:
            raise self._missing(slot) from None

    def __getattribute__(self, name: str) -> Any:
        bound = object.__getattribute__(self, "_bound")
        if name in bound:
            return bound[name]
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("resources are read-only")

    def __contains__(self, slot: object) -> bool:
        return slot in self._bound

    def __iter__(self) -> Iterator[str]:
        return iter(self._bound)

    def __repr__(self) -> str:
        return f"Resources(generator={self._generator!r}, column={self._column!r}, slots={sorted(self._bound)})"
