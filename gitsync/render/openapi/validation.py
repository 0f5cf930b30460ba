"""Request validation from an operation: APISIX's ``request-validation`` plugin, from its parameters and
its request body.

The plugin (``apisix/plugins/request-validation.lua``, APISIX 3.18) checks two things, each with a
JSON schema that api7/jsonschema compiles: the request's headers (``header_schema``) and its body
(``body_schema``, the body decoded as JSON, or as a form when the request says
``application/x-www-form-urlencoded``). What an operation says becomes:

- **headers**: each ``in: header`` parameter (the operation's, over its path item's) is a property
  under its lower-case name (the plugin sees header names in lower case), ``required`` when the
  parameter is. A header's value is text: a schema of ``type: integer`` or ``number`` becomes a
  pattern of digits, ``boolean`` the texts ``true``/``false``; a string's ``enum``, ``pattern``,
  ``minLength``, ``maxLength`` and ``format`` are kept. ``Accept``, ``Content-Type`` and
  ``Authorization`` are not parameters (OpenAPI says they are ignored).
- **body**: the request body's schema, when the body is ``required`` and every media type it lists
  is JSON (``application/json``, ``…+json``): the plugin refuses a request without a body as soon as
  it has a ``body_schema``, and would read any other media type as JSON. References are written out
  (`gitsync.render.openapi.refs`); the schema is given in the words api7/jsonschema knows: 3.0's
  ``nullable`` as a ``null`` type, its boolean ``exclusiveMinimum``/``Maximum`` as numbers, a
  ``readOnly`` property not required of a request, and what only documents a schema (``example``,
  ``description``, ``xml``…) or would change the request (``default``: the library writes defaults
  into the body it passes on) left out.

Query and path parameters are not validated: the plugin cannot see them (a path's templates are
matched by the route itself, one segment each). A schema gitsync cannot write out (a recursive
one) is a problem at its reference; leave validation off for that operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitsync.render.openapi.refs import Expansion, Place
from gitsync.render.openapi.spec import Operation, Spec

PLUGIN = "request-validation"
#: An extension that switches request validation on or off for the document, a path item or an
#: operation (the most specific wins), or gives the plugin's options.
EXTENSION = "x-gitsync-request-validation"
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
#: The keywords api7/jsonschema compiles (lib/jsonschema.lua), but ``default``.
_KEYWORDS = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "items", "additionalItems", "maxItems", "minItems",
    "uniqueItems", "contains", "maxProperties", "minProperties", "required", "properties",
    "patternProperties", "additionalProperties", "dependencies", "propertyNames", "allOf", "anyOf", "oneOf",
    "not",
})
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SCHEMA_MAPS = ("properties", "patternProperties")
_SCHEMA_ONE = ("additionalProperties", "additionalItems", "not", "contains", "propertyNames")
_TEXT_PATTERNS = {"integer": "^-?[0-9]+$", "number": "^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$"}


def switch(spec: Spec, operation: Operation, declared: bool | Mapping[str, Any]) -> bool | Mapping[str, Any]:
    """Whether (and with which options) the operation is validated: its own extension, its path
    item's, the document's, else the declaration's."""
    for data in (operation.data, operation.item, spec.data):
        value = data.get(EXTENSION)
        if isinstance(value, bool | Mapping):
            return value
    return declared


def plugin_conf(spec: Spec, operation: Operation, options: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``request-validation`` configuration of an operation, or None when it has nothing to check."""
    conf: dict[str, Any] = {}
    headers = _header_schema(spec, operation)
    if headers is not None:
        conf["header_schema"] = headers
    try:
        body = _body_schema(spec, operation)
    except Expansion:
        body = None
    if body is not None:
        conf["body_schema"] = body
    if not conf:
        return None
    if isinstance(options, Mapping):
        conf.update(options)
    return conf


def _parameters(spec: Spec, operation: Operation) -> list[tuple[Place, Mapping[str, Any]]]:
    """The operation's parameters over its path item's, each keyed by (name, in), references followed."""
    found: dict[tuple[str, str], tuple[Place, Mapping[str, Any]]] = {}
    for owner, place in ((operation.item, operation.item_place), (operation.data, operation.place)):
        listed = owner.get("parameters")
        if not isinstance(listed, list):
            continue
        for index, parameter in enumerate(listed):
            followed = spec.resolver.follow(place.child("parameters", index), parameter)
            if followed is None:
                continue
            at, value = followed
            if isinstance(value, Mapping) and isinstance(value.get("name"), str) \
                    and isinstance(value.get("in"), str):
                found[(value["name"], value["in"])] = (at, value)
    return list(found.values())


def _header_schema(spec: Spec, operation: Operation) -> dict[str, Any] | None:
    properties: dict[str, Any] = {}
    required = []
    for at, parameter in _parameters(spec, operation):
        name = parameter["name"].lower()
        if parameter["in"] != "header" or name in _IGNORED_HEADERS:
            continue
        schema = parameter.get("schema", {}) if spec.version != "2.0" else parameter
        try:
            schema = spec.resolver.expand(at.child("schema"), schema) if spec.version != "2.0" else schema
        except Expansion:
            continue
        properties[name] = _header_value(schema if isinstance(schema, Mapping) else {})
        if parameter.get("required") is True:
            required.append(name)
    if not properties:
        return None
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _header_value(schema: Mapping[str, Any]) -> dict[str, Any]:
    """What a header's text must look like, from the parameter's schema."""
    kind = schema.get("type")
    if kind in _TEXT_PATTERNS:
        return {"type": "string", "pattern": _TEXT_PATTERNS[kind]}
    if kind == "boolean":
        return {"type": "string", "enum": ["true", "false"]}
    if kind not in (None, "string"):
        return {}
    out: dict[str, Any] = {"type": "string"}
    for key in ("enum", "pattern", "minLength", "maxLength", "format"):
        if key in schema:
            out[key] = schema[key]
    return out


def _is_json(media_type: Any) -> bool:
    name = str(media_type).split(";", 1)[0].strip().lower()
    return name == "application/json" or (name.startswith("application/") and name.endswith("+json"))


def _body_schema(spec: Spec, operation: Operation) -> dict[str, Any] | None:
    """The JSON schema of a required JSON request body, or None."""
    if spec.version == "2.0":
        consumes = operation.data.get("consumes", spec.data.get("consumes", ["application/json"]))
        if not isinstance(consumes, list) or not consumes or not all(_is_json(c) for c in consumes):
            return None
        for at, parameter in _parameters(spec, operation):
            if parameter["in"] == "body" and parameter.get("required") is True:
                schema = spec.resolver.expand(at.child("schema"), parameter.get("schema", {}))
                return _for_validator(schema, "2.0")
        return None
    place = operation.place.child("requestBody")
    followed = spec.resolver.follow(place, operation.data.get("requestBody"))
    if followed is None:
        return None
    at, body = followed
    if not isinstance(body, Mapping) or body.get("required") is not True:
        return None
    content = body.get("content")
    if not isinstance(content, Mapping) or not content or not all(_is_json(m) for m in content):
        return None
    media, value = next(iter(content.items()))
    if not isinstance(value, Mapping) or "schema" not in value:
        return None
    schema = spec.resolver.expand(at.child("content", media, "schema"), value["schema"],
                                  siblings_too=spec.version != "3.0")
    return _for_validator(schema, spec.version)


def _for_validator(schema: Any, version: str | None) -> dict[str, Any]:
    """A request's schema in the words api7/jsonschema knows (see the module)."""
    if schema is True or not isinstance(schema, Mapping):
        return {}
    if schema is False:
        return {"not": {}}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _KEYWORDS:
            continue
        if key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_for_validator(v, version) for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _for_validator(v, version) for name, v in value.items()}
        elif key in _SCHEMA_ONE and isinstance(value, Mapping):
            out[key] = _for_validator(value, version)
        elif key == "items":
            out[key] = [_for_validator(v, version) for v in value] if isinstance(value, list) \
                else _for_validator(value, version)
        else:
            out[key] = value
    for bound in ("Minimum", "Maximum"):
        exclusive = out.get("exclusive" + bound)
        if isinstance(exclusive, bool):  # OpenAPI 3.0 / draft 4: a flag on minimum / maximum
            plain = out.pop(bound.lower(), None)
            del out["exclusive" + bound]
            if exclusive and plain is not None:
                out["exclusive" + bound] = plain
            elif plain is not None:
                out[bound.lower()] = plain
    if version in ("2.0", "3.0") and schema.get("nullable") is True and "type" in out:
        kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*kinds, "null"] if "null" not in kinds else kinds
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    properties = schema.get("properties")
    if isinstance(out.get("required"), list) and isinstance(properties, Mapping):
        kept = [name for name in out["required"] if not (isinstance(properties.get(name), Mapping)
                                                         and properties[name].get("readOnly") is True)]
        if kept:
            out["required"] = kept
        else:
            del out["required"]
    return out


__all__ = ["EXTENSION", "PLUGIN", "plugin_conf", "switch"]
