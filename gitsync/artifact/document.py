"""The artifact: one commit rendered and validated once, as a canonical JSON document (pure).

What it holds (format 1)::

    {"format": 1, "gitsync": "<version>", "repo": "<URL, credentials stripped>", "branch": "main",
     "commit": "<40 hex>", "subject": "...", "message": "...", "committed": "<ISO 8601>",
     "published": "<ISO 8601, UTC>",                   # when it was published: no replay of an older one
     "payload": {kind: [item, ...]},                    # secret references kept as references
     "sources": {kind: [[file, line, col, doc, index, id], ...]},   # each item's place, payload order
     "references": {kind: [index, ...]},                # items holding a ``${{`` to expand on the host
     "contents": {kind: [text or null, ...]},           # each other item's canonical content
     "splits": {kind: [int or null, ...]},              # where its modifiedIndex goes in it
     "checks": [{name, request, expect, timeout, retries, interval, file, line, col}],
     "secret_fields": [...]}                             # the repo's declared secret fields

Canonical: sorted keys, no spaces, UTF-8, no NaN or infinity (`gitsync.content.canonical_json`);
numbers as Python's JSON writes them (integers exact, floats in their shortest round-trip form), so
the same render published at the same time gives the same bytes and the same digest. The digest
(``sha256:<hex>`` of those bytes) is the artifact's name; the signature binds it, so it binds the
time of publication too: an agent refuses an artifact published before one it already holds
(`gitsync.artifact.source`), so an older signed artifact tagged again cannot roll a gateway back.

Each item's canonical content (`gitsync.content.content_bytes`: what reconcile compares and the digest
is made of) and where its ``modifiedIndex`` goes in it travel with the payload, worked out once by the
publisher: an agent would otherwise spend most of a first sync encoding them again (about a second
per 10,000 routes). An item with a secret reference carries none (its content is the host's).

Secrets never enter it: the publisher renders with a lookup that answers a marker for every
``${{ secrets.NAME }}``; the markers become ``${{ secrets.NAME }}`` again in the document (a literal
``${{`` the repo wrote as ``$${{`` is written ``$${{`` again), and the agent expands them with its own
secrets (`expand_references`). Values decrypted from SOPS files are secret values: a commit that has
any is refused by the publisher (`ArtifactError`), never written.
"""

from __future__ import annotations

import hashlib
import json
import secrets as random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gitsync.content import canonical_json, content_bytes, content_split
from gitsync.kinds import item_id
from gitsync.problems import Location, Problem, ProblemsError
from gitsync.render.healthchecks import Check, CheckLimits, parse_checks, status_text
from gitsync.render.result import Rendered
from gitsync.render.secrets import SecretRules
from gitsync.render.sourcemap import ItemSource, SourceMap
from gitsync.render.substitute import Substitution

FORMAT = 1
_EXPRESSION = "${{"


class ArtifactError(Exception):
    """An artifact that cannot be made or read as one: what is wrong, secret-free."""


def digest_of(data: bytes) -> str:
    """``sha256:<hex>``: an artifact's (or a blob's) name."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Secret references: a marker per secret at render, ``${{ secrets.NAME }}`` in the document


class ReferenceMarkers:
    """The secret lookup of a publishing render: each ``${{ secrets.NAME }}`` becomes a marker unique to
    this render (a random nonce), long enough for the render's checks on a secret, never a value."""

    def __init__(self) -> None:
        self.nonce = random.token_hex(8)
        self.names: set[str] = set()

    def __call__(self, name: str) -> str:
        self.names.add(name)
        return self.marker(name)

    def marker(self, name: str) -> str:
        return f"gitsync-secret-reference-{self.nonce}-{name}-end"

    def restore(self, text: str) -> str:
        """`text` as the document holds it: literal ``${{`` escaped, each marker a reference again."""
        text = text.replace(_EXPRESSION, "$" + _EXPRESSION)
        for name in self.names:
            text = text.replace(self.marker(name), "${{ secrets." + name + " }}")
        return text

    def markers(self) -> frozenset[str]:
        return frozenset(self.marker(name) for name in self.names)


def _restored(value: Any, markers: ReferenceMarkers) -> tuple[Any, bool]:
    """`value` with every string restored (`ReferenceMarkers.restore`); whether any holds a ``${{``."""
    if isinstance(value, str):
        text = markers.restore(value)
        return text, _EXPRESSION in text
    if isinstance(value, dict):
        out, found = {}, False
        for key, inner in value.items():
            new_key, in_key = _restored(key, markers)
            out[new_key], in_value = _restored(inner, markers)
            found = found or in_key or in_value
        return out, found
    if isinstance(value, list):
        items = [_restored(inner, markers) for inner in value]
        return [item for item, _ in items], any(found for _, found in items)
    return value, False


# ---------------------------------------------------------------------------------------------------------
# Building


@dataclass(frozen=True)
class Provenance:
    """Where a render came from: what the artifact says of its commit."""

    repo: str  # credentials stripped (`gitsync.urls.display_url`)
    branch: str
    commit: str
    subject: str
    message: str  # the whole commit message (its trailers allow deletions: the deletion guard)
    committed: str  # ISO 8601
    version: str
    #: ISO 8601 in UTC, when it is published (default: when this is made): an agent refuses an artifact
    #: published before one it already has (a replay of an older artifact under the tag)
    published: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


def _check_document(check: Check) -> dict[str, Any]:
    """A check as the repo would declare it (so the agent parses it as render does) and its place."""
    request: dict[str, Any] = {"method": check.method, "path": check.path, "headers": dict(check.headers)}
    if check.host is not None:
        request["host"] = check.host
    if check.body is not None:
        request["body"] = check.body
    expect: dict[str, Any] = {"status": [low if low == high else status_text([(low, high)])
                                         for low, high in check.status],
                              "headers": {name: pattern.pattern for name, pattern in check.expect_headers}}
    if check.expect_body is not None:
        expect["body"] = check.expect_body.pattern
    return {"name": check.name, "request": request, "expect": expect, "timeout": check.timeout,
            "retries": check.retries, "interval": check.interval,
            "file": check.location.file, "line": check.location.line, "col": check.location.col}


def build(rendered: Rendered, markers: ReferenceMarkers, provenance: Provenance) -> bytes:
    """The artifact of a render made with `markers` as its secret lookup: canonical JSON bytes.
    `ArtifactError` when the render holds a secret value (a SOPS file's): it cannot be published."""
    if rendered.secret_values - markers.markers():
        raise ArtifactError("the commit holds values decrypted from SOPS files: an artifact carries secret "
                            "references only (${{ secrets.NAME }}, $secret://, $env://), never a value; "
                            "move those values to the agents' secrets")
    if rendered.left_out:
        raise ArtifactError("a partial render cannot be published: every item must validate")
    payload: dict[str, list[Any]] = {}
    references: dict[str, list[int]] = {}
    for kind, items in rendered.payload.items():
        restored = [_restored(item, markers) for item in items]
        payload[kind] = [item for item, _ in restored]
        found = [index for index, (_, holds) in enumerate(restored) if holds]
        if found:
            references[kind] = found
    contents = {kind: [None if index in references.get(kind, ()) else content.decode()
                       for index, content in enumerate(rendered.contents.get(kind, ()))]
                for kind in payload}
    splits = {kind: [None if index in references.get(kind, ()) else split
                     for index, split in enumerate(rendered.splits.get(kind, ()))]
              for kind in payload}
    sources = {kind: [[s.file, s.pos[0], s.pos[1], s.doc, s.index, s.id] for s in listed]
               for kind, listed in rendered.source_map.lists().items()}
    document = {"format": FORMAT, "gitsync": provenance.version, "repo": provenance.repo,
                "branch": provenance.branch, "commit": provenance.commit, "subject": provenance.subject,
                "message": provenance.message, "committed": provenance.committed,
                "published": provenance.published, "payload": payload,
                "sources": sources,
                "references": references, "contents": contents, "splits": splits,
                "checks": [_check_document(c) for c in rendered.checks],
                "secret_fields": list(rendered.secret_rules.entries)}
    try:
        return canonical_json(document)
    except ValueError as exc:  # NaN or infinity: not JSON
        raise ArtifactError(f"the payload cannot be written as JSON: {exc}") from None


# ---------------------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Artifact:
    """An artifact as read (its shape checked; nothing expanded yet)."""

    digest: str
    repo: str
    branch: str
    commit: str
    subject: str
    message: str
    committed: str
    version: str
    published: datetime  # when it was built and signed (the signature binds it through the digest)
    payload: dict[str, list[Any]]
    sources: dict[str, list[ItemSource]]
    references: dict[str, list[int]]
    checks: list[dict[str, Any]]
    secret_fields: tuple[str, ...]
    size: int
    contents: dict[str, list[str | None]]
    splits: dict[str, list[int | None]]


def _need(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise ArtifactError(f"field {key!r} is missing or not {getattr(kind, '__name__', kind)}")
    return value


def parse(data: bytes) -> Artifact:
    """The artifact in `data` (its bytes as published); `ArtifactError` naming the first thing wrong."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ArtifactError("not a JSON object")
    if document.get("format") != FORMAT:
        raise ArtifactError(f"format {document.get('format')!r}: this gitsync reads format {FORMAT}")
    payload = _need(document, "payload", dict)
    sources_in = _need(document, "sources", dict)
    sources: dict[str, list[ItemSource]] = {}
    for kind, items in payload.items():
        listed = sources_in.get(kind)
        if not isinstance(items, list) or not isinstance(listed, list) or len(listed) != len(items):
            raise ArtifactError(f"payload kind {kind!r}: its items and its sources do not match")
        try:
            sources[kind] = [ItemSource(str(f), int(d), int(i), (int(line), int(col)),
                                        None if ident is None else str(ident))
                             for f, line, col, d, i, ident in listed]
        except (TypeError, ValueError):
            raise ArtifactError(f"sources of {kind!r}: each is [file, line, col, doc, index, id]") from None
    references = _need(document, "references", dict)
    for kind, indexes in references.items():
        if kind not in payload or not isinstance(indexes, list) or \
                not all(isinstance(i, int) and 0 <= i < len(payload[kind]) for i in indexes):
            raise ArtifactError(f"references of {kind!r}: indexes into its payload list")
    contents = _need(document, "contents", dict)
    splits = _need(document, "splits", dict)
    for kind, items in payload.items():
        carried, where = contents.get(kind), splits.get(kind)
        if not isinstance(carried, list) or not isinstance(where, list) or \
                not len(carried) == len(where) == len(items):
            raise ArtifactError(f"contents of {kind!r}: one per item of its payload list")
    commit = _need(document, "commit", str)
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise ArtifactError("field 'commit' is not a commit id (40 hex)")
    return Artifact(digest_of(data), _need(document, "repo", str), _need(document, "branch", str), commit,
                    str(document.get("subject", "")), str(document.get("message", "")),
                    str(document.get("committed", "")),
                    str(document.get("gitsync", "")), _published(document), payload, sources, references,
                    _need(document, "checks", list),
                    tuple(str(e) for e in _need(document, "secret_fields", list)), len(data), contents,
                    splits)


def _published(document: Mapping[str, Any]) -> datetime:
    """The artifact's time of publication, with its zone (an agent compares them across publishers)."""
    try:
        published = datetime.fromisoformat(_need(document, "published", str))
    except ValueError:
        raise ArtifactError("field 'published' is not an ISO 8601 time") from None
    if published.tzinfo is None:
        raise ArtifactError("field 'published' has no time zone")
    return published


def expand_references(artifact: Artifact, secret_lookup: Callable[[str], str | None],
                      limits: CheckLimits | None = None) -> Rendered:
    """The artifact as a render: its references expanded with the host's own secrets (only the items
    the artifact lists), its source map and checks. No YAML is read. `ProblemsError` (stage
    ``render``) at each item's file:line when a secret is missing, as a git render says it."""
    source_map = SourceMap({}, artifact.sources)
    substitution = Substitution({}, secret_lookup)
    payload = {kind: list(items) for kind, items in artifact.payload.items()}
    problems: list[Problem] = []
    for kind, indexes in artifact.references.items():
        for index in indexes:
            before = len(substitution.problems)
            payload[kind][index] = substitution.document(payload[kind][index])
            for path, message in substitution.problems[before:]:
                problems.append(source_map.problem(kind, index, message, tuple(path)))
    checks, check_problems = _checks(artifact, limits)
    problems += check_problems
    if problems:
        raise ProblemsError("render", problems)
    contents, splits = _contents(artifact, payload)
    ids = {kind: [item_id(kind, item) for item in items] for kind, items in payload.items()}
    return Rendered(payload, source_map, frozenset(substitution.secret_values), tuple(checks), contents, (),
                    ids, splits, SecretRules.of(artifact.secret_fields))


def _contents(artifact: Artifact, payload: Mapping[str, list[Any]]
              ) -> tuple[dict[str, list[bytes]], dict[str, list[int]]]:
    """Each item's canonical content and its modifiedIndex's place: carried, or (an item with a secret
    reference, or one the publisher left without) worked out here."""
    contents: dict[str, list[bytes]] = {}
    splits: dict[str, list[int]] = {}
    for kind, items in payload.items():
        found, where = contents[kind], splits[kind] = [], []
        for item, carried, split in zip(items, artifact.contents[kind], artifact.splits[kind], strict=True):
            if isinstance(carried, str) and isinstance(split, int):
                found.append(carried.encode())
                where.append(split)
            else:
                found.append(content_bytes(item))
                where.append(content_split(item, found[-1]))
    return contents, splits


def _checks(artifact: Artifact, limits: CheckLimits | None) -> tuple[list[Check], list[Problem]]:
    places = [Location(str(c.get("file", "")), int(c.get("line", 0) or 0), int(c.get("col", 0) or 0))
              if isinstance(c, dict) else Location("") for c in artifact.checks]
    declared = [{k: v for k, v in c.items() if k not in ("file", "line", "col")} if isinstance(c, dict) else c
                for c in artifact.checks]
    return parse_checks(declared, lambda index, _path: places[min(index, len(places) - 1)], limits)


__all__ = ["FORMAT", "Artifact", "ArtifactError", "Provenance", "ReferenceMarkers", "build", "digest_of",
           "expand_references", "parse"]
