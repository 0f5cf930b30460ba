"""Validation of a built payload: ids, references, certificates, limits, and each item's schema.

Every problem is collected (not just the first) and placed at its file:line:col
through the source map. The item schemas live in `gitsync.schema`, shared with the
APISIX test double, so both speak APISIX's wording.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from gitsync.content import content_bytes, content_split
from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.problems import Problem
from gitsync.render.build import Segment
from gitsync.render.facts import UNKNOWN, FileFacts, SegmentFacts
from gitsync.render.options import RenderOptions
from gitsync.render.references import SECRET_REFERENCE, dependants, ids_named, may_refer
from gitsync.render.secrets import is_secret_name, walk_item
from gitsync.render.sourcemap import FieldPath, SourceMap, describe, string_leaves
from gitsync.schema import check_item
from gitsync.schema.checks import INVALID

ID_PATTERN = re.compile(r"^[a-zA-Z0-9-_.]+$")
ID_MAX = 64
SECRET_MANAGERS = ("vault", "aws", "gcp")
ENV_OR_SECRET = re.compile(r"^\$(secret|env|ENV)://")

#: The gateway's own words when an upstream names its client certificate by id (replaced by ours).
SSL_LOOKUP = "failed to fetch ssl info by ssl id"


@dataclass(frozen=True)
class Run:
    """Items ``lo`` to ``hi`` of a kind: one plain document's whole list (`segment` is what is known of
    it, `file` its file's facts), or items to be checked one by one (both None)."""

    lo: int
    hi: int
    file: FileFacts | None = None
    segment: SegmentFacts | None = None


@dataclass
class Checker:
    payload: dict[str, list[Any]]
    sources: SourceMap
    options: RenderOptions
    problems: list[Problem]
    facts: Mapping[str, FileFacts]
    skip_schema: Set[tuple[str, int, str, int]] = frozenset()
    #: Files that did not load: their bytes (searched for an id), or None when never read.
    unknown: Mapping[str, bytes | None] = field(default_factory=dict)
    #: Per kind, the runs of items that are one document's whole list (`gitsync.render.build.Segment`).
    segments: Mapping[str, Sequence[Segment]] = field(default_factory=dict)
    #: Per kind, each item's id, when build gave them.
    item_ids: Mapping[str, Sequence[str | None]] | None = None

    def add(self, kind: str, index: int | None, message: str, field: FieldPath = ()) -> None:
        detail = None
        if index is not None and message.startswith(INVALID):
            field, detail = explained(kind, self.payload[kind][index], message, field)
        self.problems.append(self.sources.problem(kind, index, message, field, detail))

    def __post_init__(self) -> None:
        # Per kind and item: the reusable facts of its file and its key in them (None: not plain);
        # built for a kind the first time an item of it is checked on its own.
        self._where: dict[str, list[tuple[FileFacts | None, Any]]] = {}
        self._runs: dict[str, list[Run]] = {}

    def runs(self, kind: str) -> list[Run]:
        """The kind's items as runs: each plain document's whole list (its `SegmentFacts` computed the
        first time the file is seen), and between them items to check one by one."""
        if kind not in self._runs:
            runs: list[Run] = []
            at = 0
            for segment in self.segments.get(kind, ()):
                facts = self.facts.get(segment.file)
                if facts is None:
                    continue
                if segment.start > at:
                    runs.append(Run(at, segment.start))
                hi = segment.start + segment.count
                known = segment_of(facts, segment.doc, kind, self.payload[kind][segment.start:hi])
                runs.append(Run(segment.start, hi, facts, known))
                at = hi
            if at < len(self.payload.get(kind, ())):
                runs.append(Run(at, len(self.payload[kind])))
            self._runs[kind] = runs
        return self._runs[kind]

    def _places(self, kind: str) -> list[tuple[FileFacts | None, Any]]:
        if kind not in self._where:
            places = []
            for index in range(len(self.payload[kind])):
                source = self.sources.source(kind, index)
                facts = self.facts.get(source.file) if source is not None else None
                places.append((facts, (source.doc, kind, source.index)) if facts is not None and source
                              else (None, None))
            self._where[kind] = places
        return self._where[kind]

    def items(self, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
        for index, item in enumerate(self.payload.get(kind, ())):
            if isinstance(item, dict):
                yield index, item

    def facts_of(self, kind: str, index: int) -> tuple[FileFacts | None, Any]:
        """The reusable facts of the file an item came from, and the item's key in them."""
        return self._places(kind)[index]

    def memo(self, store: str, kind: str, index: int, compute: Any) -> Any:
        """`compute(item)` for item `index` of `kind`, kept with the file's parse when the file is
        plain (`store` names the `FileFacts` table): an unchanged file is not looked into again."""
        facts, key = self.facts_of(kind, index)
        if facts is not None:
            known = facts.segments.get(key[:2])
            value = known.item(store, key[2]) if known is not None else UNKNOWN
            if value is not UNKNOWN:
                return value
        return _kept(getattr(facts, store) if facts is not None else None, key, compute,
                     self.payload[kind][index])

    def ids(self, kind: str) -> set[str]:
        if self.item_ids is not None and kind in self.item_ids:
            found = set(self.item_ids[kind])
            found.discard(None)
            return found  # type: ignore[return-value]
        return {ident for _, item in self.items(kind) if (ident := item_id(kind, item)) is not None}

    def may_be_declared_elsewhere(self, ident: str) -> bool:
        """A file that did not load may declare `ident`: it was never read, or its text holds it."""
        needle = ident.encode("utf-8", "surrogateescape")
        return any(data is None or needle in data for data in self.unknown.values())


def _kept(table: dict[Any, Any] | None, key: Any, compute: Any, item: Any, keep: bool = True) -> Any:
    """`compute(item)`, or the value `table` (a `FileFacts` table) has under `key`; kept there when
    `keep` (a `SegmentFacts` keeps its list's values itself)."""
    if table is not None and key in table:
        return table[key]
    value = compute(item)
    if table is not None and keep:
        table[key] = value
    return value


def segment_of(facts: FileFacts, doc: int, kind: str, items: Sequence[Any]) -> SegmentFacts:
    """What is known of document `doc`'s list of `kind` (its `items`), worked out the first time."""
    known = facts.segments.get((doc, kind))
    if known is None:
        known = facts.segments[doc, kind] = segment_facts(kind, items, facts, doc)
    return known


def segment_facts(kind: str, items: Sequence[Any], facts: FileFacts, doc: int) -> SegmentFacts:
    """What is known of a plain document's list of one kind as a whole (each item's facts reused where
    an item-by-item check kept them; not kept again per item: `Checker.memo` asks the list first)."""
    issues: dict[int, tuple[tuple[str, FieldPath], ...]] = {}
    named: dict[str, set[str]] = {}
    look_closer = False
    sizes = []
    contents = []
    splits = []
    refers = may_refer(kind)
    for index, item in enumerate(items):
        key = (doc, kind, index)
        if not isinstance(item, dict):
            issues[index] = ((f"an item must be a mapping, not {describe(item)}", ()),)
        else:
            own = _kept(facts.issues, key, lambda i: _own_issues(kind, i), item, keep=False)
            if own:
                issues[index] = own
            for ref in _kept(facts.references, key, lambda i: ids_named(kind, i), item, keep=False) \
                    if refers else ():
                look_closer = look_closer or ref.label == "client_cert_id"
                named.setdefault(ref.target, set()).add(ref.ident)
        sizes.append(_kept(facts.sizes, key, _json_size, item, keep=False))
        contents.append(_kept(facts.contents, key, content_bytes, item, keep=False))
        splits.append(_kept(facts.splits, key, lambda i, c=contents[-1]: content_split(i, c), item,
                            keep=False))
    return SegmentFacts(issues, {target: frozenset(ids) for target, ids in named.items()}, look_closer, sizes,
                        contents, splits)


def _plain_id_problem(value: Any) -> str | None:
    """Why `value` is not an APISIX id (a string of ≤ 64 of ``[a-zA-Z0-9-_.]``, or an integer ≥ 1)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"the id must be a string, not {describe(value)}"
    if isinstance(value, int):
        return None if value >= 1 else "an integer id must be 1 or more"
    if not ID_PATTERN.match(value):
        return f"invalid id {value!r}: only letters, digits, '-', '_' and '.' are allowed"
    if len(value) > ID_MAX:
        return f"invalid id: {len(value)} characters, at most {ID_MAX} are allowed"
    return None


def _id_problems(kind: str, item: dict[str, Any]) -> list[tuple[str, FieldPath]]:
    """gitsync's own id rules, clearer than the schema's wording (whose ``id`` issues they replace)."""
    if kind == "consumers":
        return []  # usernames and credential ids: the schema says it in APISIX's words
    if "id" not in item:
        if kind == "plugin_metadata":
            return [("missing id: the plugin's name", ("id",))]
        if kind == "secrets":
            return [("missing id: a secret manager's id is <manager>/<name>, e.g. vault/main", ("id",))]
        return [("missing id: every item needs one (APISIX before 3.17 fails on items without)", ("id",))]
    if kind == "secrets":
        manager, _, name = str(item["id"]).partition("/")
        if manager in SECRET_MANAGERS and name and ("/" in name or not ID_PATTERN.match(name)
                                                     or len(name) > ID_MAX):
            return [(f"invalid secret id: {item['id']} (the name after '{manager}/' must be one segment of "
                     "letters, digits, '-', '_' and '.': a $secret:// reference can name no other)", ("id",))]
        return []
    if kind == "plugin_metadata":
        return []  # the id is a plugin name: the schema knows which exist
    reason = _plain_id_problem(item["id"])
    return [(reason, ("id",))] if reason else []


def check_items(check: Checker) -> None:
    """Each item on its own: a mapping, a good id, APISIX's schema (reused for unchanged files: a
    plain document's list as a whole)."""
    for kind, items in check.payload.items():
        for run in check.runs(kind):
            if run.segment is not None:
                for offset, issues in run.segment.issues.items():
                    for message, path in issues:
                        check.add(kind, run.lo + offset, message, path)
                continue
            _check_each(check, kind, items, run)


def _check_each(check: Checker, kind: str, items: list[Any], run: Run) -> None:
    for index in range(run.lo, run.hi):
        item = items[index]
        if not isinstance(item, dict):
            check.add(kind, index, f"an item must be a mapping, not {describe(item)}")
            continue
        source = check.sources.source(kind, index)
        if source is not None and (source.file, source.doc, kind, source.index) in check.skip_schema:
            for message, path in _id_problems(kind, item):  # a failed ${{ }} is still in it:
                check.add(kind, index, message, path)  # schema errors would only be noise
            continue
        for message, path in check.memo("issues", kind, index, lambda i, kind=kind: _own_issues(kind, i)):
            check.add(kind, index, message, path)


def explained(kind: str, item: Any, message: str, path: FieldPath) -> tuple[FieldPath, str | None]:
    """The field a schema issue is really about and what to add for people (the value, the allowed
    ones), worked out again for the item at hand: issues are cached as the gateway words them, and an
    item with issues is rare. A value that is, or may be, a secret is never shown (nor explained)."""
    if not isinstance(item, dict):
        return path, None
    for issue in check_item(kind, item):
        if issue.explanation is not None and issue.message == message and tuple(issue.path) == path:
            detail, deeper = issue.explanation
            at = tuple(deeper) if deeper is not None else path
            if _may_be_secret(kind, item, at):
                return path, None
            return at, detail
    return path, None


def _may_be_secret(kind: str, item: dict[str, Any], at: FieldPath) -> bool:
    """Whether the value at `at` is, holds or lies within a secret (by the classifier, or by its name)."""
    if any(isinstance(step, str) and is_secret_name(step) for step in at):
        return True
    return any(finding.path[:len(at)] == at or at[:len(finding.path)] == finding.path
               for finding in walk_item(kind, item))


def _own_issues(kind: str, item: dict[str, Any]) -> tuple[tuple[str, FieldPath], ...]:
    """An item's id problems (gitsync's wording) and APISIX's schema issues (except those the id
    problems say better, and the gateway's own words for a client_cert_id, which references say)."""
    own = _id_problems(kind, item)
    replaced = {path for _, path in own}
    return (*own, *((issue.message, tuple(issue.path)) for issue in check_item(kind, item)
                    if tuple(issue.path) not in replaced and not issue.message.startswith(SSL_LOOKUP)))


def unmanaged_warnings(payload: Mapping[str, list[Any]], unmanaged: Collection[str]) -> list[str]:
    """The repo's items of kinds gitsync leaves alone are never pushed: say so, with the pushed items
    that refer to them (a route's ``$secret://vault/main/…``), which work only if the gateway holds
    its own item of that id."""
    warnings = []
    for kind, items in payload.items():
        if not items or kind not in unmanaged:
            continue
        ids = {(kind, ident) for item in items if (ident := item_id(kind, item)) is not None}
        users = sorted(f"{k}/{i}" for k, i in dependants(payload, ids) if k not in unmanaged)
        text = (f"{len(items)} {kind} item(s) of the repo are not pushed: {kind} is unmanaged (the "
                f"gateway's own {kind} stay as they are)")
        if users:
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            text += (f"; {len(users)} pushed item(s) refer to them and work only if the gateway holds "
                     f"its own: {shown}")
        warnings.append(text)
    return warnings


def check_references(check: Checker) -> None:
    """Every id an item refers to is declared (standalone APISIX accepts dangling ones, then 404/502/503).

    A reference a file that did not load may satisfy is not reported (that check depends on it);
    every other one is, whatever else failed.
    """
    declared = {kind: check.ids(kind) for kind in KINDS}
    unmanaged = check.options.unmanaged

    def dangling(target: str, ident: str) -> bool:
        return target not in unmanaged and ident not in declared[target] \
            and not check.may_be_declared_elsewhere(ident)

    for kind in KINDS:
        if not may_refer(kind):
            continue
        for index, _item in _items_to_look_at(check, kind, declared):
            for ref in check.memo("references", kind, index, lambda i, kind=kind: ids_named(kind, i)):
                if ref.label == "client_cert_id":
                    _client_cert(check, kind, index, ref.at, ref.ident, dangling(ref.target, ref.ident))
                elif dangling(ref.target, ref.ident):
                    check.add(kind, index, f"{ref.label} {ref.ident!r} names no item of {ref.target}", ref.at)
    if "consumers" not in unmanaged:
        consumer_names = {str(i.get("username")) for _, i in check.items("consumers")
                          if not is_credential("consumers", i)}
        for index, item in check.items("consumers"):
            if is_credential("consumers", item) and isinstance(item.get("id"), str):
                owner = item["id"].split("/credentials/")[0]
                if owner not in consumer_names and not check.may_be_declared_elsewhere(owner):
                    check.add("consumers", index, f"credential of an unknown consumer {owner!r}", ("id",))
    _check_secret_references(check, declared["secrets"])


def _items_to_look_at(check: Checker, kind: str, declared: Mapping[str, set[str]]
                      ) -> Iterator[tuple[int, dict[str, Any]]]:
    """The items whose references must be looked at one by one: all of them but the plain lists
    whose every reference names a declared item (or an unmanaged kind)."""
    unmanaged = check.options.unmanaged
    items = check.payload.get(kind, ())
    for run in check.runs(kind):
        known = run.segment
        if known is not None and not known.look_closer and all(
                target in unmanaged or ids <= declared[target] for target, ids in known.named.items()):
            continue
        for index in range(run.lo, run.hi):
            if isinstance(items[index], dict):
                yield index, items[index]


def _items_that_may_name_secrets(check: Checker, kind: str, items: list[Any]
                                 ) -> Iterator[tuple[int, dict[str, Any]]]:
    """The mapping items of `kind` whose file may hold ``$secret://`` (plain files say whether)."""
    for run in check.runs(kind):
        if run.file is not None and not run.file.secret_references:
            continue
        for index in range(run.lo, run.hi):
            item = items[index]
            if not isinstance(item, dict):
                continue
            if run.file is None:
                facts, _ = check.facts_of(kind, index)
                if facts is not None and not facts.secret_references:
                    continue
            yield index, item


def _client_cert(check: Checker, kind: str, index: int, at: FieldPath, ident: str, dangling: bool) -> None:
    """An upstream's ``tls.client_cert_id``: standalone APISIX looks the ssl up in etcd, which it does
    not have, so it refuses any such upstream (``failed to fetch ssl info by ssl id``)."""
    if dangling:
        check.add(kind, index, f"client_cert_id {ident!r} names no item of ssls", at)
    else:
        check.add(kind, index, f"client_cert_id {ident!r}: a standalone gateway cannot use it (APISIX looks "
                  "the ssl up in etcd, which standalone mode has not, and refuses the config); give the "
                  "certificate inline as tls.client_cert and tls.client_key", at)


def _check_secret_references(check: Checker, declared: set[str]) -> None:
    unmanaged = "secrets" in check.options.unmanaged
    for kind, items in check.payload.items():
        for index, item in _items_that_may_name_secrets(check, kind, items):
            for path, text in string_leaves(item):
                if not text.startswith("$secret://"):
                    continue
                match = SECRET_REFERENCE.match(text)
                if not match or not match.group(1) or not match.group(2):
                    check.add(kind, index, f"malformed secret reference {text!r}: expected "
                              "$secret://<manager>/<name>/<key>", path)
                    continue
                manager, name = match.group(1), match.group(2)
                if manager not in SECRET_MANAGERS:
                    check.add(kind, index, f"{text!r}: unknown secret manager {manager!r} (one of "
                              f"{', '.join(SECRET_MANAGERS)})", path)
                elif not unmanaged and f"{manager}/{name}" not in declared \
                        and not check.may_be_declared_elsewhere(f"{manager}/{name}"):
                    check.add(kind, index, f"{text!r} names no item of secrets (declare one with id "
                              f"{manager}/{name})", path)


def check_ssls(check: Checker) -> None:
    """Each key belongs to its certificate; no SNI is served by two certificates (parsing: the schema)."""
    served: dict[str, int] = {}
    for index, item in check.items("ssls"):
        pairs: list[tuple[Any, Any, FieldPath]] = [(item.get("cert"), item.get("key"), ("key",))]
        certs, keys = item.get("certs"), item.get("keys")
        if isinstance(certs, list) and isinstance(keys, list):
            pairs += [(c, k, ("keys", i)) for i, (c, k) in enumerate(zip(certs, keys, strict=False))]
        for cert, key, key_field in pairs:
            if not isinstance(cert, str) or not isinstance(key, str):
                continue  # missing or mistyped: the schema says so
            if ENV_OR_SECRET.match(cert) or ENV_OR_SECRET.match(key):
                continue  # resolved by APISIX at handshake time
            from gitsync.render.certs import key_matches  # cryptography's x509: only for ssls

            if not key_matches(cert, key):
                check.add("ssls", index, "the private key does not match the certificate", key_field)
        if item.get("type", "server") != "server":
            continue
        names: list[tuple[str, FieldPath]] = []
        if isinstance(item.get("sni"), str):
            names.append((item["sni"], ("sni",)))
        if isinstance(item.get("snis"), list):
            names += [(n, ("snis", i)) for i, n in enumerate(item["snis"]) if isinstance(n, str)]
        for name, at in names:
            other = served.setdefault(name.lower(), index)
            if other != index:
                where = check.sources.location("ssls", other)
                other_id = item_id("ssls", check.payload["ssls"][other])
                check.add("ssls", index, f"sni {name!r} is also served by ssls[{other_id}]"
                          + (f" at {where}" if where else ""), at)


def check_limits(check: Checker) -> None:
    count = sum(len(items) for items in check.payload.values())
    if count > check.options.max_items:
        check.problems.append(Problem(f"{count} items, more than max_items = {check.options.max_items}"))
        return
    size = _payload_size(check)
    if size > check.options.max_payload_size:
        check.problems.append(Problem(
            f"the rendered payload is {size} bytes, more than max_payload_size = "
            f"{check.options.max_payload_size} (APISIX keeps its whole config in a 10 MiB shared dict)"))


def frame_size(payload: Mapping[str, Sequence[Any]]) -> int:
    """`len(payload_json(payload))` less its items' own JSON: braces, kinds, brackets and commas."""
    size = 2 + max(len(payload) - 1, 0)  # {} and the commas between kinds
    for kind, items in payload.items():
        size += len(json.dumps(kind)) + 3 + max(len(items) - 1, 0)  # "kind":[] and the commas
    return size


def _payload_size(check: Checker) -> int:
    """`len(payload_json(payload))`, from each item's JSON size (kept for the items of plain files)."""
    size = frame_size(check.payload)
    for kind in check.payload:
        for run in check.runs(kind):
            size += run.segment.size if run.segment is not None else sum(
                check.memo("sizes", kind, index, _json_size) for index in range(run.lo, run.hi))
    return size


def _json_size(item: Any) -> int:
    return len(json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


def payload_json(payload: dict[str, Any]) -> bytes:
    """The payload as deterministic JSON bytes: sorted keys, compact, UTF-8."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def item_contents(payload: Mapping[str, list[Any]], sources: SourceMap, facts: Mapping[str, FileFacts],
                  segments: Mapping[str, Sequence[Segment]] | None = None
                  ) -> tuple[dict[str, list[bytes]], dict[str, list[int]]]:
    """Each item's canonical content (what reconcile compares) and where its modifiedIndex goes in it
    (`gitsync.content.content_split`), kept for the items of plain files."""
    check = Checker(dict(payload), sources, RenderOptions(), [], facts, segments=segments or {})
    contents: dict[str, list[bytes]] = {}
    splits: dict[str, list[int]] = {}
    for kind in payload:
        found, where = contents[kind], splits[kind] = [], []
        for run in check.runs(kind):
            if run.segment is not None:
                found += run.segment.contents
                where += run.segment.splits
                continue
            for index in range(run.lo, run.hi):
                found.append(check.memo("contents", kind, index, content_bytes))
                where.append(check.memo("splits", kind, index,
                                        lambda item, content=found[-1]: content_split(item, content)))
    return contents, splits


def validate(payload: dict[str, list[Any]], sources: SourceMap, options: RenderOptions,
             unknown: Mapping[str, bytes | None] | None = None, facts: Mapping[str, FileFacts] | None = None,
             skip_schema: Set[tuple[str, int, str, int]] = frozenset(),
             segments: Mapping[str, Sequence[Segment]] | None = None,
             ids: Mapping[str, Sequence[str | None]] | None = None) -> list[Problem]:
    """Every problem of a built payload.

    `unknown` names the files that did not load: a reference to an id one of them may declare
    (its text holds the id; or it was never read) is not reported, every other one is. `facts`
    holds what may be reused about files whose items are exactly as parsed; a file not in it is
    checked in full. Items in `skip_schema` (file, document, kind, index in the document) hold a
    failed substitution and skip the schema check. `segments` (build's runs of whole documents) let
    the items of an unchanged plain file be checked as one; `ids` is each item's id, when build has it.
    """
    check = Checker(payload, sources, options, [], facts or {}, skip_schema, unknown or {}, segments or {},
                    ids)
    check_items(check)
    check_references(check)
    check_ssls(check)
    check_limits(check)
    return check.problems
