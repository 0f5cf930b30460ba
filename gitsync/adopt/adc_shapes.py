"""The shapes of ADC's declarative files: what type each field has, checked before a file is converted.

From ADC's own schema (``libs/sdk/src/core/schema.ts``, ADC 0.28): which fields are lists,
mappings, text, numbers or booleans, down to the plugin configurations (whose insides are
APISIX's to check). The conversion reads only files that pass, so a wrong type is reported
as ``file:line:col: field: expected …, got …`` and never met as an exception. What is
inside a field of the right type (an unknown field, a value out of range) is left to the
conversion and to the validation of the converted repo.

A field set to null counts as absent, as the conversion treats it; an item of a list or a
value of a mapping that is null is a wrong type.

Text in a number field is read as ADC's lint reads it (`numbers_read`): every number field of ADC's
schema is a ``z.coerce.number()``, which makes a number of the text with JavaScript's ``Number()``
(``"18390"`` → 18390, ``" 5 "`` → 5, ``"0x1F"`` → 31, ``""`` → 0), after ADC has put its environment
variables in. So text that reads as a number becomes that number, and a field that is exactly one
``${NAME}`` becomes ``${{ number(vars.NAME) }}``, which gitsync renders as the number NAME holds. Text
``Number()`` does not read (``"1_000"``, ``"fast"``) is refused by ADC's lint and stays a wrong type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gitsync.adopt.repo_writer import NumberReference
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

#: ADC's environment variables in a value (``apps/cli/src/command/utils.ts``, ``recursiveReplaceEnvVars``):
#: ``${NAME}``, and ``\${NAME}`` for the literal text.
ADC_ENV = re.compile(r"\\\$\{(\w+)\}|\$\{(\w+)\}")
#: What JavaScript's ``Number()`` strips around a number: ECMAScript's white space and line terminators.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_JS_RADIX = re.compile(r"0(?:[xX](?P<hex>[0-9a-fA-F]+)|[oO](?P<oct>[0-7]+)|[bB](?P<bin>[01]+))")
#: zod 4's ``.int()`` takes safe integers only.
_SAFE_INTEGER = 2**53 - 1


def js_number(text: str) -> int | float | None:
    """What ADC's lint makes of `text` in a number field: JavaScript's ``Number(text)`` (ECMAScript's
    StringToNumber), as a Python int when it is whole; None where zod refuses the result (NaN, or an
    infinity, which zod 4's numbers do not take)."""
    text = text.strip(_JS_SPACE)
    if not text:
        return 0
    radix = _JS_RADIX.fullmatch(text)
    if radix:
        digits = radix.group("hex") or radix.group("oct") or radix.group("bin")
        value: float = float(int(digits, 16 if radix.group("hex") else 8 if radix.group("oct") else 2))
    elif _JS_DECIMAL.fullmatch(text):
        value = float(text)
    else:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() and abs(value) <= _SAFE_INTEGER else value


@dataclass(frozen=True)
class NumberRead:
    """Text in a number field, read as ADC's lint reads it: the number (or the reference) it becomes,
    and what to tell."""

    path: Path
    text: str
    value: int | float | NumberReference
    variable: str | None = None  # the environment variable a reference stands for

    def note(self) -> str:
        field = field_text(self.path)
        if self.variable is not None:
            return (f"{field}: ${{{self.variable}}} in a number field is imported as {self.value}, which "
                    f"renders the number it holds: set GITSYNC_VAR_{self.variable} (or [render.vars]) to "
                    "the value ADC reads from its environment")
        return (f"{field}: the text {self.text!r} is the number {self.value} to ADC's lint "
                "(z.coerce.number), and is imported as that number")

    def unlinted(self) -> str:
        """Why a gateway synced with ``adc sync --no-lint`` cannot hold this field as ADC writes it."""
        return (f"{field_text(self.path)}: with --no-lint ADC writes the text {self.text!r} as it is, and "
                "APISIX refuses text where it wants a number, so no gateway holds it (leave out --no-lint if "
                "the gateway was synced with ADC's lint)")


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


def _numbers(value: Any, spec: Spec, path: Path) -> Iterator[tuple[Path, Spec, str]]:
    """(path, spec, text) of each text under `value` that `spec` wants as a number."""
    if isinstance(value, str) and spec in (NUMBER, INTEGER):
        yield path, spec, value
    elif isinstance(spec, OneOf):
        fitting = [option for option in spec.options if _outer(value, option)]
        if fitting:
            yield from _numbers(value, fitting[0], path)
    elif isinstance(spec, ListOf) and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _numbers(item, spec.item, (*path, index))
    elif isinstance(spec, RecordOf) and isinstance(value, Mapping):
        for key, child in value.items():
            yield from _numbers(child, spec.value, (*path, key))
    elif isinstance(spec, Mapping) and isinstance(value, Mapping):
        for key, child_spec in spec.items():
            if value.get(key) is not None:
                yield from _numbers(value[key], child_spec, (*path, key))


def numbers_read(data: Any) -> tuple[list[NumberRead], list[tuple[Path, str]]]:
    """Text in the number fields of an ADC file's content, read as ADC's lint reads it (see the module):
    what each becomes, set in `data` in place; and (path, message) of each ``${NAME}`` that is only a
    part of a number field's text, which gitsync cannot write. Text that is no number is left as it is
    (`wrong_types` says so)."""
    found: list[NumberRead] = []
    problems: list[tuple[Path, str]] = []
    for path, spec, text in list(_numbers(data, ADC_FILE, ())):
        variables = [m for m in ADC_ENV.finditer(text) if m.group(2)]
        if variables:
            whole = ADC_ENV.fullmatch(text.strip(_JS_SPACE))
            if whole is None or not whole.group(2):
                name = variables[0].group(2)
                problems.append((path, f"{field_text(path)}: {text!r} puts ${{{name}}} into a number field "
                                       "with other text, which gitsync cannot write (its "
                                       "${{ number(vars.NAME) }} is the whole value): give the variable the "
                                       "whole number"))
                continue
            name = whole.group(2)
            found.append(NumberRead(path, text, NumberReference.to(name), name))
        else:
            number = js_number(text)
            if number is None or (spec == INTEGER and not isinstance(number, int)):
                continue
            found.append(NumberRead(path, text, number))
        _put(data, path, found[-1].value)
    return found, problems


def _put(data: Any, path: Path, value: Any) -> None:
    for step in path[:-1]:
        data = data[step]
    data[path[-1]] = value


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
        return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, NumberReference)
    if spec == NUMBER:
        return (isinstance(value, int | float) and not isinstance(value, bool)) \
            or isinstance(value, NumberReference)
    return True


def _wrong(value: Any, spec: Spec, path: Path) -> Iterator[tuple[Path, str]]:
    """(path, message) for each value under `value` whose type is not the one `spec` gives it."""
    if not _outer(value, spec):
        unread = f" {value!r}, which JavaScript's Number() (ADC's lint) does not read as " \
                 f"{_expected(spec)} either" if isinstance(value, str) and spec in (NUMBER, INTEGER) else ""
        yield path, f"expected {_expected(spec)}, got {_type_name(value)}{unread}"
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


__all__ = ["ADC_ENV", "ADC_FILE", "NumberRead", "item_count", "js_number", "numbers_read", "too_many_items",
           "wrong_types"]
