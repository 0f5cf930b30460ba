"""A status file as untrusted input: one typed schema, loaded with bounds, every field checked.

Whoever can push under the status refs can put any bytes in a ``status.yaml`` (an agent's own
credential can, on every gateway host). Every reader (the gate, ``status --fleet``, the web view's
``/fleet``, the writer reading its own last status) goes through `read_status`, which never raises
and never grows with the file beyond its bounds:

* the bytes are at most `MAX_STATUS_BYTES`, looked at before any parsing;
* the YAML is first read as events (no document is built yet): anchors, aliases and tags other
  than YAML's plain types are refused there, so a document of nested aliases (a "billion laughs")
  never expands; so are more than `MAX_NODES` nodes, nesting deeper than `MAX_DEPTH` and a scalar
  longer than `MAX_SCALAR` characters;
* only then is the document built, and every field checked against `StatusFile`: its type, its
  range (no NaN or infinity, no integer beyond 2^53, no negative count), times in any form YAML or
  ISO 8601 writes them (a date alone, an offset, a naive time taken as UTC) and within years
  1970–9999.

A file that does not pass is an `Unreadable` with the reason, shown as that agent's "unreadable
status: <reason>" and never counted toward a gate.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.cyaml import CParser
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from ruamel.yaml.nodes import ScalarNode

MAX_STATUS_BYTES = 256 * 1024  # a status of 100 gateways with their pruned lists is well under this
MAX_NODES = 10_000
MAX_DEPTH = 8  # the deepest a status goes: gateways → one gateway → pruned → a kind's list → an id
MAX_SCALAR = 16 * 1024  # characters of one value (an error message, a subject)
MAX_GATEWAYS = 1000
MAX_INT = 2**53  # what every reader (JSON, JavaScript, a float) holds exactly
PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in (
    "str", "int", "float", "bool", "null", "timestamp", "map", "seq"))
# \Z, not $: a "$" matches before a final newline, and "failed\n" is not "failed" to the gate
SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
WORD = re.compile(r"^[a-z][a-z_]{0,31}\Z")


class StatusError(ValueError):
    """Why a status file cannot be used (the text of "unreadable status: …")."""


@dataclass(frozen=True)
class GatewayEntry:
    """One gateway in a status: its url (without credentials) and what it was given."""

    url: str
    status: str
    versions: Mapping[str, int | float] = field(default_factory=dict)
    digest: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    pruned: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str | None = None
    checks_passed: int | None = None  # None: no checks ran on it
    checks_failed: tuple[str, ...] = ()
    rolled_back: bool = False
    two_step: bool = False

    @property
    def checked(self) -> bool:
        return self.checks_passed is not None


@dataclass(frozen=True)
class StatusFile:
    """A status file, every field checked (the writer's side is `gitsync.writeback.wire.StatusReport`)."""

    agent: str
    commit: str  # a commit SHA, or "" before the agent applied anything
    result: str
    time: datetime
    subject: str = ""
    gateways: tuple[GatewayEntry, ...] = ()
    duration: float = 0.0
    version: str = ""  # the gitsync that wrote it
    group: str | None = None
    applied_at: datetime | None = None
    heartbeat: float | None = None  # the writer's promise; shown, never trusted by a gate

    def checks(self) -> tuple[int, int] | None:
        """The health checks over its gateways: (passed, failed); None when none ran. A gateway
        rolled back counts as a failure."""
        ran = [g for g in self.gateways if g.checked or g.rolled_back]
        if not ran:
            return None
        passed = sum(g.checks_passed or 0 for g in ran)
        failed = sum(len(g.checks_failed) + g.rolled_back for g in ran)
        return passed, failed


@dataclass(frozen=True)
class Unreadable:
    """A status file that did not pass, and why."""

    reason: str


# ---------------------------------------------------------------------------------------------------------
# Loading: bytes → a plain document, bounded


def load_document(data: bytes) -> Any:
    """The YAML document in `data`, built only after its events passed the bounds (see the module);
    raises `StatusError`."""
    if len(data) > MAX_STATUS_BYTES:
        raise StatusError(f"{len(data)} bytes, more than the {MAX_STATUS_BYTES} a status file may have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StatusError(f"not UTF-8 text (byte {exc.start})") from None
    with contextlib.suppress(_Unusual):
        return _plain_document(text)
    _check_events(text)
    try:
        return YAML(typ="safe").load(text)
    except Exception as exc:  # the YAML library's own refusals, and ValueError for an int too long
        raise StatusError(f"not YAML: {_first_line(exc)}") from None


class _Unusual(Exception):
    """A document the fast reader leaves to the checked, slower one (which says what is wrong, if any)."""


#: The values of plain scalars, as the safe loader makes them: statuses repeat theirs (results, counts,
#: kinds), so a fleet's worth resolves each once. Short ones only: a cache an attacker cannot bloat.
_SCALARS: dict[str, Any] = {}
_SCALARS_MAX = 1 << 14
_SCALAR_CACHED = 64  # characters


def _plain_value(value: str) -> Any:
    known = _SCALARS.get(value, _SCALARS)
    if known is not _SCALARS:
        return known
    loader = _plain_loader()
    tag = str(loader.resolver.resolve(ScalarNode, value, (True, False)))  # a Tag: the table's keys are text
    if tag == _MERGE_TAG:
        raise _Unusual
    constructor = loader.constructor
    # the constructor's own function for the tag, called as construct_object would, without its memory
    # of the nodes it made (shared state across threads, and it would grow with every scalar)
    made = constructor.yaml_constructors[tag](constructor, ScalarNode(tag, value))
    if len(value) <= _SCALAR_CACHED:
        if len(_SCALARS) >= _SCALARS_MAX:
            _SCALARS.clear()
        _SCALARS[value] = made
    return made


@functools.cache
def _plain_loader() -> YAML:
    """A safe loader, for its resolver and its constructors of scalars (neither keeps state for these)."""
    return YAML(typ="safe")


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _plain_document(text: str) -> Any:
    """The document in `text` built in one pass of the C parser's events, when it is what gitsync writes:
    block or flow mappings and sequences of untagged scalars, no anchor, alias, tag or directive, within
    the bounds (see the module), string keys, once each. The values are the safe loader's (its resolver
    and constructor, per scalar). Anything else raises `_Unusual`: the checked reader then says why it is
    refused, or reads it (`load_document`). About four times faster than parsing twice and constructing
    through the loader (bench/README.md)."""
    parser = CParser(text)
    try:
        stack: list[Any] = []  # open collections; a mapping's pending key rides on top as a 1-tuple
        root: list[Any] = []
        nodes = documents = depth = 0
        while parser.check_event():
            event = parser.get_event()
            kind = type(event)
            if kind is ScalarEvent:
                nodes += 1
                if event.anchor is not None or event.tag is not None or len(event.value) > MAX_SCALAR:
                    raise _Unusual
                value: Any = _plain_value(event.value) if event.implicit[0] else event.value
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                nodes += 1
                depth += 1
                if event.anchor is not None or event.tag is not None or depth > MAX_DEPTH:
                    raise _Unusual
                stack.append({} if kind is MappingStartEvent else [])
                continue
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                depth -= 1
                value = stack.pop()
                if type(value) is tuple:  # a key without its value: not what a parser sends
                    raise _Unusual
            elif kind is DocumentStartEvent:
                documents += 1
                if documents > 1 or event.version is not None or event.tags:
                    raise _Unusual
                continue
            elif kind in (StreamStartEvent, StreamEndEvent, DocumentEndEvent):
                continue
            else:  # an alias, or anything new
                raise _Unusual
            if nodes > MAX_NODES:
                raise _Unusual
            _place(stack, root, value)
        if stack or len(root) > 1:
            raise _Unusual
        return root[0] if root else None
    except _Unusual:
        raise
    except Exception:  # the parser's refusals: worded by the checked reader
        raise _Unusual from None
    finally:
        parser.dispose()


def _place(stack: list[Any], root: list[Any], value: Any) -> None:
    if not stack:
        root.append(value)
        return
    top = stack[-1]
    if type(top) is list:
        top.append(value)
    elif type(top) is tuple:  # the key is waiting: this is its value
        stack.pop()
        mapping = stack[-1]
        if top[0] in mapping:
            raise _Unusual  # a duplicate key: the loader's error
        mapping[top[0]] = value
    else:
        if type(value) is not str:  # keys other than text: the loader decides
            raise _Unusual
        stack.append((value,))


def _check_events(text: str) -> None:
    nodes = depth = documents = 0
    try:
        for event in YAML(typ="safe").parse(text):
            if isinstance(event, AliasEvent):
                raise StatusError(f"line {_line(event)}: aliases (*{event.anchor}) are not allowed")
            if isinstance(event, NodeEvent):
                nodes += 1
                if event.anchor is not None:
                    raise StatusError(f"line {_line(event)}: anchors (&{event.anchor}) are not allowed")
                tag = getattr(event, "tag", None)
                if tag is not None and tag != "!" and tag not in PLAIN_TAGS:
                    raise StatusError(f"line {_line(event)}: the tag {str(tag)[:40]!r} is not allowed")
                if nodes > MAX_NODES:
                    raise StatusError(f"more than {MAX_NODES} values")
            if isinstance(event, ScalarEvent) and len(event.value) > MAX_SCALAR:
                raise StatusError(f"line {_line(event)}: a value longer than {MAX_SCALAR} characters")
            if isinstance(event, CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise StatusError(f"line {_line(event)}: nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, CollectionEndEvent):
                depth -= 1
            elif type(event).__name__ == "DocumentStartEvent":
                documents += 1
                if documents > 1:
                    raise StatusError("more than one YAML document")
    except StatusError:
        raise
    except Exception as exc:
        raise StatusError(f"not YAML: {_first_line(exc)}") from None


def _line(event: Any) -> int:
    mark = getattr(event, "start_mark", None)
    return (mark.line + 1) if mark is not None else 0


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + "…") if len(text) > 200 else (text or type(exc).__name__)


# ---------------------------------------------------------------------------------------------------------
# Checking: a plain document → a StatusFile


def read_status(data: bytes) -> StatusFile | Unreadable:
    """A status file's bytes as a `StatusFile`, or why they are not one. Never raises."""
    try:
        return status_from(load_document(data))
    except StatusError as exc:
        return Unreadable(str(exc))
    except RecursionError:
        return Unreadable("nested too deeply")


def status_from(doc: Any) -> StatusFile:
    """A loaded document as a `StatusFile`; raises `StatusError` naming the first wrong field."""
    if not isinstance(doc, dict):
        raise StatusError(f"expected a mapping, got {_kind(doc)}")
    commit = _text(doc, "commit", optional=True, limit=64) or ""
    if commit and not SHA.match(commit):
        raise StatusError(f"commit: expected a commit SHA, got {commit[:80]!r}")
    result = _text(doc, "result", limit=32)
    if not WORD.match(result):
        raise StatusError(f"result: expected a word, got {result!r}")
    gateways = doc.get("gateways")
    if gateways is None:
        gateways = []
    if not isinstance(gateways, list):
        raise StatusError(f"gateways: expected a list, got {_kind(gateways)}")
    if len(gateways) > MAX_GATEWAYS:
        raise StatusError(f"gateways: more than {MAX_GATEWAYS}")
    return StatusFile(
        agent=_text(doc, "agent", limit=1024),
        commit=commit,
        result=result,
        time=_moment(doc, "time"),
        subject=_text(doc, "subject", optional=True) or "",
        gateways=tuple(_gateway(g, f"gateways[{i}]") for i, g in enumerate(gateways)),
        duration=_number(doc, "duration", optional=True) or 0.0,
        version=_text(doc, "gitsync", optional=True, limit=64) or "",
        group=_text(doc, "group", optional=True, limit=64),
        applied_at=_moment(doc, "applied_at", optional=True),
        heartbeat=_number(doc, "heartbeat", optional=True),
    )


def _gateway(value: Any, where: str) -> GatewayEntry:
    if not isinstance(value, dict):
        raise StatusError(f"{where}: expected a mapping, got {_kind(value)}")
    checks = value.get("checks")
    passed, failed = None, ()
    if checks is not None:
        if not isinstance(checks, dict):
            raise StatusError(f"{where}.checks: expected a mapping, got {_kind(checks)}")
        passed = _count(checks.get("passed", 0), f"{where}.checks.passed")
        failed = _texts(checks.get("failed") or [], f"{where}.checks.failed")
    pruned = _mapping(value, "pruned", where)
    return GatewayEntry(
        url=_text(value, "url", where=where, limit=2048),
        status=_text(value, "status", where=where, limit=32),
        versions={str(k): _finite(v, f"{where}.versions.{k}")
                  for k, v in _mapping(value, "versions", where).items()},
        digest=_text(value, "digest", where=where, optional=True, limit=256),
        counts={str(k): _count(v, f"{where}.counts.{k}")
                for k, v in _mapping(value, "counts", where).items()},
        pruned={str(k): _texts(v, f"{where}.pruned.{k}") for k, v in pruned.items()},
        error=_text(value, "error", where=where, optional=True),
        checks_passed=passed,
        checks_failed=failed,
        rolled_back=_flag(value, "rolled_back", where),
        two_step=_flag(value, "two_step", where),
    )


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _text(doc: Mapping[str, Any], key: str, *, where: str = "", optional: bool = False,
          limit: int = MAX_SCALAR) -> Any:
    value = doc.get(key)
    name = f"{where}.{key}" if where else key
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise StatusError(f"{name}: expected text, got {_kind(value)}")
    if len(value) > limit:
        raise StatusError(f"{name}: longer than {limit} characters")
    return value


def _texts(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise StatusError(f"{name}: expected a list of text")
    return tuple(value)


def _mapping(doc: Mapping[str, Any], key: str, where: str) -> Mapping[Any, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StatusError(f"{where}.{key}: expected a mapping, got {_kind(value)}")
    return value


def _flag(doc: Mapping[str, Any], key: str, where: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise StatusError(f"{where}.{key}: expected true or false, got {_kind(value)}")
    return value


def _finite(value: Any, name: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StatusError(f"{name}: expected a number, got {_kind(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise StatusError(f"{name}: expected a finite number, got {value}")
    if abs(value) > MAX_INT:
        raise StatusError(f"{name}: beyond ±2^53")
    return value


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StatusError(f"{name}: expected a whole number, got {_kind(value)}")
    _finite(value, name)
    if value < 0:
        raise StatusError(f"{name}: expected a count, got {value}")
    return value


def _number(doc: Mapping[str, Any], key: str, *, optional: bool = False) -> float | None:
    value = doc.get(key)
    if value is None and optional:
        return None
    number = float(_finite(value, key))
    if number < 0:
        raise StatusError(f"{key}: expected a positive number, got {number}")
    return number


def _moment(doc: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    """A time as YAML writes it (a timestamp, a date) or as ISO 8601 text; UTC when naive."""
    value = doc.get(key)
    if value is None and optional:
        return None
    moment = parse_moment(value)
    if moment is None:
        raise StatusError(f"{key}: expected a time (ISO 8601), got {_kind(value)} {str(value)[:60]!r}")
    return moment


def parse_moment(value: Any) -> datetime | None:
    """`value` as an aware datetime between 1970 and 9999, or None."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except (OverflowError, ValueError):
        return None
    return moment if moment.year >= 1970 else None


@dataclass(frozen=True)
class Verdict:
    """Whether a status commit may speak for its agent and group; `why` when it may not."""

    verified: bool
    why: str = ""


@dataclass(frozen=True)
class FleetEntry:
    """One status ref as read: whom it speaks for, what it says (or why it cannot be used), whether its
    signature is allowed for that agent and group, and the commit times git holds for it."""

    ref: str  # the ref's last component, as on the remote
    agent: str  # the status's agent; the ref's decoded name when the status is unreadable
    status: StatusFile | None
    unreadable: str | None = None
    signature: Verdict | None = None  # None: status_signers is not set, nothing is checked
    written: datetime | None = None  # the status commit's time (under a heartbeat: its parent's)
    seen: datetime | None = None  # the ref's tip's time: the agent's last write (status or heartbeat)
    tip: str = ""

    @property
    def verified(self) -> bool:
        """Readable, and signed as `status_signers` asks (when it is set)."""
        return self.status is not None and (self.signature is None or self.signature.verified)

    @property
    def trouble(self) -> str | None:
        """Why this status is not counted: ``unreadable status: …`` or ``unverified: …``; None if it is."""
        if self.status is None:
            return f"unreadable status: {self.unreadable}"
        if self.signature is not None and not self.signature.verified:
            return f"unverified: {self.signature.why}"
        return None

    @property
    def group(self) -> str | None:
        return self.status.group if self.status is not None else None


__all__ = ["MAX_STATUS_BYTES", "GatewayEntry", "StatusError", "StatusFile", "Unreadable", "load_document",
           "parse_moment", "read_status", "status_from"]
