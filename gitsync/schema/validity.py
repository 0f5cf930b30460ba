"""Whether a value satisfies a schema, answered by functions compiled once per schema.

`gitsync.schema.jsonschema` walks a schema keyword by keyword for every value, as generators that
can say every error in the library's words; a config of 10,000 routes is 10,000 such walks of the
route schema, nearly all of them finding nothing. This module answers only the question those
walks answer first, *is there any error*, by a function built once per schema (`validator`), and
`valid` leaves the value as it found it: the callers (`gitsync.schema.checks`) take the compiled
answer when it is yes and walk `jsonschema` for the errors when it is no, so every message, path
and explanation still comes from the one reference walk.

A compiled check is `jsonschema.is_valid` made ahead, step for step: the same keywords in the same
order, the same helpers (so the same exceptions at the same point), and it stops where the walk
would yield its first error. That includes the walk's one side effect: the defaults of absent
properties are written into the value as it goes (APISIX's library does the same, and the semantic
checks after the schema read them), also inside the options of an ``anyOf`` or ``oneOf`` that are
tried and fail. Every default a check writes is logged (`Added`), so `valid` can take them back
out when the answer is no, leaving the value exactly as the reference walk must see it.
`tests/schema/test_validity.py` holds both to the same answers and the same values afterwards
over every schema gitsync knows, with generated values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from copy import deepcopy
from typing import Any

from gitsync.schema.jsonschema import (
    _ARRAY_KEYWORDS,
    _OBJECT_KEYWORDS,
    _OTHER_KEYWORDS,
    _RANGES,
    _STRING_KEYWORDS,
    Schema,
    _enum_equal,
    _errors,
    _has_type,
    _is_array,
    _is_ip,
    _is_object,
    _unique_violation,
    is_number,
    pattern_search,
)

#: The defaults a check wrote: (the object, the property), in the order written.
Added = list[tuple[dict[str, Any], str]]
Check = Callable[[Any, Added], bool]

_COMPILED: dict[int, tuple[Schema, Check]] = {}
_COMPILED_MAX = 4096  # schemas are module constants; a caller building them afresh is bounded
_NO_DEFAULT, _SHARED_DEFAULT, _COPIED_DEFAULT = 0, 1, 2


def valid(schema: Schema, value: Any) -> bool:
    """Whether `value` satisfies `schema` (`jsonschema.is_valid`'s answer). Yes: `value` holds the
    schema's defaults, as after the reference walk. No: `value` is as it was given."""
    added: Added = []
    if validator(schema)(value, added):
        return True
    for obj, prop in reversed(added):
        del obj[prop]
    return False


def validator(schema: Schema) -> Check:
    """The compiled check of `schema`, made on first use and kept while the schema lives."""
    known = _COMPILED.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    if len(_COMPILED) >= _COMPILED_MAX:
        _COMPILED.clear()
    made: list[Check] = []

    def late(value: Any, added: Added) -> bool:  # a schema that contains itself: its check, once made
        return made[0](value, added)

    _COMPILED[id(schema)] = (schema, late)  # the schema is held: its id stays its own
    check = _compile(schema)
    made.append(check)
    _COMPILED[id(schema)] = (schema, check)
    return check


def _always(value: Any, added: Added) -> bool:
    return True


def _never(value: Any, added: Added) -> bool:
    return False


def _compile(schema: Schema) -> Check:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not (type(schema) is dict or isinstance(schema, Mapping)):
        return lambda value, added: next(_errors(schema, value), None) is None  # the walk's own failure

    steps: list[Check] = []
    declared = schema.get("type")
    if declared is not None:
        steps.append(_type_step(declared))
    if any(keyword in schema for keyword in _OBJECT_KEYWORDS):
        steps.append(_object_step(schema))
    if any(keyword in schema for keyword in _ARRAY_KEYWORDS):
        steps.append(_array_step(schema))
    if any(keyword in schema for keyword in _STRING_KEYWORDS):
        steps.append(_string_step(schema))
    if any(keyword in schema for keyword, *_ in _RANGES):
        steps.append(_number_step(schema))
    if any(keyword in schema for keyword in _OTHER_KEYWORDS):
        steps.extend(_other_steps(schema))
    if not steps:
        return _always
    if len(steps) == 1:
        return steps[0]
    if len(steps) == 2:
        first, second = steps
        return lambda value, added: first(value, added) and second(value, added)
    run = tuple(steps)

    def check(value: Any, added: Added) -> bool:
        for step in run:  # noqa: SIM110 (a loop, not all(): no generator made per value)
            if not step(value, added):
                return False
        return True

    return check


def _type_step(declared: Any) -> Check:
    if not isinstance(declared, str):
        types = list(declared)
        return lambda value, added: any(_has_type(value, t) for t in types)
    if declared == "string":
        return lambda value, added: isinstance(value, str)
    if declared == "object":
        return lambda value, added: type(value) is dict or _is_object(value)
    if declared == "array":
        return lambda value, added: type(value) is list or _is_array(value)
    if declared == "boolean":
        return lambda value, added: isinstance(value, bool)
    return lambda value, added: _has_type(value, declared)  # numbers (and an unknown name raises, as there)


def _default_of(subschema: Any) -> tuple[int, Any]:
    """How `jsonschema._apply_default` fills an absent property of this schema."""
    if not (type(subschema) is dict or isinstance(subschema, Mapping)) or "default" not in subschema:
        return _NO_DEFAULT, None
    default = subschema["default"]
    if type(default) in (str, int, float, bool):
        return _SHARED_DEFAULT, default
    if isinstance(default, bool | int | float | str | dict | list):
        return _COPIED_DEFAULT, default
    return _NO_DEFAULT, None


def _dependency(dependency: Any) -> Check:
    """A dependency's check, given the object (not the property's value)."""
    if isinstance(dependency, list):
        needed = tuple(dependency)
        return lambda obj, added: all(name in obj for name in needed)
    return validator(dependency)


def _object_step(schema: Mapping[str, Any]) -> Check:
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", ()))
    dependencies: Mapping[str, Any] = schema.get("dependencies", {})
    declared = tuple(
        (prop, validator(sub), _dependency(dependencies[prop]) if prop in dependencies else None,
         prop in required, *_default_of(sub))
        for prop, sub in properties.items())
    required_elsewhere = tuple(prop for prop in required if prop not in properties)
    depending_elsewhere = tuple((prop, _dependency(dep)) for prop, dep in dependencies.items()
                                if prop not in properties)
    additional = schema.get("additionalProperties")
    closed = additional is not None and additional is not True
    additional_check = validator(additional) if closed and isinstance(additional, Mapping) else None
    patterns = tuple((pattern, validator(sub))
                     for pattern, sub in schema.get("patternProperties", {}).items())
    minimum = schema.get("minProperties") if "minProperties" in schema else None
    maximum = schema.get("maxProperties") if "maxProperties" in schema else None
    empty_only = "required" in schema and not schema["required"]

    def check(value: Any, added: Added) -> bool:
        if type(value) is dict or isinstance(value, dict):
            obj: dict[str, Any] | None = value
        elif isinstance(value, list) and not value:
            obj = {}
        else:
            obj = None
        if obj is not None:
            for prop, sub_check, dependency, is_required, filled, default in declared:
                if prop in obj:
                    if not sub_check(obj[prop], added):
                        return False
                    if dependency is not None and not dependency(obj, added):
                        return False
                elif is_required:
                    return False
                if filled and prop not in obj:
                    obj[prop] = default if filled == _SHARED_DEFAULT else deepcopy(default)
                    added.append((obj, prop))
            for prop in required_elsewhere:
                if prop not in obj:
                    return False
            for prop, dependency in depending_elsewhere:
                if prop in obj and not dependency(obj, added):
                    return False
            if closed or patterns:
                for key in list(obj):
                    matched = False
                    for pattern, sub_check in patterns:
                        if pattern_search(pattern, key):
                            matched = True
                            if not sub_check(obj[key], added):
                                return False
                    if closed and not matched and key not in properties and (
                            additional_check is None or not additional_check(obj[key], added)):
                        return False
            if minimum is not None and len(obj) < minimum:
                return False
            if maximum is not None and len(obj) > maximum:
                return False
        return not (empty_only and not (isinstance(value, dict | list) and not value))

    return check


def _array_step(schema: Mapping[str, Any]) -> Check:
    minimum = schema.get("minItems") if "minItems" in schema else None
    maximum = schema.get("maxItems") if "maxItems" in schema else None
    item_schema = schema.get("items")
    item_check = validator(item_schema) if isinstance(item_schema, Mapping) else None
    unique = bool(schema.get("uniqueItems"))

    def check(value: Any, added: Added) -> bool:
        if type(value) is list:
            items: list[Any] = value
        elif _is_array(value):
            items = value if isinstance(value, list) else []
        else:
            return True
        if minimum is not None and len(items) < minimum:
            return False
        if maximum is not None and len(items) > maximum:
            return False
        if item_check is not None:
            for item in items:
                if not item_check(item, added):
                    return False
        return not (unique and _unique_violation(items))

    return check


def _string_step(schema: Mapping[str, Any]) -> Check:
    shortest = schema.get("minLength") if "minLength" in schema else None
    longest = schema.get("maxLength") if "maxLength" in schema else None
    pattern = schema.get("pattern") if "pattern" in schema else None

    def check(value: Any, added: Added) -> bool:
        if not isinstance(value, str):
            return True
        if shortest is not None and len(value) < shortest:
            return False
        if longest is not None and len(value) > longest:
            return False
        return pattern is None or pattern_search(pattern, value)

    return check


def _number_step(schema: Mapping[str, Any]) -> Check:
    bounds = tuple((violates, schema[keyword]) for keyword, violates, _ in _RANGES if keyword in schema)

    def check(value: Any, added: Added) -> bool:
        if not is_number(value):
            return True
        return not any(violates(value, bound) for violates, bound in bounds)

    return check


def _other_steps(schema: Mapping[str, Any]) -> list[Check]:
    steps: list[Check] = []
    if "enum" in schema:
        options = schema["enum"]
        steps.append(lambda value, added: any(_enum_equal(value, option) for option in options))
    steps.extend(validator(sub) for sub in schema.get("allOf", ()))
    if "anyOf" in schema:
        any_of = tuple(validator(option) for option in schema["anyOf"])
        steps.append(lambda value, added: any(option(value, added) for option in any_of))
    if "oneOf" in schema:
        steps.append(_one_of(tuple(validator(option) for option in schema["oneOf"])))
    if "if" in schema:
        steps.append(_if_then(schema))
    if "not" in schema:
        negated = validator(schema["not"])
        steps.append(lambda value, added: not negated(value, added))
    fmt = schema.get("format")
    if fmt in ("ipv4", "ipv6"):
        steps.append(lambda value, added: not isinstance(value, str) or _is_ip(value, fmt))
    return steps


def _one_of(options: tuple[Check, ...]) -> Check:
    def check(value: Any, added: Added) -> bool:
        matched = False
        for option in options:
            if option(value, added):
                if matched:
                    return False
                matched = True
        return matched

    return check


def _if_then(schema: Mapping[str, Any]) -> Check:
    condition = validator(schema["if"])
    then = validator(schema["then"]) if "then" in schema else None
    otherwise = validator(schema["else"]) if "else" in schema else None

    def check(value: Any, added: Added) -> bool:
        if condition(value, added):
            return then is None or then(value, added)
        return otherwise is None or otherwise(value, added)

    return check
