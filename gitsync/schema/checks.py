"""APISIX 3.17+'s per-resource checkers and ``config_validate``, with the gateway's messages.

`check_item` is the Admin-API checker of one item (schema, then the semantic
checks of ``apisix/admin/<kind>.lua``, ``apisix/upstream.lua``,
``apisix/ssl.lua``, ``apisix/plugin.lua``); `check_payload` is
``config_validate.validate_configuration`` over a whole standalone body. Both
are pure. tests/testing/test_golden.py holds them to a real 3.18's recorded answers.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Callable, Mapping
from copy import deepcopy
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gitsync.kinds import VERSIONED_KEYS, is_credential, version_key
from gitsync.schema import definitions as defs
from gitsync.schema.expr import expr_problem
from gitsync.schema.jsonschema import (
    Explanation,
    Path,
    cjson_encode,
    first_error,
    is_number,
    is_secret_ref,
    iter_explained,
    lua_number,
    lua_tostring,
    lua_type,
)
from gitsync.schema.live_state import live_conflict
from gitsync.schema.lua import compile_problem
from gitsync.schema.plugin_schemas import META, PLUGIN_SCHEMAS
from gitsync.schema.plugins import AUTH_PLUGINS, PLUGINS, STREAM_PLUGINS
from gitsync.schema.proto import unknown_type
from gitsync.schema.validity import valid

INVALID = "invalid configuration: "
#: APISIX's install prefix, in the Lua error texts that name its source files (the default install).
APISIX_HOME = "/usr/local/apisix"
CONFIG_VALIDATE = APISIX_HOME + "/apisix/admin/config_validate.lua"


@dataclass(frozen=True)
class SchemaIssue:
    """One thing APISIX refuses in an item: where (JSON path inside the item) and its exact message."""

    path: tuple[str | int, ...]
    message: str
    #: For people only (`gitsync validate`), never in what the gateway answers: the value and the allowed
    #: ones, and the path inside `path` the message is really about (see `jsonschema.Explanation`).
    explanation: Explanation | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PayloadIssue:
    """One refusal of ``config_validate`` over a whole body (``kind``/``index`` None when not per item)."""

    kind: str | None
    index: int | None
    resource_id: str | None
    message: str
    #: A Lua error raised outside config_validate's per-item guard, at this line of config_validate.lua:
    #: it ends the whole validation (validate answers only it; PUT crashes with a 500 page).
    lua_line: int | None = None

    @property
    def lua_error(self) -> str:
        """The error text as the gateway prints it, with its source location."""
        return f"{CONFIG_VALIDATE}:{self.lua_line}: {self.message}" if self.lua_line else self.message


Issues = list[SchemaIssue]


def _present(conf: Mapping[str, Any], key: str) -> bool:
    """Lua truthiness of ``conf.key``: set and not ``false`` (cjson's null is truthy)."""
    return key in conf and conf[key] is not False


def _schema(schema: Mapping[str, Any], value: Any, base: Path = (), prefix: str = INVALID) -> Issues:
    """Every refusal of `value` by `schema` (defaults written into it), in the library's words: the
    compiled check answers the usual case, no refusal; the reference walk says what a refusal is."""
    if valid(schema, value):
        return []
    return [SchemaIssue((*base, *path), prefix + message,
                        None if why is None else (why[0], None if why[1] is None else (*base, *why[1])))
            for path, message, why in iter_explained(schema, value)]


CONSUMER, ROUTE = "consumer", "route"  # which of a plugin's schemas applies to a body


def _has_secret_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_secret_ref(v) for v in value.values())
    return is_secret_ref(value)


def _without_secret_refs(schema: Mapping[str, Any], conf: Any) -> tuple[Mapping[str, Any], Any]:
    """3.17+: a plugin body's ``$secret://``/``$env://`` strings skip every constraint (resolved later).

    APISIX checks a copy of the body without those fields against a copy of the
    schema that neither declares nor requires them.
    """
    if not isinstance(conf, dict) or not isinstance(schema, Mapping) or not _has_secret_ref(conf):
        return schema, conf
    refs = {key for key, value in conf.items() if is_secret_ref(value)}
    properties = dict(schema.get("properties") or {})
    kept = {}
    for key, value in conf.items():
        if key in refs:
            properties.pop(key, None)
        elif isinstance(value, dict) and isinstance(properties.get(key), Mapping):
            properties[key], kept[key] = _without_secret_refs(properties[key], value)
        else:
            kept[key] = value
    if not refs and kept == conf:
        return schema, conf
    stripped = dict(schema, properties=properties)
    if "required" in schema:
        stripped["required"] = [name for name in schema["required"] if name not in refs]
    return stripped, kept


@cache
def _plugin_schema(name: str, place: str) -> Mapping[str, Any]:
    """The plugin's schema for that place, with the injected ``_meta`` property."""
    known = PLUGIN_SCHEMAS[name]
    schema = known.consumer if place == CONSUMER and known.consumer is not None else known.schema
    return dict(schema, properties={**schema.get("properties", {}), "_meta": META})


#: The plugin bodies found valid, each by a SHA-256 of its plugin, place and exact marshal bytes: a
#: config repeats plugin bodies (one rate limit, one auth body on many routes), checked once each.
#: Digests only: no body (a substituted key, a token) outlives its render here.
_VALID_BODIES: set[bytes] = set()
_VALID_BODIES_MAX = 16_384  # 32 bytes each


def plugin_conf_problem(name: str, conf: Any, place: str = ROUTE) -> str | None:
    """Why the plugin's ``check_schema`` refuses `conf` (None: accepted, or a plugin not checked here).

    The answer is a function of the body's exact value (marshal keeps types apart: ``1`` and
    ``true`` are two bodies, though Python finds them equal), so a body found valid once is not
    checked again."""
    if name not in PLUGIN_SCHEMAS:
        return None
    try:
        frozen = marshal.dumps(conf)
    except ValueError:  # not plain data (a template string awaiting substitution)
        return _plugin_conf_problem(name, deepcopy(conf), place)
    key = hashlib.sha256(b"%s\0%s\0%s" % (name.encode(), place.encode(), frozen)).digest()
    if key in _VALID_BODIES:
        return None
    problem = _plugin_conf_problem(name, marshal.loads(frozen), place)
    if problem is None:
        if len(_VALID_BODIES) >= _VALID_BODIES_MAX:
            _VALID_BODIES.clear()
        _VALID_BODIES.add(key)
    return problem


def _copy(value: Any) -> Any:
    """A deep copy of plain data, by marshal (about 3× `deepcopy`'s speed); `deepcopy` for the rest."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return deepcopy(value)


def _plugin_conf_problem(name: str, conf: Any, place: str) -> str | None:
    """`plugin_conf_problem` of `conf`, a copy of the body this may change (schema defaults)."""
    known = PLUGIN_SCHEMAS[name]
    schema, conf = _without_secret_refs(_plugin_schema(name, place), conf)
    error = None if valid(schema, conf) else first_error(schema, conf)
    if error is not None:
        return error[1]
    return known.extra(conf) if known.extra is not None and isinstance(conf, dict) else None


def _plugins(conf: Mapping[str, Any], known: frozenset[str], prefix: str = "", place: str = ROUTE,
             stream: bool = False) -> Issues:
    """``plugin.check_schema``: each body a table, the name known, the body valid for the plugin."""
    plugins = conf.get("plugins")
    if not isinstance(plugins, dict):
        return []
    issues = []
    for name, plugin_conf in plugins.items():
        if not isinstance(plugin_conf, dict | list):
            message = f"invalid plugin conf {cjson_encode(plugin_conf)} for plugin [{name}]"
        elif name not in known:
            message = f"unknown plugin [{name}]"
        elif (problem := plugin_conf_problem(name, plugin_conf, place)) is not None:
            message = (f"failed to check the configuration of stream plugin [{name}]: {problem}" if stream
                       else f"failed to check the configuration of plugin {name} err: {problem}")
        elif isinstance(plugin_conf, dict) and isinstance(plugin_conf.get("_meta"), dict) and \
                (problem := expr_problem(plugin_conf["_meta"].get("filter") or [])) is not None:
            message = f"failed to validate the 'vars' expression: {problem}"
        else:
            continue
        issues.append(SchemaIssue(("plugins", name), prefix + message))
    return issues


def _lua_tonumber(text: str) -> float | None:
    try:
        return float(int(text.strip(), 0)) if text.strip().lower().startswith("0x") else float(text)
    except ValueError:
        return None


def _node_port(addr: str) -> float | None:
    """The port ``core.utils.parse_addr`` finds in a ``host:port`` node key (None: none given)."""
    if addr.startswith("["):
        if addr.endswith("]"):
            return None
        pos = addr.rfind(":", 0, len(addr) - 1)
        if pos <= 0 or addr[pos - 1] != "]":
            return None
    else:
        pos = addr.rfind(":", 0, len(addr) - 1)
        if pos < 0:
            return None
    return _lua_tonumber(addr[pos + 1:])


def _pem_problem(cert: Any, key: Any) -> str | None:
    """``apisix.ssl.validate``: the certificate (and key, when given) must parse."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        x509.load_pem_x509_certificate(str(cert).encode())
    except ValueError:
        return "failed to parse cert: PEM_read_bio_X509_AUX() failed"
    if key is None:
        return None
    if not str(key).startswith("---"):
        return "failed to decrypt previous encrypted key"
    try:
        serialization.load_pem_private_key(str(key).encode(), password=None)
    except (ValueError, TypeError):
        return "failed to parse key: PEM_read_bio_PrivateKey() failed"
    return None


def _upstream_semantics(up: Any, base: Path = ()) -> Issues:
    """``apisix/upstream.lua`` ``check_upstream_conf`` after its schema check."""
    if not isinstance(up, dict):
        return []
    issues: Issues = []
    nodes = up.get("nodes")
    if isinstance(nodes, dict):
        for addr in nodes:
            port = _node_port(addr)
            if port is not None and not 1 <= port <= 65535:
                issues.append(SchemaIssue((*base, "nodes", addr), f"invalid port {lua_number(port)}"))
    tls = up.get("tls") if isinstance(up.get("tls"), dict) else {}
    if _present(tls, "client_cert_id"):
        # Standalone has no etcd: the lookup the checker still makes cannot succeed.
        issues.append(SchemaIssue((*base, "tls", "client_cert_id"), (
            f"failed to fetch ssl info by ssl id [{lua_tostring(tls['client_cert_id'])}]: "
            "has no healthy etcd endpoint available")))
    if up.get("pass_host") == "rewrite" and up.get("upstream_host") in (None, ""):
        issues.append(SchemaIssue((*base, "upstream_host"),
                                  "`upstream_host` can't be empty when `pass_host` is `rewrite`"))
    if _present(tls, "client_cert"):
        problem = _pem_problem(tls["client_cert"], tls.get("client_key"))
        if problem:
            issues.append(SchemaIssue((*base, "tls", "client_cert"), problem))
    if up.get("type") == "chash":
        hash_on = up.get("hash_on", "vars")
        if hash_on != "consumer" and not _present(up, "key"):
            issues.append(SchemaIssue((*base, "key"), "missing key"))
        else:
            key_schema = {
                "vars": defs.UPSTREAM_HASH_VARS,
                "header": defs.UPSTREAM_HASH_HEADER,
                "cookie": defs.UPSTREAM_HASH_HEADER,
                "vars_combinations": defs.UPSTREAM_HASH_VARS_COMBINATIONS,
            }.get(hash_on)
            if key_schema is not None:
                issues += _schema(key_schema, up.get("key"), (*base, "key"))
    return issues


def _check_route(conf: dict[str, Any], _id: Any) -> Issues:
    """``apisix/admin/routes.lua``: host/hosts, schema, inline upstream, plugins, vars, Lua sources."""
    issues: Issues = []
    if _present(conf, "host") and _present(conf, "hosts"):
        issues.append(SchemaIssue(("hosts",), "only one of host or hosts is allowed"))
    if _present(conf, "remote_addr") and _present(conf, "remote_addrs"):
        issues.append(SchemaIssue(("remote_addrs",), "only one of remote_addr or remote_addrs is allowed"))
    schema_issues = _schema(defs.ROUTE, conf)
    if not schema_issues:
        issues += _upstream_semantics(conf.get("upstream"), ("upstream",))
    issues += schema_issues + _plugins(conf, PLUGINS)
    if schema_issues:
        return issues
    if _present(conf, "vars") and (problem := expr_problem(conf["vars"])) is not None:
        issues.append(SchemaIssue(("vars",), f"failed to validate the 'vars' expression: {problem}"))
    if _present(conf, "filter_func") and (problem := compile_problem("return " + conf["filter_func"])):
        issues.append(SchemaIssue(("filter_func",), f"failed to load 'filter_func' string: {problem}"))
    if _present(conf, "script") and (problem := compile_problem(conf["script"])):
        # APISIX also runs the script and wants a table back; gitsync never runs config code
        issues.append(SchemaIssue(("script",), f"failed to load 'script' string: {problem}"))
    return issues


def _with_inline_upstream(schema: defs.Schema, conf: dict[str, Any], plugins: frozenset[str],
                          stream: bool = False) -> Issues:
    """Schema, then the inline upstream's semantic checks, then the plugins (service, stream route)."""
    issues = _schema(schema, conf)
    if not issues:
        issues += _upstream_semantics(conf.get("upstream"), ("upstream",))
    return issues + _plugins(conf, plugins, stream=stream)


def _check_service(conf: dict[str, Any], _id: Any) -> Issues:
    return _with_inline_upstream(defs.SERVICE, conf, PLUGINS)


def _check_upstream(conf: dict[str, Any], _id: Any) -> Issues:
    issues = _schema(defs.UPSTREAM, conf)
    return issues or _upstream_semantics(conf)


def _check_consumer(conf: dict[str, Any], item_id: Any) -> Issues:
    issues = _schema(defs.CONSUMER, conf)
    if not issues and item_id is not None and item_id != conf.get("username"):
        issues.append(SchemaIssue(("id",), "wrong username"))
    return issues + _plugins(conf, PLUGINS, "invalid plugins configuration: ", CONSUMER)


def _check_credential(conf: dict[str, Any], _id: Any) -> Issues:
    issues = _schema(defs.CREDENTIAL, conf) + _plugins(conf, PLUGINS, "invalid plugins configuration: ",
                                                       CONSUMER)
    if issues:
        return issues
    for name in conf.get("plugins") or {}:
        if name not in AUTH_PLUGINS:
            issues.append(SchemaIssue(("plugins", name),
                                      "only supports auth type plugins in consumer credential"))
    return issues


def _schema_and_plugins(schema: Mapping[str, Any]) -> Callable[[dict[str, Any], Any], Issues]:
    def check(conf: dict[str, Any], _id: Any) -> Issues:
        return _schema(schema, conf) + _plugins(conf, PLUGINS)
    return check


def _check_ssl(conf: dict[str, Any], _id: Any) -> Issues:
    issues = _schema(defs.SSL, conf)
    if issues:
        return issues
    cert, key = conf.get("cert"), conf.get("key")
    if not is_secret_ref(cert) and not is_secret_ref(key):
        problem = _pem_problem(cert, key)
        if problem:
            issues.append(SchemaIssue(("cert",), problem))
    if conf.get("type") == "client":
        return issues
    certs, keys = conf.get("certs") or [], conf.get("keys") or []
    if len(certs) != len(keys):
        issues.append(SchemaIssue(("certs",), "mismatched number of certs and keys"))
    else:
        for index, (pair_cert, pair_key) in enumerate(zip(certs, keys, strict=True)):
            if is_secret_ref(pair_cert) or is_secret_ref(pair_key):
                continue
            problem = _pem_problem(pair_cert, pair_key)
            if problem:
                issues.append(SchemaIssue(("certs", index),
                                          f"failed to handle cert-key pair[{index + 1}]: {problem}"))
    client = conf.get("client")
    if isinstance(client, dict):
        problem = _pem_problem(client.get("ca"), None)
        if problem:
            issues.append(SchemaIssue(("client", "ca"), f"failed to validate client_cert: {problem}"))
    return issues


def _check_proto(conf: dict[str, Any], _id: Any) -> Issues:
    issues = _schema(defs.PROTO, conf)
    if not issues and (problem := unknown_type(conf["content"])):
        issues.append(SchemaIssue(("content",), f"invalid content: {PROTOC}: {problem}"))
    return issues


PROTOC = APISIX_HOME + "//deps/share/lua/5.1/protoc.lua:915"  # where protoc.lua raises its type errors


def _check_stream_route(conf: dict[str, Any], _id: Any) -> Issues:
    return _with_inline_upstream(defs.STREAM_ROUTE, conf, STREAM_PLUGINS, stream=True)


def _check_plugin_metadata(conf: dict[str, Any], item_id: Any) -> Issues:
    if item_id is None:
        return [SchemaIssue(("id",), "missing plugin name")]
    name = lua_tostring(item_id)
    if name not in PLUGINS | STREAM_PLUGINS:
        return [SchemaIssue(("id",), "invalid plugin name")]
    known = PLUGIN_SCHEMAS.get(name)
    if known is None or known.metadata is None:
        return []  # the body follows the plugin's own metadata_schema: unchecked for other plugins
    return _schema(known.metadata, conf)


def _check_secret(conf: dict[str, Any], item_id: Any) -> Issues:
    text_id = lua_tostring(item_id)
    if "/" not in text_id:
        return [SchemaIssue(("id",), f"invalid secret id: {text_id}")]
    manager = text_id.split("/", 1)[0]
    schema = defs.SECRET_MANAGERS.get(manager)
    if schema is None:
        return [SchemaIssue(("id",), f"invalid secret manager: {manager}")]
    return _schema(schema, conf)


_CHECKERS: dict[str, Callable[[dict[str, Any], Any], Issues]] = {
    "routes": _check_route,
    "services": _check_service,
    "upstreams": _check_upstream,
    "consumers": _check_consumer,
    "consumer_groups": _schema_and_plugins(defs.CONSUMER_GROUP),
    "ssls": _check_ssl,
    "global_rules": _schema_and_plugins(defs.GLOBAL_RULE),
    "plugin_configs": _schema_and_plugins(defs.PLUGIN_CONFIG),
    "plugin_metadata": _check_plugin_metadata,
    "protos": _check_proto,
    "stream_routes": _check_stream_route,
    "secrets": _check_secret,
}


def check_item(kind: str, item: object) -> list[SchemaIssue]:
    """Everything APISIX 3.17+ refuses in one item of `kind`; the first issue is what it answers.

    Checks run on a copy, as APISIX does: schema defaults never leak into `item`.
    """
    if kind not in _CHECKERS:
        raise ValueError(f"unknown kind {kind!r}")
    if not isinstance(item, dict | list | str):
        # config_validate indexes the item before any checker runs: a Lua error, caught by pcall.
        return [SchemaIssue((), f"attempt to index local 'item' (a {lua_type(item)} value)")]
    conf = _copy(item)
    item_id = conf.get("id") if isinstance(conf, dict) else None
    if is_credential(kind, conf):
        return _check_credential(conf, item_id)
    if not isinstance(conf, dict):
        # A string or an array has no fields: its id reads as nil, then only the schema speaks.
        if kind == "secrets":
            return _check_secret({}, None)
        if kind == "plugin_metadata":
            return _check_plugin_metadata({}, None)
        return _schema(_SCHEMAS[kind], conf)
    return _CHECKERS[kind](conf, item_id)


_SCHEMAS: dict[str, Mapping[str, Any]] = {
    "routes": defs.ROUTE,
    "services": defs.SERVICE,
    "upstreams": defs.UPSTREAM,
    "consumers": defs.CONSUMER,
    "consumer_groups": defs.CONSUMER_GROUP,
    "ssls": defs.SSL,
    "global_rules": defs.GLOBAL_RULE,
    "plugin_configs": defs.PLUGIN_CONFIG,
    "protos": defs.PROTO,
    "stream_routes": defs.STREAM_ROUTE,
}


def _resource_id(item: object) -> str:
    """3.17+ ``resource_id``: the id, else the username, else ``""``."""
    if isinstance(item, dict):
        for key in ("id", "username"):
            if item.get(key) is not None and item.get(key) is not False:
                return lua_tostring(item[key])
    return ""


def _duplicate(kind: str, item: object, seen: set[tuple[str, Any]]) -> str | None:
    if not isinstance(item, dict):
        return None
    label = "id"
    identifier = item.get("id")
    if kind == "consumers":
        if identifier is None or identifier is False:
            identifier, label = item.get("username"), "username"
        else:
            label = "credential id"
    if identifier is None or identifier is False or isinstance(identifier, dict | list):
        return None
    key = (lua_type(identifier), float(identifier) if is_number(identifier) else identifier)
    if key in seen:
        return f"found duplicate {label} {lua_tostring(identifier)} in {kind}"
    seen.add(key)
    return None


def _length_error(items: object) -> PayloadIssue | None:
    """The Lua error ``#items``/``ipairs(items)`` raises when a kind is not a list (nothing for an object)."""
    if isinstance(items, str):
        message = "bad argument #1 to 'ipairs' (table expected, got string)"
        return PayloadIssue(None, None, None, message, lua_line=150) if items else None
    if isinstance(items, dict | list) or items is False:
        return None
    message = f"attempt to get length of local 'items' (a {lua_type(items)} value)"
    return PayloadIssue(None, None, None, message, lua_line=145)


def _item_crash(kind: str, item: object) -> PayloadIssue | None:
    """An item Lua cannot index (a number, boolean or null): the error escapes the per-item guard."""
    if isinstance(item, dict | list | str):
        return None
    # plugins has no checker: check_duplicate indexes the item first; other kinds fail when the
    # refusal of the item is written down (its resource_id), after the guarded checker refused it
    return PayloadIssue(None, None, None, f"attempt to index local 'item' (a {lua_type(item)} value)",
                        lua_line=77 if kind == "plugins" else 160)


def check_payload(body: Mapping[str, object], *, collect_all: bool = True,
                  live: Mapping[str, Any] | None = None) -> list[PayloadIssue]:
    """``config_validate.validate_configuration`` (3.17+) over a whole standalone body.

    `collect_all` False is the PUT mode: the first refusal only, with PUT's wording
    (``K_conf_version must be a number``). True is the validate endpoint's mode: one
    issue per refused item or version key. `live`, the gateway's current config,
    enables the checks APISIX makes against live state (global-rule plugins 3.17+,
    consumer auth keys 3.18+). A Lua error outside the per-item guard (an issue with
    `lua_line`) ends the check: it is then the only issue.
    """
    issues: list[PayloadIssue] = []
    for kind in VERSIONED_KEYS:
        vkey = version_key(kind)
        version = body.get(vkey, False)
        if version is not False and not is_number(version):
            if not collect_all:
                return [PayloadIssue(kind, None, None, f"{vkey} must be a number")]
            issues.append(PayloadIssue(kind, None, None, f"{vkey} must be a number, got {lua_type(version)}"))

        items = body.get(kind, False)
        crash = _length_error(items)
        if crash:
            return [crash]
        if not isinstance(items, list):
            continue
        seen: set[tuple[str, Any]] = set()
        for index, item in enumerate(items):
            crash = _item_crash(kind, item)
            if crash:
                return [crash]
            if kind == "plugins":
                found: list[str] = []  # plugins has no checker in APISIX
            else:
                found = [i.message for i in check_item(kind, item)]
                conflict = None if found else live_conflict(kind, item, live)
                if conflict:
                    found.append(conflict)
            if found:
                issues.append(PayloadIssue(kind, index, _resource_id(item), found[0]))
                if not collect_all:
                    return issues
            duplicate = _duplicate(kind, item, seen)
            if duplicate:
                issues.append(PayloadIssue(kind, index, _resource_id(item), duplicate))
                if not collect_all:
                    return issues
    return issues
