"""Building: documents → one payload ``{kind: [items]}`` and its source map, with layering.

Within one layer the same kind and id twice is an error naming both places; an
item of a later layer replaces the earlier item with the same kind and id, whole,
in the earlier item's place (so indices stay stable across environments), or, when
it is marked ``$patch: merge``, patches it there (`gitsync.render.patch`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import KINDS, REPO_ONLY_KINDS, VERSION_SUFFIX, item_id
from gitsync.problems import Location, Problem
from gitsync.render.filememo import FileMemo, MemoSlot
from gitsync.render.load import Document, Pos
from gitsync.render.patch import apply_patch, is_patch, patch_problem
from gitsync.render.sourcemap import ItemSource, Patched, describe


@dataclass
class Loaded:
    """One document ready to build: its file, layer, positions and (substituted) data."""

    file: str
    layer: int
    document: Document
    data: Any
    #: The parse's memo when the data is the parse's own (a plain file): units are kept there (`UNITS`).
    memo: FileMemo | None = None


@dataclass
class Built:
    payload: dict[str, list[Any]]
    sources: dict[str, list[ItemSource]]
    problems: list[Problem] = field(default_factory=list)
    ids: dict[str, list[str | None]] = field(default_factory=dict)  # each item's id, as `item_id` gives it
    segments: dict[str, list[Segment]] = field(default_factory=dict)  # runs appended whole
    #: Items made by overlays that patch, by their (last patch's) source: where their parts come from.
    patched: dict[ItemSource, Patched] = field(default_factory=dict)


def _hint(word: str) -> str:
    candidates = [*KINDS, *(k.rstrip("s") for k in KINDS)]
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not close:
        return ""
    match = close[0] if close[0] in KINDS else close[0] + "s"
    return f" (did you mean {match!r}?)"


def _top_level_problems(loaded: Loaded) -> tuple[list[Problem], list[str]]:
    """Problems with a document's top level, and the kinds it may contribute."""
    doc = loaded.document
    data = loaded.data

    def at(pos: Pos | None) -> Location:
        return Location(loaded.file, *(pos or doc.pos))

    if data is None:
        return [], []
    if not isinstance(data, dict):
        return [Problem(f"a document must be a mapping of kinds to lists (routes: [...]), not "
                        f"{describe(data)}", at(doc.pos))], []
    if isinstance(data.get("openapi"), str) or "swagger" in data:
        return [Problem("this is an OpenAPI document, not a config file: declare it in an `openapi:` list "
                        "of a config file (- name: …, spec: <its path>) to render its routes "
                        "(docs/openapi.md)", at(doc.pos))], []
    problems: list[Problem] = []
    kinds: list[str] = []
    for key, value in data.items():
        if key in KINDS or key in REPO_ONLY_KINDS:
            if value is None or value == {}:
                continue  # `routes:` with nothing under it, or APISIX's GET rendering of an empty list
            if not isinstance(value, list):
                problems.append(Problem(f"expected a list of items, got {describe(value)}",
                                        at(doc.key_pos.get(key)), key))
                continue
            kinds.append(key)
        elif key.endswith(VERSION_SUFFIX) and key[: -len(VERSION_SUFFIX)] in (*KINDS, "plugins"):
            problems.append(Problem(f"{key} does not belong in the repo: versions are chosen by the agent "
                                    "from the live gateway; remove it", at(doc.key_pos.get(key))))
        elif key in ("plugins", "stream_plugins"):
            problems.append(Problem(f"{key!r} (file-driven APISIX's plugin list) is not managed by gitsync: "
                                    "it has no effect in API-driven mode; remove it",
                                    at(doc.key_pos.get(key))))
        else:
            hint = _hint(key) or f" (expected one of: {', '.join((*KINDS, *REPO_ONLY_KINDS))})"
            problems.append(Problem(f"unknown top-level key {key!r}{hint}", at(doc.key_pos.get(key))))
    return problems, kinds


@dataclass(frozen=True)
class Unit:
    """One document's items of one kind, ready to append: the same objects every render while the
    file is plain and cached (`Loaded.memo`), so an unchanged file costs one list append."""

    kind: str
    items: list[Any]
    sources: list[ItemSource]
    ids: list[str | None]
    id_set: frozenset[str]
    unique: bool  # no id twice in this unit (else each item goes through the duplicate check)
    patches: bool = False  # some item is marked `$patch` (each goes through the layers one by one)


@dataclass(frozen=True)
class Segment:
    """A run of a kind's payload items that are exactly one document's list of that kind, in order:
    ``payload[kind][start:start + count]`` is item 0 … count-1 of `doc` in `file`. Validation reuses
    what it knows of a plain file's run as a whole (`gitsync.render.validate.SegmentFacts`)."""

    start: int
    count: int
    file: str
    doc: int


#: Where a plain file's parse keeps its documents' units: (file, document) → (its problems, its units).
UNITS: MemoSlot[dict[tuple[str, int], tuple[list[Problem], list[Unit]]]] = MemoSlot("units")


def units_of(loaded: Loaded) -> tuple[list[Problem], list[Unit]]:
    """A document's top-level problems and its units, kept with a plain file's parse."""
    key = (loaded.file, loaded.document.index)
    kept = loaded.memo.setdefault(UNITS, {}) if loaded.memo is not None else None
    if kept is not None and key in kept:
        return kept[key]
    problems, kinds = _top_level_problems(loaded)
    doc = loaded.document
    units = []
    for kind in kinds:
        item_positions = doc.item_pos.get(kind, [])
        items = loaded.data[kind]
        ids = [item_id(kind, item) for item in items]
        sources = [ItemSource(loaded.file, doc.index, index,
                              item_positions[index] if index < len(item_positions)
                              else doc.key_pos.get(kind, doc.pos), ident)
                   for index, ident in enumerate(ids)]
        id_set = frozenset(i for i in ids if i is not None)
        units.append(Unit(kind, items, sources, ids, id_set, len(id_set) == len(ids) - ids.count(None),
                          any(is_patch(item) for item in items)))
    if kept is not None:
        kept[key] = (problems, units)
    return problems, units


def build(documents: list[Loaded]) -> Built:
    """Concatenate every document's items per kind, in layer and path order, replacing across layers.

    A unit whose ids are new is appended whole (a `Segment`); only a unit that repeats an id (a
    duplicate, or an overlay replacing a base item) is taken item by item."""
    every = (*KINDS, *REPO_ONLY_KINDS)
    payload: dict[str, list[Any]] = {kind: [] for kind in every}
    sources: dict[str, list[ItemSource]] = {kind: [] for kind in every}
    ids: dict[str, list[str | None]] = {kind: [] for kind in every}
    layer_of: dict[str, list[int]] = {kind: [] for kind in every}
    seen_ids: dict[str, set[str]] = {kind: set() for kind in every}
    segments: dict[str, list[Segment]] = {kind: [] for kind in every}
    replaced: dict[str, set[int]] = {kind: set() for kind in every}
    # kind → id → index in payload[kind]: built for a kind only when a unit repeats an id
    placed: dict[str, dict[str, int]] = {}
    patched: dict[ItemSource, Patched] = {}
    problems: list[Problem] = []
    for loaded in documents:
        top_problems, units = units_of(loaded)
        problems += top_problems
        for unit in units:
            kind = unit.kind
            start = len(payload[kind])
            if unit.unique and not unit.patches and seen_ids[kind].isdisjoint(unit.id_set):
                payload[kind] += unit.items
                sources[kind] += unit.sources
                ids[kind] += unit.ids
                layer_of[kind] += [loaded.layer] * len(unit.items)
                seen_ids[kind] |= unit.id_set
                segments[kind].append(Segment(start, len(unit.items), loaded.file, loaded.document.index))
                if kind in placed:
                    placed[kind].update((ident, start + n) for n, ident in enumerate(unit.ids)
                                        if ident is not None)
                continue
            if kind not in placed:
                placed[kind] = {}
                for index, ident in enumerate(ids[kind]):
                    if ident is not None:
                        placed[kind].setdefault(ident, index)
            _add_one_by_one(loaded, unit, payload[kind], sources[kind], ids[kind], layer_of[kind],
                            placed[kind], replaced[kind], problems, patched)
            seen_ids[kind] |= unit.id_set
    kept = [kind for kind in every if payload[kind]]
    # a run with an item replaced by a later layer is no document's list any more
    whole = {kind: [s for s in segments[kind] if not any(s.start <= i < s.start + s.count
                                                         for i in replaced[kind])]
             if replaced[kind] else segments[kind] for kind in kept}
    return Built({k: payload[k] for k in kept}, {k: sources[k] for k in kept}, problems,
                 {k: ids[k] for k in kept}, whole, patched)


def _add_one_by_one(loaded: Loaded, unit: Unit, payload: list[Any], sources: list[ItemSource],
                    ids: list[str | None], layer_of: list[int], placed: dict[str, int], replaced: set[int],
                    problems: list[Problem], patched: dict[ItemSource, Patched]) -> None:
    """Append a unit's items to one kind's lists one at a time: a duplicate id within a layer is a
    problem naming both places; an id of an earlier layer is replaced (or patched) in place
    (`replaced`)."""
    kind = unit.kind
    for item, source, ident in zip(unit.items, unit.sources, unit.ids, strict=True):
        earlier = None if ident is None else placed.get(ident)
        if is_patch(item) and (earlier is None or layer_of[earlier] != loaded.layer):
            _patch(loaded, kind, item, source, earlier, payload, sources, layer_of, patched, problems)
            if earlier is not None:
                replaced.add(earlier)
        elif earlier is None:
            if ident is not None:
                placed[ident] = len(payload)
            payload.append(item)
            sources.append(source)
            ids.append(ident)
            layer_of.append(loaded.layer)
        elif layer_of[earlier] == loaded.layer:
            first = sources[earlier]
            what = "username" if kind == "consumers" and "/credentials/" not in str(ident) \
                and isinstance(item, dict) and "id" not in item else "id"
            what = "name" if kind in REPO_ONLY_KINDS else what
            hint = " (a $patch changes the item of an earlier path: put the patch in a directory listed " \
                "after it in `paths`)" if is_patch(item) else ""
            problems.append(Problem(
                f"duplicate {what} {ident!r} in {kind}: also at {Location(first.file, *first.pos)}{hint}",
                Location(loaded.file, *source.pos), kind, ident))
        else:
            patched.pop(sources[earlier], None)
            payload[earlier] = item
            sources[earlier] = source
            layer_of[earlier] = loaded.layer
            replaced.add(earlier)


def _patch(loaded: Loaded, kind: str, item: dict[str, Any], source: ItemSource, earlier: int | None,
           payload: list[Any], sources: list[ItemSource], layer_of: list[int],
           patched: dict[ItemSource, Patched], problems: list[Problem]) -> None:
    """Apply an overlay's patch to the item of an earlier layer it names, in that item's place; or say
    why it cannot be (a patch without a base, or of an unknown sort), at the patch's place."""
    where = Location(loaded.file, *source.pos)
    why = patch_problem(item)
    if why is None and earlier is None:
        what = f"{kind}[{source.id}]" if source.id is not None else f"an item of {kind} without an id"
        why = (f"$patch: merge patches {what}, but no earlier path declares it "
               "(a patch changes an item of an earlier path in `paths`; without $patch the item is new)")
    if why is not None:
        problems.append(Problem(why, where, kind, source.id))
        return
    assert earlier is not None
    base_source = sources[earlier]
    payload[earlier], patched[source] = apply_patch(payload[earlier], item, base_source, source,
                                                    patched.pop(base_source, None))
    sources[earlier] = source
    layer_of[earlier] = loaded.layer
