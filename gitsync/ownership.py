"""Ownership: which items each source of a gateway's payload may declare (vocabulary, pure).

A source (a team's repo, the platform's) owns a set of items: each `Claim` names kinds and, within
them, an id prefix, labels (``labels: {team: orders}`` on the item), or both; a source's claims are
its `Ownership`. Two sources never own one item:

* at start, two claims on a kind that could both match an item are a settings error
  (`static_overlap`), unless only the items themselves can make them meet: one claim tells its items
  by id prefix and the other by labels (on keys the first does not look at);
* such a pair is then checked item by item when a source is rendered: an item both claims match is
  refused at its file:line, in the source that declares it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS


@dataclass(frozen=True)
class Claim:
    """Items of `kinds` whose id starts with `prefix` (None: any) and that carry every one of `labels`
    (in their ``labels`` mapping)."""

    kinds: tuple[str, ...]
    prefix: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs

    @property
    def whole(self) -> bool:
        """Every item of its kinds."""
        return self.prefix is None and not self.labels

    def matches(self, kind: str, ident: str | None, item: Any) -> bool:
        if kind not in self.kinds:
            return False
        if self.prefix is not None and not (ident or "").startswith(self.prefix):
            return False
        if self.labels:
            labels = item.get("labels") if isinstance(item, dict) else None
            if not isinstance(labels, Mapping) or any(labels.get(k) != v for k, v in self.labels):
                return False
        return True

    def describe(self, kind: str | None = None) -> str:
        """``routes with id prefix 'orders-' and label team=orders`` (of `kind` only, when given)."""
        what = kind or ", ".join(self.kinds)
        parts = ([f"id prefix {self.prefix!r}"] if self.prefix is not None else []) + \
            [f"label {key}={value}" for key, value in self.labels]
        return f"{what} with {' and '.join(parts)}" if parts else f"every item of {what}"


@dataclass(frozen=True)
class Ownership:
    """A source's claims; `everything`: the one implicit source of the single-repo settings."""

    claims: tuple[Claim, ...] = ()
    everything: bool = False

    def owns(self, kind: str, ident: str | None, item: Any) -> bool:
        return self.everything or any(claim.matches(kind, ident, item) for claim in self.claims)

    def may_own(self, kind: str, ident: str) -> bool:
        """Whether an item of `kind` with id `ident` could be this source's (its labels unknown)."""
        return self.everything or any(kind in claim.kinds and (claim.prefix is None or ident.startswith(
            claim.prefix)) for claim in self.claims)

    def kinds(self) -> frozenset[str]:
        """The kinds it may declare items of."""
        return frozenset(KINDS) if self.everything else frozenset(k for c in self.claims for k in c.kinds)

    def whole_kinds(self) -> frozenset[str]:
        """The kinds it owns every item of (no other source declares any)."""
        if self.everything:
            return frozenset(KINDS)
        return frozenset(k for c in self.claims if c.whole for k in c.kinds)

    def describe(self, kind: str) -> str:
        """What it owns of `kind`, for messages: ``routes with id prefix 'orders-'``."""
        found = [c.describe(kind) for c in self.claims if kind in c.kinds]
        return " or ".join(found) if found else f"no {kind}"


def may_meet(a: Claim, b: Claim) -> bool:
    """Whether some item could match both claims."""
    if not set(a.kinds) & set(b.kinds):
        return False
    if a.prefix is not None and b.prefix is not None and not (
            a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix)):
        return False  # no id starts with both
    a_labels, b_labels = dict(a.labels), dict(b.labels)
    return all(a_labels[key] == b_labels[key] for key in a_labels.keys() & b_labels.keys())


def static_overlap(a: Claim, b: Claim) -> str | None:
    """Why two claims (of two sources) may both match one item, when nothing but the settings is needed
    to see it; None when they cannot meet, or when only an item's own id and labels together could
    make them meet (one tells items by prefix, the other by labels on other keys: `may_meet` pairs
    that are checked per item)."""
    if not may_meet(a, b):
        return None
    common = dict(a.labels).keys() & dict(b.labels).keys()
    if a.whole or b.whole or (a.prefix is not None and b.prefix is not None) or common:
        kind = next(k for k in a.kinds if k in b.kinds)
        return f"both claim {a.describe(kind)} / {b.describe(kind)}"
    return None


__all__ = ["Claim", "Ownership", "may_meet", "static_overlap"]
