"""What a render gives: the payload, where each item came from, the secrets in it, the repo's health
checks; and, with partial apply, the items it left out and what they keep (plain data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import item_id
from gitsync.problems import Problem
from gitsync.render.healthchecks import Check
from gitsync.render.secrets import SecretRules
from gitsync.render.sourcemap import SourceMap


@dataclass(frozen=True)
class Rendered:
    """The payload (kinds with items, in KINDS order), where each item came from, the secrets in it."""

    payload: dict[str, list[dict]]
    source_map: SourceMap
    secret_values: frozenset[str]
    checks: tuple[Check, ...] = ()  # health checks of the commit (gitsync.push.health); not pushed
    #: Each item's canonical content, by kind, in payload order (`gitsync.content.content_bytes`).
    contents: dict[str, list[bytes]] = field(default_factory=dict, repr=False, compare=False)
    #: Partial apply: the items this commit could not apply, and why (see `_leave_out`).
    left_out: tuple[LeftOut, ...] = ()
    #: Each item's id by kind, in payload order (`gitsync.kinds.item_id`), as build found them.
    ids: dict[str, list[str | None]] = field(default_factory=dict, repr=False, compare=False)
    #: Where each item's modifiedIndex goes in its content (`gitsync.content.content_split`), by kind.
    splits: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)
    #: The secret fields declared by the settings and the repo (`secret_fields`), for every mask.
    secret_rules: SecretRules = field(default_factory=SecretRules)
    #: Plain scalars YAML 1.1 tools read otherwise, each at its place (`gitsync.render.scalars`), in file
    #: order: told, not refused (unless ``ambiguous_scalars = "error"``, which refuses the commit instead).
    warnings: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class LeftOut:
    """An item partial apply left out of a commit: why, and whether its last good version stays."""

    kind: str
    id: str
    why: Problem
    kept: bool  # the last good version stays live; else the item is not applied at all

    def describe(self) -> str:
        fate = "its last good version stays live" if self.kept else "not applied"
        return f"{self.why} (left out: {fate})"


@dataclass(frozen=True)
class LastGood:
    """What partial apply may keep: last good items by (kind, id), and the secret values among them."""

    items: Mapping[tuple[str, str], Any]
    secret_values: frozenset[str] = frozenset()

    @classmethod
    def of(cls, rendered: Rendered) -> LastGood:
        return cls({(kind, ident): item for kind, items in rendered.payload.items() for item in items
                    if (ident := item_id(kind, item)) is not None}, rendered.secret_values)
