"""APISIX 3.18's resource schemas (``apisix/schema_def.lua``, ``apisix/secret/*.lua``), as data.

With the standalone patches of ``apisix/admin/standalone.lua``: an integer
``modifiedIndex`` on every resource schema but secrets and plugin metadata, and
the credential ``id`` pattern. Where the recorded 3.18 answers differ from the source
(``tests/data/golden``), the recording wins (docs/apisix-versions.md).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

ID: Schema = {
    "anyOf": [
        {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[a-zA-Z0-9-_.]+$"},
        {"type": "integer", "minimum": 1},
    ],
}
HOST_PATTERN = r"^\*$|^\*?[0-9a-zA-Z-._\[\]:]+$"
HOST: Schema = {"type": "string", "pattern": HOST_PATTERN}
TIMESTAMP: Schema = {"type": "integer"}
NAME: Schema = {"type": "string", "minLength": 1, "maxLength": 256}
DESC: Schema = {"type": "string", "maxLength": 256}
LABELS: Schema = {
    "type": "object",
    "patternProperties": {
        ".*": {"type": "string", "pattern": r"^\S+$", "minLength": 1, "maxLength": 256},
    },
}
PLUGINS: Schema = {"type": "object"}
URI: Schema = {"type": "string", "pattern": r"^[^\/]+:\/\/([\da-zA-Z.-]+|\[[\da-fA-F:]+\])(:\d+)?"}

_IPV4_SEG = "([0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])"
_IPV4 = r"\.".join([_IPV4_SEG] * 4)
_IPV6 = "([a-fA-F0-9]{0,4}:){1,8}(:[a-fA-F0-9]{0,4}){0,8}([a-fA-F0-9]{0,4})?"
IP_DEF: list[Schema] = [
    {"title": "IPv4", "type": "string", "format": "ipv4"},
    {"title": "IPv4/CIDR", "type": "string", "pattern": f"^{_IPV4}/([12]?[0-9]|3[0-2])$"},
    {"title": "IPv6", "type": "string", "format": "ipv6"},
    {"title": "IPv6/CIDR", "type": "string", "pattern": f"^{_IPV6}/[0-9]{{1,3}}$"},
]
REMOTE_ADDR: Schema = {"description": "client IP", "type": "string", "anyOf": IP_DEF}

TIMEOUT: Schema = {
    "type": "object",
    "properties": {
        "connect": {"type": "number", "exclusiveMinimum": 0},
        "send": {"type": "number", "exclusiveMinimum": 0},
        "read": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": ["connect", "send", "read"],
}

METHOD: Schema = {
    "description": "HTTP method",
    "type": "string",
    "enum": ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE", "PURGE"],
}


def _statuses(default: list[int]) -> Schema:
    return {
        "type": "array", "minItems": 1, "uniqueItems": True, "default": default,
        "items": {"type": "integer", "minimum": 200, "maximum": 599},
    }


def _counter(default: int) -> Schema:
    return {"type": "integer", "minimum": 1, "maximum": 254, "default": default}


HEALTH_CHECKER: Schema = {
    "type": "object",
    "properties": {
        "active": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["http", "https", "tcp"], "default": "http"},
                "timeout": {"type": "number", "default": 1},
                "concurrency": {"type": "integer", "default": 10},
                "host": HOST,
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "http_path": {"type": "string", "default": "/"},
                "https_verify_certificate": {"type": "boolean", "default": True},
                "healthy": {
                    "type": "object",
                    "properties": {
                        "interval": {"type": "integer", "minimum": 1, "default": 1},
                        "http_statuses": _statuses([200, 302]),
                        "successes": _counter(2),
                    },
                },
                "unhealthy": {
                    "type": "object",
                    "properties": {
                        "interval": {"type": "integer", "minimum": 1, "default": 1},
                        "http_statuses": _statuses([429, 404, 500, 501, 502, 503, 504, 505]),
                        "http_failures": _counter(5),
                        "tcp_failures": _counter(2),
                        "timeouts": _counter(3),
                    },
                },
                "req_headers": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            },
        },
        "passive": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["http", "https", "tcp"], "default": "http"},
                "healthy": {
                    "type": "object",
                    "properties": {
                        "http_statuses": _statuses([200, 201, 202, 203, 204, 205, 206, 207, 208, 226,
                                                    300, 301, 302, 303, 304, 305, 306, 307, 308]),
                        "successes": _counter(5),
                    },
                },
                "unhealthy": {
                    "type": "object",
                    "properties": {
                        "http_statuses": _statuses([429, 500, 503]),
                        "tcp_failures": _counter(2),
                        "timeouts": _counter(7),
                        "http_failures": _counter(5),
                    },
                },
            },
        },
    },
    "additionalProperties": False,
    "anyOf": [{"required": ["active"]}, {"required": ["active", "passive"]}],
}

NODES: Schema = {
    "anyOf": [
        {
            "type": "object",
            "patternProperties": {".*": {"description": "weight of node", "type": "integer", "minimum": 0}},
        },
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "host": HOST,
                    "port": {"description": "port of node", "type": "integer", "minimum": 1,
                             "maximum": 65535},
                    "weight": {"description": "weight of node", "type": "integer", "minimum": 0},
                    "priority": {"description": "priority of node", "type": "integer", "default": 0},
                    "metadata": {"description": "metadata of node", "type": "object"},
                },
                "required": ["host", "weight"],
            },
        },
    ],
}

CERTIFICATE: Schema = {"type": "string", "minLength": 128, "maxLength": 64 * 1024}  # 128: recorded on 3.18
PRIVATE_KEY: Schema = {"type": "string", "minLength": 64, "maxLength": 64 * 1024}

UPSTREAM: Schema = {
    "type": "object",
    "properties": {
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "nodes": NODES,
        "retries": {"type": "integer", "minimum": 0},
        "retry_timeout": {"type": "number", "minimum": 0},
        "timeout": TIMEOUT,
        "tls": {
            "type": "object",
            "properties": {
                "client_cert_id": ID,
                "client_cert": CERTIFICATE,
                "client_key": PRIVATE_KEY,
                "verify": {"type": "boolean", "default": False},
            },
            "dependencies": {
                "client_cert": {"required": ["client_key"], "not": {"required": ["client_cert_id"]}},
                "client_key": {"required": ["client_cert"], "not": {"required": ["client_cert_id"]}},
                "client_cert_id": {"not": {"required": ["client_cert", "client_key"]}},
            },
        },
        "keepalive_pool": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "default": 320, "minimum": 1},
                "idle_timeout": {"type": "number", "default": 60, "minimum": 0},
                "requests": {"type": "integer", "default": 1000, "minimum": 1},
            },
        },
        "type": {"description": "algorithms of load balancing", "type": "string", "default": "roundrobin"},
        "checks": HEALTH_CHECKER,
        "hash_on": {
            "type": "string",
            "default": "vars",
            "enum": ["vars", "header", "cookie", "consumer", "vars_combinations"],
        },
        "key": {"description": "the key of chash for dynamic load balancing", "type": "string"},
        "scheme": {
            "default": "http",
            "enum": ["grpc", "grpcs", "http", "https", "tcp", "tls", "udp", "kafka"],
        },
        "labels": LABELS,
        "discovery_type": {"description": "discovery type", "type": "string"},
        "discovery_args": {
            "type": "object",
            "properties": {
                "namespace_id": {"description": "namespace id", "type": "string"},
                "group_name": {"description": "group name", "type": "string"},
                "metadata": {"type": "object"},
            },
        },
        "pass_host": {
            "description": "mod of host passing",
            "type": "string",
            "enum": ["pass", "node", "rewrite"],
            "default": "pass",
        },
        "upstream_host": HOST,
        "name": NAME,
        "desc": DESC,
        "service_name": {"type": "string", "maxLength": 256, "minLength": 1},
        "id": ID,
    },
    "oneOf": [
        {"required": ["nodes"]},
        {"required": ["service_name", "discovery_type"]},
    ],
    "additionalProperties": False,
}

UPSTREAM_HASH_VARS: Schema = {
    "type": "string",
    "pattern": (r"^((uri|server_name|server_addr|request_uri|remote_port|remote_addr|query_string"
                r"|host|hostname|mqtt_client_id)|arg_[0-9a-zA-z_-]+)$"),
}
UPSTREAM_HASH_HEADER: Schema = {"type": "string", "pattern": r"^[a-zA-Z0-9-_]+$"}
UPSTREAM_HASH_VARS_COMBINATIONS: Schema = {"type": "string"}


def _one_of_or_neither(a: str, b: str) -> Schema:
    return {
        "oneOf": [
            {"not": {"anyOf": [{"required": [a]}, {"required": [b]}]}},
            {"required": [a]},
            {"required": [b]},
        ],
    }


ROUTE: Schema = {
    "type": "object",
    "properties": {
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "uri": {"type": "string", "minLength": 1, "maxLength": 4096},
        "uris": {
            "type": "array",
            "items": {"description": "HTTP uri", "type": "string"},
            "minItems": 1,
            "uniqueItems": True,
        },
        "name": NAME,
        "desc": DESC,
        "priority": {"type": "integer", "default": 0},
        "methods": {"type": "array", "items": METHOD, "uniqueItems": True},
        "host": HOST,
        "hosts": {"type": "array", "items": HOST, "minItems": 1, "uniqueItems": True},
        "remote_addr": REMOTE_ADDR,
        "remote_addrs": {"type": "array", "items": REMOTE_ADDR, "minItems": 1, "uniqueItems": True},
        "timeout": TIMEOUT,
        "vars": {"type": "array"},
        "filter_func": {"type": "string", "minLength": 10, "pattern": "^function"},
        "script": {"type": "string", "minLength": 10, "maxLength": 102400},
        "script_id": ID,
        "plugins": PLUGINS,
        "plugin_config_id": ID,
        "upstream": UPSTREAM,
        "labels": LABELS,
        "service_id": ID,
        "upstream_id": ID,
        "enable_websocket": {"description": "enable websocket for request", "type": "boolean"},
        "id": ID,
        "status": {
            "description": "route status, 1 to enable, 0 to disable",
            "type": "integer",
            "enum": [1, 0],
            "default": 1,
        },
    },
    "allOf": [
        {"oneOf": [{"required": ["uri"]}, {"required": ["uris"]}]},
        _one_of_or_neither("host", "hosts"),
        _one_of_or_neither("remote_addr", "remote_addrs"),
    ],
    "anyOf": [
        {"required": ["plugins", "uri"]},
        {"required": ["upstream", "uri"]},
        {"required": ["upstream_id", "uri"]},
        {"required": ["service_id", "uri"]},
        {"required": ["plugins", "uris"]},
        {"required": ["upstream", "uris"]},
        {"required": ["upstream_id", "uris"]},
        {"required": ["service_id", "uris"]},
        {"required": ["script", "uri"]},
        {"required": ["script", "uris"]},
    ],
    "not": {
        "anyOf": [
            {"required": ["script", "plugins"]},
            {"required": ["script", "plugin_config_id"]},
        ],
    },
    "additionalProperties": False,
}

SERVICE: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "plugins": PLUGINS,
        "upstream": UPSTREAM,
        "upstream_id": ID,
        "name": NAME,
        "desc": DESC,
        "labels": LABELS,
        "script": {"type": "string", "minLength": 10, "maxLength": 102400},
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "enable_websocket": {"description": "enable websocket for request", "type": "boolean"},
        "hosts": {"type": "array", "items": HOST, "minItems": 1, "uniqueItems": True},
    },
    "additionalProperties": False,
}

CONSUMER: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "username": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[a-zA-Z0-9_\-]+$"},
        "group_id": ID,
        "plugins": PLUGINS,
        "labels": LABELS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "desc": DESC,
    },
    "required": ["username"],
    "additionalProperties": False,
}

CREDENTIAL: Schema = {
    "type": "object",
    "properties": {
        # standalone.lua patch_credential_schema
        "id": {
            "type": "string",
            "minLength": 15,
            "maxLength": 128,
            "pattern": r"^[a-zA-Z0-9-_]+/credentials/[a-zA-Z0-9-_.]+$",
        },
        "name": NAME,
        "desc": DESC,
        "labels": LABELS,
        "plugins": {"type": "object", "maxProperties": 1},
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
    },
    "additionalProperties": False,
}

CONSUMER_GROUP: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "name": NAME,
        "desc": DESC,
        "labels": LABELS,
        "plugins": PLUGINS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
    },
    "required": ["id", "plugins"],
    "additionalProperties": False,
}

PLUGIN_CONFIG: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "name": {"type": "string"},
        "desc": DESC,
        "plugins": PLUGINS,
        "labels": LABELS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
    },
    "required": ["id", "plugins"],
    "additionalProperties": False,
}

GLOBAL_RULE: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "plugins": PLUGINS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
    },
    "required": ["id", "plugins"],
    "additionalProperties": False,
}

SNI_PATTERN = HOST_PATTERN  # recorded on 3.18: a lone "*" is a valid SNI too
SSL: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "desc": DESC,
        "labels": LABELS,
        "type": {"description": "ssl certificate type", "type": "string", "enum": ["server", "client"],
                 "default": "server"},
        "cert": CERTIFICATE,
        "key": PRIVATE_KEY,
        "sni": {"type": "string", "pattern": SNI_PATTERN},
        "snis": {"type": "array", "items": {"type": "string", "pattern": SNI_PATTERN}, "minItems": 1},
        "certs": {"type": "array", "items": CERTIFICATE},
        "keys": {"type": "array", "items": PRIVATE_KEY},
        "client": {
            "type": "object",
            "properties": {
                "ca": CERTIFICATE,
                "depth": {"type": "integer", "minimum": 0, "default": 1},
                "skip_mtls_uri_regex": {"type": "array", "minItems": 1, "uniqueItems": True,
                                        "items": {"type": "string"}},
            },
            "required": ["ca"],
        },
        "status": {"description": "ssl status, 1 to enable, 0 to disable", "type": "integer",
                   "enum": [1, 0], "default": 1},
        "ssl_protocols": {"description": "set ssl protocols", "type": "array", "maxItems": 3,
                          "uniqueItems": True, "items": {"enum": ["TLSv1.1", "TLSv1.2", "TLSv1.3"]}},
        "validity_end": TIMESTAMP,
        "validity_start": TIMESTAMP,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
    },
    "if": {"properties": {"type": {"enum": ["server"]}}},
    "then": {"oneOf": [{"required": ["sni", "key", "cert"]}, {"required": ["snis", "key", "cert"]}]},
    "else": {"required": ["key", "cert"]},
    "additionalProperties": False,
}

PROTO: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "name": NAME,
        "desc": DESC,
        "labels": LABELS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "content": {"type": "string", "minLength": 1, "maxLength": 1024 * 1024},
    },
    "required": ["content"],
    "additionalProperties": False,
}

XRPC_PROTOCOL: Schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "superior_id": ID,
        "conf": {"description": "protocol-specific configuration", "type": "object"},
        "logger": {
            "type": "array",
            "items": {
                "properties": {
                    "name": {"type": "string"},
                    "filter": {"type": "array"},
                    "conf": {"type": "object"},
                },
                "required": ["name"],
            },
        },
    },
    "required": ["name"],
}

STREAM_ROUTE: Schema = {
    "type": "object",
    "properties": {
        "id": ID,
        "name": NAME,
        "desc": DESC,
        "labels": LABELS,
        "create_time": TIMESTAMP,
        "update_time": TIMESTAMP,
        "remote_addr": REMOTE_ADDR,
        "server_addr": {"description": "server IP", "type": "string", "anyOf": IP_DEF},
        "server_port": {"description": "server port", "type": "integer", "minimum": 1, "maximum": 65535},
        "sni": {"description": "server name indication", "type": "string", "pattern": HOST_PATTERN},
        "upstream": UPSTREAM,
        "upstream_id": ID,
        "service_id": ID,
        "plugins": PLUGINS,
        "protocol": XRPC_PROTOCOL,
    },
    "additionalProperties": False,
}

# Secret managers: no additionalProperties, so modifiedIndex and friends pass.
SECRET_MANAGERS: dict[str, Schema] = {
    "vault": {
        "type": "object",
        "properties": {
            "uri": URI,
            "prefix": {"type": "string"},
            "token": {"type": "string"},
            "namespace": {"type": "string"},
        },
        "required": ["uri", "prefix", "token"],
    },
    "aws": {
        "type": "object",
        "properties": {
            "access_key_id": {"type": "string"},
            "secret_access_key": {"type": "string"},
            "session_token": {"type": "string"},
            "region": {"type": "string", "default": "us-east-1"},
            "endpoint_url": URI,
        },
        "required": ["access_key_id", "secret_access_key"],
    },
    "gcp": {
        "type": "object",
        "properties": {
            "auth_config": {
                "type": "object",
                "properties": {
                    "client_email": {"type": "string"},
                    "private_key": {"type": "string"},
                    "project_id": {"type": "string"},
                    "token_uri": {"type": "string", "default": "https://oauth2.googleapis.com/token"},
                    "scope": {"type": "array", "items": {"type": "string"},
                              "default": ["https://www.googleapis.com/auth/cloud-platform"]},
                    "entries_uri": {"type": "string", "default": "https://secretmanager.googleapis.com/v1"},
                },
                "required": ["client_email", "private_key", "project_id"],
            },
            "ssl_verify": {"type": "boolean", "default": True},
            "auth_file": {"type": "string"},
        },
        "oneOf": [{"required": ["auth_config"]}, {"required": ["auth_file"]}],
    },
}


def _patch_modified_index(*schemas: Schema) -> None:
    """standalone.lua ``attach_modifiedIndex_schema``: an integer ``modifiedIndex`` is allowed."""
    for schema in schemas:
        schema["properties"].setdefault("modifiedIndex", {"type": "integer"})


_patch_modified_index(PROTO, GLOBAL_RULE, ROUTE, STREAM_ROUTE, SERVICE, UPSTREAM, CONSUMER,
                      CONSUMER_GROUP, CREDENTIAL, SSL, PLUGIN_CONFIG)
