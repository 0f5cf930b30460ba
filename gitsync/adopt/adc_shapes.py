"""The shapes of ADC's declarative files: what type each field has, checked before a file is converted.

From ADC's own schema (``libs/sdk/src/core/schema.ts``, ADC 0.28): which fields are lists,
mappings, text, numbers or booleans, down to the plugin configurations (whose insides are
APISIX's to check). The conversion reads only files that pass, so a wrong type is reported
as ``file:line:col: field: expected …, got …`` and never met as an exception. What is
inside a field of the right type (an unknown field, a value out of range) is left to the
conversion and to the validation of the converted repo.

A field set to null counts as absent, as the conversion treats it; an item of a list or a
value of a mapping that is null is a wrong type. ADC coerces some text to numbers; gitsync
does not convert values, so a number field must hold a number.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gitsync.render.sourcemap import field_text

TEXT, INTEGER, NUMBER, BOOLEAN = "text", "integer", "number", "boolean"
MAPPING, LIST = "mapping", "list"


@dataclass(frozen=True)
class ListOf:
    item: Spec


@dataclass(frozen=True)
class RecordOf:
    """A mapping with any keys, each value of one shape."""

    value: Spec


@dataclass(frozen=True)
class OneOf:
    options: tuple[Spec, ...]


#: A type name, a list, a record, a choice, or a mapping of known fields (others are not looked at).
Spec = str | ListOf | RecordOf | OneOf | Mapping[str, "Spec"]

LABELS = RecordOf(OneOf((TEXT, ListOf(TEXT))))
PLUGINS = RecordOf(MAPPING)
TIMEOUT = {"connect": NUMBER, "send": NUMBER, "read": NUMBER}
_PASSIVE_HEALTHY = {"http_statuses": ListOf(INTEGER), "successes": INTEGER}
_PASSIVE_UNHEALTHY = {"http_statuses": ListOf(INTEGER), "http_failures": INTEGER, "tcp_failures": INTEGER,
                      "timeouts": INTEGER}
ACTIVE_CHECK = {"type": TEXT, "timeout": NUMBER, "concurrency": NUMBER, "host": TEXT, "port": INTEGER,
                "http_path": TEXT, "https_verify_certificate": BOOLEAN, "https_verify_cert": BOOLEAN,
                "http_request_headers": ListOf(TEXT), "http_req_headers": ListOf(TEXT),
                "healthy": {**_PASSIVE_HEALTHY, "interval": INTEGER},
                "unhealthy": {**_PASSIVE_UNHEALTHY, "interval": INTEGER}}
PASSIVE_CHECK = {"type": TEXT, "healthy": _PASSIVE_HEALTHY, "unhealthy": _PASSIVE_UNHEALTHY}
NODE = {"host": TEXT, "port": INTEGER, "weight": INTEGER, "priority": NUMBER, "metadata": MAPPING}
UPSTREAM = {
    "name": TEXT, "description": TEXT, "labels": LABELS, "type": TEXT, "hash_on": TEXT, "key": TEXT,
    "checks": {"active": ACTIVE_CHECK, "passive": PASSIVE_CHECK}, "nodes": ListOf(NODE), "scheme": TEXT,
    "retries": INTEGER, "retry_timeout": NUMBER, "timeout": TIMEOUT,
    "tls": {"client_cert": TEXT, "client_key": TEXT, "client_cert_id": TEXT, "verify": BOOLEAN},
    "keepalive_pool": {"size": INTEGER, "idle_timeout": NUMBER, "requests": INTEGER},
    "pass_host": TEXT, "upstream_host": TEXT, "service_name": TEXT, "discovery_type": TEXT,
    "discovery_args": MAPPING,
}
ROUTE = {"id": TEXT, "name": TEXT, "description": TEXT, "labels": LABELS, "hosts": ListOf(TEXT),
         "uris": ListOf(TEXT), "priority": INTEGER, "timeout": TIMEOUT, "vars": LIST, "methods": ListOf(TEXT),
         "enable_websocket": BOOLEAN, "remote_addrs": ListOf(TEXT), "plugins": PLUGINS, "filter_func": TEXT}
STREAM_ROUTE = {"id": TEXT, "name": TEXT, "description": TEXT, "labels": LABELS, "plugins": PLUGINS,
                "remote_addr": TEXT, "server_addr": TEXT, "server_port": INTEGER, "sni": TEXT}
SERVICE = {"id": TEXT, "name": TEXT, "description": TEXT, "labels": LABELS, "upstream": UPSTREAM,
           "upstreams": ListOf({**UPSTREAM, "id": TEXT}), "plugins": PLUGINS, "path_prefix": TEXT,
           "strip_path_prefix": BOOLEAN, "hosts": ListOf(TEXT), "routes": ListOf(ROUTE),
           "stream_routes": ListOf(STREAM_ROUTE)}
SSL = {"id": TEXT, "labels": LABELS, "type": TEXT, "snis": ListOf(TEXT),
       "certificates": ListOf({"certificate": TEXT, "key": TEXT}),
       "client": {"ca": TEXT, "depth": INTEGER, "skip_mtls_uri_regex": ListOf(TEXT)},
       "ssl_protocols": ListOf(TEXT)}
CREDENTIAL = {"id": TEXT, "name": TEXT, "description": TEXT, "labels": LABELS, "type": TEXT,
              "config": MAPPING}
CONSUMER = {"username": TEXT, "description": TEXT, "labels": LABELS, "plugins": PLUGINS,
            "credentials": ListOf(CREDENTIAL)}
CONSUMER_GROUP = {"id": TEXT, "name": TEXT, "description": TEXT, "labels": LABELS, "plugins": PLUGINS,
                  "consumers": ListOf(CONSUMER)}
ADC_FILE: Spec = {"services": ListOf(SERVICE), "ssls": ListOf(SSL), "consumers": ListOf(CONSUMER),
                  "consumer_groups": ListOf(CONSUMER_GROUP), "global_rules": PLUGINS,
                  "plugin_metadata": PLUGINS, "routes": ListOf(ROUTE), "stream_routes": ListOf(STREAM_ROUTE)}

_NAMES = {TEXT: "text", INTEGER: "an integer", NUMBER: "a number", BOOLEAN: "true or false",
          MAPPING: "a mapping", LIST: "a list"}

Path = tuple[str | int, ...]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    return "a list" if isinstance(value, list) else type(value).__name__


def _expected(spec: Spec) -> str:
    if isinstance(spec, str):
        return _NAMES.get(spec, spec)
    if isinstance(spec, ListOf):
        return "a list"
    if isinstance(spec, OneOf):
        return " or ".join(_expected(option) for option in spec.options)
    return "a mapping"


def _outer(value: Any, spec: Spec) -> bool:
    """Whether `value` has the outer type `spec` asks for (its insides aside)."""
    if isinstance(spec, OneOf):
        return any(_outer(value, option) for option in spec.options)
    if isinstance(spec, ListOf) or spec == LIST:
        return isinstance(value, list)
    if isinstance(spec, RecordOf | Mapping) or spec == MAPPING:
        return isinstance(value, Mapping)
    if spec == TEXT:
        return isinstance(value, str)
    if spec == BOOLEAN:
        return isinstance(value, bool)
    if spec == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    if spec == NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _wrong(value: Any, spec: Spec, path: Path) -> Iterator[tuple[Path, str]]:
    """(path, message) for each value under `value` whose type is not the one `spec` gives it."""
    if not _outer(value, spec):
        yield path, f"expected {_expected(spec)}, got {_type_name(value)}"
    elif isinstance(spec, OneOf):
        fitting = [option for option in spec.options if _outer(value, option)]
        if all(any(True for _ in _wrong(value, option, path)) for option in fitting):
            yield from _wrong(value, fitting[0], path)  # the option of its outer type says what is wrong
    elif isinstance(spec, ListOf):
        for index, item in enumerate(value):
            yield from _wrong(item, spec.item, (*path, index))
    elif isinstance(spec, RecordOf):
        for key, child in value.items():
            yield from _wrong(child, spec.value, (*path, key))
    elif isinstance(spec, Mapping):
        for key, child_spec in spec.items():
            child = value.get(key)
            if child is not None:
                yield from _wrong(child, child_spec, (*path, key))


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list | Mapping) else 0


def item_count(data: Any) -> int:
    """How many items an ADC file's content (of the right types) makes at most: a service and its
    upstream, each named upstream, route, stream route, SSL, consumer, credential, global rule and
    metadata item."""
    if not isinstance(data, Mapping):
        return 0
    count = sum(_length(data.get(key)) for key in ("ssls", "consumer_groups", "global_rules",
                                                   "plugin_metadata", "routes", "stream_routes"))
    for service in data.get("services") or ():
        count += 2 + sum(_length(service.get(key)) for key in ("routes", "stream_routes", "upstreams"))
    for consumer in data.get("consumers") or ():
        count += 1 + _length(consumer.get("credentials"))
    return count


def too_many_items(count: int, max_items: int) -> str:
    return (f"the files make {count} items or more, more than max_items = {max_items} (raise max_items in "
            "the settings, or import them in parts)")


def wrong_types(data: Any) -> list[tuple[Path, str]]:
    """Each field of an ADC file's content (one YAML document) whose type ADC's schema does not allow,
    as (path in the document, ``field: expected …, got …``)."""
    if data is None:
        return []
    return [(path, f"{field_text(path) or 'the file'}: {message}") for path, message in
            _wrong(data, ADC_FILE, ())]


__all__ = ["ADC_FILE", "item_count", "too_many_items", "wrong_types"]
