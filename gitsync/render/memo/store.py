"""The parse cache on disk, in the state dir: a new process (`gitsync sync --once`, a restarted
daemon) parses only the files that changed since the last run, not the whole repo.

One file per parsed config file, named by its git blob SHA, under a directory named by gitsync's
version: ``<state_dir>/parse-cache/<format>-<version>/<sha>.parsed``, 0600 in a 0700 directory. An entry holds
what `ParsedFile` holds (documents with their positions, warnings) and the facts validation keeps about its
items (`FileFacts`: per document list as a whole, and per item for items outside one: their own
problems, the ids they name, sizes, canonical content and where its modifiedIndex goes).

Only plain files are stored: a file with ``${{ }}`` expressions or SOPS encryption is never written
here, so no substituted or decrypted value reaches the disk; what is stored is exactly what the
repo's plain files say (the mirror beside it holds the same bytes).

An entry is plain values in `marshal`'s format (version 4), behind a SHA-256 of them: marshal, the
format a cached `Document` already keeps its content in, reads back about twice as fast as JSON,
and a restarted process reads every entry. It builds values, never runs code (unlike pickle). It is
not meant to read bytes crafted against it; the state dir is trusted as the settings file is (it
also holds the mirror and what was pushed), and the checksum catches what a disk or a killed writer
damaged. An entry that does not read, whose checksum, format, version or SHA is not its own, or whose
shape is wrong is ignored (and removed), and the file is parsed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import operator
import os
import re
from collections.abc import Iterable
from itertools import chain
from pathlib import Path
from typing import Any

from gitsync import __version__
from gitsync.log import logger
from gitsync.render.facts import FACTS, FileFacts, SegmentFacts
from gitsync.render.load import Document, LoadIssue, ParsedFile
from gitsync.render.references import Reference

FORMAT = 6  # 2: facts per document list (segments), items outside one; 3, 4: with content splits; 5: marshal;
#            6: the YAML 1.2 core reading of plain scalars (1_000 is text), with its warnings
SUFFIX = ".parsed"
MARSHAL_VERSION = 4  # read by every Python gitsync runs on
_SHA = re.compile(r"^[0-9a-f]{40}$")
_VERSION_DIR = re.compile(r"[^A-Za-z0-9._+-]")


class ParseStore:
    """Parsed plain files by blob SHA, on disk. Every method is best effort: an I/O error is logged
    once and the store behaves as empty (the cache is an optimisation, never a requirement)."""

    def __init__(self, root: Path, version: str = __version__) -> None:
        self.root = root
        self.dir = root / _VERSION_DIR.sub("_", f"{FORMAT}-{version}")
        self.version = version  # the gitsync version an entry must name
        self._broken = False
        self._names: set[str] | None = None  # the entries' file names, listed once (one stat per file less)
        self._swept = False  # the directories of other gitsync versions removed (once per store)

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}{SUFFIX}"

    def has(self, key: str) -> bool:
        if self._broken:
            return False
        if self._names is None:
            try:
                self._names = set(os.listdir(self.dir)) if self.dir.is_dir() else set()
            except OSError as exc:
                self._give_up(exc)
                return False
        return f"{key}{SUFFIX}" in self._names and bool(_SHA.match(key))

    def load(self, key: str) -> ParsedFile | None:
        """The stored parse of blob `key`, or None (absent, or not to be trusted: then removed)."""
        if not self.has(key):
            return None
        path = self._path(key)
        try:
            raw = _read(path)
        except OSError:
            if self._names is not None:
                self._names.discard(path.name)
            return None
        parsed = decode(raw, key, self.version)
        if parsed is None:
            logger.debug("parse cache: ignoring the entry {} (corrupt or foreign)", path.name)
            self._forget(path)
        return parsed

    def _forget(self, path: Path) -> None:
        if self._names is not None:
            self._names.discard(path.name)
        with contextlib.suppress(OSError):
            path.unlink()

    def save(self, key: str, parsed: ParsedFile) -> None:
        """Store `parsed` when it is a plain file that parsed cleanly (else nothing)."""
        if self._broken or not _SHA.match(key) or not storable(parsed):
            return
        try:
            self.write(key, encode(key, parsed, self.version))
        except OSError as exc:
            self._give_up(exc)

    @property
    def usable(self) -> bool:
        """False once an I/O error made the store give up."""
        return not self._broken

    def write(self, key: str, entry: bytes) -> None:
        """Write `entry` (what `encode` made of blob `key`'s plain file); OSError on failure, unlogged:
        a parse worker (`gitsync.render.memo.workers`) reports it to the render instead."""
        if not _SHA.match(key):
            raise OSError(f"not a blob SHA: {key!r}")
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(self._path(key), entry)
        if self._names is not None:
            self._names.add(f"{key}{SUFFIX}")

    def relist(self) -> None:
        """Forget the entries' names: other processes (parse workers) wrote to the store. They are
        listed again when next needed."""
        self._names = None

    def retain(self, keys: Iterable[str]) -> None:
        """Remove every entry but `keys`, and (once) the directories of other gitsync versions.

        The entries are listed once per store (`_names`, kept up to date by what writes and removes
        them), not at every render: a render's retain costs what it removes."""
        if self._broken:
            return
        keep = {f"{key}{SUFFIX}" for key in keys}
        try:
            if not self._swept:
                for other in self.root.iterdir() if self.root.is_dir() else ():
                    if other != self.dir and other.is_dir():
                        _remove_tree(other)
                self._swept = True
            if self._names is None:
                self._names = set(os.listdir(self.dir)) if self.dir.is_dir() else set()
            for name in self._names - keep:
                self._forget(self.dir / name)
        except OSError as exc:
            self._give_up(exc)

    def _give_up(self, exc: OSError) -> None:
        logger.warning("parse cache in {}: {}; going on without it", self.root, exc)
        self._broken = True


def storable(parsed: ParsedFile) -> bool:
    """Plain files only: no expressions (substituted later), no SOPS (decrypted later), no problems."""
    return not parsed.has_templates and not parsed.has_sops and not parsed.issues


def _read(path: Path) -> bytes:
    """The file's bytes, by the system calls alone: a render after a restart reads a thousand entries,
    and `Path.read_bytes` (a buffered file object each) costs about twice as much."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _remove_tree(path: Path) -> None:
    for child in path.iterdir():
        with contextlib.suppress(OSError):
            child.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()


# ---------------------------------------------------------------------------------------------------------
# Entries: marshal with a checksum, decoded defensively


def encode(key: str, parsed: ParsedFile, version: str) -> bytes:
    """A parse-store entry: `parsed` (a plain file) and its facts, as marshal behind a SHA-256."""
    facts = parsed.memo.get(FACTS)
    body = {
        "format": FORMAT, "version": version, "blob": key, "size": parsed.size,
        "secret_references": parsed.has_secret_references,
        "documents": [[doc.index, doc.pos, doc.key_pos, doc.item_pos, doc.blob] for doc in parsed.documents],
        "warnings": [[w.line, w.col, w.message] for w in parsed.warnings],
        "facts": None if facts is None else _facts_rows(facts),
    }
    data = marshal.dumps(body, MARSHAL_VERSION)
    return hashlib.sha256(data).hexdigest().encode() + b"\n" + data


def decode(raw: bytes, key: str, version: str) -> ParsedFile | None:
    """The file an entry holds, or None when it is not an intact entry of `key` by this version."""
    checksum, _, data = raw.partition(b"\n")
    if hashlib.sha256(data).hexdigest().encode() != checksum:
        return None
    try:
        body = marshal.loads(data)
        if (body["format"], body["version"], body["blob"]) != (FORMAT, version, key):
            return None
        documents = tuple(
            Document.stored(_int(index), blob, _pos(pos), {str(k): _pos(v) for k, v in key_pos.items()},
                            {str(k): _positions(v) for k, v in item_pos.items()})
            for index, pos, key_pos, item_pos, blob in body["documents"])
        warnings = tuple(LoadIssue(_int(line), _int(col), _text(message))
                         for line, col, message in body["warnings"])
        parsed = ParsedFile(documents, (), False, False, body["secret_references"] is True,
                            _int(body["size"]), warnings)
        if body["facts"] is not None:
            parsed.memo.put(FACTS, _facts(body["facts"], parsed.has_secret_references))
        return parsed
    except (ValueError, TypeError, KeyError, AttributeError, EOFError, MemoryError):
        return None


def _facts_rows(facts: FileFacts) -> dict[str, list[list[Any]]]:
    """Each document list's `SegmentFacts`, and one row per item no segment covers: doc, kind, index,
    then each table's value for it (None: not computed)."""
    segments = [[doc, kind,
                 [[index, [[m, list(f)] for m, f in issues]] for index, issues in known.issues.items()],
                 {target: sorted(ids) for target, ids in known.named.items()}, known.look_closer,
                 list(known.sizes), list(known.contents), list(known.splits)]
                for (doc, kind), known in facts.segments.items()]
    tables = (facts.issues, facts.references, facts.sizes, facts.contents, facts.splits)
    keys = [key for key in dict.fromkeys(key for table in tables for key in table)
            if key[:2] not in facts.segments]
    rows = []
    for key in keys:
        issues, references = facts.issues.get(key), facts.references.get(key)
        content = facts.contents.get(key)
        rows.append([*key,
                     None if issues is None else [[m, list(f)] for m, f in issues],
                     None if references is None else [[r.target, list(r.at), r.ident, r.label]
                                                      for r in references],
                     facts.sizes.get(key),
                     content,
                     facts.splits.get(key) if content is not None else None])
    return {"segments": segments, "items": rows}


def _facts(stored: dict[str, list[list[Any]]], secret_references: bool) -> FileFacts:
    facts = FileFacts({}, secret_references)
    for doc, kind, issues, named, look_closer, sizes, contents, splits in stored["segments"]:
        if type(look_closer) is not bool or not isinstance(named, dict) or not isinstance(contents, list):
            raise TypeError("not a segment")
        if not isinstance(sizes, list) or not isinstance(splits, list) \
                or not len(sizes) == len(splits) == len(contents):
            raise TypeError("not a segment")
        encoded = contents if set(map(type, contents)) <= _BYTES else [_bytes(c) for c in contents]
        facts.segments[_int(doc), str(kind)] = SegmentFacts(
            {_int(index): tuple((str(m), _path(f)) for m, f in rows) for index, rows in issues},
            {str(target): frozenset(map(str, ids)) for target, ids in named.items()}, look_closer,
            _ints(sizes), encoded, _splits(splits, encoded))
    for doc, kind, index, issues, references, size, content, split in stored["items"]:
        key = (_int(doc), str(kind), _int(index))
        if issues is not None:
            facts.issues[key] = tuple((str(m), _path(f)) for m, f in issues)
        if references is not None:
            facts.references[key] = tuple(Reference(str(t), _path(at), str(i), str(label))
                                          for t, at, i, label in references)
        if size is not None:
            facts.sizes[key] = _int(size)
        if content is not None:
            facts.contents[key] = _bytes(content)
            if split is not None:
                facts.splits[key] = _split(split, facts.contents[key])
    return facts


# The checks of a segment's lists and of a document list's positions run in C (`set(map(type, ...))`)
# on what marshal gave back, which is kept as it is; only a list that fails them is looked at value by
# value (for the error it raises). Checked one value at a time, they were a third of reading back the
# entries of a 1,004-file commit.
_INT, _BYTES, _TUPLE, _PAIR = {int}, {bytes}, {tuple}, {2}


def _ints(values: list[Any]) -> list[int]:
    return values if set(map(type, values)) <= _INT else [_int(value) for value in values]


def _splits(values: list[Any], contents: list[bytes]) -> list[int]:
    """Each item's content split (`content_split`): -1, or a place inside its content past the ``{``."""
    if set(map(type, values)) <= _INT and 0 not in values and (not values or min(values) >= -1) \
            and all(map(operator.lt, values, map(len, contents))):
        return values
    return [_split(value, content) for value, content in zip(values, contents, strict=True)]


def _positions(value: Any) -> tuple[tuple[int, int], ...]:
    """A document list's item positions, (line, column) pairs."""
    if type(value) is tuple and set(map(type, value)) <= _TUPLE and set(map(len, value)) <= _PAIR \
            and set(map(type, chain.from_iterable(value))) <= _INT:
        return value
    return tuple(_pos(p) for p in value)


def _split(value: Any, content: bytes) -> int:
    split = _int(value)
    if not -1 <= split < len(content) or split == 0:
        raise ValueError(f"not a split: {split}")
    return split


def _bytes(value: Any) -> bytes:
    if type(value) is not bytes:
        raise TypeError(f"not bytes: {type(value).__name__}")
    return value


def _text(value: Any) -> str:
    if type(value) is not str:
        raise TypeError(f"not text: {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"not an integer: {value!r}")
    return value


def _pos(value: Any) -> tuple[int, int]:
    line, col = value
    return _int(line), _int(col)


def _path(value: Any) -> tuple[str | int, ...]:
    if not isinstance(value, list) or not all(type(p) in (str, int) for p in value):
        raise TypeError(f"not a field path: {value!r}")
    return tuple(value)
