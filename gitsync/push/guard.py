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

Trailers are read as git reads them (``git interpret-trailers --parse --no-divider``, the rules of
git's trailer.c): only the message's last paragraph, never the subject, and only when every line of
it is a ``Key: value`` trailer (or it holds a git-generated one, ``Signed-off-by: `` or ``(cherry
picked from commit ``, and at least a quarter of its lines are trailers); a line that starts with
whitespace continues the trailer above it; ``#`` lines and trailing blank lines are left out (git's
legacy ``Conflicts:`` block and the ``--verbose`` scissors line, which git removes before it stores a
message, are not looked for). A
``Gitsync-Allow-Delete`` value counts only when every word of it is a kind name or ``all`` (any
case, separated by commas or spaces): prose such as "none of the routes please" allows nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import KINDS, distinct_ids, item_id

TRAILER = "Gitsync-Allow-Delete"
ALL = "all"
#: Lines git counts as trailers whatever the rest of their paragraph holds.
GIT_GENERATED = ("Signed-off-by: ", "(cherry picked from commit ")
_C_SPACE = " \t\n\v\f\r"  # C's isspace(), which git uses: not Python's Unicode notion
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_WORDS = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class GuardPolicy:
    """How much of a kind a commit may delete without saying so."""

    enabled: bool = True
    max_delete: float = 0.25  # fraction of a kind's live items
    max_delete_count: int = 10  # deleting this many items of a kind is always allowed
    per_kind: Mapping[str, float] = field(default_factory=dict)  # fractions for some kinds
    allowed: frozenset[str] = frozenset()  # kinds the author allows to shrink freely (or "all")
    #: No commit message carries the allowance (``--dir``): a refusal points at ``--allow-delete``.
    by_flag: bool = False

    def allows(self, kind: str) -> bool:
        return ALL in self.allowed or kind in self.allowed

    def remedy(self, kind: str) -> str:
        """How the author allows deleting items of `kind`."""
        return f"pass --allow-delete {kind}" if self.by_flag else f'add "{TRAILER}: {kind}"'

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
    remedy: str = ""  # how the author allows it: 'add "Gitsync-Allow-Delete: routes"'

    @property
    def added(self) -> int:
        """How many items of the kind the commit adds (ids that are not live)."""
        return self.after - (self.live - self.deleted)

    def describe(self) -> str:
        """``routes: 812 → 0, deletes 812 of 812 (100 %), refused: add "Gitsync-Allow-Delete: routes"``;
        ``routes: 1 → 3, deletes 1 of 1 (100 %), adds 3``: what the guard counts (the deleted share of
        what is live) beside the totals, so that a kind that grows while it loses items reads right."""
        counts = ""
        if self.deleted:
            counts = f", deletes {self.deleted} of {self.live} ({round(100 * self.deleted / self.live)} %)"
            counts += f", adds {self.added}" if self.added else ""
        verdict = f", refused: {self.remedy}" if self.refused else ""
        return f"{self.kind}: {self.live} → {self.after}{counts}{verdict}"


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


def _separator(line: str) -> int:
    """Where a ``Token: value`` line's colon is (git's find_separator: the token is letters, digits and
    ``-``, then optional blanks), or -1; 0 when the line starts with the colon (no token)."""
    blanks = False
    for index, char in enumerate(line):
        if char == ":":
            return index
        if not blanks and char in _TOKEN_CHARS:
            continue
        if index and char in " \t":
            blanks = True
            continue
        break
    return -1


def _is_blank(line: str) -> bool:
    return not line.strip(_C_SPACE)


def _message_end(lines: list[str]) -> int:
    """How many lines the message has once the trailing blank and ``#`` lines are left out."""
    end = len(lines)
    while end and (lines[end - 1] == "" or lines[end - 1].startswith("#")):
        end -= 1
    return end


def _trailer_block(lines: list[str]) -> list[str]:
    """The lines of the message's trailer block (git's find_trailer_block_start), or none."""
    title_end = next((i for i, line in enumerate(lines) if not line.startswith("#") and _is_blank(line)),
                     len(lines))
    trailers = others = continuations = 0
    generated, only_blank = False, True
    for index in range(len(lines) - 1, title_end - 1, -1):
        line = lines[index]
        if line.startswith("#"):
            others, continuations = others + continuations, 0
        elif _is_blank(line):
            if only_blank:
                continue
            others += continuations
            if (generated and trailers * 3 >= others) or (trailers and not others):
                return lines[index + 1:]
            return []
        else:
            only_blank = False
            if line.startswith(GIT_GENERATED):
                trailers, continuations, generated = trailers + 1, 0, True
            elif _separator(line) >= 1 and line[0] not in _C_SPACE:
                trailers, continuations = trailers + 1, 0
            elif line[0] in _C_SPACE:
                continuations += 1
            else:
                others, continuations = others + 1 + continuations, 0
    return []


def trailers(message: str) -> list[tuple[str, str]]:
    """The (token, value) trailers of a commit message, as ``git interpret-trailers --parse
    --no-divider`` prints them: continuation lines unfolded, both sides trimmed."""
    lines = message.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    joined: list[str] = []
    last_is_trailer = False
    for line in _trailer_block(lines[:_message_end(lines)]):
        if last_is_trailer and line[:1] and line[0] in _C_SPACE:
            joined[-1] += "\n" + line
            continue
        joined.append(line)
        last_is_trailer = _separator(line) >= 1
    out = []
    for line in joined:
        at = _separator(line)
        if line.startswith("#") or at < 1:
            continue
        first, *more = line[at + 1:].split("\n")
        value = first + "".join(" " + part.lstrip(_C_SPACE) for part in more)  # git's unfold_value
        out.append((line[:at].strip(_C_SPACE), value.strip(_C_SPACE)))
    return out


def allowance(value: str) -> frozenset[str] | None:
    """The kinds one ``Gitsync-Allow-Delete`` value names, or None when it is not only kind names and
    ``all`` (any case): a value with any other word allows nothing."""
    words = [w.lower() for w in _WORDS.split(value) if w]
    if not words or any(w != ALL and w not in KINDS for w in words):
        return None
    return frozenset(words)


def allowed_kinds(message: str) -> frozenset[str]:
    """The kinds a commit message's ``Gitsync-Allow-Delete`` trailers allow (``all`` for every kind)."""
    kinds: set[str] = set()
    for token, value in trailers(message):
        if token.lower() == TRAILER.lower():
            kinds |= allowance(value) or frozenset()
    return frozenset(kinds)


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
        changes.append(KindChange(kind, len(live_ids), len(wanted_ids), deleted, refused,
                                  policy.remedy(kind) if refused else ""))
    return GuardVerdict(tuple(changes))


__all__ = ["ALL", "TRAILER", "GuardPolicy", "GuardVerdict", "KindChange", "allowance", "allowed_kinds",
           "check_deletions", "deletion_verdict", "trailers"]
