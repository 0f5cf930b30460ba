"""Request validation from an operation: the request-validation plugin's header and body schemas, in the
words api7/jsonschema knows, only where the plugin's behaviour fits the operation."""

from __future__ import annotations

from typing import Any

from testkit.openapi import conversion

HEAD = "openapi: {version}\ninfo: {{title: T}}\nservers: [{{url: 'http://b.example.com'}}]\npaths:\n"


def plugin(operation: str, version: str = "3.0.3", validate: Any = True, extra: str = "") -> Any:
    spec = HEAD.format(version=version) + "  /things:\n    post:\n" + operation + extra
    converted = conversion({"spec.yaml": spec}, request_validation=validate)
    assert converted.problems == [], converted.problems
    [route] = [item.item for item in converted.items if item.kind == "routes"]
    return (route.get("plugins") or {}).get("request-validation")


BODY = """\
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: '#/components/schemas/Thing'}
"""
COMPONENTS = """\
components:
  schemas:
    Thing:
      type: object
      required: [id, name, size]
      description: a thing
      properties:
        id: {type: integer, readOnly: true}
        name: {type: string, nullable: true, enum: [a, b], example: a}
        size: {type: number, minimum: 0, maximum: 10, exclusiveMaximum: true, default: 1}
        tags: {type: array, items: {type: string, pattern: '^[a-z]+$'}}
"""


def test_a_json_body_becomes_the_body_schema_in_jsonschemas_words() -> None:
    assert plugin(BODY, extra=COMPONENTS) == {"body_schema": {
        "type": "object", "required": ["name", "size"],  # id is readOnly: a response's, not a request's
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": ["string", "null"], "enum": ["a", "b", None]},
            "size": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},  # no default: it is written
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}}}}}


def test_headers_are_checked_as_text_under_lower_case_names() -> None:
    parameters = """\
      parameters:
        - {name: X-Count, in: header, required: true, schema: {type: integer}}
        - {name: X-Flag, in: header, schema: {type: boolean}}
        - {name: X-Mode, in: header, schema: {type: string, enum: [fast, slow]}}
        - {name: Content-Type, in: header, required: true, schema: {type: string}}
        - {name: limit, in: query, required: true, schema: {type: integer}}
"""
    assert plugin(parameters) == {"header_schema": {
        "type": "object", "required": ["x-count"],
        "properties": {"x-count": {"type": "string", "pattern": "^-?[0-9]+$"},
                       "x-flag": {"type": "string", "enum": ["true", "false"]},
                       "x-mode": {"type": "string", "enum": ["fast", "slow"]}}}}


def test_only_a_required_json_only_body_is_validated() -> None:
    optional = BODY.replace("required: true", "required: false")
    assert plugin(optional, extra=COMPONENTS) is None  # the plugin refuses an empty body
    both = BODY.replace("          application/json:",
                        "          application/xml: {schema: {type: object}}\n          application/json:")
    assert plugin(both, extra=COMPONENTS) is None  # it would read the XML as JSON
    vendor = BODY.replace("application/json", "application/vnd.api+json")
    assert plugin(vendor, extra=COMPONENTS) is not None


def test_validation_is_opt_in_and_the_most_specific_switch_wins() -> None:
    assert plugin(BODY, extra=COMPONENTS, validate=False) is None
    off = BODY + "      x-gitsync-request-validation: false\n"
    assert plugin(off, extra=COMPONENTS) is None
    on = BODY + "      x-gitsync-request-validation: {rejected_code: 422}\n"
    found = plugin(on, extra=COMPONENTS, validate=False)
    assert found["rejected_code"] == 422 and "body_schema" in found


def test_openapi_3_1_schemas_keep_their_types_and_ref_siblings() -> None:
    body = BODY.replace("{$ref: '#/components/schemas/Thing'}",
                        "{$ref: '#/components/schemas/N', maximum: 3}")
    extra = "components:\n  schemas:\n    N: {type: [integer, 'null'], exclusiveMinimum: 0}\n"
    assert plugin(body, version="3.1.0", extra=extra) == {"body_schema": {
        "allOf": [{"type": ["integer", "null"], "exclusiveMinimum": 0}, {"maximum": 3}]}}


def test_an_explicit_request_validation_plugin_is_kept() -> None:
    own = BODY + "      x-adc-plugin-request-validation: {header_schema: {type: object}}\n"
    assert plugin(own, extra=COMPONENTS) == {"header_schema": {"type": "object"}}
