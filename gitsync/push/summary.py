"""What a sync would change, told in groups: one line for many items of a kind changed alike.

A diff of 10,000 routes that all differ in the same label is one fact, not 10,000 lines.
`summarise` keeps the per-item changes where few items changed alike and folds each
larger set of items of one kind with the same action and the same changed fields into a
`ChangeGroup`, with the values when every item has the same before and after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.push.plan import FieldPath, ItemChange
from gitsync.render.sourcemap import field_text

#: Items of a kind changed alike from which one line tells them all.
GROUP_MIN = 5
#: Ids a group line names as examples.
EXAMPLES = 3



class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()

ItemKey = tuple[str, str | None]


def value_at(value: Any, path: FieldPath) -> Any:
    """The value at a path of `changed_fields`, or `ABSENT`."""
    for step in path:
        if not isinstance(value, dict) or step not in value:
            return ABSENT
        value = value[step]
    return value


def value_text(value: Any, limit: int = 80) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class ChangeGroup:
    """Items of one kind with the same action and the same changed fields."""

    kind: str
    action: str  # add | change | remove | prune
    fields: tuple[FieldPath, ...]
    ids: tuple[str, ...]
    #: Per field, (live, wanted) when every item has the same pair; None when they vary.
    values: tuple[tuple[Any, Any], ...] | None = None

    def describe(self, values: bool = True) -> str:
        """``10,000 routes differ only in labels.managed-by: (absent) → "adc"``; without the values
        when `values` is false."""
        count = f"{len(self.ids):,} {self.kind}"
        if self.action != "change":
            verb = {"add": "to add", "remove": "to remove", "prune": "written out of band, to prune"}
            return f"{count} {verb[self.action]}"
        names = ", ".join(field_text(p) or "(whole item)" for p in self.fields)
        text = f"{count} differ only in {names}"
        if not values:
            return text
        if self.values is None:
            return text + " (values vary)"
        pairs = [f"{value_text(a)} → {value_text(b)}" for a, b in self.values]
        return text + ": " + "; ".join(pairs)

    def examples(self) -> str:
        shown = ", ".join(f"{self.kind}[{i}]" for i in self.ids[:EXAMPLES])
        return shown + (", …" if len(self.ids) > EXAMPLES else "")


def _uniform(group: Sequence[ItemChange], live: Mapping[ItemKey, Any], wanted: Mapping[ItemKey, Any],
             ) -> tuple[tuple[Any, Any], ...] | None:
    first = group[0]
    pairs = []
    for path in first.fields:
        seen = {(value_text(value_at(live.get((c.kind, c.id)), path), limit=10_000),
                 value_text(value_at(wanted.get((c.kind, c.id)), path), limit=10_000)) for c in group}
        if len(seen) != 1:
            return None
        key = (first.kind, first.id)
        pairs.append((value_at(live.get(key), path), value_at(wanted.get(key), path)))
    return tuple(pairs)


def summarise(changes: Sequence[ItemChange], live: Mapping[ItemKey, Any], wanted: Mapping[ItemKey, Any],
              minimum: int = GROUP_MIN) -> list[ItemChange | ChangeGroup]:
    """`changes` in their order, each set of at least `minimum` items of a kind with the same action
    and changed fields folded into one `ChangeGroup` where its first item was. `live` and `wanted`:
    the items by (kind, id), for the values."""
    groups: dict[tuple[str, str, tuple[FieldPath, ...]], list[ItemChange]] = {}
    for change in changes:
        groups.setdefault((change.kind, change.action, change.fields), []).append(change)
    out: list[ItemChange | ChangeGroup] = []
    for change in changes:
        key = (change.kind, change.action, change.fields)
        members = groups[key]
        if len(members) < minimum:
            out.append(change)
        elif members[0] is change:
            values = _uniform(members, live, wanted) if change.action == "change" else None
            out.append(ChangeGroup(change.kind, change.action, change.fields, tuple(c.id for c in members),
                                   values))
    return out
