"""Reconcile: choose every ``*_conf_version`` and ``modifiedIndex`` from the live config.

Pure: `plan(desired, live, policy)` takes the rendered payload and the body of a
fresh ``GET /apisix/admin/configs`` and returns the PUT body. The rules are
DESIGN.md §4; they make a stale-version rejection impossible by construction,
because no version sent is ever below the live one read just before:

- every version key the gateway reports is in the body (a missing one wipes its kind);
- a managed kind equal to live (ignoring ``modifiedIndex``, ``{}`` ≡ ``[]``) is sent at
  the live version without its list, so APISIX keeps it as it is;
- a managed kind that differs is sent at ``live + 1`` with the full desired list;
- unmanaged kinds, ``plugins`` and version keys this gitsync does not know keep the live
  version and no list;
- an item keeps its live twin's ``modifiedIndex`` when its content is equal, and gets a
  content-derived one otherwise (APISIX keeps the old data-plane object when the index is equal).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitsync.kinds import KINDS, METADATA_KEYS, VERSION_SUFFIX, item_id, version_key
from gitsync.problems import Problem

#: Versions and indexes stay below this: APISIX round-trips numbers with 14 significant digits.
VERSION_LIMIT = 10**14

#: Kinds whose items get no ``modifiedIndex``: a plugin's ``metadata_schema`` may refuse the extra field.
UNINDEXED_KINDS: frozenset[str] = frozenset({"plugin_metadata"})

INDEX_FIELD = "modifiedIndex"


class KindStatus(StrEnum):
    UNCHANGED = "unchanged"  # managed, equal to live: live version, no list
    CHANGED = "changed"  # managed, different: live + 1 and the full list
    UNMANAGED = "unmanaged"  # the policy keeps whatever is live
    KEPT = "kept"  # `plugins` or a version key this gitsync does not know


@dataclass(frozen=True)
class Policy:
    """What this agent owns on a gateway: every kind except the `unmanaged` ones."""

    unmanaged: frozenset[str] = frozenset()

    def manages(self, kind: str) -> bool:
        return kind in KINDS and kind not in self.unmanaged


#: The default policy: every kind is the repo's.
MANAGE_ALL = Policy()


@dataclass(frozen=True)
class KindPlan:
    """What the push does to one versioned key of the gateway."""

    key: str
    status: KindStatus
    live_version: int | float
    version: int | float
    count: int  # items after the push: desired items when managed, live items otherwise
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()  # items gitsync wrote before and the repo no longer has
    modified: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()  # items written out of band (not by gitsync), now dropped

    @property
    def version_key(self) -> str:
        return version_key(self.key)


@dataclass(frozen=True)
class Plan:
    """The PUT for one gateway, and what it does per kind."""

    kinds: tuple[KindPlan, ...]
    body: bytes  # canonical JSON
    digest: str  # X-Digest: SHA-256 of the canonical desired content of the managed kinds
    problems: tuple[Problem, ...] = ()  # reasons this plan must not be pushed

    @property
    def changes(self) -> bool:
        """True when something differs from live: nothing to change means no PUT at all."""
        return any(k.status is KindStatus.CHANGED for k in self.kinds)

    @property
    def versions(self) -> dict[str, int | float]:
        return {k.version_key: k.version for k in self.kinds}

    def kind(self, key: str) -> KindPlan | None:
        return next((k for k in self.kinds if k.key == key), None)

    @property
    def pruned(self) -> dict[str, tuple[str, ...]]:
        return {k.key: k.pruned for k in self.kinds if k.pruned}


# ---------------------------------------------------------------------------------------------------------
# Content: normal form, equality, digest, modifiedIndex


def normalize(value: Any) -> Any:
    """The form in which two values are compared: what APISIX would give back for what it was sent.

    Empty objects and arrays are the same (GET renders ``[]`` as ``{}``), and numbers are
    rounded the way cjson stores them (14 significant digits; integral floats are ints).
    """
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in value.items()} if value else []
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return value
        if abs(value) >= VERSION_LIMIT or isinstance(value, float):
            rounded = float(f"{value:.14g}")
            return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
        return value
    return value


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def item_content(item: Any) -> Any:
    """An item's normal form without its ``modifiedIndex`` (which is bookkeeping, not content)."""
    if isinstance(item, Mapping):
        item = {k: v for k, v in item.items() if k != INDEX_FIELD}
    return normalize(item)


def items_equal(desired: Sequence[Any], live: Any) -> bool:
    """Whether a kind's desired list equals the live value, in order, ignoring ``modifiedIndex``."""
    live_list = _live_list(live)
    if live_list is None:
        return False
    if len(desired) != len(live_list):
        return False
    return all(_same_content(a, b) for a, b in zip(desired, live_list, strict=True))


def _same_content(a: Any, b: Any) -> bool:
    return canonical_json(item_content(a)) == canonical_json(item_content(b))


def _index_of(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % (VERSION_LIMIT - 1) + 1


def content_indexes(item: Any) -> tuple[int, int]:
    """The two ``modifiedIndex`` values gitsync may give this content: the usual one and its stand-in.

    The stand-in is used only when the usual one equals the live twin's index while the
    content differs (APISIX would then keep the old object).
    """
    data = canonical_json(item_content(item))
    return _index_of(data), _index_of(data + b"\x00")


def content_index(item: Any, avoid: Any = None) -> int:
    """A ``modifiedIndex`` derived from the item's content, below 10^14 and never equal to `avoid`."""
    usual, stand_in = content_indexes(item)
    return stand_in if usual == avoid else usual


def written_by_gitsync(item: Any) -> bool:
    """An item whose ``modifiedIndex`` is the one gitsync derives from its content."""
    return isinstance(item, Mapping) and item.get(INDEX_FIELD) in content_indexes(item)


def desired_digest(desired: Mapping[str, Sequence[Any]], policy: Policy) -> str:
    """SHA-256 of the canonical desired content of the kinds this agent manages."""
    content = {kind: [item_content(i) for i in desired.get(kind) or ()] for kind in KINDS
               if policy.manages(kind)}
    return hashlib.sha256(canonical_json(content)).hexdigest()


# ---------------------------------------------------------------------------------------------------------
# The plan


def _live_list(value: Any) -> list[Any] | None:
    """A live kind as a list: absent or ``{}`` is empty; any other non-list shape is unknown (None)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return []
    return list(value) if isinstance(value, list) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def live_version_keys(live: Mapping[str, Any]) -> list[str]:
    """The keys with a ``*_conf_version`` on the gateway, known kinds first in their usual order."""
    keys = [k[: -len(VERSION_SUFFIX)] for k in live if k.endswith(VERSION_SUFFIX) and k not in METADATA_KEYS]
    order = {k: i for i, k in enumerate((*KINDS, "plugins"))}
    return sorted(keys, key=lambda k: (order.get(k, len(order)), k))


def _ids(kind: str, items: Iterable[Any]) -> list[str]:
    return [i for i in (item_id(kind, item) for item in items) if i is not None]


def _with_indexes(kind: str, desired: Sequence[Any], live_items: Sequence[Any]) -> list[Any]:
    """The desired list with each item's ``modifiedIndex``: the live twin's when equal, else derived."""
    twins: dict[str, Any] = {}
    for item in live_items:
        key = item_id(kind, item)
        if key is not None and isinstance(item, Mapping):
            twins.setdefault(key, item)
    sent = []
    for item in desired:
        if not isinstance(item, Mapping) or kind in UNINDEXED_KINDS:
            sent.append(item)
            continue
        out = {k: v for k, v in item.items() if k != INDEX_FIELD}
        twin = twins.get(item_id(kind, item) or "")
        twin_index = twin.get(INDEX_FIELD) if twin is not None else None
        if twin is not None and _is_number(twin_index) and _same_content(twin, out):
            out[INDEX_FIELD] = twin_index
        else:
            out[INDEX_FIELD] = content_index(out, avoid=twin_index)
        sent.append(out)
    return sent


def _changed_kind(kind: str, desired: Sequence[Any], live_items: Sequence[Any], live_v: int | float,
                  ) -> tuple[KindPlan, list[Any]]:
    desired_ids = _ids(kind, desired)
    live_by_id = {}
    for item in live_items:
        key = item_id(kind, item)
        if key is not None:
            live_by_id.setdefault(key, item)
    wanted = set(desired_ids)
    gone = [i for i in live_by_id if i not in wanted]
    modified = [
        key for key, item in ((item_id(kind, d), d) for d in desired)
        if key in live_by_id and not _same_content(item, live_by_id[key])
    ]
    kind_plan = KindPlan(
        key=kind,
        status=KindStatus.CHANGED,
        live_version=live_v,
        version=math.floor(live_v) + 1,
        count=len(desired),
        added=tuple(i for i in desired_ids if i not in live_by_id),
        removed=tuple(i for i in gone if written_by_gitsync(live_by_id[i])),
        modified=tuple(modified),
        pruned=tuple(i for i in gone if not written_by_gitsync(live_by_id[i])),
    )
    return kind_plan, _with_indexes(kind, desired, live_items)


def plan(desired: Mapping[str, Sequence[Any]], live: Mapping[str, Any], policy: Policy = MANAGE_ALL) -> Plan:
    """The PUT that makes `live` hold `desired` for every managed kind, and leaves the rest alone."""
    problems: list[Problem] = []
    kinds: list[KindPlan] = []
    body: dict[str, Any] = {}
    for key in live_version_keys(live):
        live_v = live[version_key(key)]
        if not _is_number(live_v):
            problems.append(Problem(f"the gateway reports a {version_key(key)} that is not a number: "
                                    f"{live_v!r}", kind=key))
            continue
        live_items = _live_list(live.get(key))
        if not policy.manages(key):
            status = KindStatus.UNMANAGED if key in KINDS else KindStatus.KEPT
            kinds.append(KindPlan(key, status, live_v, live_v, len(live_items or ())))
            body[version_key(key)] = live_v
            continue
        want = list(desired.get(key) or ())
        if items_equal(want, live.get(key)):
            kinds.append(KindPlan(key, KindStatus.UNCHANGED, live_v, live_v, len(want)))
            body[version_key(key)] = live_v
            continue
        kind_plan, items = _changed_kind(key, want, live_items or [], live_v)
        if kind_plan.version >= VERSION_LIMIT:
            problems.append(Problem(f"{version_key(key)} is {live_v} on the gateway: no version above it "
                                    "stays below 10^14; restart the gateway to reset its versions",
                                    kind=key))
        kinds.append(kind_plan)
        body[version_key(key)] = kind_plan.version
        body[key] = items
    reported = {k.key for k in kinds}
    for kind in KINDS:
        if desired.get(kind) and kind not in reported and policy.manages(kind) and \
                version_key(kind) not in live:
            problems.append(Problem(f"the gateway has no {version_key(kind)}: this APISIX version does not "
                                    f"support {kind}", kind=kind))
    return Plan(tuple(kinds), canonical_json(body), desired_digest(desired, policy), tuple(problems))


FieldPath = tuple[str, ...]


def changed_fields(live_item: Any, desired_item: Any) -> list[FieldPath]:
    """The paths of the fields that differ between two items (``modifiedIndex`` ignored)."""
    return _diff_paths(item_content(live_item), item_content(desired_item), ())


def _diff_paths(a: Any, b: Any, prefix: FieldPath) -> list[FieldPath]:
    if isinstance(a, dict) and isinstance(b, dict):
        paths: list[FieldPath] = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                paths.append((*prefix, key))
            else:
                paths.extend(_diff_paths(a[key], b[key], (*prefix, key)))
        return paths
    return [prefix] if canonical_json(a) != canonical_json(b) else []


@dataclass(frozen=True)
class ItemChange:
    """One line of `gitsync diff`: what a push does to one item."""

    kind: str
    id: str
    action: str  # add | change | remove | prune
    fields: tuple[FieldPath, ...] = field(default=())


def item_changes(desired: Mapping[str, Sequence[Any]], live: Mapping[str, Any], the_plan: Plan,
                 ) -> list[ItemChange]:
    """Per item, what `the_plan` adds, changes, removes or prunes (in plan order)."""
    changes: list[ItemChange] = []
    for kp in the_plan.kinds:
        if kp.status is not KindStatus.CHANGED:
            continue
        live_by_id = {item_id(kp.key, i): i for i in reversed(_live_list(live.get(kp.key)) or [])}
        want_by_id = {item_id(kp.key, i): i for i in reversed(list(desired.get(kp.key) or ()))}
        changes += [ItemChange(kp.key, i, "add") for i in kp.added]
        changes += [ItemChange(kp.key, i, "change", tuple(changed_fields(live_by_id[i], want_by_id[i])))
                    for i in kp.modified]
        changes += [ItemChange(kp.key, i, "remove") for i in kp.removed]
        changes += [ItemChange(kp.key, i, "prune") for i in kp.pruned]
    return changes
