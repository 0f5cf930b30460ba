"""An item's own lines, cut from its file without parsing the whole file.

The sync's parse recorded where every item starts (the render's source map). An item page cuts its
item's lines from its start to the next item's, wraps them in a document holding just that list
item (``routes:`` above a block item, ``routes: [`` … ``]`` around a flow one) and has
`catalog.written_lines` parse that alone: with 10,000 routes in one 2 MB file, a page parses a dozen
lines, not the file. The cut ends at the next item's start at the latest; the excerpt's own parse
finds where the item really ends (a key of the document, or a comment, may come first), as the whole
file's would. An excerpt that does not parse as one item of its kind (a layout the wrapper cannot
reproduce) is no answer: the caller reads the whole file instead.

Lines are the file's ``\\n``-separated lines, numbered as the parser numbers them (a file of ``\\n``
or ``\\r\\n`` line ends).
"""

from __future__ import annotations

import bisect
import codecs
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Generic, TypeVar

from gitsync.render.sourcemap import ItemSource

K = TypeVar("K")
V = TypeVar("V")

#: Where the item's first line lands in an excerpt: after the one line that names its kind.
FIRST_LINE = 2


@dataclass(frozen=True)
class Excerpt:
    data: bytes  # a YAML document of one list item of `kind`
    source: ItemSource  # the item's place in `data`
    offset: int  # an excerpt line number + offset = the file's line number
    last: int  # the excerpt's last line from the file (after it: the wrapper's closing)

    def in_file(self, lines: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
        """Lines numbered in the excerpt, numbered in the file (the wrapper's own left out)."""
        return [(number + self.offset, text) for number, text in lines if number <= self.last]


class LineStarts:
    """The byte offset where each line of a file starts (built once per file: one pass in C)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = array("q", [0])
        self.starts.extend(accumulate(len(line) + 1 for line in data.split(b"\n")[:-1]))
        #: Only ``\n`` and ``\r\n`` end its lines. The parser also ends a line at a lone ``\r``
        #: and at NEL, LS and PS: in a file holding one, these line numbers are not the parser's. Nor
        #: are a UTF-16 file's lines its bytes cut at ``\n``.
        self.plain = data.count(b"\r") == data.count(b"\r\n") and not any(
            mark in data for mark in ("\x85".encode(), "\u2028".encode(), "\u2029".encode())) \
            and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))

    def __len__(self) -> int:
        return len(self.starts)

    def line(self, number: int) -> bytes:
        """Line `number` (1-based), without its line end."""
        start = self.starts[number - 1]
        end = self.starts[number] - 1 if number < len(self.starts) else len(self.data)
        return self.data[start:end]

    def span(self, first: int, stop: int | None) -> bytes:
        """Lines `first` up to `stop` (not included; None: to the end)."""
        start = self.starts[first - 1]
        end = self.starts[stop - 1] if stop is not None and stop <= len(self.starts) else len(self.data)
        return self.data[start:end]


class Recent(Generic[K, V]):
    """The values of the last `size` keys asked for (a small LRU), thread-safe; a value is built
    outside the lock, so a slow build holds up no other key."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, build: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = build()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


def item_starts(sources: Mapping[str, Sequence[ItemSource]]) -> dict[str, list[int]]:
    """Every file's item start lines, sorted (from the render's source map, once per commit)."""
    by_file: dict[str, set[int]] = {}
    for items in sources.values():
        for source in items:
            by_file.setdefault(source.file, set()).add(source.pos[0])
    return {file: sorted(lines) for file, lines in by_file.items()}


def next_start(starts: Sequence[int], line: int) -> int | None:
    """The first item start after `line` (None: none)."""
    at = bisect.bisect_right(starts, line)
    return starts[at] if at < len(starts) else None


def shares_a_line(lines: LineStarts, source: ItemSource, following: int | None) -> bool:
    """The item's first line holds something before it (another item, the list's opening), or the
    next item starts on that line: its own lines cannot be shown apart (`written_lines` says the same
    of the whole file)."""
    return _head(lines, source) not in ("", "-") or following == source.pos[0]


def _head(lines: LineStarts, source: ItemSource) -> str:
    """What comes before the item on its first line (YAML columns count characters, not bytes)."""
    first, col = source.pos
    return lines.line(first).decode("utf-8", "replace")[:col - 1].strip()


def cut(lines: LineStarts, kind: str, source: ItemSource, following: int | None) -> Excerpt:
    """The item's lines, from its start to `following` (the next item's start), as a document of one
    list item of `kind`: a block item under ``kind:``, any other in a flow list."""
    first, col = source.pos
    body = lines.span(first, following)
    if not body.endswith(b"\n"):
        body += b"\n"
    if _head(lines, source) == "-":
        data = kind.encode() + b":\n" + body
    else:
        data = kind.encode() + b": [\n" + body + b" ]\n"
    last = FIRST_LINE + body.count(b"\n") - 1
    place = ItemSource(source.file, 0, 0, (FIRST_LINE, col), source.id)
    return Excerpt(data, place, first - FIRST_LINE, last)


__all__ = ["FIRST_LINE", "Excerpt", "LineStarts", "Recent", "cut", "item_starts", "next_start",
           "shares_a_line"]
