"""What validation may reuse about a plain file (its items exactly as parsed, no templates, no SOPS):
each item's own problems, the ids it names, its JSON size and canonical content, per item and per
document list as a whole. Kept with a file's parse (`ParsedFile.memo`, slot `FACTS`); plain data, no
checks here (the checks that fill them are `gitsync.render.validate`'s)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from gitsync.render.filememo import MemoSlot
from gitsync.render.load import ParsedFile
from gitsync.render.references import Reference
from gitsync.render.sourcemap import FieldPath

#: An item's value a `SegmentFacts` does not know (asked again of the item).
UNKNOWN = object()


@dataclass
class FileFacts:
    """What validation may reuse about one file whose items are exactly as parsed (no templates, no SOPS)."""

    #: (doc, kind, index) → the item's own problems (id and schema: (message, field)), kept as long
    #: as the file's parse is cached.
    issues: dict[Any, tuple[tuple[str, FieldPath], ...]]
    secret_references: bool  # the bytes contain "$secret://"
    #: (doc, kind, index) → the ids the item refers to (`Reference`s), and its JSON size.
    references: dict[Any, tuple[Reference, ...]] = field(default_factory=dict)
    sizes: dict[Any, int] = field(default_factory=dict)
    contents: dict[Any, bytes] = field(default_factory=dict)  # reconcile's canonical content
    splits: dict[Any, int] = field(default_factory=dict)  # where its modifiedIndex goes (`content_split`)
    #: (doc, kind) → what is known of the document's whole list of that kind.
    segments: dict[Any, SegmentFacts] = field(default_factory=dict)

    @classmethod
    def of(cls, parsed: ParsedFile) -> FileFacts:
        """The facts kept with a plain file's parse (made empty the first time)."""
        return parsed.memo.setdefault(FACTS, cls({}, parsed.has_secret_references))


#: Where a plain file's parse keeps its facts.
FACTS: MemoSlot[FileFacts] = MemoSlot("facts")


@dataclass(frozen=True)
class SegmentFacts:
    """One plain document's list of one kind, as a whole: what lets a render check an unchanged
    file's items without looking at each (a one-file change then costs about that file)."""

    issues: dict[int, tuple[tuple[str, FieldPath], ...]]  # index in the list → its own problems
    named: dict[str, frozenset[str]]  # kind → the ids the items refer to (`Reference`s)
    look_closer: bool  # a reference that is a problem wherever it points (client_cert_id)
    sizes: list[int]  # each item's JSON size
    contents: list[bytes]  # each item's canonical content
    splits: list[int]  # where each one's modifiedIndex goes in it (`gitsync.content.content_split`)

    @functools.cached_property
    def size(self) -> int:
        return sum(self.sizes)

    def item(self, store: str, index: int) -> Any:
        """Item `index`'s value in a `FileFacts` table, when this list knows it (else `UNKNOWN`)."""
        if not 0 <= index < len(self.contents):
            return UNKNOWN
        if store == "issues":
            return self.issues.get(index, ())
        if store == "sizes":
            return self.sizes[index]
        if store == "contents":
            return self.contents[index]
        if store == "splits":
            return self.splits[index]
        return UNKNOWN  # references: computed again (cheap), the schema is what is worth keeping
