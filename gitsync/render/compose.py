"""Several sources, one payload: what each source may declare, and the payload they make together
(pure; the agent's `gitsync.agent.repos` does the I/O).

Each source is rendered alone, by `render`, with the kinds it does not own whole treated as it treats
unmanaged kinds: a reference into one of them may name another source's item, so it is checked here,
on the composed payload, instead. Then:

* `facts_of(part, others)`: what the source declares outside what it owns (refused at the item's
  file:line, saying whose it is: the settings give every id one owner, `gitsync.ownership`; a
  credential is its consumer's), and the references into the kinds it shares. Worked out once per
  commit of a source; an item the last commit of the source held as the same object (an unchanged
  file: the render keeps its parse) is not looked at again.
* `compose(parts)`: one payload: per kind, the sources' items in the order the settings list the
  sources; a source map whose every place is ``name:file``; the sources' health checks, each named
  ``name:check``.
* `dangling(parts, facts)`: the references of the composed payload that name no item, or an item of
  another source that does not share it with theirs (`crossing`);
* `external(...)`: a source validated alone (a team's CI): its references into other sources' items,
  accepted where the owner shares them (declared by the settings), refused where it does not.

A source without a name (None: the one repo of the ``[source]`` settings, a composition of one) owns
every item, and its places are its own files: nothing to prefix, nothing to check across sources, and
its render is the composed payload as it is.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.ownership import Ownership, Traffic, owner_of, trespass
from gitsync.problems import Location, Problem
from gitsync.render.references import Reference, references_of
from gitsync.render.result import Rendered
from gitsync.render.secrets import SecretRules
from gitsync.render.sourcemap import FieldPath, Generated, ItemSource, Patched, SourceMap

#: Between a source's name and a file of it, in every place a composed payload reports.
SEPARATOR = ":"


def in_source(name: str | None, file: str) -> str:
    """``name:file``: a file of source `name` as a composed payload names it (an unnamed source's: `file`)."""
    return file if name is None else f"{name}{SEPARATOR}{file}"


def split_file(file: str) -> tuple[str | None, str]:
    """(source name, file) of a composed payload's ``name:file`` (None: not a source's)."""
    name, sep, rest = file.partition(SEPARATOR)
    return (name, rest) if sep else (None, file)


def of_source(name: str | None, file: str) -> str | None:
    """`file` of a composed payload as source `name` names it (its ``name:`` taken off), or None when it
    is another source's; an unnamed source is alone, and every file is its own as it stands."""
    if name is None:
        return file
    owner, own = split_file(file)
    return own if owner == name else None


def label(name: str | None) -> str:
    """``source a: ``, before what is said of source `a`; nothing for an unnamed source."""
    return "" if name is None else f"source {name}: "


def relabel(name: str | None, problem: Problem) -> Problem:
    """A problem of source `name`'s own render, as the composed payload states it."""
    if name is None:
        return problem
    if problem.location is None:
        return dataclasses.replace(problem, message=f"source {name!r}: {problem.message}")
    return dataclasses.replace(problem, location=_moved(name, problem.location))


def _moved(name: str | None, location: Location) -> Location:
    return Location(in_source(name, location.file), location.line, location.col)


@dataclass(frozen=True)
class Part:
    """One source at one commit, rendered alone."""

    name: str | None  # None: the one repo of the ``[source]`` settings
    commit: str
    rendered: Rendered
    ownership: Ownership


@dataclass(frozen=True)
class Outgoing:
    """A reference of a source's item into a kind other sources declare items of too."""

    kind: str
    index: int  # the item's index in its source's own payload
    reference: Reference
    message: str  # what a problem says when it names nothing


@dataclass(frozen=True)
class PartFacts:
    """What composing needs of one source's render (`facts_of`)."""

    problems: tuple[Problem, ...]  # items it may not declare, at their file:line (its own files)
    references: tuple[Outgoing, ...]  # those into shared kinds that none of its own items answers
    declared: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # its ids, by kind
    #: id(item) → (item, its problem, its references): what the next commit need not work out again.
    memo: Mapping[int, tuple[Any, str | None, tuple[tuple[Reference, str], ...]]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False)


def shared_kinds(ownership: Ownership) -> frozenset[str]:
    """The kinds a source shares with others: references into them are checked on the composed payload."""
    return frozenset(KINDS) - ownership.whole_kinds()


def facts_of(part: Part, others: Sequence[tuple[str | None, Ownership]], before: PartFacts | None = None
             ) -> PartFacts:
    """What the source `part` declares that it may not, and its references into shared kinds (see the
    module). `others`: every source's name and ownership (this one's is skipped); `before`: the facts
    of the source's last commit."""
    rendered, owns = part.rendered, part.ownership
    shared = shared_kinds(owns)
    every = {kind: rendered.ids.get(kind) or [item_id(kind, item) for item in items]
             for kind, items in rendered.payload.items()}
    declared = {kind: frozenset(i for i in ids if i is not None) for kind, ids in every.items()}
    if not shared and not _item_checks(part.name, owns, others):  # nothing to look at item by item
        return PartFacts((), (), declared)
    known = before.memo if before is not None else {}
    memo: dict[int, tuple[Any, str | None, tuple[tuple[Reference, str], ...]]] = {}
    problems: list[Problem] = []
    references: list[Outgoing] = []
    for kind, items in rendered.payload.items():
        for index, (item, ident) in enumerate(zip(items, every[kind], strict=True)):
            seen = known.get(id(item))
            if seen is None or seen[0] is not item:
                why = _not_owned(part.name, owns, others, kind, ident, item)
                refs = tuple((ref, message) for ref, message in references_of(kind, item)
                             if ref.target in shared)
                seen = (item, why, refs)
            memo[id(item)] = seen
            if seen[1] is not None:
                problems.append(rendered.source_map.problem(kind, index, seen[1]))
            references += [Outgoing(kind, index, ref, message) for ref, message in seen[2]
                           if ref.ident not in declared.get(ref.target, ())]
    return PartFacts(tuple(problems), tuple(references), declared, memo)


def _item_checks(name: str | None, owns: Ownership, others: Sequence[tuple[str | None, Ownership]]) -> bool:
    """Whether the source's items are checked one by one for more than ownership: plugins it may not
    use, traffic another source owns."""
    return not owns.everything and (bool(owns.restricted - owns.may_run) or any(
        theirs.traffic != Traffic() for other, theirs in others if other != name))


def _not_owned(name: str | None, owns: Ownership, others: Sequence[tuple[str | None, Ownership]], kind: str,
               ident: str | None, item: Any) -> str | None:
    """Why source `name` may not declare this item (`_not_its`), or use it so (`_not_allowed`), or None."""
    return _not_its(name, owns, others, kind, ident, item) or _not_allowed(name, owns, others, kind, item)


def _not_allowed(name: str | None, owns: Ownership, others: Sequence[tuple[str | None, Ownership]], kind: str,
                 item: Any) -> str | None:
    """A plugin that runs code the source may not use; traffic another source owns that the item would
    take."""
    if owns.everything or not isinstance(item, dict):
        return None
    plugins = item.get("plugins")
    used = [*(plugins if isinstance(plugins, dict) else ()), *(["script"] if "script" in item else [])]
    banned = sorted(set(used) & (owns.restricted - owns.may_run))
    if banned:
        return (f"source {name!r} may not use {banned[0]}: it runs code on the gateway's workers, which a "
                "source does only when its [[sources]] table's may_run lists it")
    for other, theirs in others:
        why = trespass(kind, item, theirs.traffic) if other != name else None
        if why:
            return f"source {name!r} may not take traffic source {other!r} owns: {why}"
    return None


def _not_its(name: str | None, owns: Ownership, others: Sequence[tuple[str | None, Ownership]], kind: str,
             ident: str | None, item: Any) -> str | None:
    """Why source `name` may not declare this item, or None. A credential is judged by its id alone (its
    consumer's username against the claims' prefixes), not by labels of its own: it is its consumer's.
    The owner named is the one the settings give the id (`owner_of`)."""
    credential = is_credential(kind, item)
    if owns.may_own(kind, ident or "") if credential else owns.owns(kind, ident, item):
        return None
    whose = owner_of(kind, ident or "", [(other, theirs) for other, theirs in others if other != name])
    if credential:
        consumer = (ident or "").split("/credentials/")[0]
        return (f"source {name!r} may not declare this credential: a credential belongs to the source of its "
                f"consumer, and it owns {owns.describe(kind)}"
                + (f"; consumer {consumer!r} belongs to source {whose!r}" if whose else ""))
    if whose is not None:
        theirs = f"; it belongs to source {whose!r} ({dict(others)[whose].describe(kind)})"
    else:
        theirs = "; the id is its own, the item lacks the labels" if owns.may_own(kind, ident or "") else ""
    return f"source {name!r} may not declare this item: it owns {owns.describe(kind)}{theirs}"


@dataclass(frozen=True)
class Dangling:
    """A reference of the composed payload that names no item: the source whose item holds it, what it
    names, and the problem (placed ``name:file:line``)."""

    source: str | None
    target: tuple[str, str]  # (kind, id)
    problem: Problem
    owner: str | None = None  # the source that declares it, when another source's: it is not shared


def dangling(parts: Sequence[Part], facts: Sequence[PartFacts], unmanaged: frozenset[str] = frozenset()
             ) -> list[Dangling]:
    """The references into shared kinds that name no item of the composed payload (a kind in
    `unmanaged` cannot be checked: its items are the gateway's own), and those that name an item of
    another source that does not share it with theirs (`crossing`). Those a source's own items answer
    were left out by `facts_of`: only the others are looked up, in the other sources' ids."""
    found = []
    for part, known in zip(parts, facts, strict=True):
        for out in known.references:
            ref = out.reference
            if ref.target in unmanaged:
                continue
            holder = next((other for other, f in zip(parts, facts, strict=True)
                           if ref.ident in f.declared.get(ref.target, ())), None)
            if holder is None:
                message = out.message
            elif (message := crossing(part.name, out, holder.name, holder.ownership)) is None:
                continue
            problem = part.rendered.source_map.problem(out.kind, out.index, message, ref.at)
            found.append(Dangling(part.name, (ref.target, ref.ident), relabel(part.name, problem),
                                  None if holder is None else holder.name))
    return found


def crossing(name: str | None, out: Outgoing, owner: str | None, owns: Ownership) -> str | None:
    """Why source `name`'s reference `out` may not name an item of source `owner` (which owns it as
    `owns` says), or None when it may: the owner shares it with `name`. A credential's consumer is never
    shared: a credential is its consumer's source's to declare."""
    ref = out.reference
    if owner == name:
        return None
    if out.kind == "consumers" and ref.target == "consumers" and ref.at == ("id",):
        return (f"credential of consumer {ref.ident!r}, which is source {owner!r}'s: a credential belongs to "
                "the source of its consumer")
    if owns.shares_with(ref.target, ref.ident, name):
        return None
    return (f"{ref.label} {ref.ident!r} names {ref.target} of source {owner!r}, which does not share it with "
            f"source {name!r} (see the shares of its [[sources]] table)")


def external(name: str | None, facts: PartFacts, source_map: SourceMap,
             others: Sequence[tuple[str | None, Ownership]], unmanaged: frozenset[str] = frozenset(),
             ) -> list[Problem]:
    """A source validated alone (a team's CI, the other sources unread): its references into items
    other sources own, each accepted when the owner shares it with `name` (checked for real where the
    sources are composed), else refused naming the owner; a reference no source may answer names
    nothing. Places are the source's own."""
    found = []
    for out in facts.references:
        ref = out.reference
        if ref.target in unmanaged:
            continue
        owner = owner_of(ref.target, ref.ident, [(o, t) for o, t in others if o != name])
        message = out.message if owner is None else crossing(name, out, owner, dict(others)[owner])
        if message is not None:
            found.append(source_map.problem(out.kind, out.index, message, ref.at))
    return found


def compose(parts: Sequence[Part]) -> Rendered:
    """One payload of every part (see the module). An unnamed part is alone: its render is the payload."""
    if len(parts) == 1 and parts[0].name is None:
        return parts[0].rendered
    payload: dict[str, list[Any]] = {}
    contents: dict[str, list[bytes]] = {}
    ids: dict[str, list[str | None]] = {}
    splits: dict[str, list[int]] = {}
    starts: dict[str, list[tuple[int, int]]] = {}
    for kind in KINDS:
        holding = [(number, part.rendered) for number, part in enumerate(parts)
                   if part.rendered.payload.get(kind)]
        if not holding:
            continue
        at = 0
        starts[kind] = []
        for number, rendered in holding:
            starts[kind].append((at, number))
            at += len(rendered.payload[kind])
        payload[kind] = [item for _, rendered in holding for item in rendered.payload[kind]]
        contents[kind] = [c for _, rendered in holding for c in _per_item(rendered, rendered.contents, kind)]
        ids[kind] = [i for _, rendered in holding for i in _per_item(rendered, rendered.ids, kind)]
        splits[kind] = [s for _, rendered in holding for s in _per_item(rendered, rendered.splits, kind)]
    checks = tuple(dataclasses.replace(check, name=in_source(part.name, check.name),
                                       location=_moved(part.name, check.location))
                   for part in parts for check in part.rendered.checks)
    secrets = frozenset().union(*(part.rendered.secret_values for part in parts))
    source_map = ComposedSourceMap([(part.name, part.rendered.source_map) for part in parts], starts)
    left_out = tuple(dataclasses.replace(out, why=relabel(part.name, out.why))
                     for part in parts for out in part.rendered.left_out)
    rules = sum((part.rendered.secret_rules for part in parts), SecretRules())
    warnings = tuple(relabel(part.name, warning) for part in parts for warning in part.rendered.warnings)
    return Rendered(payload, source_map, secrets, checks, contents, left_out, ids, splits, rules, warnings)


def _per_item(rendered: Rendered, table: Mapping[str, list[Any]], kind: str) -> list[Any]:
    """A kind's per-item list of a render's `contents`, `ids` or `splits` (each as long as the payload's)."""
    found = table.get(kind)
    if found is None or len(found) != len(rendered.payload[kind]):
        raise ValueError(f"a render without its per-item {kind} lists cannot be composed")
    return found


class ComposedSourceMap(SourceMap):
    """The source map of a composed payload: each place is the part's own, its file named ``name:file``."""

    def __init__(self, parts: Sequence[tuple[str | None, SourceMap]],
                 starts: Mapping[str, list[tuple[int, int]]]) -> None:
        super().__init__({}, {})
        self._parts = list(parts)
        self._starts = dict(starts)
        self._lists: dict[str, list[ItemSource]] | None = None
        self._relabeled: dict[ItemSource, Patched] | None = None
        self._relabeled_generated: dict[tuple[str, ItemSource], Generated] | None = None

    def _find(self, kind: str, index: int) -> tuple[str | None, SourceMap, int] | None:
        """The part holding item `index` of `kind`: its name, source map and the item's own index."""
        starts = self._starts.get(kind)
        if not starts or index < 0:
            return None
        at = bisect.bisect_right([start for start, _ in starts], index) - 1
        if at < 0:
            return None
        start, number = starts[at]
        name, source_map = self._parts[number]
        return name, source_map, index - start

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._starts)

    def lists(self) -> Mapping[str, list[ItemSource]]:
        if self._lists is None:
            self._lists = {kind: [s._replace(file=in_source(self._parts[number][0], s.file))
                                  for _, number in starts
                                  for s in self._parts[number][1].lists().get(kind, ())]
                           for kind, starts in self._starts.items()}
        return self._lists

    def source(self, kind: str, index: int) -> ItemSource | None:
        found = self._find(kind, index)
        if found is None:
            return None
        name, source_map, local = found
        source = source_map.source(kind, local)
        return None if source is None else source._replace(file=in_source(name, source.file))

    def location(self, kind: str, index: int) -> Location | None:
        source = self.source(kind, index)
        return None if source is None else Location(source.file, *source.pos)

    def index_of(self, kind: str, item_id: str) -> int | None:
        for start, number in self._starts.get(kind, ()):
            local = self._parts[number][1].index_of(kind, item_id)
            if local is not None:
                return start + local
        return None

    def problem(self, kind: str, index: int | None, message: str, field: FieldPath = ()) -> Problem:
        found = None if index is None else self._find(kind, index)
        if found is None:
            return super().problem(kind, None, message, field)
        name, source_map, local = found
        return relabel(name, source_map.problem(kind, local, message, field))

    def field_location(self, kind: str, source: ItemSource, field: FieldPath) -> Location:
        name, file = split_file(source.file)
        for part, source_map in self._parts:
            if part == name:
                return _moved(part, source_map.field_location(kind, source._replace(file=file), field))
        return super().field_location(kind, source, field)

    @property
    def patched(self) -> Mapping[ItemSource, Patched]:
        if self._relabeled is None:
            self._relabeled = {key._replace(file=in_source(name, key.file)): Patched(
                tuple(s._replace(file=in_source(name, s.file)) for s in value.sources), value.owners)
                for name, source_map in self._parts for key, value in source_map.patched.items()}
        return self._relabeled

    @property
    def generated(self) -> Mapping[tuple[str, ItemSource], Generated]:
        if self._relabeled_generated is None:
            self._relabeled_generated = {
                (kind, key._replace(file=in_source(name, key.file))): dataclasses.replace(
                    value, spec=in_source(name, value.spec), declared=_moved(name, value.declared),
                    fields={path: _moved(name, where) for path, where in value.fields.items()})
                for name, source_map in self._parts for (kind, key), value in source_map.generated.items()}
        return self._relabeled_generated

    def __len__(self) -> int:
        return sum(len(source_map) for _, source_map in self._parts)


class ComposedFiles(Mapping[str, bytes]):
    """The files of every part, named ``name:file`` (read through, never copied)."""

    def __init__(self, parts: Sequence[tuple[str, Mapping[str, bytes]]]) -> None:
        self._parts = dict(parts)

    def __getitem__(self, key: str) -> bytes:
        name, file = split_file(key)
        if name is None or name not in self._parts:
            raise KeyError(key)
        return self._parts[name][file]

    def __iter__(self) -> Iterator[str]:
        return (in_source(name, file) for name, files in self._parts.items() for file in files)

    def __len__(self) -> int:
        return sum(len(files) for files in self._parts.values())


def compose_files(parts: Sequence[tuple[str | None, Mapping[str, bytes]]]) -> Mapping[str, bytes]:
    """The files of every part as the composed payload names them (an unnamed part is alone: its own)."""
    if len(parts) == 1 and parts[0][0] is None:
        return parts[0][1]
    return ComposedFiles([(name, files) for name, files in parts if name is not None])


__all__ = ["SEPARATOR", "ComposedFiles", "ComposedSourceMap", "Dangling", "Outgoing", "Part", "PartFacts",
           "compose", "compose_files", "crossing", "dangling", "external", "facts_of", "in_source", "label",
           "of_source", "relabel", "shared_kinds", "split_file"]
