"""What render's stages work out once per parse of a plain file, kept with the parse (`FileMemo`).

A plain file's items are the parse's own objects, the same every render while the parse is cached
(`gitsync.render.memo.ParseCache`), so what a stage works out about them holds as long as the parse
does: validation's facts (`gitsync.render.facts.FACTS`), the build's units
(`gitsync.render.build.UNITS`), the values the classifier finds secret
(`gitsync.render.pipeline.SECRET_VALUES`), an OpenAPI spec file's references and outline
(`gitsync.render.openapi.stage.REFERENCES`, `OUTLINE`). Each stage declares its own `MemoSlot`,
typed with what it keeps there, so a reader of one slot knows what it gets; this module knows none
of them (it sits below every stage that uses it).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class MemoSlot(Generic[T]):
    """One stage's place in a file's memo, and the type of what it keeps there (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"MemoSlot({self.name!r})"


class FileMemo:
    """A parse's memo: one value per `MemoSlot`, each written by the stage that declares the slot."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[MemoSlot[Any], Any] = {}

    def get(self, slot: MemoSlot[T]) -> T | None:
        """What `slot` holds, or None."""
        value: T | None = self._values.get(slot)
        return value

    def setdefault(self, slot: MemoSlot[T], value: T) -> T:
        """What `slot` holds, after putting `value` there when it held nothing."""
        held: T = self._values.setdefault(slot, value)
        return held

    def put(self, slot: MemoSlot[T], value: T) -> T:
        self._values[slot] = value
        return value


__all__ = ["FileMemo", "MemoSlot"]
