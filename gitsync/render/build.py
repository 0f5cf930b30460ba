"""Building: documents → one payload ``{kind: [items]}`` and its source map, with layering.

Within one layer the same kind and id twice is an error naming both places; an
item of a later layer replaces the earlier item with the same kind and id, whole,
in the earlier item's place (so indices stay stable across environments).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from gitsync.kinds import KINDS, REPO_ONLY_KINDS, VERSION_SUFFIX, item_id
from gitsync.problems import Location, Problem
from gitsync.render.load import Document, Pos
from gitsync.render.sourcemap import ItemSource, describe


@dataclass
class Loaded:
    """One document ready to build: its file, layer, positions and (substituted) data."""

    file: str
    layer: int
    document: Document
    data: Any


@dataclass
class Built:
    payload: dict[str, list[Any]]
    sources: dict[str, list[ItemSource]]
    problems: list[Problem] = field(default_factory=list)


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


def build(documents: list[Loaded]) -> Built:
    """Concatenate every document's items per kind, in layer and path order, replacing across layers."""
    payload: dict[str, list[Any]] = {kind: [] for kind in (*KINDS, *REPO_ONLY_KINDS)}
    sources: dict[str, list[ItemSource]] = {kind: [] for kind in (*KINDS, *REPO_ONLY_KINDS)}
    # (kind, id) → (index in payload[kind], layer)
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    problems: list[Problem] = []
    for loaded in documents:
        top_problems, kinds = _top_level_problems(loaded)
        problems += top_problems
        doc = loaded.document
        for kind in kinds:
            item_positions = doc.item_pos.get(kind, [])
            for index, item in enumerate(loaded.data[kind]):
                pos = item_positions[index] if index < len(item_positions) else doc.key_pos.get(kind, doc.pos)
                ident = item_id(kind, item)
                source = ItemSource(loaded.file, doc.index, index, pos, ident)
                if ident is None:
                    payload[kind].append(item)
                    sources[kind].append(source)
                    continue
                earlier = seen.get((kind, ident))
                if earlier is None:
                    seen[(kind, ident)] = (len(payload[kind]), loaded.layer)
                    payload[kind].append(item)
                    sources[kind].append(source)
                elif earlier[1] == loaded.layer:
                    first = sources[kind][earlier[0]]
                    what = "username" if kind == "consumers" and "/credentials/" not in ident \
                        and isinstance(item, dict) and "id" not in item else "id"
                    what = "name" if kind in REPO_ONLY_KINDS else what
                    problems.append(Problem(
                        f"duplicate {what} {ident!r} in {kind}: also at {Location(first.file, *first.pos)}",
                        Location(loaded.file, *pos), kind, ident))
                else:
                    payload[kind][earlier[0]] = item
                    sources[kind][earlier[0]] = source
                    seen[(kind, ident)] = (earlier[0], loaded.layer)
    return Built({k: v for k, v in payload.items() if v}, {k: v for k, v in sources.items() if v}, problems)
