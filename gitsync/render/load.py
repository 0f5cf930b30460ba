"""Loading: config file bytes → documents, with the positions the source map needs.

YAML is read from the event stream of ruamel.yaml's C parser, not through its
composer and constructor: the C composer recurses in C and crashes the process
on deeply nested input (``[`` × 30,000 is a segfault), and the event stream lets
one pass also refuse anchors and aliases (alias bombs), collect duplicate keys
instead of stopping at the first, and record the line of every item. It is as
fast as ruamel's own C safe loader.

Parsed files are cached by git blob SHA (`ParseCache`), so a commit that changes
one file parses one file. A field's exact line is found later, lazily, by
re-reading that one file (`locate`).
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.cyaml import CParser
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)

from gitsync.render.filememo import FileMemo
from gitsync.render.scalars import MERGE_MESSAGE, Reading, read, read_tagged, shown

#: Deeper nesting than any APISIX config needs; also keeps every later recursive walk safe.
MAX_DEPTH = 64
#: The YAML version gitsync reads. A ``%YAML 1.1`` directive asks for other rules (``yes``/``on`` as
#: booleans, ``0777`` as octal): refused, rather than read with rules its author did not mean.
YAML_VERSION = (1, 2)

Pos = tuple[int, int]  # 1-based line and column

_TAG = "tag:yaml.org,2002:"
_STR, _TIMESTAMP, _MERGE, _MAP, _SEQ = (_TAG + n for n in ("str", "timestamp", "merge", "map", "seq"))
#: The core schema's explicit tags (``!!int 12``): their text must read as that type.
_CORE_TAGS = {_TAG + name: name for name in ("int", "float", "bool", "null")}


class PlainTemplate(str):
    """An unquoted scalar that is exactly one ``${{ … }}`` expression: typed after substitution."""

    __slots__ = ()


@dataclass(frozen=True)
class LoadIssue:
    """A problem found while reading one file: its 1-based position and the message."""

    line: int
    col: int
    message: str


class Document:
    """One YAML document of a file, with the positions of its top-level keys and their list items.

    The content is kept as `marshal` bytes: every read of `data` is a fresh copy that
    later stages may change freely, and a cache of 10,000 parsed files is 10,000 bytes
    objects instead of millions of dicts for the garbage collector to walk on every
    full collection. (Documents holding ``${{`` keep `PlainTemplate` strings, which
    marshal cannot store: those are copied by the substitution stage instead.)
    """

    __slots__ = ("_blob", "_shared", "_value", "index", "item_pos", "key_pos", "pos")

    def __init__(self, index: int, data: Any, pos: Pos, key_pos: dict[str, Pos],
                 item_pos: dict[str, tuple[Pos, ...]], keep_objects: bool = False) -> None:
        self.index = index  # 0-based position in the file's stream of documents
        self.pos = pos
        self.key_pos = key_pos
        self.item_pos = item_pos
        self._blob = None if keep_objects else marshal.dumps(data)
        self._value = data if keep_objects else None
        self._shared: Any = None

    @classmethod
    def stored(cls, index: int, blob: bytes, pos: Pos, key_pos: dict[str, Pos],
               item_pos: dict[str, tuple[Pos, ...]]) -> Document:
        """A document read back from the parse store, its content as `blob` (what `blob` gave). The
        blob is read here: one that does not read (ValueError, EOFError, TypeError, MemoryError)
        refuses the entry, not a later render."""
        if type(blob) is not bytes or not blob:
            raise TypeError("not a document's content")
        doc = cls.__new__(cls)
        doc.index, doc.pos, doc.key_pos, doc.item_pos = index, pos, key_pos, item_pos
        doc._blob, doc._value, doc._shared = blob, None, marshal.loads(blob)
        return doc

    @property
    def blob(self) -> bytes | None:
        """The content as `marshal` bytes (None: a document holding expressions, kept as objects)."""
        return self._blob

    @property
    def data(self) -> Any:
        """The document's content: a fresh copy, except for documents holding expressions."""
        if self._blob is None:
            return self._value
        return marshal.loads(self._blob)

    @property
    def shared(self) -> Any:
        """The document's content, one object for every render while the file is cached: no stage
        after render changes an item (each makes its own copy: the schema check, reconcile's sent
        items, masking), so unchanged files cost nothing to render again. Only `data` may be
        changed by its caller."""
        if self._blob is None:
            return self._value
        if self._shared is None:
            self._shared = marshal.loads(self._blob)
        return self._shared

    def __repr__(self) -> str:
        return f"Document(index={self.index}, pos={self.pos}, data={self.data!r})"


@dataclass(frozen=True)
class ParsedFile:
    """Everything rendering needs from one file's bytes; independent of the file's path."""

    documents: tuple[Document, ...]
    issues: tuple[LoadIssue, ...]
    has_templates: bool  # contains ``${{``: substitution must look at it
    has_sops: bool  # has a top-level ``sops`` mapping: must be decrypted
    has_secret_references: bool  # contains ``$secret://``
    size: int = 0  # bytes
    #: Plain scalars YAML 1.1 tools read otherwise (`gitsync.render.scalars`): what to write instead.
    warnings: tuple[LoadIssue, ...] = ()
    #: Results of later pure checks on items exactly as parsed, kept as long as the parse is cached.
    memo: FileMemo = field(default_factory=FileMemo, compare=False, repr=False)


def blob_sha(data: bytes) -> str:
    """The git blob SHA-1 of `data`: the same key a git tree gives, so both sources share one cache."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _Loader(CParser):
    """ruamel's C parser, read event by event: plain scalars are typed by `gitsync.render.scalars`, not
    by ruamel's resolver (which would ask the parser its version for every scalar, and whose YAML 1.2
    table reads ``1_000`` and ``0b101`` as numbers, as YAML 1.1 does)."""

    def close(self) -> None:
        """Release the C parser."""
        self.dispose()


_TEXT = tuple.__new__  # a quoted scalar's Reading, made without NamedTuple's __new__ (a Python function)


class _Stop(Exception):
    """Abandon the rest of a file (too deep)."""


def _pos(mark: Any) -> Pos:
    return (mark.line + 1, mark.column + 1)


def _scalar(event: ScalarEvent, templates: bool) -> Reading:
    """The Python value of a scalar, an error for values JSON cannot carry, and a note for a plain scalar
    YAML 1.1 tools read otherwise (`gitsync.render.scalars`)."""
    value: str = event.value
    tag = event.tag
    if tag is None or tag == "!":
        if event.style or tag == "!":
            return _TEXT(Reading, (value, None, None))
        reading = read(value)
        if templates and reading.value is value and "${{" in value and value.startswith("${{") \
                and value.endswith("}}") and value.count("${{") == 1:
            return Reading(PlainTemplate(value))
        return reading
    if tag in (_STR, _TIMESTAMP):
        return Reading(value)  # dates stay text: JSON has no date type
    core = _CORE_TAGS.get(tag)
    if core is not None:
        return read_tagged(core, value)
    if tag == _MERGE:
        return Reading(value, MERGE_MESSAGE)
    return Reading(value, f"the tag {tag!r} is not supported (only plain strings, numbers, booleans and "
                          "null)")


def _key_text(key: Any) -> str:
    """A scalar mapping key as JSON would write it (``200`` → ``"200"``, ``true`` → ``"true"``)."""
    if isinstance(key, str):
        return str(key)
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return repr(key) if isinstance(key, float) else str(key)


def parse(data: bytes) -> ParsedFile:
    """Parse one file's bytes: every document, every problem, never an exception."""
    templates = b"${{" in data
    issues: list[LoadIssue] = []
    warnings: list[LoadIssue] = []
    documents: list[Document] = []
    loader = _Loader(data)
    get_event = loader.get_event
    # Each frame: [container, pending_key, start_pos]; pending_key is _NO_KEY while a key is expected.
    stack: list[list[Any]] = []
    doc_index = -1
    key_pos: dict[str, Pos] = {}
    item_pos: dict[str, list[Pos]] = {}
    root: list[tuple[Any, Pos]] = []
    sops = False
    doc_pos: Pos = (1, 1)

    def add(value: Any, pos: Pos) -> None:
        if not stack:
            root.append((value, pos))
            return
        frame = stack[-1]
        container = frame[0]
        if type(container) is list:
            container.append(value)
            return
        key = frame[1]
        if key is _NO_KEY:
            if isinstance(value, dict | list):
                issues.append(LoadIssue(*pos, "a mapping key must be a plain value, not a collection"))
                value = f"<complex key at line {pos[0]}>"
            key = _key_text(value)
            if key in container:
                issues.append(LoadIssue(*pos, f"duplicate key {key!r} in this mapping"))
            frame[1] = key
            if len(stack) == 1:
                key_pos.setdefault(key, pos)
        else:
            container[key] = value
            frame[1] = _NO_KEY

    def note_item(pos: Pos) -> None:
        """Record the position of a node that starts a list item directly under a top-level key."""
        if len(stack) == 2 and type(stack[1][0]) is list and type(stack[0][0]) is dict:
            item_pos.setdefault(stack[0][1], []).append(pos)

    try:
        while True:
            event = get_event()
            if event is None:
                break
            kind = type(event)
            if kind is ScalarEvent:
                # Most scalars lie deeper than any position kept (a document's, its top-level keys', their
                # list items'): theirs is worked out only for a problem or a note about them.
                depth = len(stack)
                pos = _pos(event.start_mark) if depth < 3 else None
                if event.anchor:
                    issues.append(LoadIssue(*(pos or _pos(event.start_mark)), _ANCHOR_MESSAGE))
                if event.style and event.tag is None:  # quoted or block text: the text as written
                    value, error, note = event.value, None, None
                else:
                    try:
                        value, error, note = _scalar(event, templates)
                    except (ValueError, OverflowError) as exc:  # the schema took it, Python cannot build it
                        value, error, note = None, f"cannot read the value {shown(event.value)}: {exc}", None
                    if error:
                        issues.append(LoadIssue(*(pos or _pos(event.start_mark)), error))
                    elif note:
                        warnings.append(LoadIssue(*(pos or _pos(event.start_mark)), note))
                if depth < 3:
                    if depth == 2:
                        note_item(pos)
                    add(value, pos)
                    continue
                frame = stack[-1]  # `add`, for a scalar too deep for positions
                container = frame[0]
                if type(container) is list:
                    container.append(value)
                elif frame[1] is _NO_KEY:
                    key = value if type(value) is str else _key_text(value)
                    if key in container:
                        issues.append(LoadIssue(*_pos(event.start_mark),
                                                f"duplicate key {key!r} in this mapping"))
                    frame[1] = key
                else:
                    container[frame[1]] = value
                    frame[1] = _NO_KEY
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                pos = _pos(event.start_mark)
                if event.anchor:
                    issues.append(LoadIssue(*pos, _ANCHOR_MESSAGE))
                expected = _MAP if kind is MappingStartEvent else _SEQ
                if event.tag not in (None, "!", expected):
                    issues.append(LoadIssue(*pos, f"the tag {event.tag!r} is not supported"))
                if len(stack) >= MAX_DEPTH:
                    issues.append(LoadIssue(*pos, f"nested more than {MAX_DEPTH} levels deep"))
                    raise _Stop
                if len(stack) == 2:
                    note_item(pos)
                stack.append([{} if kind is MappingStartEvent else [], _NO_KEY, pos])
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                frame = stack.pop()
                add(frame[0], frame[2])
            elif kind is AliasEvent:
                pos = _pos(event.start_mark)
                issues.append(LoadIssue(*pos, _ANCHOR_MESSAGE))
                if len(stack) == 2:
                    note_item(pos)
                add(None, pos)
            elif kind is DocumentStartEvent:
                doc_index += 1
                key_pos, item_pos, root = {}, {}, []
                doc_pos = _pos(event.end_mark)
                version = getattr(event, "version", None)
                if version is not None and tuple(version) != YAML_VERSION:
                    issues.append(LoadIssue(*_pos(event.start_mark), _version_message(tuple(version))))
            elif kind is DocumentEndEvent:
                # No reference left to the content but its own: marshal writes a shared object as a
                # back-reference, and a document's bytes must not depend on this loop's last names.
                frame = container = key = None
                value, pos = root[0] if root else (None, doc_pos)
                sops = sops or (isinstance(value, dict) and isinstance(value.get("sops"), dict))
                items_at = {name: tuple(at) for name, at in item_pos.items()}
                documents.append(Document(doc_index, value, pos, key_pos, items_at, keep_objects=templates))
    except YAMLError as exc:
        issues.append(_yaml_issue(exc, data))
    except _Stop:
        pass
    finally:
        loader.close()
    return ParsedFile(tuple(documents), tuple(issues), templates, sops, b"$secret://" in data, len(data),
                      tuple(warnings))


_NO_KEY = object()


def _version_message(version: tuple[int, ...]) -> str:
    written = ".".join(map(str, version))
    return (f"%YAML {written}: gitsync reads YAML 1.2 only (yes/no/on/off are text, 0777 is decimal); "
            "remove the directive, and quote or rewrite the values YAML 1.1 would read otherwise")
_ANCHOR_MESSAGE = ("YAML anchors and aliases (&name, *name) are not accepted: they can hide a huge "
                   "document; write the value out")


def _yaml_issue(exc: YAMLError, data: bytes) -> LoadIssue:
    """A parser error at its mark, without ruamel's ``in "<byte string>"`` lines."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if problem:
        message = f"YAML syntax error: {problem}" + (f" ({context})" if context else "")
    else:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"cannot read the file: {text}"
    if mark is None:
        offset = getattr(exc, "position", None)  # a ReaderError (bad encoding) gives a byte offset
        if isinstance(offset, int) and 0 <= offset <= len(data):
            line = data.count(b"\n", 0, offset)
            return LoadIssue(line + 1, offset - (data.rfind(b"\n", 0, offset) + 1) + 1, message)
        return LoadIssue(1, 1, message)
    return LoadIssue(mark.line + 1, mark.column + 1, message)


def _nodes(data: bytes, depth: int | None = None) -> Iterator[tuple[tuple[str | int, ...], Any, str]]:
    """Every node event of `data` with its path ``(document, *path)`` and its role: ``"key"`` (a
    mapping key: the path of its entry), ``"value"`` (a mapping's value), ``"item"`` (a list item) or
    ``"root"`` (a document's); with `depth`, only those at most that many levels below the root."""
    loader = _Loader(data)
    # Each frame: [is_mapping, current key or index, expecting_key, is_complex_key]
    stack: list[list[Any]] = []
    doc = -1
    try:
        while True:
            event = loader.get_event()
            if event is None:
                break
            kind = type(event)
            if kind is DocumentStartEvent:
                doc += 1
                continue
            if doc < 0 or kind is DocumentEndEvent:
                continue
            if kind is MappingEndEvent or kind is SequenceEndEvent:
                if not stack.pop()[3]:
                    _after_value(stack)
                continue
            opens = kind is MappingStartEvent or kind is SequenceStartEvent
            top = stack[-1] if stack else None
            if top is not None and top[0] and top[2]:  # a mapping key
                top[1] = _key_text(event.value) if kind is ScalarEvent else None
                top[2] = False
                if depth is None or len(stack) <= depth:
                    yield (doc, *(f[1] for f in stack)), event, "key"
                if opens:
                    stack.append([kind is MappingStartEvent, 0, True, True])
                continue
            role = "root" if top is None else "value" if top[0] else "item"
            if depth is None or len(stack) <= depth:
                yield (doc, *(f[1] for f in stack)), event, role
            if opens:
                stack.append([kind is MappingStartEvent, 0, True, False])
            else:
                _after_value(stack)
    except YAMLError:
        pass
    finally:
        loader.close()


def positions(data: bytes, depth: int | None = None) -> dict[tuple[str | int, ...], Pos]:
    """Every node's position in `data` (with `depth`: those at most that many levels below their
    document's root), keyed by ``(document, *path)``: for error messages only.

    A mapping entry maps to its key's position, a list item to the item's start. Built
    lazily for one file at a time when an error needs a field's line.
    """
    found: dict[tuple[str | int, ...], Pos] = {}
    for path, event, role in _nodes(data, depth):
        if role != "value":
            found.setdefault(path, _pos(event.start_mark))
    return found


def value_spans(data: bytes) -> dict[tuple[str | int, ...], tuple[int, int]]:
    """Where each scalar value (not a key) is written in `data`, keyed like `positions`: the offsets of
    its first character and of the one after it in the text as the parser counts it (decoded, a
    byte-order mark not counted), quotes and block indicators included. The web view masks a secret
    as written by these, whatever the style (flow, JSON, quoted keys, block and multi-line scalars)."""
    spans: dict[tuple[str | int, ...], tuple[int, int]] = {}
    for path, event, role in _nodes(data):
        if role != "key" and type(event) is ScalarEvent:
            spans.setdefault(path, (event.start_mark.index, event.end_mark.index))
    return spans


def _after_value(stack: list[list[Any]]) -> None:
    """A node inside the top frame ended: a mapping expects its next key, a list counts the item."""
    if not stack:
        return
    frame = stack[-1]
    if frame[0]:
        frame[2] = True
    else:
        frame[1] += 1
