"""An ordered list of named things: what the study's registries hold (rows, stages, report sections).

Each registry keeps its own rule for where a new entry goes (rows before ``random``, required stages
before optional ones, sections before "Cost"); registering a name again replaces that entry in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


class NamedList(list[T]):
    """A list whose entries are named by their attribute ``key`` (``"name"``, or ``"id"`` for sections)."""

    def __init__(self, items: Iterable[T] = (), *, key: str = "name") -> None:
        super().__init__(items)
        self.key = key

    def names(self) -> list[str]:
        """The entries' names, in order."""
        return [getattr(x, self.key) for x in self]

    def replace(self, item: T) -> bool:
        """Put ``item`` where the entry of its name stands; ``False`` when there is none."""
        names = self.names()
        name = getattr(item, self.key)
        if name not in names:
            return False
        self[names.index(name)] = item
        return True

    def position(self, name: str | None) -> int:
        """Where the entry ``name`` stands (the end when there is none)."""
        names = self.names()
        return names.index(name) if name in names else len(self)

    def drop(self, name: str) -> None:
        """Remove the entry ``name`` (nothing when there is none)."""
        self[:] = [x for x in self if getattr(x, self.key) != name]


__all__ = ["NamedList"]
