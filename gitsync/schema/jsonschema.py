"""A validator for the JSON-schema subset APISIX uses, with api7/jsonschema's wording.

APISIX validates every resource with the Lua library ``api7/jsonschema``, and the
gateway's 400 answers quote that library's messages verbatim. gitsync's
``validate`` and the test double must say exactly what the gateway says, so this
module reproduces the library's checks, their order and their text — including
its Lua-isms:

- JSON types are named as Lua sees them: objects and arrays are ``table``,
  ``null`` is ``userdata`` (cjson's null), ``true``/``false`` are ``boolean``.
- An empty array passes as an object and an empty object as an array (Lua
  cannot tell them apart).
- Numbers print as Lua prints them (``%.14g``); strings in ``pattern`` messages
  are quoted with Lua's ``%q``.
- Defaults of absent properties are written into the validated value while it is
  checked (callers pass a copy), which later semantic checks rely on.
- 3.17+: a string that is a ``$secret://`` or ``$env://`` reference skips the
  string constraints of a ``type: string`` schema.

Where the library walks a Lua hash (property order), this module walks the
schema's declaration order; APISIX's own order there is not deterministic.

Errors are yielded lazily as ``(path, message)``: the first one is what APISIX
answers, all of them are what ``gitsync validate`` reports.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterator, Mapping
from copy import deepcopy
from functools import lru_cache
from typing import Any

from gitsync.problems import lua_quote

Path = tuple[str | int, ...]
Error = tuple[Path, str]
Schema = Mapping[str, Any] | bool

_SECRET_REF = re.compile(r"^\$(?:secret|env|ENV)://")


def is_secret_ref(value: object) -> bool:
    """A ``$secret://`` / ``$env://`` reference, which APISIX resolves at run time."""
    return isinstance(value, str) and bool(_SECRET_REF.match(value))


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def lua_type(value: object) -> str:
    """The name Lua's ``type()`` gives a decoded JSON value."""
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict | list):
        return "table"
    return "userdata"  # cjson.null


def lua_number(value: float) -> str:
    """A number as Lua's ``tostring`` prints it (``%.14g``)."""
    return format(value, ".14g")


def lua_tostring(value: object) -> str:
    """A scalar as Lua's ``tostring``/concatenation prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if is_number(value):
        return lua_number(value)  # type: ignore[arg-type]
    if value is None:
        return "nil"
    return str(value)




def cjson_encode(value: object) -> str:
    """Compact JSON as cjson writes it (numbers with 14 significant digits)."""
    if is_number(value):
        return lua_number(value)  # type: ignore[arg-type]
    if isinstance(value, list):
        return "[" + ",".join(cjson_encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{cjson_encode(str(k))}:{cjson_encode(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False).replace("/", "\\/")


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def pattern_search(pattern: str, text: str) -> bool:
    """``ngx.re.find(text, pattern, "jo")``: an unanchored PCRE search."""
    return _regex(pattern).search(text) is not None


def _is_object(value: object) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and not value)


def _is_array(value: object) -> bool:
    return isinstance(value, list) or (isinstance(value, dict) and not value)


def _has_type(value: object, json_type: str) -> bool:
    if json_type == "object":
        return _is_object(value)
    if json_type == "array":
        return _is_array(value)
    if json_type == "integer":
        return is_number(value) and float(value) % 1.0 == 0.0  # type: ignore[arg-type]
    if json_type == "number":
        return is_number(value)
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "null":
        return value is None
    if json_type == "table":
        return isinstance(value, dict | list)
    raise ValueError(f"invalid JSON type: {json_type}")


def _unique_violation(items: list[Any]) -> tuple[int, int] | None:
    """The 1-based pair the library reports for ``uniqueItems`` (scalars first, then tables)."""
    seen: dict[tuple[str, Any], int] = {}
    tables: list[tuple[int, Any]] = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, dict | list):
            tables.append((index, item))
            continue
        key = (lua_type(item), float(item) if is_number(item) else item)
        if key in seen:
            return seen[key], index
        seen[key] = index
    for i, (first, left) in enumerate(tables):
        for second, right in tables[i + 1:]:
            if left == right:
                return first, second
    return None


def _apply_default(obj: dict[str, Any], prop: str, subschema: Any) -> None:
    if prop in obj or not (type(subschema) is dict or isinstance(subschema, Mapping)):
        return
    if "default" in subschema:
        default = subschema["default"]
        if type(default) in (str, int, float, bool):  # immutable: no copy
            obj[prop] = default
        elif isinstance(default, bool | int | float | str | dict | list):
            obj[prop] = deepcopy(default)


_OBJECT, _ARRAY, _STRING, _NUMBER, _OTHER = 1, 2, 4, 8, 16
_SHAPES: dict[int, tuple[Mapping[str, Any], int]] = {}


def _shape(schema: Mapping[str, Any]) -> int:
    """Which groups of keywords `schema` has (`_OBJECT` … `_OTHER`), worked out once per schema: the
    checks of a group it lacks are not entered (a schema is walked once per item and field)."""
    known = _SHAPES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    groups = ((_OBJECT, _OBJECT_KEYWORDS), (_ARRAY, _ARRAY_KEYWORDS), (_STRING, _STRING_KEYWORDS),
              (_NUMBER, tuple(keyword for keyword, *_ in _RANGES)), (_OTHER, _OTHER_KEYWORDS))
    shape = sum(flag for flag, keywords in groups if any(k in schema for k in keywords))
    if len(_SHAPES) >= 4096:  # schemas are module constants; a caller building them afresh is bounded
        _SHAPES.clear()
    _SHAPES[id(schema)] = (schema, shape)  # the schema is held: its id stays its own
    return shape


#: What `gitsync validate` adds to the library's message for the person who reads it (never part of
#: what the gateway, or the double, answers): the value and the allowed ones, and for an ``anyOf``
#: that matched no option, the error of the option the value was meant for and the path to it.
Explanation = tuple[str, Path | None]


class _Text:
    """An error's message, written only when it is read: `is_valid` (an anyOf's or oneOf's options,
    an if) reads none, and most of those options fail, each with a nested message to quote."""

    __slots__ = ("args", "write")

    def __init__(self, write: Callable[..., str], *args: Any) -> None:
        self.write, self.args = write, args

    def __str__(self) -> str:
        return self.write(*self.args)

    def explanation(self) -> Explanation | None:
        """The explanation of the message this one wraps, if it has one."""
        for arg in self.args:
            if isinstance(arg, _Text):
                return arg.explanation()
        return None


class _Explained(_Text):
    """A message with an explanation, worked out (`why` and its arguments) only when it is asked for."""

    __slots__ = ("why",)

    def __init__(self, why: tuple[Any, ...], write: Callable[..., str], *args: Any) -> None:
        super().__init__(write, *args)
        self.why = why

    def explanation(self) -> Explanation | None:
        return self.why[0](*self.why[1:])


def _same(text: str) -> str:
    return text


#: How much of a value an explanation shows.
SHOWN = 60


def shown(value: Any) -> str:
    """A value as an explanation quotes it: JSON, cut to `SHOWN` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


def _got(value: Any) -> Explanation:
    return f"value {shown(value)}", None


def _allowed(value: Any, options: list[Any]) -> Explanation:
    allowed = ", ".join(str(o) if isinstance(o, str) else shown(o) for o in options)
    return f"value {shown(value)}; allowed: {allowed}", None


def _option_meant(options: Any, value: Any, path: Path) -> Explanation | None:
    """Why the option `value` has the type of (the first such) refuses it, and where inside it."""
    for option in options:
        declared = option.get("type") if isinstance(option, Mapping) else None
        if isinstance(declared, str) and not _has_type(value, declared):
            continue
        first = next(_errors(option, value, path), None)
        if first is None:
            continue
        where, message = first
        inner = message.explanation() if isinstance(message, _Text) else None
        if inner is None:
            return str(message), where
        return f"{message}: {inner[0]}", inner[1] or where
    return None


def iter_explained(schema: Schema, value: Any, path: Path = ()
                   ) -> Iterator[tuple[Path, str, Explanation | None]]:
    """`iter_errors`, each with its explanation for people (None when the message says it all)."""
    for where, message in _errors(schema, value, path):
        yield where, str(message), message.explanation() if isinstance(message, _Text) else None


_Errors = Iterator[tuple[Path, "str | _Text"]]


def _wrapped(prefix: str, message: str | _Text) -> str:
    return f"{prefix}{message}"


def _property_failed(prop: str, message: str | _Text) -> str:
    return f"property {lua_quote(prop)} validation failed: {message}"


def _property_required(prop: str) -> str:
    return f"property {lua_quote(prop)} is required"


def _required_when(needed: str, prop: str) -> str:
    return f"property {lua_quote(needed)} is required when {lua_quote(prop)} is set"


def _dependent_failed(prop: str, message: str | _Text) -> str:
    return f"failed to validate dependent schema for {lua_quote(prop)}: {message}"


def _pattern_failed(pattern: str, value: str) -> str:
    return f"failed to match pattern {lua_quote(pattern)} with {lua_quote(value)}"


def _none_of_the_required(options: Any) -> str:
    required = [cjson_encode(list(option["required"])) for option in options
                if isinstance(option, Mapping) and "required" in option]
    suffix = ": " + " or ".join(required) if required else ""
    return f"object matches none of the required{suffix}"


def iter_errors(schema: Schema, value: Any, path: Path = ()) -> Iterator[Error]:
    """Every violation of `schema` by `value`, in the order the Lua validator checks them."""
    for where, message in _errors(schema, value, path):
        yield where, str(message)


def _errors(schema: Schema, value: Any, path: Path = ()) -> _Errors:
    """`iter_errors`, each message kept unwritten (`_Text`) until it is read."""
    if schema is True:
        return
    if schema is False:
        yield path, "expect false always"
        return
    assert type(schema) is dict or isinstance(schema, Mapping)

    declared = schema.get("type")
    if declared is not None:
        if isinstance(declared, str):
            typed = _has_type(value, declared)
        else:
            types = list(declared)
            typed = any(_has_type(value, t) for t in types)
        if not typed:
            got = lua_type(value)
            if isinstance(declared, str):
                yield path, _Explained((_got, value), _same, f"wrong type: expected {declared}, got {got}")
            else:
                yield path, _Explained((_got, value), _same,
                                       f"wrong type: expected one of {', '.join(types)}, got {got}")
            return

    shape = _shape(schema)
    if shape & _OBJECT:
        yield from _object_errors(schema, value, path)
    if shape & _ARRAY:
        yield from _array_errors(schema, value, path)
    if shape & _STRING:
        yield from _string_errors(schema, value, path)
    if shape & _NUMBER:
        yield from _number_errors(schema, value, path)
    if not shape & _OTHER:
        return

    if "enum" in schema and not any(_enum_equal(value, option) for option in schema["enum"]):
        yield path, _Explained((_allowed, value, list(schema["enum"])), _same,
                               "matches none of the enum values")

    for index, subschema in enumerate(schema.get("allOf", ()), start=1):
        for sub_path, message in _errors(subschema, value, path):
            yield sub_path, _Text(_wrapped, f"allOf {index} failed: ", message)

    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(is_valid(option, value) for option in options):
            yield path, _Explained((_option_meant, options, value, path), _none_of_the_required, options)

    if "oneOf" in schema:
        matched: int | None = None
        for index, option in enumerate(schema["oneOf"], start=1):
            if is_valid(option, value):
                if matched is not None:
                    yield path, (
                        "value should match only one schema, but matches both schemas "
                        f"{matched} and {index}"
                    )
                    break
                matched = index
        else:
            if matched is None:
                yield path, "value should match only one schema, but matches none"

    if "if" in schema:
        if is_valid(schema["if"], value):
            if "then" in schema and not is_valid(schema["then"], value):
                yield path, "then clause did not match"
        elif "else" in schema and not is_valid(schema["else"], value):
            yield path, "else clause did not match"

    if "not" in schema and is_valid(schema["not"], value):
        yield path, "value wasn't supposed to match schema"

    fmt = schema.get("format")
    if fmt in ("ipv4", "ipv6") and isinstance(value, str) and not _is_ip(value, fmt):
        yield path, f"expect valid {fmt} address but got: {value}"


def _is_ip(text: str, fmt: str) -> bool:
    """``inet_pton`` as the library calls it under OpenResty."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return address.version == (4 if fmt == "ipv4" else 6)


def _enum_equal(value: Any, option: Any) -> bool:
    if isinstance(value, bool) or isinstance(option, bool):
        return isinstance(value, bool) and isinstance(option, bool) and value == option
    return bool(value == option)


_OBJECT_KEYWORDS = ("properties", "additionalProperties", "patternProperties", "minProperties",
                    "maxProperties", "dependencies", "required")
_ARRAY_KEYWORDS = ("items", "minItems", "maxItems", "uniqueItems")
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern")
_OTHER_KEYWORDS = ("enum", "allOf", "anyOf", "oneOf", "if", "not", "format")


def _object_errors(schema: Mapping[str, Any], value: Any, path: Path) -> _Errors:
    if _is_object(value):
        obj: dict[str, Any] = value if isinstance(value, dict) else {}
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = list(schema.get("required", ()))
        dependencies: Mapping[str, Any] = schema.get("dependencies", {})

        for prop, subschema in properties.items():
            if prop in obj:
                for sub_path, message in _errors(subschema, obj[prop], (*path, prop)):
                    yield sub_path, _Text(_property_failed, prop, message)
                if prop in dependencies:
                    yield from _dependency_errors(prop, dependencies[prop], obj, path)
            elif prop in required:
                yield path, _Text(_property_required, prop)
            _apply_default(obj, prop, subschema)

        for prop in required:
            if prop not in properties and prop not in obj:
                yield path, _Text(_property_required, prop)

        for prop, dependency in dependencies.items():
            if prop not in properties and prop in obj:
                yield from _dependency_errors(prop, dependency, obj, path)

        additional = schema.get("additionalProperties")
        closed = additional is not None and additional is not True
        patterns: Mapping[str, Any] = schema.get("patternProperties", {})
        if closed or patterns:
            for key in list(obj):
                matched = False
                for pattern, subschema in patterns.items():
                    if pattern_search(pattern, key):
                        matched = True
                        for sub_path, message in _errors(subschema, obj[key], (*path, key)):
                            prefix = f'failed to validate {key} (matching "{pattern}"): '
                            yield sub_path, _Text(_wrapped, prefix, message)
                if closed and not matched and key not in properties:
                    if isinstance(additional, Mapping):
                        for sub_path, message in _errors(additional, obj[key], (*path, key)):
                            prefix = f"failed to validate additional property {key}: "
                            yield sub_path, _Text(_wrapped, prefix, message)
                    else:
                        yield (*path, key), f"additional properties forbidden, found {key}"

        if "minProperties" in schema and len(obj) < schema["minProperties"]:
            yield path, f"expect object to have at least {schema['minProperties']} properties"
        if "maxProperties" in schema and len(obj) > schema["maxProperties"]:
            yield path, f"expect object to have at most {schema['maxProperties']} properties"

    if "required" in schema and not schema["required"] and not (
        isinstance(value, dict | list) and not value
    ):
        yield path, "the input data should be an empty table"


def _dependency_errors(prop: str, dependency: Any, obj: dict[str, Any], path: Path) -> _Errors:
    if isinstance(dependency, list):
        for needed in dependency:
            if needed not in obj:
                yield path, _Text(_required_when, needed, prop)
    else:
        for sub_path, message in _errors(dependency, obj, path):
            yield sub_path, _Text(_dependent_failed, prop, message)


def _array_errors(schema: Mapping[str, Any], value: Any, path: Path) -> _Errors:
    if not _is_array(value):
        return
    items: list[Any] = value if isinstance(value, list) else []
    if "minItems" in schema and len(items) < schema["minItems"]:
        yield path, f"expect array to have at least {schema['minItems']} items"
    if "maxItems" in schema and len(items) > schema["maxItems"]:
        yield path, f"expect array to have at most {schema['maxItems']} items"
    item_schema = schema.get("items")
    if isinstance(item_schema, Mapping):
        for index, item in enumerate(items):
            for sub_path, message in _errors(item_schema, item, (*path, index)):
                yield sub_path, _Text(_wrapped, f"failed to validate item {index + 1}: ", message)
    if schema.get("uniqueItems"):
        pair = _unique_violation(items)
        if pair:
            yield path, f"expected unique items but items {pair[0]} and {pair[1]} are equal"


def _string_errors(schema: Mapping[str, Any], value: Any, path: Path) -> _Errors:
    if not isinstance(value, str):
        return
    if "minLength" in schema and len(value) < schema["minLength"]:
        yield path, f"string too short, expected at least {schema['minLength']}, got {len(value)}"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        yield path, f"string too long, expected at most {schema['maxLength']}, got {len(value)}"
    if "pattern" in schema and not pattern_search(schema["pattern"], value):
        yield path, _Text(_pattern_failed, schema['pattern'], value)


_RANGES = (
    ("minimum", lambda v, r: v < r, "at least"),
    ("exclusiveMinimum", lambda v, r: v <= r, "greater than"),
    ("maximum", lambda v, r: v > r, "at most"),
    ("exclusiveMaximum", lambda v, r: v >= r, "smaller than"),  # by symmetry: no recorded answer has it
)


def _number_errors(schema: Mapping[str, Any], value: Any, path: Path) -> _Errors:
    if not is_number(value):
        return
    for keyword, violates, wording in _RANGES:
        if keyword in schema and violates(value, schema[keyword]):
            yield path, f"expected {lua_number(value)} to be {wording} {lua_number(schema[keyword])}"


def first_error(schema: Schema, value: Any) -> Error | None:
    """The error APISIX answers (the validator stops at its first failure)."""
    return next(iter_errors(schema, value), None)


def is_valid(schema: Schema, value: Any) -> bool:
    return next(_errors(schema, value), None) is None
