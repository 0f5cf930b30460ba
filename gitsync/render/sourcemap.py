"""The source map: from a payload item (kind, index) back to the file, line and column it came from.

Every error about the config repo goes through it — validation here, a gateway
rejecting "routes at index 42" later, notes on a failed commit. Item positions
are recorded while parsing (free); a field's position is found lazily by
re-reading just the one file that holds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gitsync.problems import Location, Problem
from gitsync.render.load import Pos, positions

FieldPath = tuple[str | int, ...]


class ItemSource(NamedTuple):
    """Where one payload item was written: file, document, index in that document's list, position.
    A named tuple: render makes one per item of every file it builds (a frozen dataclass is twice
    the cost to make)."""

    file: str
    doc: int
    index: int
    pos: Pos
    id: str | None


@dataclass(frozen=True)
class Patched:
    """Where the parts of an item made by overlays that patch come from (`gitsync.render.patch`):
    `sources[0]` is the base item, each later one a patch applied on top, in layer order; `owners`
    maps a path inside the item to the index (in `sources`) of the layer that wrote that part whole.
    A path owned by no entry, nor by any entry for a prefix of it, is the base item's."""

    sources: tuple[ItemSource, ...]
    owners: Mapping[FieldPath, int]

    def origin(self, path: FieldPath) -> ItemSource:
        """The item source (base or patch) that wrote the field at `path`."""
        for length in range(len(path), -1, -1):
            owner = self.owners.get(path[:length])
            if owner is not None:
                return self.sources[owner]
        return self.sources[0]

    def describe(self) -> str:
        """``patched by P onto its base at B`` (every patch, in order)."""
        patches = ", ".join(str(Location(s.file, *s.pos)) for s in self.sources[1:])
        base = self.sources[0]
        return f"patched by {patches} onto its base item at {Location(base.file, *base.pos)}"


@dataclass(frozen=True)
class Generated:
    """An item rendered from an OpenAPI spec (`gitsync.render.openapi`): the spec, its declaration, the
    operation it came from (None for a spec's service or upstream) and where each of its fields came
    from: `fields` maps a path inside the item to a place in the spec or in the declaration; a field
    that no entry (nor any entry for a prefix of it) names is the item's own place."""

    spec: str
    name: str  # the declaration's
    declared: Location
    operation: str | None = None  # "GET /users/{id}"
    operation_id: str | None = None
    fields: Mapping[FieldPath, Location] = field(default_factory=dict)

    def origin(self, path: FieldPath) -> Location | None:
        for length in range(len(path), -1, -1):
            where = self.fields.get(path[:length])
            if where is not None:
                return where
        return None

    def describe(self) -> str:
        """``generated from GET /users/{id} (operationId getUser) of the OpenAPI spec S (openapi N at F)``."""
        what = "generated from"
        if self.operation is not None:
            what += f" {self.operation}"
            if self.operation_id is not None:
                what += f" (operationId {self.operation_id})"
            what += " of"
        return f"{what} the OpenAPI spec {self.spec} (openapi {self.name} at {self.declared})"


def string_leaves(value: Any, path: FieldPath = ()) -> Iterator[tuple[FieldPath, str]]:
    """Every string inside `value` (mappings and lists walked), with its path from `value`."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, child in value.items():
            yield from string_leaves(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from string_leaves(child, (*path, i))


def leaves(value: Any, path: FieldPath = ()) -> Iterator[FieldPath]:
    """The path of every field of `value` that holds no other field: a scalar, an empty mapping or
    list; the items of a list one by one."""
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from leaves(child, (*path, key))
    elif isinstance(value, list) and value:
        for index, child in enumerate(value):
            yield from leaves(child, (*path, index))
    else:
        yield path


def field_text(field: FieldPath) -> str:
    """``("upstream", "nodes", 0, "host")`` → ``upstream.nodes[0].host``."""
    text = ""
    for step in field:
        if isinstance(step, int):
            text += f"[{step}]"
        else:
            text += f".{step}" if text else str(step)
    return text


class FilePositions:
    """Lazily built position tables of the files that had an error; one re-read per file at most."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self._files = files
        self._tables: dict[str, dict[FieldPath, Pos]] = {}

    def location(self, file: str, doc: int, path: FieldPath, fallback: Pos | None = None) -> Location:
        """The position of the deepest node along ``(doc, *path)`` in `file`."""
        table = self._tables.get(file)
        if table is None:
            data = self._files.get(file)
            table = positions(data) if data is not None else {}
            self._tables[file] = table
        key: FieldPath = (doc, *path)
        while key:
            pos = table.get(key)
            if pos is not None:
                return Location(file, *pos)
            key = key[:-1]
        return Location(file, *(fallback or (0, 0)))


class SourceMap:
    """(kind, index) → where the item was written, and problems located at a field of an item.

    `patched`: for each item an overlay patched (by its source, the last patch's), where its parts
    come from; a problem about such an item is placed at the field's own file and line, and names
    the patch and the base item. `generated`: for each item rendered from an OpenAPI spec (by kind and
    source), the operation and where its fields come from, named in a problem the same way."""

    def __init__(self, files: Mapping[str, bytes], items: Mapping[str, list[ItemSource]],
                 positions_cache: FilePositions | None = None,
                 patched: Mapping[ItemSource, Patched] | None = None,
                 generated: Mapping[tuple[str, ItemSource], Generated] | None = None) -> None:
        self._items = {kind: list(sources) for kind, sources in items.items()}
        self._positions = positions_cache or FilePositions(files)
        self._ids: dict[str, dict[str, int]] = {}
        self._patched: Mapping[ItemSource, Patched] = patched or {}
        self._generated: Mapping[tuple[str, ItemSource], Generated] = generated or {}

    @property
    def patched(self) -> Mapping[ItemSource, Patched]:
        """Each patched item's provenance, by the item's source."""
        return self._patched

    @property
    def generated(self) -> Mapping[tuple[str, ItemSource], Generated]:
        """Each item rendered from an OpenAPI spec, by its kind and (base item's) source."""
        return self._generated

    def describe(self, kind: str, index: int) -> str | None:
        """Where item `index` of `kind` comes from when it is not simply written at its place: patched by
        overlays, generated from a spec, or both."""
        source = self.source(kind, index)
        if source is None:
            return None
        parts = []
        patched = self.patched.get(source) if self.patched else None
        if patched is not None:
            parts.append(patched.describe())
            source = patched.sources[0]
        generated = self.generated.get((kind, source)) if self.generated else None
        if generated is not None:
            parts.append(generated.describe())
        return "; ".join(parts) or None

    def kinds(self) -> tuple[str, ...]:
        return tuple(self._items)

    def lists(self) -> Mapping[str, list[ItemSource]]:
        """Each kind's item sources, in payload order (read only)."""
        return self._items

    def source(self, kind: str, index: int) -> ItemSource | None:
        listed = self._items.get(kind)
        if listed is None or not 0 <= index < len(listed):
            return None
        return listed[index]

    def location(self, kind: str, index: int) -> Location | None:
        source = self.source(kind, index)
        return None if source is None else Location(source.file, *source.pos)

    def index_of(self, kind: str, item_id: str) -> int | None:
        if kind not in self._ids:
            self._ids[kind] = {}
            for index, source in enumerate(self._items.get(kind, ())):
                if source.id is not None:
                    self._ids[kind].setdefault(source.id, index)
        return self._ids[kind].get(str(item_id))

    def problem(self, kind: str, index: int | None, message: str, field: FieldPath = (),
                detail: str | None = None) -> Problem:
        """A problem about item `index` of `kind` (or the kind as a whole), at the field's line when known."""
        source = None if index is None else self.source(kind, index)
        if source is None:
            return Problem(message, None, kind, None, field_text(field) or None, detail)
        origin = self.describe(kind, index) if self.patched or self.generated else None
        if origin is not None:  # the detail says what the message is about: before where it came from
            message = f"{message} ({detail}) ({origin})" if detail else f"{message} ({origin})"
            detail = None
        return Problem(message, self.field_location(kind, source, field), kind, source.id,
                       field_text(field) or None, detail)

    def field_location(self, kind: str, source: ItemSource, field: FieldPath) -> Location:
        """Where the field at `field` of the item written at `source` is (for a patched item: in the
        base item or the patch that wrote it)."""
        patched = self.patched.get(source) if self.patched else None
        if patched is not None:
            source = patched.origin(field)
        generated = self.generated.get((kind, source)) if self.generated else None
        if generated is not None:
            return generated.origin(field) or Location(source.file, *source.pos)
        location = Location(source.file, *source.pos)
        if field:
            location = self._positions.location(source.file, source.doc, (kind, source.index, *field),
                                                source.pos)
            if location.line < source.pos[0]:  # the path left the item (e.g. a key renamed by substitution)
                location = Location(source.file, *source.pos)
        return location

    def explain(self, kind: str, index: int, item: Any) -> list[tuple[FieldPath, Location]]:
        """Every field of the item (its leaves: scalars, empty mappings and lists, each list item) and
        the place it came from: for a patched item, the base item's or the patch's line."""
        source = self.source(kind, index)
        if source is None:
            return []
        return [(path, self.field_location(kind, source, path)) for path in leaves(item)]

    def __len__(self) -> int:
        return sum(len(v) for v in self._items.values())


def describe(value: Any) -> str:
    """A short, secret-free description of a value's type for messages."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
