"""The items of one commit as the web view lists them: rows to search and page through, and one
item as written in its file and as pushed, secret values masked. Pure: no I/O.

Masking is the classifier's (`gitsync.render.secrets`), the same as ``gitsync render`` and ``gitsync
diff``: the pushed JSON is the masked item. The text as written is the file's own lines, where each
secret the classifier finds in the item as parsed is replaced by its masked value, at the place the
parse says that value is written (`gitsync.render.load.value_spans`: plain, quoted, flow, JSON or
block style; a multi-line value keeps its first line, masked, and drops the others), never found by
a pattern over the text; known secret values are masked on every line besides. When the item's
lines cannot be told apart from its neighbours' (several items on one line, as in JSON files), the
masked item is shown re-formatted instead.
"""

from __future__ import annotations

import bisect
import codecs
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from gitsync.kinds import KINDS, item_id
from gitsync.log import MASK, MIN_SECRET_LENGTH
from gitsync.render import Rendered, mask_secrets
from gitsync.render.load import ParsedFile, parse, positions, value_spans
from gitsync.render.mask import mask_known
from gitsync.render.secrets import NO_RULES, SecretRules, classify, value_at
from gitsync.render.sourcemap import FieldPath, ItemSource
from gitsync.web.excerpt import LineStarts, Recent, cut, item_starts, next_start, shares_a_line
from gitsync.writeback.wire import dump_yaml

PER_PAGE = 100
Places = dict[FieldPath, tuple[int, int]]
FILES_KEPT = 8  # files whose line starts an item page keeps (about 8 bytes a line)
TABLES_KEPT = 2  # files whose every node's position is kept, for items an excerpt cannot show
#: Trailing lines of an item's span that belong to no item: blank lines, comments, document markers.
_NOT_ITEM = re.compile(r"^\s*(#.*)?$|^(---|\.\.\.)(\s.*)?$")

@dataclass(frozen=True)
class Row:
    """One item in the list: what it is, where it was written, and the text a search looks in."""

    kind: str
    id: str
    index: int
    title: str  # name, username or description
    match: str  # what it answers to: uris and hosts, snis, nodes...
    plugins: tuple[str, ...]
    file: str | None
    line: int | None
    haystack: str  # lower case


@dataclass(frozen=True)
class ItemDetail:
    """One item: where it was written, its text there, and its JSON as pushed (both masked)."""

    row: Row
    written: tuple[tuple[int, str], ...]  # (line number, text); empty when `reformatted`
    reformatted: str | None  # the masked item as YAML, when its own lines cannot be shown
    pushed: str  # masked JSON
    item: Any  # the item as rendered, NOT masked: for comparisons only, never for display


@dataclass(frozen=True)
class Page:
    rows: tuple[Row, ...]
    total: int  # rows that match
    number: int  # 1-based
    pages: int
    start: int  # the index of its first row among those that match


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value if v is not None)
    return "" if value is None or isinstance(value, dict) else str(value)


def _nodes(nodes: Any) -> str:
    if isinstance(nodes, dict):
        return " ".join(str(k) for k in nodes)
    if isinstance(nodes, list):
        return " ".join(f"{n.get('host')}:{n.get('port')}" for n in nodes if isinstance(n, dict))
    return ""


def describe(kind: str, item: Mapping[str, Any]) -> tuple[str, str]:
    """(title, match) of an item, as the list shows it."""
    title = _text(item.get("name") or item.get("username") or item.get("desc"))
    if kind in ("routes", "stream_routes", "services"):
        parts = [_text(item.get("methods")), _text(item.get("uri")), _text(item.get("uris")),
                 _text(item.get("host")), _text(item.get("hosts")), _text(item.get("server_port")),
                 _text(item.get("remote_addr")), _text(item.get("sni"))]
    elif kind == "upstreams":
        parts = [_text(item.get("type")), _nodes(item.get("nodes")), _text(item.get("service_name"))]
    elif kind == "ssls":
        parts = [_text(item.get("snis")), _text(item.get("sni"))]
    elif kind == "secrets":
        parts = [_text(item.get("uri")), _text(item.get("prefix"))]
    else:
        parts = []
    return title, " ".join(p for p in parts if p)


class Catalog:
    """Every item of one rendered commit. A page of the plain list builds only its own rows; the first
    search builds every row's text once (at 10,000 items, a few hundred ms), later ones scan strings."""

    def __init__(self, sha: str, rendered: Rendered, files: Mapping[str, bytes]) -> None:
        self.sha = sha
        self.rendered = rendered
        self.files = files
        self._entries: list[tuple[str, int, str]] = []  # (kind, index in the payload, id), in KINDS order
        self._at: dict[tuple[str, str], int] = {}  # (kind, id) → position in _entries
        self._rows: dict[int, Row] = {}
        self._haystacks: list[str] | None = None
        self._lock = threading.Lock()
        self._starts: dict[str, list[int]] | None = None  # each file's item start lines
        self._lines = Recent[str, LineStarts](FILES_KEPT)
        self._tables = Recent[str, tuple[Places, Places]](TABLES_KEPT)  # `positions` and `value_spans`
        for kind in KINDS:
            for index, item in enumerate(rendered.payload.get(kind) or ()):
                ident = item_id(kind, item)
                if ident is not None:
                    self._at.setdefault((kind, ident), len(self._entries))
                    self._entries.append((kind, index, ident))
        self.counts = {kind: 0 for kind in KINDS}
        for kind, _, _ in self._entries:
            self.counts[kind] += 1

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def prepared(self) -> bool:
        return self._haystacks is not None

    def _build(self, positions: Sequence[int]) -> list[Row]:
        """The rows at `positions` (built once each; titles and matches masked in one pass)."""
        missing = [p for p in positions if p not in self._rows]
        if missing:
            payload = self.rendered.payload
            # described from the masked items, by kind: the rules of `secret_fields` name fields of a
            # kind (`routes.desc`), so a title or a match (and the search text) never holds such a value
            by_kind: dict[str, list[Any]] = {}
            for kind, index, _ in (self._entries[p] for p in missing):
                by_kind.setdefault(kind, []).append(payload[kind][index])
            masked = mask_secrets(by_kind, self.rendered.secret_values, self.rendered.secret_rules)
            taken = {kind: iter(items) for kind, items in masked.items()}
            described = [describe(k, next(taken[k])) for k, _, _ in (self._entries[p] for p in missing)]
            for position, (title, match) in zip(missing, described, strict=True):
                kind, index, ident = self._entries[position]
                item = payload[kind][index]
                plugins = tuple(sorted(item["plugins"])) if isinstance(item.get("plugins"), dict) else ()
                location = self.rendered.source_map.location(kind, index)
                file, line = (location.file, location.line) if location is not None else (None, None)
                text = " ".join((kind, ident, title, match, *plugins, file or "")).lower()
                self._rows[position] = Row(kind, ident, index, title, match, plugins, file, line, text)
        return [self._rows[p] for p in positions]

    def search(self, query: str = "", kind: str | None = None) -> Rows:
        """Rows of `kind` (all kinds when None) holding every word of `query` (case-insensitive)."""
        words = query.lower().split()
        if not words:
            found = [p for p, entry in enumerate(self._entries) if kind is None or entry[0] == kind]
            return Rows(self, found)
        haystacks = self.prepare()
        return Rows(self, [p for p, entry in enumerate(self._entries)
                           if (kind is None or entry[0] == kind) and all(w in haystacks[p] for w in words)])

    def prepare(self) -> list[str]:
        """Every row built, and the text each search scans (once)."""
        with self._lock:
            if self._haystacks is None:
                self._haystacks = [row.haystack for row in self._build(range(len(self._entries)))]
            return self._haystacks

    def rows_at(self, positions: Sequence[int]) -> list[Row]:
        # No lock: two threads building the same row build equal rows, and a dict's item assignment is
        # atomic; so a page never waits for `prepare` building every row.
        return self._build(positions)

    def row(self, kind: str, ident: str) -> Row | None:
        position = self._at.get((kind, ident))
        return None if position is None else self.rows_at([position])[0]

    def detail(self, kind: str, ident: str) -> ItemDetail | None:
        row = self.row(kind, ident)
        if row is None:
            return None
        item = self.rendered.payload[kind][row.index]
        secrets, rules = self.rendered.secret_values, self.rendered.secret_rules
        masked = mask_secrets({kind: [item]}, secrets, rules)[kind][0]
        pushed = json.dumps(masked, indent=2, ensure_ascii=False, default=str)
        source = self.rendered.source_map.source(kind, row.index)
        data = self.files.get(source.file) if source is not None else None
        lines = None
        generated = source is not None and (kind, source) in self.rendered.source_map.generated
        if source is not None and data is not None and not generated:  # a spec's item has no lines of its own
            lines = self._written(kind, source, data, secrets, rules)
        if lines is None:
            return ItemDetail(row, (), dump_yaml(masked), pushed, item)
        return ItemDetail(row, tuple(lines), None, pushed, item)

    def _written(self, kind: str, source: ItemSource, data: bytes, secrets: Iterable[str],
                 rules: SecretRules) -> list[tuple[int, str]] | None:
        """`written_lines` of the item, parsed from an excerpt of its file (`gitsync.web.excerpt`);
        from the whole file only when the excerpt cannot stand for it (its positions then kept for
        the next page of that file)."""
        if self._starts is None:
            self._starts = item_starts(self.rendered.source_map.lists())
        lines = self._lines.get(source.file, lambda: LineStarts(data))
        if lines.plain:
            following = next_start(self._starts.get(source.file, ()), source.pos[0])
            if shares_a_line(lines, source, following):
                return None
            excerpt = cut(lines, kind, source, following)
            parsed = parse(excerpt.data)
            if not parsed.issues and _first_item_is(parsed, kind, source.id):
                found = written_lines(excerpt.data, kind, excerpt.source, secrets, rules=rules)
                return None if found is None else excerpt.in_file(found)
        table, spans = self._tables.get(source.file, lambda: (positions(data), value_spans(data)))
        return written_lines(data, kind, source, secrets, table, rules, spans)


def _first_item_is(parsed: ParsedFile, kind: str, ident: str | None) -> bool:
    """The excerpt's first document lists, first under `kind`, the item of id `ident`."""
    content = parsed.documents[0].shared if parsed.documents else None
    listed = content.get(kind) if isinstance(content, dict) else None
    return isinstance(listed, list) and bool(listed) and item_id(kind, listed[0]) == ident


class Rows(Sequence[Row]):
    """Rows found by a search, built only when read (a page reads a hundred of them)."""

    def __init__(self, catalog: Catalog, positions: list[int]) -> None:
        self._catalog = catalog
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, at: int) -> Row: ...

    @overload
    def __getitem__(self, at: slice) -> list[Row]: ...

    def __getitem__(self, at: int | slice) -> Row | list[Row]:
        if isinstance(at, slice):
            return self._catalog.rows_at(self._positions[at])
        return self._catalog.rows_at([self._positions[at]])[0]


def paginate(rows: Sequence[Row], number: int, per_page: int = PER_PAGE) -> Page:
    pages = max(1, -(-len(rows) // per_page))
    number = min(max(1, number), pages)
    start = (number - 1) * per_page
    return Page(tuple(rows[start:start + per_page]), len(rows), number, pages, start)


# ---------------------------------------------------------------------------------------------------------
# An item's own lines, masked


def _after(table: Mapping[FieldPath, tuple[int, int]], path: FieldPath) -> int | None:
    """The line of the first node after `path` and all it holds, in document order (None: the end)."""
    seen = False
    for key, (line, _) in table.items():
        if seen and key[:len(path)] != path:
            return line
        if key == path:
            seen = True
    return None


def _lines_at(text: str) -> list[int]:
    """The offset of each line's first character in `text` (lines as `str.splitlines` cuts them)."""
    starts, pos = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    return starts or [0]


def _place(starts: list[int], offset: int) -> tuple[int, int]:
    """(0-based line, column) of a character offset."""
    line = bisect.bisect_right(starts, offset) - 1
    return line, offset - starts[line]


def _mask_written(text: str, lines: list[str], edits: list[tuple[int, int, str]]) -> dict[int, str | None]:
    """Each edit (offsets of a value as written, its masked text) applied to `lines`: its first line
    takes the masked text, the other lines it spanned are dropped (None). Edits must not overlap."""
    starts = _lines_at(text)
    changed: dict[int, str | None] = {}
    for start, stop, shown in sorted(edits, reverse=True):
        while stop > start and text[stop - 1] in " \t\r\n":
            stop -= 1  # a block scalar's end is the next line's start
        (first, col), (last, end_col) = _place(starts, start), _place(starts, stop)
        head = changed.get(first, lines[first])
        tail = changed.get(last, lines[last]) if last != first else head
        assert head is not None and tail is not None
        changed[first] = head[:col] + shown + tail[end_col:]
        changed.update((n, None) for n in range(first + 1, last + 1))
    return changed


def written_lines(data: bytes, kind: str, source: ItemSource, secret_values: Iterable[str],
                  table: Mapping[FieldPath, tuple[int, int]] | None = None, rules: SecretRules = NO_RULES,
                  spans: Mapping[FieldPath, tuple[int, int]] | None = None) -> list[tuple[int, str]] | None:
    """The item's lines in its file, numbered, each secret the classifier finds in the item as parsed
    masked where the parse says it is written (`value_spans`: any style), and known secret values
    masked; None when its lines are shared with other items or its place cannot be found again.
    `table`, `spans`: the file's `positions` and `value_spans`, when already known."""
    table = positions(data) if table is None else table
    item_path: FieldPath = (source.doc, kind, source.index)
    if item_path not in table:
        return None
    text = _decoded(data)
    lines = text.splitlines()
    first, col = table[item_path]
    end = _after(table, item_path) or len(lines) + 1
    if end <= first or lines[first - 1][:col - 1].strip() not in ("", "-"):
        return None  # another item shares its first or its next line
    try:
        original = parse(data).documents[source.doc].data[kind][source.index]
    except (IndexError, KeyError, TypeError):
        return None
    spans = value_spans(data) if spans is None else spans
    edits, pieces = [], []
    for finding in classify(kind, original, rules):
        at = spans.get((*item_path, *finding.path))
        if at is None:
            return None
        value = value_at(original, finding.path)
        pieces += [p.strip() for p in finding.pieces(value) if len(p.strip()) >= MIN_SECRET_LENGTH]
        edits.append((*at, json.dumps(finding.masked(value, MASK), ensure_ascii=False)))
    changed = _mask_written(text, lines, edits)
    out = [(number, changed.get(number - 1, lines[number - 1])) for number in range(first, end)]
    kept = [(number, line) for number, line in out if line is not None]
    while kept and _NOT_ITEM.match(kept[-1][1]):
        kept.pop()
    values = tuple(secret_values)
    shown = [(number, mask_known(line, values)) for number, line in kept]
    if any(piece in line for piece in pieces for _, line in shown):
        return None  # a place the parser gave did not hold the value as read: show the masked item instead
    return shown


def _decoded(data: bytes) -> str:
    """A file's text as the YAML parser counted its characters (a byte-order mark is not one)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", "replace")
    return data.decode("utf-8-sig", "replace")


__all__ = ["PER_PAGE", "Catalog", "ItemDetail", "Page", "Row", "Rows", "describe",
           "paginate", "written_lines"]
