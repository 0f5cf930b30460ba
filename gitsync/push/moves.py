"""Moves the live state refuses: a key or a plugin that changes owner, applied in two pushes.

APISIX checks a few parts of a new config against what it runs, not against the rest of the
same body, so a push that moves such a part from one item to another is refused even though
it takes the part away from the old owner:

- a consumer's auth key (key-auth ``key``, basic-auth ``username``, jwt-auth ``key``,
  hmac-auth ``key_id``, ldap-auth ``user_dn``) may not belong to another live consumer or
  credential (``apisix/consumer.lua`` ``check_duplicate_key``, 3.18+):
  ``duplicate key of plugin key-auth found with consumer: jack``;
- a global rule's plugin may not be in another live global rule
  (``apisix/admin/global_rules.lua`` ``check_conf``, 3.17+):
  ``plugin 'cors' already exists in global rule with id 'g1'``.

`first_step` finds such moves in a sync and returns the config to push first: every kind as
desired, except that the new owners leave the moved parts out. Once the gateway holds it, no
live item owns a moved part any more, and the desired config is pushed right after. Pure: the
gateway's rules are `gitsync.schema.live_state.live_conflict`, the model the validator and the
test double share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import item_id
from gitsync.push.plan import MANAGE_ALL, KindStatus, Plan, Policy, items_equal
from gitsync.schema.live_state import live_conflict
from gitsync.schema.plugins import AUTH_KEY_FIELDS

#: The kinds whose items APISIX checks against live items of the same kind.
CHECKED_KINDS: tuple[str, ...] = ("consumers", "global_rules")

#: How the gateway words a refusal for a part another live item owns.
_MOVE_REFUSAL = re.compile(r"duplicate \S+ of plugin \S+ found with (consumer|credential): "
                           r"|plugin '[^']*' already exists in global rule with id ")


@dataclass(frozen=True)
class Move:
    """One part that changes owner: the new owner leaves it out of the first step."""

    kind: str
    id: str  # the new owner
    plugin: str
    refusal: str  # what the gateway answers while the old owner is live (it names no key)

    def __str__(self) -> str:
        return f"{self.kind}[{self.id}] takes {self.plugin} ({self.refusal})"


@dataclass(frozen=True)
class FirstStep:
    """The config to push before the desired one, and the moves it prepares."""

    payload: dict[str, Any]
    moves: tuple[Move, ...]


def is_move_refusal(message: str) -> bool:
    """Whether a refused push names a part another live item owns (the first step not yet applied)."""
    return _MOVE_REFUSAL.search(message) is not None


Part = tuple[str, str | None]  # (plugin, its key for a consumer's auth plugin)


def _part(kind: str, plugin: str, conf: Any) -> Part | None:
    """What of one plugin another item may not hold: the plugin itself in a global rule, the
    key in a consumer's auth plugin (None: nothing)."""
    if kind != "consumers":
        return plugin, None
    if plugin not in AUTH_KEY_FIELDS or not isinstance(conf, Mapping):
        return None
    key = conf.get(AUTH_KEY_FIELDS[plugin])
    return (plugin, key) if isinstance(key, str) else None


def _owner(kind: str, item: Mapping[str, Any]) -> str:
    """Who holds an item's parts: a consumer (a credential's consumer) or a global rule, as `repr`
    so that ``1`` and ``"1"`` stay apart as they do for the gateway's comparison. A credential's id
    is ``<consumer>/credentials/<credential>``."""
    if kind == "consumers":
        consumer, separator, _ = str(item.get("id")).partition("/credentials/")
        return repr(consumer if separator else item.get("username"))
    return repr(item.get("id"))


def _owners(kind: str, live: Mapping[str, Any]) -> dict[Part, set[str]]:
    """Each part live items of `kind` hold, and who holds it."""
    items = live.get(kind)
    owners: dict[Part, set[str]] = {}
    for item in items if isinstance(items, list) else ():
        plugins = item.get("plugins") if isinstance(item, Mapping) else None
        for name, conf in plugins.items() if isinstance(plugins, Mapping) else ():
            part = _part(kind, name, conf)
            if part is not None:
                owners.setdefault(part, set()).add(_owner(kind, item))
    return owners


def _refused_parts(kind: str, item: Any, live: Mapping[str, Any],
                   owners: Mapping[Part, set[str]]) -> list[tuple[str, str]]:
    """The plugins of `item` the gateway refuses because another live item holds them, with its message.

    `owners` only picks the plugins worth asking `live_conflict` about (it keeps this linear)."""
    plugins = item.get("plugins") if isinstance(item, Mapping) else None
    if not isinstance(plugins, Mapping):
        return []
    refused = []
    for name, conf in plugins.items():
        part = _part(kind, name, conf)
        if part is None or not owners.get(part, set()) - {_owner(kind, item)}:
            continue
        refusal = live_conflict(kind, {**item, "plugins": {name: conf}}, live)
        if refusal:
            refused.append((name, refusal))
    return refused


def first_step(desired: Mapping[str, Sequence[Any]], live: Mapping[str, Any],
               policy: Policy = MANAGE_ALL, the_plan: Plan | None = None) -> FirstStep | None:
    """The config to push before `desired` so that APISIX takes its moves, or None when none is needed.

    None too when the desired config itself gives a part to two owners: two steps cannot
    help, and the push is refused with the gateway's own message. `the_plan`, the plan of
    `desired` on `live` when there is one, saves finding out which kinds the push sends."""
    payload = dict(desired)
    moves: list[Move] = []
    for kind in CHECKED_KINDS:
        if not _sent(kind, desired, live, policy, the_plan):
            continue  # a kind the push does not send is not checked
        payload[kind], found = _without_refused_parts(kind, desired.get(kind) or (), live)
        moves += found
    if not moves:
        return None
    after = {**live, **{kind: payload[kind] for kind in {move.kind for move in moves}}}
    if any(_without_refused_parts(kind, desired.get(kind) or (), after)[1] for kind in CHECKED_KINDS):
        return None
    return FirstStep(payload, tuple(moves))


def _sent(kind: str, desired: Mapping[str, Sequence[Any]], live: Mapping[str, Any], policy: Policy,
          the_plan: Plan | None) -> bool:
    """Whether the push sends the list of `kind`: managed and different from live."""
    if the_plan is not None:
        kind_plan = the_plan.kind(kind)
        return kind_plan is not None and kind_plan.status is KindStatus.CHANGED
    return policy.manages(kind) and not items_equal(list(desired.get(kind) or ()), live.get(kind))


def _without_refused_parts(kind: str, items: Sequence[Any], live: Mapping[str, Any],
                           ) -> tuple[list[Any], list[Move]]:
    """`items` without the plugins the gateway refuses while `live` is live, and those moves."""
    owners = _owners(kind, live)
    listed: list[Any] = []
    moves: list[Move] = []
    for item in items:
        refused = _refused_parts(kind, item, live, owners)
        if refused:
            names = {name for name, _ in refused}
            item = {**item, "plugins": {n: c for n, c in item["plugins"].items() if n not in names}}
            moves += [Move(kind, item_id(kind, item) or "", name, refusal) for name, refusal in refused]
        listed.append(item)
    return listed, moves
