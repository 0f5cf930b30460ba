"""Validation of a built payload: ids, references, certificates, limits, and each item's schema.

Every problem is collected (not just the first) and placed at its file:line:col
through the source map. The item schemas live in `gitsync.schema`, shared with the
APISIX test double, so both speak APISIX's wording.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.problems import Problem
from gitsync.render.certs import key_matches
from gitsync.render.options import RenderOptions
from gitsync.render.sourcemap import FieldPath, SourceMap, describe, string_leaves
from gitsync.schema import SchemaIssue, check_item

ID_PATTERN = re.compile(r"^[a-zA-Z0-9-_.]+$")
ID_MAX = 64
SECRET_MANAGERS = ("vault", "aws", "gcp")
SECRET_REFERENCE = re.compile(r"^\$secret://([^/]*)/([^/]*)/(.+)$")
ENV_OR_SECRET = re.compile(r"^\$(secret|env|ENV)://")

#: (kind, field, kind the field names): checked here because standalone APISIX skips references.
REFERENCES: tuple[tuple[str, str, str], ...] = (
    ("routes", "upstream_id", "upstreams"),
    ("routes", "service_id", "services"),
    ("routes", "plugin_config_id", "plugin_configs"),
    ("services", "upstream_id", "upstreams"),
    ("consumers", "group_id", "consumer_groups"),
    ("stream_routes", "upstream_id", "upstreams"),
    ("stream_routes", "service_id", "services"),
)


@dataclass
class FileFacts:
    """What validation may reuse about one file whose items are exactly as parsed (no templates, no SOPS)."""

    #: (doc, kind, index) → the item's schema issues; lives as long as the file's parse is cached.
    schema_issues: dict[Any, tuple[SchemaIssue, ...]]
    secret_references: bool  # the bytes contain "$secret://"


@dataclass
class Checker:
    payload: dict[str, list[Any]]
    sources: SourceMap
    options: RenderOptions
    problems: list[Problem]
    facts: Mapping[str, FileFacts]
    skip_schema: Set[tuple[str, int, str, int]] = frozenset()

    def add(self, kind: str, index: int | None, message: str, field: FieldPath = ()) -> None:
        self.problems.append(self.sources.problem(kind, index, message, field))

    def items(self, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
        for index, item in enumerate(self.payload.get(kind, ())):
            if isinstance(item, dict):
                yield index, item

    def facts_of(self, kind: str, index: int) -> tuple[FileFacts | None, Any]:
        """The reusable facts of the file an item came from, and the item's key in them."""
        source = self.sources.source(kind, index)
        if source is None:
            return None, None
        return self.facts.get(source.file), (source.doc, kind, source.index)

    def ids(self, kind: str) -> set[str]:
        return {ident for _, item in self.items(kind) if (ident := item_id(kind, item)) is not None}


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
    """Each item on its own: a mapping, a good id, APISIX's schema (reused for unchanged files)."""
    for kind, items in check.payload.items():
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                check.add(kind, index, f"an item must be a mapping, not {describe(item)}")
                continue
            own = _id_problems(kind, item)
            for message, field in own:
                check.add(kind, index, message, field)
            source = check.sources.source(kind, index)
            if source is not None and (source.file, source.doc, kind, source.index) in check.skip_schema:
                continue  # a failed ${{ }} is still in it: schema errors would only be noise
            facts, key = check.facts_of(kind, index)
            issues = facts.schema_issues.get(key) if facts is not None else None
            if issues is None:
                issues = tuple(check_item(kind, item))  # an empty tuple costs the cache nothing
                if facts is not None:
                    facts.schema_issues[key] = issues
            replaced = {field for _, field in own}
            for issue in issues:
                if tuple(issue.path) not in replaced:
                    check.add(kind, index, issue.message, tuple(issue.path))


def check_references(check: Checker) -> None:
    """Every id an item refers to is declared (standalone APISIX accepts dangling ones, then 404/502/503)."""
    declared = {kind: check.ids(kind) for kind in KINDS}
    unmanaged = check.options.unmanaged
    for kind, field, target in REFERENCES:
        if target in unmanaged:
            continue
        for index, item in check.items(kind):
            value = item.get(field)
            if value is None or isinstance(value, bool) or not isinstance(value, str | int):
                continue
            if str(value) not in declared[target]:
                check.add(kind, index, f"{field} {str(value)!r} names no item of {target}", (field,))
    if "consumers" not in unmanaged:
        consumer_names = {str(i.get("username")) for _, i in check.items("consumers")
                          if not is_credential("consumers", i)}
        for index, item in check.items("consumers"):
            if is_credential("consumers", item) and isinstance(item.get("id"), str):
                owner = item["id"].split("/credentials/")[0]
                if owner not in consumer_names:
                    check.add("consumers", index, f"credential of an unknown consumer {owner!r}", ("id",))
    _check_secret_references(check, declared["secrets"])


def _check_secret_references(check: Checker, declared: set[str]) -> None:
    unmanaged = "secrets" in check.options.unmanaged
    for kind in check.payload:
        for index, item in check.items(kind):
            facts, _ = check.facts_of(kind, index)
            if facts is not None and not facts.secret_references:
                continue
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
                elif not unmanaged and f"{manager}/{name}" not in declared:
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
            if not key_matches(cert, key):
                check.add("ssls", index, "the private key does not match the certificate", key_field)
        if item.get("type", "server") != "server":
            continue
        names: list[tuple[str, FieldPath]] = []
        if isinstance(item.get("sni"), str):
            names.append((item["sni"], ("sni",)))
        if isinstance(item.get("snis"), list):
            names += [(n, ("snis", i)) for i, n in enumerate(item["snis"]) if isinstance(n, str)]
        for name, field in names:
            other = served.setdefault(name.lower(), index)
            if other != index:
                where = check.sources.location("ssls", other)
                other_id = item_id("ssls", check.payload["ssls"][other])
                check.add("ssls", index, f"sni {name!r} is also served by ssls[{other_id}]"
                          + (f" at {where}" if where else ""), field)


def check_limits(check: Checker) -> None:
    count = sum(len(items) for items in check.payload.values())
    if count > check.options.max_items:
        check.problems.append(Problem(f"{count} items, more than max_items = {check.options.max_items}"))
        return
    size = len(payload_json(check.payload))
    if size > check.options.max_payload_size:
        check.problems.append(Problem(
            f"the rendered payload is {size} bytes, more than max_payload_size = "
            f"{check.options.max_payload_size} (APISIX keeps its whole config in a 10 MiB shared dict)"))


def payload_json(payload: dict[str, Any]) -> bytes:
    """The payload as deterministic JSON bytes: sorted keys, compact, UTF-8."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def validate(payload: dict[str, list[Any]], sources: SourceMap, options: RenderOptions,
             references: bool = True, facts: Mapping[str, FileFacts] | None = None,
             skip_schema: Set[tuple[str, int, str, int]] = frozenset()) -> list[Problem]:
    """Every problem of a built payload.

    `references` False skips cross-item checks (a file failed to load: they would only
    add noise). `facts` holds what may be reused about files whose items are exactly as
    parsed; a file not in it is checked in full. Items in `skip_schema` (file, document,
    kind, index in the document) hold a failed substitution and skip the schema check.
    """
    check = Checker(payload, sources, options, [], facts or {}, skip_schema)
    check_items(check)
    if references:
        check_references(check)
    check_ssls(check)
    check_limits(check)
    return check.problems
