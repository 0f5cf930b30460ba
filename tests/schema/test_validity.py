"""The compiled schema check (`validity`) against the reference walk (`jsonschema`), over every schema
gitsync checks: the same answer, and the value left the same (defaults written alike, also by an
``anyOf`` option that failed half-way), for values made from the schemas themselves (mostly valid,
then broken at one place) and for arbitrary JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsync.schema import checks
from gitsync.schema import definitions as defs
from gitsync.schema.jsonschema import Schema, is_valid
from gitsync.schema.plugin_schemas import PLUGIN_SCHEMAS
from gitsync.schema.validity import valid, validator

SCHEMAS: dict[str, Schema] = {
    **{name: value for name, value in vars(defs).items()
       if name.isupper() and isinstance(value, Mapping) and ("type" in value or "properties" in value)},
    **{f"plugin {name}": checks._plugin_schema(name, checks.ROUTE) for name in sorted(PLUGIN_SCHEMAS)},
    **{f"consumer plugin {name}": checks._plugin_schema(name, checks.CONSUMER)
       for name, known in sorted(PLUGIN_SCHEMAS.items()) if known.consumer is not None},
}

_UPSTREAM = {"type": "chash", "hash_on": "header", "key": "X-User", "nodes": {"127.0.0.1:1980": 1},
             "timeout": {"connect": 1, "send": 2, "read": 3}, "retries": 1,
             "checks": {"active": {"http_path": "/health", "healthy": {"interval": 2}}}}
#: Items APISIX accepts, to be checked as they are and broken at one place.
SEEDS: dict[str, list[Any]] = {
    "ROUTE": [
        {"id": "r1", "uri": "/api/v1/*", "methods": ["GET", "POST"], "service_id": "s1",
         "plugins": {"limit-count": {"count": 100, "time_window": 60}}},
        {"uris": ["/a", "/b"], "hosts": ["a.example.com"], "priority": 3, "upstream": _UPSTREAM,
         "vars": [["arg_name", "==", "json"]], "enable_websocket": True, "status": 0},
        {"uri": "/x", "remote_addrs": ["10.0.0.0/8", "::1"], "upstream_id": "u1", "labels": {"team": "a"},
         "timeout": {"connect": 3, "send": 3, "read": 3}},
    ],
    "UPSTREAM": [_UPSTREAM, {"type": "roundrobin", "nodes": [{"host": "10.0.0.1", "port": 80, "weight": 1}],
                             "scheme": "https", "pass_host": "rewrite", "upstream_host": "example.com"}],
    "SERVICE": [{"id": "s1", "upstream_id": "u1", "plugins": {"cors": {}}, "hosts": ["example.com"]},
                {"name": "svc", "upstream": _UPSTREAM, "enable_websocket": False}],
    "CONSUMER": [{"username": "team1", "plugins": {"key-auth": {"key": "k"}}, "desc": "a team"}],
    "GLOBAL_RULE": [{"id": "g1", "plugins": {"prometheus": {}}}],
    "plugin proxy-rewrite": [{"regex_uri": ["^/api/(.*)", "/$1"]},
                             {"uri": "/x", "headers": {"set": {"a": "b"}}}],
    "plugin limit-count": [{"count": 10, "time_window": 60, "rejected_code": 429},
                           {"count": 1, "time_window": 1, "policy": "redis", "redis_host": "127.0.0.1"}],
    "plugin cors": [{}, {"allow_origins": "**", "allow_credential": False, "max_age": 5}],
}

json_scalars = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False,
                                                                                  allow_infinity=False) \
    | st.text(max_size=12) | st.sampled_from(["", "GET", "127.0.0.1", "::1", "roundrobin", "http", "*"])
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _regex_text(pattern: str) -> st.SearchStrategy[str]:
    try:
        return st.from_regex(re.compile(pattern), fullmatch=False).map(lambda s: s[:200])
    except (re.error, ValueError, TypeError):  # PCRE that Python does not read: any text
        return st.text(max_size=20)


def from_schema(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values aimed at `schema`: mostly valid, so that defaults, options and nested checks are reached."""
    if not isinstance(schema, Mapping) or depth > 6:
        return json_values
    choices: list[st.SearchStrategy[Any]] = []
    if "enum" in schema:
        choices.append(st.sampled_from(list(schema["enum"])))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            base = from_schema(_bare(schema), depth + 1)
            choices += [st.builds(_merged, from_schema(option, depth + 1), base) for option in schema[key]]
    if "allOf" in schema:
        choices.append(from_schema(_bare(schema), depth + 1))
    declared = schema.get("type")
    kinds = [declared] if isinstance(declared, str) else list(declared or ())
    if not kinds:
        kinds = ["object"] if {"properties", "required", "additionalProperties"} & set(schema) else \
            ["array"] if "items" in schema else ["string", "integer"]
    for kind in kinds:
        choices.append(_typed(schema, kind, depth))
    return st.one_of(choices)


def _bare(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "allOf", "enum")}


def _merged(option: Any, base: Any) -> Any:
    if isinstance(option, dict) and isinstance(base, dict):
        return {**base, **option}
    return base if isinstance(base, dict) else option


def _typed(schema: Mapping[str, Any], kind: str, depth: int) -> st.SearchStrategy[Any]:
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        parts = {prop: st.one_of(st.just(_ABSENT) if prop not in required else st.nothing(),
                                 from_schema(sub, depth + 1))
                 for prop, sub in properties.items()}
        more = st.just({}) if schema.get("additionalProperties", True) is False else \
            st.one_of(st.just({}), st.dictionaries(st.text(max_size=6), json_values, max_size=1))
        return st.builds(_present, st.fixed_dictionaries(parts), more)
    if kind == "array":
        items = schema.get("items")
        low = schema.get("minItems", 0)
        return st.lists(from_schema(items, depth + 1), min_size=min(low, 3), max_size=max(min(low, 3), 3))
    if kind == "string":
        if "pattern" in schema:
            return _regex_text(schema["pattern"])
        shortest = min(schema.get("minLength", 0), 40)
        return st.text(min_size=shortest, max_size=max(shortest, 20))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1000))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 100000))
        return st.integers(int(low), int(max(low, high)))
    if kind == "boolean":
        return st.booleans()
    return json_values


_ABSENT = object()


def _present(fixed: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in fixed.items() if v is not _ABSENT}, **extra}


def _broken(value: Any, data: st.DataObject) -> Any:
    """`value` with one place replaced by arbitrary JSON, or one key dropped."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(list(value)))
        if data.draw(st.booleans()):
            del value[key]
        else:
            value[key] = _broken(value[key], data)
        return value
    if isinstance(value, list) and value and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(value) - 1))
        value[index] = _broken(value[index], data)
        return value
    return data.draw(json_values)


def _frozen(value: Any) -> str:
    return json.dumps(value)  # types (1, 1.0 and true) and key order kept apart


def assert_same_check(schema: Schema, value: Any) -> None:
    by_walk, by_compiled, by_valid = deepcopy(value), deepcopy(value), deepcopy(value)
    answer = is_valid(schema, by_walk)
    assert validator(schema)(by_compiled, []) is answer
    assert _frozen(by_compiled) == _frozen(by_walk)  # the same defaults, even where it stopped
    assert valid(schema, by_valid) is answer
    assert _frozen(by_valid) == (_frozen(by_walk) if answer else _frozen(value))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much,
                                                                  HealthCheck.data_too_large])
@given(data=st.data())
def test_compiled_check_is_the_walk(name: str, data: st.DataObject) -> None:
    schema = SCHEMAS[name]
    seeds = SEEDS.get(name, [])
    value = data.draw(st.sampled_from(seeds) if seeds and data.draw(st.booleans()) else from_schema(schema),
                      label="aimed")
    assert_same_check(schema, value)
    assert_same_check(schema, _broken(deepcopy(value), data))
    assert_same_check(schema, data.draw(json_values, label="any"))


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_the_seeds_are_accepted_and_reach_defaults(name: str) -> None:
    """The seeds are what their names say: accepted."""
    for seed in SEEDS[name]:
        checked = deepcopy(seed)
        assert is_valid(SCHEMAS[name], checked), seed
        assert_same_check(SCHEMAS[name], seed)


@pytest.mark.parametrize("name", ["ROUTE", "UPSTREAM", "plugin limit-count", "plugin proxy-rewrite"])
def test_the_walk_writes_defaults_into_the_seeds(name: str) -> None:
    assert any(json.dumps(seed) != json.dumps(_defaulted(SCHEMAS[name], seed)) for seed in SEEDS[name])


def _defaulted(schema: Schema, value: Any) -> Any:
    value = deepcopy(value)
    is_valid(schema, value)
    return value


def test_a_refused_value_is_left_as_given() -> None:
    """An anyOf option that writes a default and then fails: the walk keeps the default, `valid`
    takes it back out, the compiled check writes it as the walk does."""
    schema = {"anyOf": [{"properties": {"a": {"default": 1}, "b": {"type": "string"}}, "required": ["b"]},
                        {"properties": {"c": {"default": [2]}}, "required": ["d"]}]}
    assert_same_check(schema, {})
    walked = {}
    assert not is_valid(schema, walked)
    assert walked == {"a": 1, "c": [2]}
    given_value: dict[str, Any] = {}
    assert not valid(schema, given_value)
    assert given_value == {}
    accepted: dict[str, Any] = {"b": "x"}
    assert valid(schema, accepted)
    assert accepted == {"b": "x", "a": 1}


def test_a_schema_that_contains_itself() -> None:
    tree: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}}
    tree["properties"]["child"] = tree
    assert_same_check(tree, {"name": "a", "child": {"name": "b", "child": {"name": 3}}})
    assert_same_check(tree, {"name": "a", "child": {"name": "b"}})


@pytest.mark.parametrize("value", [10**400, 2**53 + 1, 1.5, True, None, "1"])
def test_numbers_as_the_walk_reads_them(value: Any) -> None:
    """The same type reading, to the exception (an integer too large for a float)."""
    schema = {"type": "integer", "minimum": 0}
    try:
        expected: Any = is_valid(schema, value)
    except OverflowError as exc:
        expected = type(exc)
    try:
        got: Any = valid(schema, value)
    except OverflowError as exc:
        got = type(exc)
    assert got == expected
