"""Reconcile: choose every ``*_conf_version`` and ``modifiedIndex`` from the live config.

Pure: `plan(desired, live, policy)` takes the rendered payload and the body of a
fresh ``GET /apisix/admin/configs`` and returns the PUT body. The rules (docs/reconcile.md)
make a stale-version rejection impossible by construction,
because no version sent is ever below the live one read just before:

- every version key the gateway reports is in the body (a missing one wipes its kind);
- a managed kind equal to live (ignoring ``modifiedIndex``, ``{}`` ≡ ``[]``) is sent at
  the live version without its list, so APISIX keeps it as it is;
- a managed kind that differs is sent with the full desired list at `next_version` of the live
  one: the smallest version APISIX stores as a different number (its data plane picks a kind up
  only when the stored version changes, and it stores 14 significant digits);
- unmanaged kinds, ``plugins`` and version keys this gitsync does not know keep the live
  version and no list;
- an item keeps its live twin's ``modifiedIndex`` when its content is equal, and gets a
  content-derived one otherwise (APISIX keeps the old data-plane object when the index is equal).
"""

from __future__ import annotations

import decimal
import functools
import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gitsync.content import (  # noqa: F401 - re-exported for callers of reconcile
    INDEX_FIELD,
    VERSION_LIMIT,
    canonical_json,
    content_bytes,
    item_content,
    normalize,
    with_index,
)
from gitsync.kinds import KINDS, METADATA_KEYS, VERSION_SUFFIX, distinct_ids, item_id, version_key
from gitsync.problems import Problem

#: How APISIX keeps a number: cjson writes it with ``%.14g`` (the nearest, ties to even).
_STORED = decimal.Context(prec=14, rounding=decimal.ROUND_HALF_EVEN)

#: Kinds whose items get no ``modifiedIndex``: a plugin's ``metadata_schema`` may refuse the extra field.
UNINDEXED_KINDS: frozenset[str] = frozenset({"plugin_metadata"})



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

    @property
    def managed(self) -> frozenset[str]:
        """The kinds this agent owns, the ones the guard and what-was-pushed look at."""
        return frozenset(kind for kind in KINDS if self.manages(kind))


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
    digest: str  # X-Digest: SHA-256 of the canonical desired content of the managed kinds
    problems: tuple[Problem, ...] = ()  # reasons this plan must not be pushed
    after: LiveView | None = field(default=None, repr=False, compare=False)  # the gateway once it took it
    sent: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)  # versions and lists

    @functools.cached_property
    def body(self) -> bytes:
        """The PUT body, canonical JSON, written when first asked for (the push times it apart)."""
        return _body(self.sent)

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


def items_equal(desired: Sequence[Any], live: Any) -> bool:
    """Whether a kind's desired list equals the live value, in order, ignoring ``modifiedIndex``."""
    live_list = _live_list(live)
    if live_list is None or len(desired) != len(live_list):
        return False
    return all(content_bytes(a) == content_bytes(b) for a, b in zip(desired, live_list, strict=True))


def _index_of(data: bytes) -> int:
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big") % (VERSION_LIMIT - 1) + 1


def content_indexes(item: Any, content: bytes | None = None) -> tuple[int, int]:
    """The two ``modifiedIndex`` values gitsync may give this content: the usual one and its stand-in.

    The stand-in is used only when the usual one equals the live twin's index while the
    content differs (APISIX would then keep the old object).
    """
    data = content_bytes(item) if content is None else content
    return _index_of(data), _index_of(data + b"\x00")


def content_index(item: Any, avoid: Any = None, content: bytes | None = None) -> int:
    """A ``modifiedIndex`` derived from the item's content, below 10^14 and never equal to `avoid`."""
    usual, stand_in = content_indexes(item, content)
    return stand_in if usual == avoid else usual


def written_by_gitsync(item: Any, content: bytes | None = None) -> bool:
    """An item whose ``modifiedIndex`` is the one gitsync derives from its content."""
    return isinstance(item, Mapping) and item.get(INDEX_FIELD) in content_indexes(item, content)


def _digest(contents: Mapping[str, Sequence[bytes]]) -> str:
    """SHA-256 of each kind's name and items, one per line (canonical JSON holds no raw newline: the
    separators are safe). Each kind's items are joined once and hashed as they are: a large kind is
    not copied again to add its name and separators around it."""
    digest = hashlib.sha256()
    for kind, items in contents.items():
        digest.update(kind.encode() + b"\n")
        digest.update(b"\n".join(items))
        digest.update(b"\n\n")
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# The plan


def _live_list(value: Any) -> list[Any] | None:
    """A live kind as a list: absent or ``{}`` is empty; any other non-list shape is unknown (None)."""
    if value is None or (isinstance(value, Mapping) and not value):
        return []
    return list(value) if isinstance(value, list) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def next_version(live: int | float) -> int | float | None:
    """The version that makes APISIX take a changed kind whose stored version is `live`.

    APISIX refuses a version below the stored one, stores the one it accepts with 14
    significant digits, and its data plane picks a kind up only when that stored number
    changes: ``live + 1`` on ``1.7000000000001e+15`` is accepted but never served. So the
    answer is the next integer while that stays below 10^14 (stored exactly), else the next
    number with 14 significant digits (stored exactly as sent, so a GET echoes it back), in
    the shortest JSON form that reads back as the same double. None only above
    1.7976931348623e+308, where no larger finite number exists.
    """
    stored = float(live)
    following = math.floor(stored) + 1
    if abs(following) < VERSION_LIMIT:
        return following
    above = float(_STORED.next_plus(_STORED.plus(decimal.Decimal(stored))))
    if not math.isfinite(above):
        return None
    return int(above) if above.is_integer() and abs(above) < 2**53 else above


def live_version_keys(live: Mapping[str, Any]) -> list[str]:
    """The keys with a ``*_conf_version`` on the gateway, known kinds first in their usual order."""
    keys = [k[: -len(VERSION_SUFFIX)] for k in live if k.endswith(VERSION_SUFFIX) and k not in METADATA_KEYS]
    order = {k: i for i, k in enumerate((*KINDS, "plugins"))}
    return sorted(keys, key=lambda k: (order.get(k, len(order)), k))


class _Indexed(Sequence[Any]):
    """The items of a push gitsync made, rebuilt from what it pushed: item i is ``items[i]`` with
    ``indexes[i]`` as its ``modifiedIndex``, made when first asked for. A plan looks at the changed
    items only and the body takes the others' JSON as it was sent (`_Listed.fragments`), so a sync
    after a restart does not copy 10,000 items to read one. Assignment replaces an item (a plan's
    copy, `copy`); a slice or iteration makes what it covers."""

    __slots__ = ("_indexes", "_items", "_made")

    def __init__(self, items: Sequence[Any], indexes: Sequence[Any]) -> None:
        self._items, self._indexes = items, indexes
        self._made: list[Any] = [_UNMADE] * len(items)

    def __len__(self) -> int:
        return len(self._made)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        made = self._made[index]
        if made is _UNMADE:
            item = self._items[index]
            if isinstance(item, Mapping):
                made = {k: v for k, v in item.items() if k != INDEX_FIELD}
                made[INDEX_FIELD] = self._indexes[index]
            else:
                made = item
            self._made[index] = made
        return made

    def __setitem__(self, index: int, item: Any) -> None:
        self._made[index] = item

    def copy(self) -> _Indexed:
        twin = _Indexed.__new__(_Indexed)
        twin._items, twin._indexes, twin._made = self._items, self._indexes, list(self._made)
        return twin


_UNMADE = object()


def _copy(items: Sequence[Any]) -> list[Any] | _Indexed:
    """A list of `items` to change, without making the items of an `_Indexed` nobody has asked for."""
    return items.copy() if isinstance(items, _Indexed) else list(items)


@dataclass(frozen=True)
class _Listed:
    """A list of items with each one's identity and content bytes, computed once.

    `fragments` is set when the items are ones gitsync sent (a push's `Plan.after`): each one's
    JSON as it went into the body, None until written. The next plan sends such an item again as
    it is, and its JSON with it, when its content did not change."""

    items: Sequence[Any]
    ids: list[str | None]
    contents: list[bytes]
    fragments: list[bytes | None] | None = None
    #: id → ``modifiedIndex``, for each item whose index is not the one `content_index` derives from its
    #: content (kept from another writer, or the stand-in); None until known (`odd_indexes`).
    odd: dict[str, Any] | None = None
    #: Where each item's index goes in its content (`gitsync.content.content_split`), when render said.
    splits: list[int] | None = None

    @classmethod
    def of(cls, kind: str, items: Sequence[Any], contents: Sequence[bytes] | None = None,
           ids: Sequence[str | None] | None = None, splits: Sequence[int] | None = None) -> _Listed:
        """`contents`, `ids`, `splits`: the items' canonical content, ids and content splits when render
        kept them (else computed; no splits)."""
        if contents is None or len(contents) != len(items):
            contents, splits = [content_bytes(i) for i in items], None
        if ids is None or len(ids) != len(items):
            ids = [item_id(kind, i) for i in items]
        known = splits is not None and len(splits) == len(items)
        return cls(items, list(ids), list(contents), splits=list(splits) if known else None)  # type: ignore[arg-type]

    def fragment(self, index: int) -> bytes:
        """Item `index`'s JSON as the body carries it: its content with its index put in, when the
        content is its own JSON (`splits`), else encoded."""
        item = self.items[index]
        split = -1 if self.splits is None else self.splits[index]
        if split > 0 and isinstance(item, Mapping):
            mark = item.get(INDEX_FIELD)
            if mark is None and INDEX_FIELD not in item:
                return self.contents[index]
            if type(mark) is int:
                return with_index(self.contents[index], split, mark)
        return canonical_json(item)

    def by_id(self) -> dict[str, tuple[Any, bytes]]:
        out: dict[str, tuple[Any, bytes]] = {}
        for key, item, content in zip(self.ids, self.items, self.contents, strict=True):
            if key is not None:
                out.setdefault(key, (item, content))
        return out

    def odd_indexes(self) -> dict[str, Any]:
        """`odd`, worked out from the items the first time it is asked (a list read by a GET)."""
        if self.odd is None:
            rows = zip(self.ids, self.items, self.contents, strict=True)
            odd = {key: item.get(INDEX_FIELD) for key, item, content in rows
                   if key is not None and isinstance(item, Mapping) and INDEX_FIELD in item
                   and item.get(INDEX_FIELD) != _index_of(content)}
            object.__setattr__(self, "odd", odd)
        assert self.odd is not None
        return self.odd

    @classmethod
    def restored(cls, kind: str, want: _Listed, odd: Mapping[str, Any]) -> _Listed:
        """The list gitsync pushed, rebuilt from what it pushed (`want`, the desired side) and the
        indexes it gave that were not the derived ones: the same items, indexes, and contents."""
        if kind in UNINDEXED_KINDS:
            return cls(want.items, want.ids, want.contents, [None] * len(want.items), {}, want.splits)
        indexes = [odd[key] if key in odd else _index_of(content)
                   for key, content in zip(want.ids, want.contents, strict=True)]
        # Each item's JSON as the push wrote it (`fragment`), where its content is its own JSON.
        splits = want.splits or [-1] * len(indexes)
        rows = zip(want.items, want.contents, splits, indexes, strict=True)
        fragments: list[bytes | None] = [
            with_index(content, split, index)
            if split > 0 and type(index) is int and isinstance(item, Mapping) else None
            for item, content, split, index in rows]
        ids = set(want.ids)
        kept = {key: index for key, index in odd.items() if key in ids}
        return cls(_Indexed(want.items, indexes), want.ids, want.contents, fragments, kept, want.splits)

    def sent_by_id(self) -> dict[str, tuple[Any, bytes | None]]:
        """Each item gitsync sent, with its JSON (None: not written, or not gitsync's items)."""
        if self.fragments is None:
            return {}
        out: dict[str, tuple[Any, bytes | None]] = {}
        for key, item, fragment in zip(self.ids, self.items, self.fragments, strict=True):
            if key is not None:
                out.setdefault(key, (item, fragment))
        return out


class LiveView:
    """What a gateway holds, as plans see it: every ``*_conf_version``, and each kind's items with their
    identity and canonical content (computed once per kind, when a plan first asks).

    From a GET (`LiveView.of`), or from a push the gateway confirmed by its digest (`Plan.after`): the
    next sync against that gateway then plans on it without reading the whole config again."""

    def __init__(self, versions: Mapping[str, Any], lists: Mapping[str, Any],
                 listed: Mapping[str, _Listed] | None = None) -> None:
        self.versions = dict(versions)  # version key → version, as the gateway reports them
        self._lists = dict(lists)  # kind → its items, as the gateway reports them
        self._listed: dict[str, _Listed] = dict(listed or {})

    @classmethod
    def of(cls, live: Mapping[str, Any] | LiveView) -> LiveView:
        if isinstance(live, LiveView):
            return live
        versions = {k: v for k, v in live.items() if k.endswith(VERSION_SUFFIX)}
        return cls(versions, {k: v for k, v in live.items() if not k.endswith(VERSION_SUFFIX)})

    def items(self, kind: str) -> list[Any] | None:
        """A kind's live items; [] when absent or ``{}``, None when the gateway reports a non-list."""
        if kind in self._listed:
            return list(self._listed[kind].items)
        return _live_list(self._lists.get(kind))

    def count(self, kind: str) -> int | None:
        """`len(items(kind))`, without making a restored view's items."""
        if kind in self._listed:
            return len(self._listed[kind].items)
        items = _live_list(self._lists.get(kind))
        return None if items is None else len(items)

    def listed(self, kind: str) -> _Listed:
        if kind not in self._listed:
            self._listed[kind] = _Listed.of(kind, self.items(kind) or [])
        return self._listed[kind]

    def ids(self, kinds: Collection[str]) -> dict[str, list[str]]:
        """The ids of the items of `kinds`: after our own push, what gitsync pushed there."""
        return {kind: [i for i in self.listed(kind).ids if i is not None] for kind in kinds
                if version_key(kind) in self.versions}

    def odd_indexes(self, kinds: Collection[str]) -> dict[str, dict[str, Any]]:
        """Per kind of `kinds` the gateway holds, the indexes that are not derived (`_Listed.odd`)."""
        return {kind: odd for kind in kinds if version_key(kind) in self.versions
                and (odd := self.listed(kind).odd_indexes())}

    @classmethod
    def restored(cls, desired: Desired, versions: Mapping[str, Any],
                 odd: Mapping[str, Mapping[str, Any]]) -> LiveView:
        """The gateway as gitsync's own push of `desired` left it, with `versions`: what a plan needs,
        rebuilt without reading the gateway (the caller has proved by its digest that it holds that
        push). Kinds not managed are not known: a plan sends none of their items."""
        listed = {kind: _Listed.restored(kind, want, odd.get(kind, {}))
                  for kind, want in desired.wanted.items() if version_key(kind) in versions}
        return cls(versions, {}, listed)

    def body(self, kinds: Collection[str] | None = None) -> dict[str, Any]:
        """The view as a GET body (versions and lists; only the lists of `kinds` when given)."""
        return {**self.versions, **{kind: self.items(kind) for kind in {*self._lists, *self._listed}
                                    if kinds is None or kind in kinds}}


def _with_indexes(kind: str, want: _Listed, live: _Listed, twins: Mapping[str, tuple[Any, bytes]]
                  ) -> tuple[list[Any], list[bytes | None], dict[str, Any]]:
    """The desired list with each item's ``modifiedIndex`` (the live twin's when equal, else derived),
    each one's JSON where it is known already (an item gitsync sent before, unchanged, is sent again
    as it was: `_Listed.fragments`), and the indexes that are not the usual derived one (`_Listed.odd`)."""
    sent: list[Any] = []
    fragments: list[bytes | None] = []
    odd: dict[str, Any] = {}
    ours = live.sent_by_id()
    live_odd = live.odd_indexes() if ours else {}
    for key, item, content in zip(want.ids, want.items, want.contents, strict=True):
        if not isinstance(item, Mapping) or kind in UNINDEXED_KINDS:
            sent.append(item)
            fragments.append(None)
            continue
        twin, twin_content = twins.get(key, (None, None))  # type: ignore[arg-type]
        twin_index = twin.get(INDEX_FIELD) if isinstance(twin, Mapping) else None
        if key in ours and twin_content == content and _is_number(twin_index):
            previous, fragment = ours[key]
            sent.append(previous)
            fragments.append(fragment)
            if key in live_odd:
                odd[key] = twin_index
            continue
        out, index_is_odd = _indexed(item, content, twin_index, twin_content == content)
        if key is not None and index_is_odd:
            odd[key] = out[INDEX_FIELD]
        sent.append(out)
        fragments.append(None)
    return sent, fragments, odd


def _indexed(item: Mapping[str, Any], content: bytes, twin_index: Any, same: bool
             ) -> tuple[dict[str, Any], bool]:
    """The item with its ``modifiedIndex``: the live twin's when the content is the `same` and the twin
    has one, else derived from the content (the stand-in when that equals the twin's); and whether
    that index is not the usual derived one (`_Listed.odd`)."""
    out = {k: v for k, v in item.items() if k != INDEX_FIELD}
    if same and _is_number(twin_index):
        out[INDEX_FIELD] = twin_index
        return out, twin_index != _index_of(content)
    usual, stand_in = content_indexes(out, content)
    out[INDEX_FIELD] = stand_in if usual == twin_index else usual
    return out, out[INDEX_FIELD] != usual


def _changed_in_place(kind: str, want: _Listed, live: _Listed, live_v: int | float, version: int | float
                      ) -> tuple[KindPlan, _Listed]:
    """`_changed_kind` when `live` is gitsync's own last push and holds the same ids in the same order
    (items changed, none added, removed or moved: the usual commit): the items whose content is
    unchanged are sent again as they were, with their JSON; only the changed ones are looked at."""
    changed = [index for index, (content, twin) in enumerate(zip(want.contents, live.contents, strict=True))
               if content != twin]
    items, fragments, odd = _copy(live.items), list(live.fragments or ()), dict(live.odd_indexes())
    for index in changed:
        key, item, content = want.ids[index], want.items[index], want.contents[index]
        twin = live.items[index]
        twin_index = twin.get(INDEX_FIELD) if isinstance(twin, Mapping) else None
        odd.pop(key or "", None)
        fragments[index] = None
        if not isinstance(item, Mapping):
            items[index] = item
            continue
        items[index], index_is_odd = _indexed(item, content, twin_index, False)
        if key is not None and index_is_odd:
            odd[key] = items[index][INDEX_FIELD]
    kind_plan = KindPlan(key=kind, status=KindStatus.CHANGED, live_version=live_v, version=version,
                         count=len(want.items),
                         modified=tuple(key for index in changed if (key := want.ids[index]) is not None))
    return kind_plan, _Listed(items, want.ids, want.contents, fragments, odd, want.splits)


def _in_place(kind: str, want: _Listed, live: _Listed) -> bool:
    """Whether `_changed_in_place` may plan this kind: our own push, the same unique ids in order."""
    return (live.fragments is not None and kind not in UNINDEXED_KINDS and want.ids == live.ids
            and distinct_ids(want.ids))


def _changed_kind(kind: str, want: _Listed, live: _Listed, live_v: int | float, version: int | float,
                  owned: Collection[str] | None = None) -> tuple[KindPlan, _Listed]:
    if _in_place(kind, want, live):
        return _changed_in_place(kind, want, live, live_v, version)
    twins = live.by_id()
    wanted = {key for key in want.ids if key is not None}
    gone = [key for key in twins if key not in wanted]
    # Ours: what gitsync pushed there before, when it remembers; else what carries the index it derives.
    ours = {key for key in gone if (key in owned if owned is not None else written_by_gitsync(*twins[key]))}
    kind_plan = KindPlan(
        key=kind,
        status=KindStatus.CHANGED,
        live_version=live_v,
        version=version,
        count=len(want.items),
        added=tuple(key for key in want.ids if key is not None and key not in twins),
        removed=tuple(key for key in gone if key in ours),
        modified=tuple(key for key, content in zip(want.ids, want.contents, strict=True)
                       if key is not None and key in twins and twins[key][1] != content),
        pruned=tuple(key for key in gone if key not in ours),
    )
    items, fragments, odd = _with_indexes(kind, want, live, twins)
    return kind_plan, _Listed(items, want.ids, want.contents, fragments, odd, want.splits)


@dataclass(frozen=True)
class Desired:
    """The desired side of plans, prepared once: each managed kind's items with their ids and
    canonical content, and the digest. A sync plans against the same desired config at least
    twice (before the PUT and on the read-back); this is the half of the work they share."""

    payload: Mapping[str, Sequence[Any]]
    policy: Policy
    wanted: dict[str, _Listed]
    digest: str

    @classmethod
    def of(cls, desired: Mapping[str, Sequence[Any]] | Desired, policy: Policy = MANAGE_ALL,
           contents: Mapping[str, Sequence[bytes]] | None = None,
           ids: Mapping[str, Sequence[str | None]] | None = None,
           splits: Mapping[str, Sequence[int]] | None = None) -> Desired:
        """`contents`, `ids`, `splits`: each item's canonical content, id and content split by kind, when
        render kept them (`Rendered.contents`, `Rendered.ids`, `Rendered.splits`)."""
        if isinstance(desired, Desired):
            if desired.policy == policy:
                return desired
            desired = desired.payload
        contents, ids, splits = contents or {}, ids or {}, splits or {}
        wanted = {kind: _Listed.of(kind, list(desired.get(kind) or ()), contents.get(kind), ids.get(kind),
                                   splits.get(kind)) for kind in KINDS if policy.manages(kind)}
        return cls(desired, policy, wanted, _digest({kind: want.contents for kind, want in wanted.items()}))


def plan(desired: Mapping[str, Sequence[Any]] | Desired, live: Mapping[str, Any] | LiveView,
         policy: Policy = MANAGE_ALL, owned: Mapping[str, Collection[str]] | None = None) -> Plan:
    """The PUT that makes `live` hold `desired` for every managed kind, and leaves the rest alone.

    `desired` is the rendered payload, or a `Desired` prepared from it for several plans; `live` a GET
    body, or a `LiveView` (the gateway after our own last push). `owned`: per kind, the ids gitsync
    pushed to this gateway before, so that an item gone from the repo is told from one written out of
    band (without it, by the modifiedIndex gitsync derives). `Plan.after` is the gateway once it
    takes the PUT."""
    problems: list[Problem] = []
    kinds: list[KindPlan] = []
    versions: dict[str, Any] = {}
    sent: dict[str, _Listed] = {}
    after: dict[str, _Listed] = {}
    prepared = Desired.of(desired, policy)
    wanted = prepared.wanted
    view = LiveView.of(live)
    for key in live_version_keys(view.versions):
        live_v = view.versions[version_key(key)]
        if not _is_number(live_v):
            problems.append(Problem(f"the gateway reports a {version_key(key)} that is not a number: "
                                    f"{live_v!r}", kind=key))
            continue
        versions[version_key(key)] = live_v
        count = view.count(key)
        if key not in wanted:
            status = KindStatus.UNMANAGED if key in KINDS else KindStatus.KEPT
            kinds.append(KindPlan(key, status, live_v, live_v, count or 0))
            continue
        want = wanted[key]
        current = view.listed(key)
        if count is not None and current.contents == want.contents:
            kinds.append(KindPlan(key, KindStatus.UNCHANGED, live_v, live_v, len(want.items)))
            after[key] = current
            continue
        version = next_version(live_v)
        if version is None:
            problems.append(Problem(f"{version_key(key)} is {live_v:.14g} on the gateway, the largest number "
                                    "APISIX can store: no version can follow it until the gateway restarts",
                                    kind=key))
            version = live_v
        kind_plan, sent[key] = _changed_kind(key, want, current, live_v, version,
                                             None if owned is None else owned.get(key, ()))
        kinds.append(kind_plan)
        versions[version_key(key)] = kind_plan.version
        after[key] = sent[key]
    for kind, want in wanted.items():
        if want.items and version_key(kind) not in view.versions:
            problems.append(Problem(f"the gateway has no {version_key(kind)}: this APISIX version does not "
                                    f"support {kind}", kind=kind))
    lists = {kind: view.items(kind) for kind in KINDS if kind not in after and version_key(kind) in versions}
    return Plan(tuple(kinds), prepared.digest, tuple(problems), LiveView(versions, lists, after),
                {**versions, **sent})


def _body(fields: Mapping[str, Any]) -> bytes:
    """`canonical_json` of the body, each list item written on its own (a large list is most of it)
    or taken as already written (`_Listed.fragments`, which keeps what is written here)."""
    parts = {}
    for key, value in fields.items():
        if isinstance(value, _Listed):
            fragments = value.fragments or [None] * len(value.items)
            for index, fragment in enumerate(fragments):
                if fragment is None:
                    fragments[index] = value.fragment(index)
            parts[key] = b"[" + b",".join(fragments) + b"]"  # type: ignore[arg-type]
        else:
            parts[key] = canonical_json(value)
    return b"{" + b",".join(canonical_json(key) + b":" + parts[key] for key in sorted(parts)) + b"}"


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
