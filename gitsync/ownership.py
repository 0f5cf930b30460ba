"""Ownership: which items each source of a gateway's payload may declare (vocabulary, pure).

A source (a team's repo, the platform's) owns a set of items: each `Claim` names kinds and, within
them, an id prefix, and maybe labels the items must carry (``labels: {team: orders}``; the settings
make a claim by labels name a prefix too); a source's claims are its `Ownership`.

The owner of an id follows from the settings alone (`owner_of`): two claims on a kind whose prefixes
start one another (or a whole kind) are a settings error (`static_overlap`), so no two sources may hold
one id, a fresh agent and a long-running one agree on whose it is, and a source that declares an id of
another's is the one refused, at its file:line.

A source's items are its own: another source's reference into one of them (a route's ``upstream_id``,
a consumer's ``group_id``, a ``$secret://`` manager) is refused unless the owner `shares` it with that
source (`Share`). A credential is its consumer's: no share lets another source add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


#: A share's `readers` entry that names every other source.
EVERY_SOURCE = "*"


@dataclass(frozen=True)
class Share:
    """Items of `kinds` a source lets `readers` (source names, or `EVERY_SOURCE`) name in their items:
    those whose id starts with `prefix`, or is one of `ids`, or every one it owns of the kinds."""

    kinds: tuple[str, ...]
    readers: tuple[str, ...] = (EVERY_SOURCE,)
    prefix: str | None = None
    ids: tuple[str, ...] = ()

    def allows(self, kind: str, ident: str, reader: str | None) -> bool:
        if kind not in self.kinds or not (EVERY_SOURCE in self.readers or reader in self.readers):
            return False
        if self.ids:
            return ident in self.ids
        return self.prefix is None or ident.startswith(self.prefix)

    def describe(self) -> str:
        which = f"ids {', '.join(self.ids)}" if self.ids else (
            f"id prefix {self.prefix!r}" if self.prefix is not None else "every item")
        whom = "every source" if EVERY_SOURCE in self.readers else ", ".join(self.readers)
        return f"{', '.join(self.kinds)} ({which}) with {whom}"


@dataclass(frozen=True)
class Ownership:
    """A source's claims and what it shares; `everything`: the one implicit source of the single-repo
    settings."""

    claims: tuple[Claim, ...] = ()
    everything: bool = False
    shares: tuple[Share, ...] = ()

    def shares_with(self, kind: str, ident: str, reader: str | None) -> bool:
        """Whether source `reader` may name this source's item (`kind`, `ident`)."""
        return any(share.allows(kind, ident, reader) for share in self.shares)

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


def owner_of(kind: str, ident: str, owners: Sequence[tuple[str | None, Ownership]]) -> str | None:
    """The source whose claims may hold an item of `kind` with id `ident`, from the settings alone (the
    first that may: the settings let no two); None when none may."""
    return next((name for name, owns in owners if owns.may_own(kind, ident)), None)


def static_overlap(a: Claim, b: Claim) -> str | None:
    """Why two claims (of two sources) may both hold an item of one id, or None when no id can be both's:
    a kind both name, and prefixes that start one another (a whole kind starts every id). Labels do not
    tell two sources apart: an id is unique per kind on the gateway, and its owner follows from the
    ids the claims hold; labels only narrow what a source may declare of them."""
    common = [kind for kind in a.kinds if kind in b.kinds]
    if not common:
        return None
    if a.prefix is not None and b.prefix is not None and not (
            a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix)):
        return None  # no id starts with both
    return f"both claim {a.describe(common[0])} / {b.describe(common[0])}"


__all__ = ["EVERY_SOURCE", "Claim", "Ownership", "Share", "owner_of", "static_overlap"]
