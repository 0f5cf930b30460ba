"""Validation of a built payload: ids, references, certificates, limits, and each item's schema.

Every problem is collected (not just the first) and placed at its file:line:col
through the source map. The item schemas live in `gitsync.schema`, shared with the
APISIX test double, so both speak APISIX's wording.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gitsync.kinds import KINDS, is_credential, item_id
from gitsync.problems import Problem
from gitsync.render.options import RenderOptions
from gitsync.render.sourcemap import FieldPath, SourceMap, describe

ID_PATTERN = re.compile(r"^[a-zA-Z0-9-_.]+$")
ID_MAX = 64
USERNAME_PATTERN = re.compile(r"^[a-zA-Z0-9_\-]+$")
CREDENTIAL_PATTERN = re.compile(r"^[a-zA-Z0-9-_]+/credentials/[a-zA-Z0-9-_.]+$")
SECRET_MANAGERS = ("vault", "aws", "gcp")
SECRET_REFERENCE = re.compile(r"^\$secret://([^/]*)/([^/]*)/(.+)$")
ENV_OR_SECRET = re.compile(r"^\$(secret|env|ENV)://")

#: (kind, field, kind the field names): checked here because standalone APISIX does not (§5.4).
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
class Checker:
    payload: dict[str, list[Any]]
    sources: SourceMap
    options: RenderOptions
    problems: list[Problem]

    def add(self, kind: str, index: int | None, message: str, field: FieldPath = ()) -> None:
        self.problems.append(self.sources.problem(kind, index, message, field))

    def items(self, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
        for index, item in enumerate(self.payload.get(kind, ())):
            if isinstance(item, dict):
                yield index, item

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


def check_shapes_and_ids(check: Checker) -> None:
    for kind, items in check.payload.items():
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                check.add(kind, index, f"an item must be a mapping, not {describe(item)}")
                continue
            if kind == "consumers":
                _check_consumer_id(check, index, item)
            elif kind == "secrets":
                _check_secret_id(check, index, item)
            elif "id" not in item:
                what = "the plugin's name" if kind == "plugin_metadata" else "one"
                check.add(kind, index, f"missing id: every item needs {what} (APISIX before 3.17 fails "
                                       "on items without)")
            else:
                reason = _plain_id_problem(item["id"])
                if reason:
                    check.add(kind, index, reason, ("id",))


def _check_consumer_id(check: Checker, index: int, item: dict[str, Any]) -> None:
    if is_credential("consumers", item):
        ident = item["id"]
        if not isinstance(ident, str) or not CREDENTIAL_PATTERN.match(ident) or not 15 <= len(ident) <= 128:
            check.add("consumers", index, f"invalid credential id {str(ident)!r}: expected "
                      "<username>/credentials/<name> (15 to 128 characters of letters, digits, '-', '_', "
                      "and '.' in the name)", ("id",))
        return
    if "username" not in item:
        check.add("consumers", index, "missing username: a consumer is identified by its username "
                                      "(a credential by id <username>/credentials/<name>)")
        return
    username = item["username"]
    if not isinstance(username, str) or not USERNAME_PATTERN.match(username) or len(username) > 256:
        check.add("consumers", index, f"invalid username {str(username)!r}: 1 to 256 letters, digits, "
                                      "'-' and '_'", ("username",))
    elif "id" in item and item["id"] != username:
        check.add("consumers", index, "wrong username: a consumer's id, when given, must equal its username",
                  ("id",))


def _check_secret_id(check: Checker, index: int, item: dict[str, Any]) -> None:
    ident = item.get("id")
    if ident is None:
        check.add("secrets", index, "missing id: a secret manager's id is <manager>/<name>, e.g. vault/main")
        return
    manager, _, name = str(ident).partition("/")
    if not isinstance(ident, str) or not name:
        check.add("secrets", index, f"invalid secret id: {ident} (expected <manager>/<name>, e.g. "
                  "vault/main)", ("id",))
    elif manager not in SECRET_MANAGERS:
        check.add("secrets", index, f"invalid secret manager: {manager} (one of "
                  f"{', '.join(SECRET_MANAGERS)})", ("id",))
    elif "/" in name or not ID_PATTERN.match(name) or len(name) > ID_MAX:
        check.add("secrets", index, f"invalid secret id: {ident} (the name after '{manager}/' is one segment "
                  "of letters, digits, '-', '_' and '.'; $secret:// references can name no other)", ("id",))


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


def _strings(value: Any, path: FieldPath = ()) -> Iterator[tuple[FieldPath, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _strings(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _strings(child, (*path, i))


def _check_secret_references(check: Checker, declared: set[str]) -> None:
    unmanaged = "secrets" in check.options.unmanaged
    for kind in check.payload:
        for index, item in check.items(kind):
            for path, text in _strings(item):
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
    """Certificates and keys parse and match; no SNI is served by two certificates."""
    from gitsync.render.certs import check_pair

    served: dict[str, int] = {}
    for index, item in check.items("ssls"):
        pairs: list[tuple[Any, Any, FieldPath, FieldPath]] = []
        if "cert" in item or "key" in item:
            pairs.append((item.get("cert"), item.get("key"), ("cert",), ("key",)))
        certs, keys = item.get("certs"), item.get("keys")
        if isinstance(certs, list) and isinstance(keys, list):
            if len(certs) != len(keys):
                check.add("ssls", index, "mismatched number of certs and keys", ("certs",))
            for i, (cert, key) in enumerate(zip(certs, keys, strict=False)):
                pairs.append((cert, key, ("certs", i), ("keys", i)))
        for cert, key, cert_field, key_field in pairs:
            if not isinstance(cert, str) or not isinstance(key, str):
                continue  # missing or mistyped: the schema says so
            if ENV_OR_SECRET.match(cert) or ENV_OR_SECRET.match(key):
                continue  # resolved by APISIX at handshake time
            for message, which in check_pair(cert, key):
                check.add("ssls", index, message, cert_field if which == "cert" else key_field)
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
             references: bool = True) -> list[Problem]:
    """Every problem of a built payload; `references` False skips cross-item checks (a file failed)."""
    check = Checker(payload, sources, options, [])
    check_shapes_and_ids(check)
    if references:
        check_references(check)
    check_ssls(check)
    check_limits(check)
    return check.problems
