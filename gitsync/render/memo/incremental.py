"""The next render from the last one: a commit that changes a few plain files' items, not their ids.

Most commits change the content of a few items. When the last render of the same options was clean
and made only of plain files, each appended whole (`gitsync.render.build.Segment`), a commit whose
changed files keep every document's kinds and ids in place is rendered by putting the changed
files' items where their old items were: the ids, and so every cross-item check (duplicates,
references into them, layers), are what they were, and each changed item is checked on its own
(`SegmentFacts`) and for the ids it names. Anything else — a new, removed or renamed file, an id
added, removed or moved, a problem, a file with ``${{ }}`` or SOPS, ssls (their SNIs are checked
across items), a file that holds or held health checks or secret fields (the repo's, not pushed),
an overlay that replaced an item, more than a few changed files — is a full render
(`gitsync.render.pipeline`), which says the same in every case.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from gitsync.configfiles import ConfigFiles
from gitsync.kinds import REPO_ONLY_KINDS
from gitsync.problems import Location, Problem
from gitsync.render.build import Built, Loaded, Unit, units_of
from gitsync.render.facts import FileFacts, SegmentFacts
from gitsync.render.load import LoadIssue, ParsedFile, blob_sha
from gitsync.render.options import RenderOptions
from gitsync.render.result import Rendered
from gitsync.render.sourcemap import FilePositions, SourceMap
from gitsync.render.validate import frame_size, segment_of

MAX_CHANGED = 8  # files; more is a full render
LOOKED_ACROSS = frozenset({"ssls", *REPO_ONLY_KINDS})  # checked across items, or not in the payload


@dataclass(frozen=True)
class Place:
    """Where one document list of a file stands in the payload."""

    doc: int
    kind: str
    start: int
    count: int


@dataclass(frozen=True)
class LastRender:
    """What the next render may start from (kept by the `ParseCache`)."""

    options: RenderOptions
    blobs: dict[str, str]  # file → blob SHA
    places: dict[str, tuple[Place, ...]]  # file → its document lists, every one a whole segment
    sizes: dict[str, int]  # file → its items' JSON size
    size: int  # the payload's JSON size
    rendered: Rendered
    #: The files that declare what is not pushed (health checks, secret fields): one changed is a full render.
    declaring: frozenset[str] = frozenset()


def remember(options: RenderOptions, files: Mapping[str, bytes], built: Built, facts: Mapping[str, FileFacts],
             rendered: Rendered, rendered_files: Collection[str]) -> LastRender | None:
    """What the next render may start from, when every item of this clean render is a plain file's
    whole list and every file it rendered (`rendered_files`: those under the configured paths) is
    plain; else None."""
    if options.partial or rendered.left_out or rendered.secret_values:
        return None
    places: dict[str, list[Place]] = {}
    sizes: dict[str, int] = {}
    size = frame_size(built.payload)
    for kind, items in built.payload.items():
        segments = built.segments.get(kind, ())
        if sum(segment.count for segment in segments) != len(items):
            return None  # an item outside a whole list (an overlay replaced it)
        for segment in segments:
            known = facts[segment.file].segments.get((segment.doc, kind)) if segment.file in facts else None
            if known is None:
                return None  # not a plain file
            places.setdefault(segment.file, []).append(Place(segment.doc, kind, segment.start, segment.count))
            sizes[segment.file] = sizes.get(segment.file, 0) + known.size
            size += known.size
    blobs = _blobs(files)
    if blobs is None or not set(rendered_files) <= set(facts):
        return None  # a file that is not plain: its values may change with the same bytes
    declaring = frozenset(source.file for kind in REPO_ONLY_KINDS for source in built.sources.get(kind, ()))
    return LastRender(options, blobs, {name: tuple(p) for name, p in places.items()}, sizes, size, rendered,
                      declaring)


def _blobs(files: Mapping[str, bytes]) -> dict[str, str] | None:
    """Every file's blob SHA (from the source when it knows them), or None with a file unread for its size."""
    known = files if isinstance(files, ConfigFiles) else None
    if known is not None and known.oversized:
        return None
    names = [*files, *(known.unread if known is not None else ())]
    return {name: (known.blob_ids.get(name) if known is not None else None) or blob_sha(files[name])
            for name in names}


def render_next(files: Mapping[str, bytes], options: RenderOptions, last: LastRender | None,
                parsed_of: Callable[[str, str], ParsedFile]) -> tuple[Rendered, LastRender] | None:
    """The render of `files` from the `last` one (see the module) and what the next may start from,
    or None: render it in full. `parsed_of(name, blob)`: the parsed file."""
    if last is None or options != last.options:
        return None
    blobs = _blobs(files)
    if blobs is None or blobs.keys() != last.blobs.keys():
        return None
    changed = [name for name, blob in blobs.items() if last.blobs[name] != blob]
    if len(changed) > MAX_CHANGED or not last.declaring.isdisjoint(changed):
        return None
    before = last.rendered
    payload, sources = dict(before.payload), dict(before.source_map.lists())
    contents, splits = dict(before.contents), dict(before.splits)
    declared: dict[str, set[str]] = {}
    sizes = dict(last.sizes)
    size = last.size
    warnings = [w for w in before.warnings if w.location is None or w.location.file not in changed]
    for name in changed:
        places = last.places.get(name)
        read = _lists(name, blobs[name], parsed_of)
        if places is None or read is None or len(read[0]) != len(places):
            return None
        lists, noted = read
        if noted and options.ambiguous_scalars == "error":
            return None  # refused: a full render says so
        warnings += [Problem(w.message, Location(name, w.line, w.col)) for w in noted]
        sizes[name] = 0
        where = {(place.doc, place.kind): place for place in places}
        for doc, unit, known in lists:
            place = where.get((doc, unit.kind))
            if place is None or len(unit.items) != place.count or not unit.unique \
                    or unit.ids != before.ids[place.kind][place.start:place.start + place.count]:
                return None
            if known.issues or known.look_closer or not _declared(known, before, declared, options):
                return None
            end = place.start + place.count
            for table, new in ((payload, unit.items), (sources, unit.sources), (contents, known.contents),
                               (splits, known.splits)):
                table[place.kind] = [*table[place.kind][:place.start], *new, *table[place.kind][end:]]
            sizes[name] += known.size
        size += sizes[name] - last.sizes.get(name, 0)
    if size > options.max_payload_size:
        return None
    rendered = Rendered(payload, SourceMap(files, sources, FilePositions(files)), before.secret_values,
                        before.checks, contents, (), before.ids, splits, before.secret_rules,
                        tuple(sorted(warnings, key=lambda w: w.location or Location(""))))
    return rendered, LastRender(options, blobs, last.places, sizes, size, rendered, last.declaring)


def _lists(name: str, blob: str, parsed_of: Callable[[str, str], ParsedFile]
           ) -> tuple[list[tuple[int, Unit, SegmentFacts]], tuple[LoadIssue, ...]] | None:
    """A changed file's document lists with what is known of each, when it is plain and clean; and its
    warnings."""
    parsed = parsed_of(name, blob)
    if parsed.issues or parsed.has_templates or parsed.has_sops or parsed.has_secret_references:
        return None
    facts = FileFacts.of(parsed)
    lists = []
    for doc in parsed.documents:
        problems, units = units_of(Loaded(name, 0, doc, doc.shared, parsed.memo))
        if problems:
            return None
        for unit in units:
            if unit.kind in LOOKED_ACROSS or unit.patches:
                return None  # a patch is applied on the item of another layer: a full render does it
            lists.append((doc.index, unit, segment_of(facts, doc.index, unit.kind, unit.items)))
    return lists, parsed.warnings


def _declared(known: SegmentFacts, before: Rendered, declared: dict[str, set[str]],
              options: RenderOptions) -> bool:
    """Whether every id a list names is declared (the ids are the last render's: none changed)."""
    for target, ids in known.named.items():
        if target in options.unmanaged:
            continue
        if target not in declared:
            declared[target] = {i for i in before.ids.get(target, ()) if i is not None}
        if not ids <= declared[target]:
            return False
    return True


__all__ = ["LastRender", "remember", "render_next"]
