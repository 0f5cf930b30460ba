"""The spec stage of a render: the repo's ``openapi:`` declarations → generated documents for build.

Between loading and building (`gitsync.render.pipeline`): the declarations are found among the
loaded documents and built alone (so layers replace or patch them by name, as any item); each spec
is converted (`gitsync.render.openapi.convert`); the spec files, and every file their references
read, stop being config files (their own problems are the spec's); and each spec's items become
documents of their own, placed right after the document that first declared the spec, in its layer:
build then treats them as any file's items (a duplicate id is an error naming both places, a later
layer replaces or patches them), and the source map knows where each came from (`Generated`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.configfiles import ConfigFiles
from gitsync.kinds import item_id
from gitsync.problems import Location, Problem
from gitsync.render.build import Loaded, build
from gitsync.render.filememo import MemoSlot
from gitsync.render.load import MAX_DEPTH, Document, ParsedFile, Pos, blob_sha, positions
from gitsync.render.memo_api import RenderMemo
from gitsync.render.openapi.convert import Conversion, convert
from gitsync.render.openapi.declaration import OPENAPI, declaration
from gitsync.render.openapi.items import Item, Routes, one_route_each
from gitsync.render.openapi.refs import MISSING, Place, references
from gitsync.render.sourcemap import FilePositions, Generated, ItemSource, SourceMap

#: How deep below a spec's root the places an item's origin may name are (an operation's extension's
#: field, a path item's server's url): kept with the parse; deeper ones are found when asked for.
OUTLINE_DEPTH = 6
_KIND_ORDER = ("services", "upstreams", "routes")

#: A spec file's references (`gitsync.render.openapi.refs.references`), kept with its parse.
REFERENCES: MemoSlot[list[tuple[Place, Any]]] = MemoSlot("openapi.references")
#: A spec file's outline: the positions of its nodes down to `OUTLINE_DEPTH`, kept with its parse.
OUTLINE: MemoSlot[dict[tuple[str | int, ...], Pos]] = MemoSlot("openapi.outline")


@dataclass
class Specs:
    """What the spec stage hands build: the documents, without the spec files' and with the generated
    ones; the problems; the spec files; each generated item's provenance."""

    loaded: list[Loaded]
    problems: list[Problem]
    files: set[str] = field(default_factory=set)
    generated: dict[tuple[str, ItemSource], Generated] = field(default_factory=dict)
    conversions: list[Conversion] = field(default_factory=list)


class _Files:
    """The repo's files as the specs read them: parsed once (by the render's memo), outlined once (kept
    with the parse), each problem of a file said once."""

    def __init__(self, files: Mapping[str, bytes], parsed: Mapping[str, ParsedFile], memo: RenderMemo,
                 max_file_size: int) -> None:
        self.files, self.parsed, self.memo, self.max_file_size = files, dict(parsed), memo, max_file_size
        self.read: set[str] = set()
        self.problems: list[Problem] = []
        self._documents: dict[str, Any] = {}
        self._full: dict[str, dict[tuple[str | int, ...], tuple[int, int]]] = {}

    def _exists(self, name: str) -> bool:
        known = self.files if isinstance(self.files, ConfigFiles) else None
        return name in self.files or (known is not None and name in known.oversized)

    def _parse(self, name: str) -> ParsedFile | None:
        """The parsed file, or None (its problem said) when it is too large."""
        known = self.files if isinstance(self.files, ConfigFiles) else None
        oversized = known.oversized.get(name) if known is not None else None
        data = b"" if oversized is not None else self.files[name]
        size = len(data) if oversized is None else oversized
        if size > self.max_file_size:
            self.problems.append(Problem(f"the file is {size} bytes, more than max_file_size = "
                                         f"{self.max_file_size}", Location(name)))
            return None
        parsed = self.parsed.get(name)
        if parsed is None:
            blob = known.blob_ids.get(name) if known is not None else None
            parsed = self.parsed[name] = self.memo.get(data, blob or blob_sha(data))
        return parsed

    def document(self, name: str) -> Any:
        """A file's (one) document; `MISSING` or None (`gitsync.render.openapi.refs.Documents`)."""
        if name in self._documents:
            return self._documents[name]
        self.read.add(name)
        found = self._documents[name] = self._document(name)
        return found

    def _document(self, name: str) -> Any:
        if not self._exists(name):
            return MISSING
        parsed = self._parse(name)
        if parsed is None:
            return None
        if parsed.issues:
            self.problems += [Problem(i.message, Location(name, i.line, i.col)) for i in parsed.issues]
            return None
        if len(parsed.documents) != 1:
            self.problems.append(Problem("an OpenAPI document (or a file it refers to) is one YAML or JSON "
                                         "document", Location(name)))
            return None
        return parsed.documents[0].shared

    def references(self, name: str, document: Any) -> list[tuple[Place, Any]]:
        """Every reference of a file's document, kept with its parse (a file's never change)."""
        parsed = self.parsed.get(name)
        if parsed is None:
            return list(references(name, document))
        found = parsed.memo.get(REFERENCES)
        if found is None:
            found = parsed.memo.put(REFERENCES, list(references(name, document)))
        return found

    def locate(self, place: Place) -> Location:
        """Where a node is: from the file's outline, or (deeper) from its full positions."""
        parsed = self.parsed.get(place.file)
        if parsed is None:
            return Location(place.file)
        key = (0, *place.path)
        if len(place.path) > OUTLINE_DEPTH:
            table = self._full.get(place.file)
            if table is None:
                table = self._full[place.file] = positions(self.files.get(place.file) or b"")
        else:
            table = parsed.memo.get(OUTLINE)
            if table is None:
                table = parsed.memo.put(OUTLINE, positions(self.files.get(place.file) or b"", OUTLINE_DEPTH))
        while key:
            pos = table.get(key)
            if pos is not None:
                return Location(place.file, *pos)
            key = key[:-1]
        return Location(place.file, 1, 1)


def _declarations(loaded: list[Loaded], files: Mapping[str, bytes], positions_cache: FilePositions
                  ) -> tuple[list[tuple[Any, Callable[..., Location]]], dict[str, int]]:
    """Each effective declaration (layers applied) with a way to place its fields, and the index in
    `loaded` of the document that first declared each name."""
    documents = [(index, one) for index, one in enumerate(loaded)
                 if isinstance(one.data, dict) and isinstance(one.data.get(OPENAPI), list)]
    if not documents:
        return [], {}
    first: dict[str, int] = {}
    for index, one in documents:
        for entry in one.data[OPENAPI]:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                first.setdefault(entry["name"], index)
    built = build([Loaded(one.file, one.layer, one.document, {OPENAPI: one.data[OPENAPI]})
                   for _, one in documents])
    source_map = SourceMap(files, built.sources, positions_cache, built.patched)
    found = []
    for entry, source in zip(built.payload.get(OPENAPI, []), built.sources.get(OPENAPI, []), strict=True):
        def locate(path: tuple[str | int, ...], source: ItemSource = source) -> Location:
            return source_map.field_location(OPENAPI, source, path)
        found.append((entry, locate))
    return found, first


def expand(loaded: list[Loaded], problems: list[Problem], files: Mapping[str, bytes],
           parsed: Mapping[str, ParsedFile], memo: RenderMemo, positions_cache: FilePositions,
           max_file_size: int, max_items: int) -> Specs | None:
    """The documents and problems of a render with its specs expanded (see the module); None when the
    repo declares no spec."""
    declared, first = _declarations(loaded, files, positions_cache)
    if not declared:
        return None
    reader = _Files(files, parsed, memo, max_file_size)
    out = Specs([], [])
    for entry, locate in declared:
        made = declaration(entry, locate)
        if isinstance(made, list):
            out.problems += made
            continue
        out.conversions.append(convert(made, reader.document, reader.locate, max_items, reader.references))
    out.files = set(reader.read)
    for conversion in out.conversions:
        out.problems += conversion.problems
    out.problems += _one_route_each(out.conversions)
    out.problems += reader.problems
    out.problems += [p for p in problems if p.location is None or p.location.file not in out.files]
    out.loaded = _with_generated(loaded, out, first)
    return out


def _one_route_each(conversions: list[Conversion]) -> list[Problem]:
    """Two operations of two specs that would be one route: a problem at the second, naming the first;
    the second is left out (within one spec, `gitsync.render.openapi.items` did the same)."""
    seen, problems = Routes(), []
    for conversion in conversions:
        conversion.items, found = one_route_each(conversion.items, seen)
        problems += found
    return problems


def _with_generated(loaded: list[Loaded], out: Specs, first: Mapping[str, int]) -> list[Loaded]:
    """`loaded` without the spec files' documents, each spec's items as documents right after the one
    that first declared it."""
    after: dict[int, list[Loaded]] = {}
    synthetic = 0
    for conversion in out.conversions:
        place = first.get(conversion.declaration.name, len(loaded) - 1)
        layer = loaded[place].layer if loaded else 0
        by_file: dict[str, dict[str, list[Item]]] = {}
        for item in conversion.items:
            by_file.setdefault(item.at.file, {}).setdefault(item.kind, []).append(item)
        for file, kinds in by_file.items():
            synthetic += 1
            data: dict[str, list[Any]] = {}
            item_pos: dict[str, tuple[tuple[int, int], ...]] = {}
            for kind in sorted(kinds, key=_KIND_ORDER.index):
                data[kind] = [_plain(item.item) for item in kinds[kind]]
                item_pos[kind] = tuple((item.at.line, item.at.col) for item in kinds[kind])
                for index, item in enumerate(kinds[kind]):
                    source = ItemSource(file, -synthetic, index, item_pos[kind][index],
                                        item_id(kind, data[kind][index]))
                    out.generated[(kind, source)] = item.origin
            document = Document(-synthetic, data, (1, 1), {}, item_pos, keep_objects=True)
            after.setdefault(place, []).append(Loaded(file, layer, document, data))
    result = []
    for index, one in enumerate(loaded):
        if one.file not in out.files:
            result.append(one)
        result += after.get(index, [])
    return result


def _plain(value: Any, depth: int = 0) -> Any:
    """A copy of a generated value made of plain dicts, lists and built-in scalars (a spec's text may be
    a subclass of str; nothing is shared with the cached parse)."""
    if depth > 2 * MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


__all__ = ["OUTLINE_DEPTH", "Specs", "expand"]
