"""``gitsync schema``: JSON Schema files of the repo format, for editors (yaml-language-server).

Generated from the schemas ``gitsync validate`` checks items with (`gitsync.schema.
definitions`), as draft-07 documents: ``config-file.schema.json`` for any config file
and ``<kind>.schema.json`` for a file of one kind. On top of APISIX's item schemas
they carry the repo's own rules — every item has an id, no ``*_conf_version`` keys,
plugin names from APISIX's list — and they accept, wherever a value is checked, what
only gitsync or APISIX resolve: ``${{ vars.X }}`` / ``${{ secrets.X }}`` /
``${{ number(vars.X) }}`` and ``$secret://`` / ``$env://`` references. Their description says how
unquoted values are read (YAML 1.2, as the editors read them). ``gitsync validate`` stays the authority:
the editor schemas cannot check references between items or plugin configurations.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gitsync import __version__
from gitsync.adopt.repo_writer import WriteError, replace_files
from gitsync.kinds import KINDS, is_credential
from gitsync.notation import SECRET_FIELD
from gitsync.render.openapi.declaration import DEFAULTS, MAX_PREFIX, VALIDATION_OPTIONS
from gitsync.schema import PLUGINS, STREAM_PLUGINS
from gitsync.schema import definitions as defs

DRAFT = "http://json-schema.org/draft-07/schema#"
CONFIG_FILE = "config-file.schema.json"
#: A value gitsync (templates) or APISIX (references) fills in later: never checked by shape.
FILLED_LATER: dict[str, Any] = {"type": "string", "pattern": r"\$\{\{|^\$(secret|env|ENV)://"}

ITEM_SCHEMAS: dict[str, Mapping[str, Any]] = {
    "routes": defs.ROUTE, "services": defs.SERVICE, "upstreams": defs.UPSTREAM,
    "consumer_groups": defs.CONSUMER_GROUP, "ssls": defs.SSL, "global_rules": defs.GLOBAL_RULE,
    "plugin_configs": defs.PLUGIN_CONFIG, "protos": defs.PROTO, "stream_routes": defs.STREAM_ROUTE,
}

KIND_DESCRIPTIONS = {
    "routes": "HTTP routes: match requests (uri/uris, hosts, methods, vars) and send them to an upstream.",
    "services": "Services: plugins and an upstream shared by the routes that name them (service_id).",
    "upstreams": "Upstreams: backend nodes and load balancing, referenced by upstream_id.",
    "consumers": "Consumers (identified by username) and their credentials (id "
                 "<username>/credentials/<name>, one auth plugin each).",
    "consumer_groups": "Consumer groups: plugins shared by the consumers that name them (group_id).",
    "ssls": "Certificates and keys, selected by SNI. Keep private keys out of git: "
            "${{ secrets.X }}, $secret:// or a SOPS file.",
    "global_rules": "Plugins that run on every request; one rule per plugin, named after it.",
    "plugin_configs": "Plugin sets shared by routes (plugin_config_id).",
    "plugin_metadata": "Per-plugin metadata (id = the plugin's name), e.g. http-logger's log_format.",
    "protos": "Protocol buffer definitions for grpc-transcode.",
    "stream_routes": "Layer-4 (TCP/UDP) routes; APISIX's stream_proxy must be enabled.",
    "secrets": "Secret managers (id vault/<name>, aws/<name>, gcp/<name>), resolved by APISIX for "
               "$secret://<manager>/<name>/... references.",
}
FIELD_DESCRIPTIONS = {
    "id": "The item's id: at most 64 characters of [a-zA-Z0-9-_.], or an integer ≥ 1; unique per kind.",
    "name": "A human-readable name.",
    "desc": "A description.",
    "labels": "Key/value labels (strings without spaces).",
    "plugins": "Plugins by name, each with its configuration.",
    "upstream_id": "The id of an item of upstreams.",
    "service_id": "The id of an item of services.",
    "plugin_config_id": "The id of an item of plugin_configs.",
    "group_id": "The id of an item of consumer_groups.",
    "upstream": "An inline upstream (the same fields as an item of upstreams).",
    "uri": "The request path to match; a trailing * matches a prefix.",
    "uris": "Request paths to match (any of them).",
    "hosts": "Host names to match.",
    "username": "The consumer's name: its identity.",
    "modifiedIndex": "Chosen by gitsync from the content; leave it out of the repo.",
}


# ---------------------------------------------------------------------------------------------------------
# The item schema of one item (for --strip-defaults)


def item_schema(kind: str, item: Any) -> Mapping[str, Any] | None:
    """The APISIX schema `item` of `kind` is checked against (None where there is none)."""
    if kind == "consumers":
        return defs.CREDENTIAL if is_credential(kind, item) else defs.CONSUMER
    if kind == "secrets":
        manager = str(item.get("id", "")).split("/", 1)[0] if isinstance(item, Mapping) else ""
        return defs.SECRET_MANAGERS.get(manager)
    return ITEM_SCHEMAS.get(kind)


def _strip(value: Any, schema: Mapping[str, Any]) -> Any:
    props = schema.get("properties")
    if isinstance(value, dict) and isinstance(props, Mapping):
        out = {}
        for key, child in value.items():
            sub = props.get(key)
            if isinstance(sub, Mapping) and "default" in sub and sub["default"] == child \
                    and type(sub["default"]) is type(child):
                continue
            out[key] = _strip(child, sub) if isinstance(sub, Mapping) else child
        return out
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [_strip(v, items) for v in value]
    return value


def strip_defaults(kind: str, item: Any) -> Any:
    """`item` without the fields whose value is their schema default (identity fields kept)."""
    schema = item_schema(kind, item)
    return _strip(item, schema) if schema is not None else item


# ---------------------------------------------------------------------------------------------------------
# Editor schemas


def _editor(node: Any) -> Any:
    """An APISIX schema node as an editor schema: templates and references accepted, descriptions added."""
    if isinstance(node, list):
        return [_editor(n) for n in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: _editor(v) for k, v in node.items() if k not in ("properties", "patternProperties")}
    for key in ("properties", "patternProperties"):
        if key in node:
            out[key] = {name: _described(name, _editor(sub)) for name, sub in node[key].items()}
    if "type" in node or "enum" in node or "pattern" in node:
        return {"anyOf": [out, FILLED_LATER]}
    return out


def _described(name: str, node: Any) -> Any:
    if isinstance(node, dict) and name in FIELD_DESCRIPTIONS and "description" not in node:
        return {"description": FIELD_DESCRIPTIONS[name], **node}
    return node


def _plugins_named(schema: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
    if "plugins" in schema.get("properties", {}):
        schema["properties"]["plugins"] = {
            "description": FIELD_DESCRIPTIONS["plugins"], "type": "object",
            "propertyNames": {"enum": sorted(names)},
            "additionalProperties": {"type": "object"}}
    return schema


def _with_id(schema: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(schema))
    out["required"] = sorted({*out.get("required", ()), "id"})
    return out


def kind_items(kind: str) -> dict[str, Any]:
    """The editor schema of one item of `kind`."""
    http = frozenset(PLUGINS)
    if kind == "consumers":
        consumer = _plugins_named(copy.deepcopy(dict(defs.CONSUMER)), http)
        credential = _plugins_named(_with_id(defs.CREDENTIAL), http)
        schema: dict[str, Any] = {
            "if": {"type": "object", "required": ["id"],
                   "properties": {"id": {"type": "string", "pattern": "/credentials/"}}},
            "then": _editor(credential), "else": _editor(consumer)}
    elif kind == "secrets":
        schema = {"type": "object", "required": ["id"],
                  "properties": {"id": {"type": "string", "pattern": "^(vault|aws|gcp)/[^/]+$",
                                        "description": "<manager>/<name>: vault/main, aws/prod, ..."}},
                  "allOf": [{"if": {"properties": {"id": {"pattern": f"^{m}/"}}},
                             "then": _editor(s)} for m, s in sorted(defs.SECRET_MANAGERS.items())]}
    elif kind == "plugin_metadata":
        schema = {"type": "object", "required": ["id"],
                  "properties": {"id": {"description": "The plugin's name.",
                                        "enum": sorted(frozenset(PLUGINS) | frozenset(STREAM_PLUGINS))}}}
    else:
        names = frozenset(STREAM_PLUGINS) if kind == "stream_routes" else http
        schema = _editor(_plugins_named(_with_id(ITEM_SCHEMAS[kind]), names))
    return {"description": KIND_DESCRIPTIONS[kind], **schema}


#: The repo's own ``secret_fields:`` list (`gitsync.render.secrets`), never pushed.
SECRET_FIELDS: dict[str, Any] = {
    "description": "Fields that hold secrets besides those gitsync knows: PLUGIN.PATH (that plugin's config "
                   "wherever it is) or KIND.PATH; masked in every output, taken out by export and import.",
    "type": ["array", "null"],
    "items": {"type": "string", "pattern": SECRET_FIELD.pattern},
}


#: The repo's own ``openapi:`` list (`gitsync.render.openapi.declaration`), never pushed.
OPENAPI: dict[str, Any] = {
    "description": "OpenAPI specs the repo renders into services, upstreams and routes (docs/openapi.md).",
    "type": ["array", "null"],
    "items": {
        "type": "object", "required": ["name", "spec"], "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Unique; layers replace or patch it."},
            "spec": {"type": "string", "description": "The spec's path, relative to this file (/… from the "
                                                      "repo's root)."},
            **{key: {"type": "object", "description": f"As x-adc-{key.replace('_', '-')} at the spec's root "
                                                      "(ADC's field names)."} for key in DEFAULTS},
            "server_variables": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
            "request_validation": {"type": ["boolean", "object"],
                                   "properties": {key: {} for key in VALIDATION_OPTIONS},
                                   "additionalProperties": False},
            "id_prefix": {"type": "string", "pattern": "^[a-zA-Z0-9_.-]*$", "maxLength": MAX_PREFIX},
            "$patch": {"enum": ["merge"]},
        },
    },
}


def file_schema(kinds: tuple[str, ...], title: str) -> dict[str, Any]:
    """A config file (one YAML document) holding lists of `kinds` (all of them: the repo's own lists too)."""
    properties: dict[str, Any] = {
        kind: {"description": KIND_DESCRIPTIONS[kind], "type": ["array", "null", "object"],
               "maxProperties": 0, "items": kind_items(kind)} for kind in kinds}
    if kinds == KINDS:
        properties["secret_fields"] = SECRET_FIELDS
        properties["openapi"] = OPENAPI
    return {
        "$schema": DRAFT,
        "$id": f"https://gitsync.invalid/schema/{__version__}/{title}",
        "title": f"gitsync config file ({', '.join(kinds) if len(kinds) < 3 else 'any kind'})",
        "description": "A gitsync config repo file: resource kinds mapped to lists of items. "
                       "Check with `gitsync validate`. Unquoted values are read as YAML 1.2 reads them, "
                       "as this editor does by default (yaml.yamlVersion 1.2): yes, on, 1_000 and 0b101 "
                       "are text, 0777 is the number 777; `gitsync validate` warns of each one that YAML "
                       "1.1 tools read otherwise, and names what to write. "
                       "${{ number(vars.NAME) }} stands for a number.",
        "type": ["object", "null"],
        # a list of items; `routes:` (null) or `routes: {}` is an empty kind
        "properties": properties,
        "additionalProperties": False,
    }


def schema_files() -> dict[str, bytes]:
    """File name → JSON text of every editor schema."""
    files = {CONFIG_FILE: file_schema(KINDS, CONFIG_FILE)}
    files |= {f"{kind}.schema.json": file_schema((kind,), f"{kind}.schema.json") for kind in KINDS}
    return {name: (json.dumps(schema, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
            for name, schema in files.items()}


def schema_command(_settings: object, args: argparse.Namespace) -> int:
    out: Path = args.out
    try:
        replace_files(out, schema_files())
    except (WriteError, OSError) as exc:
        print(f"gitsync schema: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {CONFIG_FILE} and {len(KINDS)} per-kind schemas to {out}; in a config file:\n"
          f"# yaml-language-server: $schema={(out / CONFIG_FILE).as_posix()}")
    return 0
