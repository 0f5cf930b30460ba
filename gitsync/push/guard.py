"""The deletion guard: a commit may not empty a kind, or delete much of one, unless its author says so.

A truncated file, a bad merge or a wrong `paths` setting renders to a valid config that simply
lacks items; pushed, it would delete them from every gateway. So before each push the guard compares,
per managed kind, what the commit leaves with what is live, and refuses (stage ``guard``) when it
would

- leave a kind empty that holds items now, or
- delete more than ``max(max_delete × live items, max_delete_count)`` items of a kind (by default
  25 %, and always up to 10 items).

The author allows it explicitly with a trailer in the commit message,
``Gitsync-Allow-Delete: routes, upstreams`` (or ``all``); for ``--dir`` (no commit), with
``--allow-delete KIND``. ``guard = false`` turns the guard off. Pure: ids in, a verdict out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitsync.kinds import KINDS, distinct_ids, item_id

if TYPE_CHECKING:
    from gitsync.settings import Settings

TRAILER = "Gitsync-Allow-Delete"
ALL = "all"
_TRAILER_LINE = re.compile(rf"^{TRAILER}\s*:\s*(?P<kinds>.*)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class GuardPolicy:
    """How much of a kind a commit may delete without saying so."""

    enabled: bool = True
    max_delete: float = 0.25  # fraction of a kind's live items
    max_delete_count: int = 10  # deleting this many items of a kind is always allowed
    per_kind: Mapping[str, float] = field(default_factory=dict)  # fractions for some kinds
    allowed: frozenset[str] = frozenset()  # kinds the author allows to shrink freely (or "all")

    @classmethod
    def from_settings(cls, settings: Settings, allowed: frozenset[str] = frozenset()) -> GuardPolicy:
        """The settings' policy, plus the kinds this commit (its trailers) or run may shrink freely."""
        return cls(settings.guard, settings.max_delete, settings.max_delete_count,
                   dict(settings.max_delete_kinds), allowed | frozenset(settings.allow_delete))

    def allows(self, kind: str) -> bool:
        return ALL in self.allowed or kind in self.allowed

    def limit(self, kind: str, live: int) -> int:
        """The most items of `kind` this commit may delete from `live` of them without an allowance."""
        fraction = self.per_kind.get(kind, self.max_delete)
        return max(math.floor(fraction * live), self.max_delete_count)


@dataclass(frozen=True)
class KindChange:
    """What a commit does to the number of items of one kind."""

    kind: str
    live: int
    after: int
    deleted: int
    refused: str | None = None  # why the guard refuses it: "it would leave routes empty", ...

    def describe(self) -> str:
        """``routes: 812 → 0 (−100 %), refused: add "Gitsync-Allow-Delete: routes"``."""
        drop = f" (−{round(100 * self.deleted / self.live)} %)" if self.live and self.deleted else ""
        verdict = f', refused: add "{TRAILER}: {self.kind}"' if self.refused else ""
        return f"{self.kind}: {self.live} → {self.after}{drop}{verdict}"


@dataclass(frozen=True)
class GuardVerdict:
    kinds: tuple[KindChange, ...] = ()

    @property
    def refused(self) -> tuple[KindChange, ...]:
        return tuple(k for k in self.kinds if k.refused)

    @property
    def problems(self) -> list[str]:
        """One line per refused kind: the numbers, why, and how the author allows it."""
        return [f"{k.describe()} ({k.refused})" for k in self.refused]


def allowed_kinds(message: str) -> frozenset[str]:
    """The kinds a commit message's ``Gitsync-Allow-Delete:`` trailers name (``all`` for every kind)."""
    kinds: set[str] = set()
    for match in _TRAILER_LINE.finditer(message):
        kinds |= {k.strip().lower() for k in re.split(r"[,\s]+", match["kinds"]) if k.strip()}
    return frozenset(k for k in kinds if k == ALL or k in KINDS)


def _ids(kind: str, items: Any) -> set[str]:
    if not isinstance(items, list):
        return set()
    return {ident for item in items if (ident := item_id(kind, item)) is not None}


def check_deletions(desired: Mapping[str, Sequence[Any]], live: Mapping[str, Any], managed: Iterable[str],
                    policy: GuardPolicy) -> GuardVerdict:
    """Per managed kind that holds items live, how many the desired config deletes, and the verdict."""
    kinds = list(managed)
    return deletion_verdict({kind: _ids(kind, list(desired.get(kind) or ())) for kind in kinds},
                            {kind: _ids(kind, live.get(kind)) for kind in kinds}, kinds, policy)


def deletion_verdict(wanted: Mapping[str, Collection[str | None]], live: Mapping[str, Collection[str | None]],
                     managed: Iterable[str], policy: GuardPolicy) -> GuardVerdict:
    """`check_deletions` from each kind's ids, desired and live (when the caller has them already)."""
    changes = []
    for kind in managed:
        listed, desired = live.get(kind) or (), wanted.get(kind) or ()
        if isinstance(listed, list) and listed and listed == desired and distinct_ids(listed):
            changes.append(KindChange(kind, len(listed), len(listed), 0, None))  # the same ids: no set work
            continue
        live_ids = set(listed)
        live_ids.discard(None)
        if not live_ids:
            continue
        wanted_ids = set(desired)
        wanted_ids.discard(None)
        deleted = len(live_ids - wanted_ids)
        refused = None
        if policy.enabled and deleted and not policy.allows(kind):
            if not wanted_ids:
                refused = f"it would leave {kind} empty"
            elif deleted > policy.limit(kind, len(live_ids)):
                refused = f"it would delete {deleted} {kind}, more than {policy.limit(kind, len(live_ids))}"
        changes.append(KindChange(kind, len(live_ids), len(wanted_ids), deleted, refused))
    return GuardVerdict(tuple(changes))


__all__ = ["ALL", "TRAILER", "GuardPolicy", "GuardVerdict", "KindChange", "allowed_kinds", "check_deletions",
           "deletion_verdict"]
