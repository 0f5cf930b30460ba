"""The configuration schemas of the plugins gitsync checks in full, with each plugin's own checks.

APISIX answers ``failed to check the configuration of plugin <name> err: <why>``
for a plugin body its schema refuses. gitsync checks the bodies of the plugins
below (the ones its users and the recorded 3.18 answers use most); every other
plugin's body stays unchecked here and is refused, if at all, by the gateway.
The fields the recorded answers exercise are confirmed against a real 3.18;
the rest of each schema is read from APISIX's plugin sources of 3.x.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gitsync.schema import definitions as defs
from gitsync.schema.expr import expr_problem

Schema = dict[str, Any]
ExtraCheck = Callable[[dict[str, Any]], "str | None"]

#: ``schema_def.plugin_injected_schema``: the ``_meta`` every plugin body may carry.
META: Schema = {
    "type": "object",
    "properties": {
        "disable": {"type": "boolean"},
        "error_response": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        "priority": {"description": "priority of plugins by customized order", "type": "integer"},
        "filter": {"description": "filter determines whether the plugin needs to be executed at runtime",
                   "type": "array"},
    },
}

_ANONYMOUS_CONSUMER: Schema = {"type": "string", "minLength": 1}
_REJECTED_CODE: Schema = {"type": "integer", "minimum": 200, "maximum": 599, "default": 503}

_REDIS: Schema = {
    "properties": {
        "redis_host": {"type": "string", "minLength": 2},
        "redis_port": {"type": "integer", "minimum": 1, "default": 6379},
        "redis_username": {"type": "string", "minLength": 1},
        "redis_password": {"type": "string", "minLength": 0},
        "redis_database": {"type": "integer", "minimum": 0, "default": 0},
        "redis_timeout": {"type": "integer", "minimum": 1, "default": 1000},
        "redis_ssl": {"type": "boolean", "default": False},
        "redis_ssl_verify": {"type": "boolean", "default": False},
    },
    "required": ["redis_host"],
}
_REDIS_CLUSTER: Schema = {
    "properties": {
        "redis_cluster_nodes": {"type": "array", "minItems": 1,
                                "items": {"type": "string", "minLength": 2, "maxLength": 100}},
        "redis_password": {"type": "string", "minLength": 0},
        "redis_timeout": {"type": "integer", "minimum": 1, "default": 1000},
        "redis_cluster_name": {"type": "string"},
        "redis_cluster_ssl": {"type": "boolean", "default": False},
        "redis_cluster_ssl_verify": {"type": "boolean", "default": False},
    },
    "required": ["redis_cluster_nodes", "redis_cluster_name"],
}
_BY_POLICY: Schema = {
    "if": {"properties": {"policy": {"enum": ["redis"]}}},
    "then": _REDIS,
    "else": {"if": {"properties": {"policy": {"enum": ["redis-cluster"]}}}, "then": _REDIS_CLUSTER},
}


def _positive_or_variable() -> Schema:
    return {"oneOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string"}]}


LIMIT_COUNT: Schema = {
    "type": "object",
    "properties": {
        "count": _positive_or_variable(),
        "time_window": _positive_or_variable(),
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"count": _positive_or_variable(), "time_window": _positive_or_variable(),
                               "key": {"type": "string"}},
                "required": ["count", "time_window", "key"],
            },
        },
        "group": {"type": "string"},
        "key": {"type": "string", "default": "remote_addr"},
        "key_type": {"type": "string", "enum": ["var", "var_combination", "constant"], "default": "var"},
        "rejected_code": _REJECTED_CODE,
        "rejected_msg": {"type": "string", "minLength": 1},
        "policy": {"type": "string", "enum": ["local", "redis", "redis-cluster"], "default": "local"},
        "allow_degradation": {"type": "boolean", "default": False},
        "show_limit_quota_header": {"type": "boolean", "default": True},
    },
    "oneOf": [{"required": ["count", "time_window"]}, {"required": ["rules"]}],
    **_BY_POLICY,
}


def _limit_count_rules(conf: dict[str, Any]) -> str | None:
    seen: set[Any] = set()
    for rule in conf.get("rules") or []:
        key = rule.get("key") if isinstance(rule, dict) else None
        if key in seen:
            return f"duplicate key '{key}' in rules"
        seen.add(key)
    return None


#: What limit-req and limit-conn share: the key, where counters live, and the refusal.
_LIMIT_COMMON: Schema = {
    "key": {"type": "string"},
    "key_type": {"type": "string", "enum": ["var", "var_combination"], "default": "var"},
    "policy": {"type": "string", "enum": ["redis", "redis-cluster", "local"], "default": "local"},
    "rejected_code": _REJECTED_CODE,
    "rejected_msg": {"type": "string", "minLength": 1},
    "allow_degradation": {"type": "boolean", "default": False},
}

LIMIT_REQ: Schema = {
    "type": "object",
    "properties": {
        "rate": {"type": "number", "exclusiveMinimum": 0},
        "burst": {"type": "number", "minimum": 0},
        **_LIMIT_COMMON,
        "nodelay": {"type": "boolean", "default": False},
    },
    "required": ["rate", "burst", "key"],
    **_BY_POLICY,
}

LIMIT_CONN: Schema = {
    "type": "object",
    "properties": {
        "conn": {"type": "integer", "exclusiveMinimum": 0},
        "burst": {"type": "integer", "minimum": 0},
        "default_conn_delay": {"type": "number", "exclusiveMinimum": 0},
        "only_use_default_delay": {"type": "boolean", "default": False},
        **_LIMIT_COMMON,
    },
    "required": ["conn", "burst", "default_conn_delay", "key"],
    **_BY_POLICY,
}

KEY_AUTH: Schema = {
    "type": "object",
    "properties": {
        "header": {"type": "string", "default": "apikey"},
        "query": {"type": "string", "default": "apikey"},
        "hide_credentials": {"type": "boolean", "default": False},
        "anonymous_consumer": _ANONYMOUS_CONSUMER,
        "realm": {"type": "string", "default": "key"},
    },
}
KEY_AUTH_CONSUMER: Schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}

BASIC_AUTH: Schema = {
    "type": "object",
    "properties": {
        "hide_credentials": {"type": "boolean", "default": False},
        "anonymous_consumer": _ANONYMOUS_CONSUMER,
        "realm": {"type": "string", "default": "basic"},
    },
}
BASIC_AUTH_CONSUMER: Schema = {
    "type": "object",
    "properties": {"username": {"type": "string"}, "password": {"type": "string"}},
    "required": ["username", "password"],
}

_HMAC_ALGORITHMS = ["HS256", "HS512"]
_KEY_ALGORITHMS = ["RS256", "ES256", "RS384", "RS512", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"]
JWT_AUTH: Schema = {
    "type": "object",
    "properties": {
        "header": {"type": "string", "default": "authorization"},
        "query": {"type": "string", "default": "jwt"},
        "cookie": {"type": "string", "default": "jwt"},
        "hide_credentials": {"type": "boolean", "default": False},
        "key_claim_name": {"type": "string", "default": "key", "minLength": 1},
        "store_in_ctx": {"type": "boolean", "default": False},
        "anonymous_consumer": _ANONYMOUS_CONSUMER,
        "claims_to_verify": {"type": "array", "uniqueItems": True,
                             "items": {"type": "string", "enum": ["exp", "nbf"]}},
        "realm": {"type": "string", "default": "jwt"},
    },
}
JWT_AUTH_CONSUMER: Schema = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "secret": {"type": "string"},
        "algorithm": {"type": "string", "enum": _HMAC_ALGORITHMS + _KEY_ALGORITHMS, "default": "HS256"},
        "exp": {"type": "integer", "minimum": 1, "default": 86400},
        "base64_secret": {"type": "boolean", "default": False},
        "lifetime_grace_period": {"type": "integer", "minimum": 0, "default": 0},
        "public_key": {"type": "string"},
    },
    "required": ["key"],
}

_HTTP_METHODS = ["GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "MKCOL", "COPY", "MOVE", "PROPFIND",
                 "LOCK", "UNLOCK", "PATCH", "TRACE"]
PROXY_REWRITE: Schema = {
    "type": "object",
    "properties": {
        "uri": {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": r"^\/.*"},
        "method": {"type": "string", "enum": _HTTP_METHODS},
        "regex_uri": {"type": "array", "minItems": 2, "items": {"type": "string"}},
        "host": {"type": "string", "pattern": r"^[0-9a-zA-Z-.]+(:\d{1,5})?$"},
        "headers": {"type": "object"},
        "use_real_request_uri_unsafe": {"type": "boolean", "default": False},
    },
    "minProperties": 1,
}

#: Python's words for a PCRE compile failure → PCRE's (``ngx.re`` answers with PCRE's own message).
_PCRE_WORDS = (
    ("missing ), unterminated subpattern", "missing )"),
    ("unbalanced parenthesis", "unmatched parentheses"),
    ("unterminated character set", "missing terminating ] for character class"),
    ("nothing to repeat", "nothing to repeat"),
)


def pcre_problem(pattern: str) -> str | None:
    """``pcre_compile() failed: <why> in "<pattern>"`` when `pattern` does not compile (None when it does).

    Python's ``re`` stands in for PCRE: the wording of the first translation is recorded
    from a real gateway; a failure without a translation keeps Python's words.
    """
    try:
        re.compile(pattern)
    except re.error as exc:
        words = str(exc.msg)
        for python_words, pcre_words in _PCRE_WORDS:
            if words.startswith(python_words):
                words = pcre_words
                break
        return f'pcre_compile() failed: {words} in "{pattern}"'
    return None


def _proxy_rewrite_regex(conf: dict[str, Any]) -> str | None:
    regex_uri = conf.get("regex_uri") or []
    if len(regex_uri) % 2:
        return "The length of regex_uri should be an even number"
    for index in range(0, len(regex_uri), 2):
        pattern, replacement = regex_uri[index], regex_uri[index + 1]
        problem = pcre_problem(pattern)
        if problem:
            return f"invalid regex_uri({pattern}, {replacement}): {problem}"
    return None


_ORIGINS_PATTERN = r"^(\*|\*\*|null|\w+://[^,]+(,\w+://[^,]+)*)$"
_REGEX_LIST: Schema = {"type": "array", "minItems": 1, "uniqueItems": True,
                       "items": {"type": "string", "minLength": 1, "maxLength": 4096}}
CORS: Schema = {
    "type": "object",
    "properties": {
        "allow_origins": {"type": "string", "pattern": _ORIGINS_PATTERN, "default": "*"},
        "allow_methods": {"type": "string", "default": "*"},
        "allow_headers": {"type": "string", "default": "*"},
        "expose_headers": {"type": "string"},
        "max_age": {"type": "integer", "default": 5},
        "allow_credential": {"type": "boolean", "default": False},
        "allow_origins_by_regex": _REGEX_LIST,
        "allow_origins_by_metadata": _REGEX_LIST,
        "timing_allow_origins": {"type": "string", "pattern": _ORIGINS_PATTERN},
        "timing_allow_origins_by_regex": _REGEX_LIST,
    },
}


def _cors_credential(conf: dict[str, Any]) -> str | None:
    """The schema's defaults are in `conf` by now: ``allow_methods`` defaults to ``*`` too."""
    if conf.get("allow_credential") and "*" in (
            conf.get("allow_origins"), conf.get("allow_methods"), conf.get("allow_headers"),
            conf.get("expose_headers"), conf.get("timing_allow_origins")):
        return "you can not set '*' for other option when 'allow_credential' is true"
    for pattern in conf.get("allow_origins_by_regex") or []:
        problem = pcre_problem(pattern)
        if problem:
            return problem
    return None


TRAFFIC_SPLIT: Schema = {
    "type": "object",
    "properties": {
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "vars": {"type": "array"},
                    "weighted_upstreams": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "upstream_id": defs.ID,
                                "upstream": defs.UPSTREAM,
                                "weight": {"type": "integer", "default": 1, "minimum": 0},
                            },
                        },
                    },
                },
            },
        },
    },
}


def _traffic_split_vars(conf: dict[str, Any]) -> str | None:
    for rule in conf.get("rules") or []:
        if isinstance(rule, dict) and rule.get("vars"):
            problem = expr_problem(rule["vars"])
            if problem:
                return f"failed to validate the 'vars' expression: {problem}"
    return None


MOCKING: Schema = {
    "type": "object",
    "properties": {
        "delay": {"type": "integer", "default": 0},
        "response_status": {"type": "integer", "default": 200, "minimum": 100},
        "content_type": {"type": "string", "default": "application/json;charset=utf8"},
        "response_example": {"type": "string"},
        "response_schema": {"type": "object"},
        "with_mock_header": {"type": "boolean", "default": True},
        "response_headers": {"type": "object", "minProperties": 1,
                             "patternProperties": {"^[^:]+$": {"oneOf": [{"type": "string"},
                                                                         {"type": "number"}]}}},
    },
    "anyOf": [{"required": ["response_example"]}, {"required": ["response_schema"]}],
}

HTTP_LOGGER_METADATA: Schema = {
    "type": "object",
    "properties": {
        "log_format": {"type": "object"},
        "max_pending_entries": {"type": "integer", "minimum": 1},
    },
}


@dataclass(frozen=True)
class PluginSchema:
    """What APISIX checks a plugin's body against, per place the body sits."""

    schema: Schema
    consumer: Schema | None = None  # a consumer's (or credential's) body, when it differs
    metadata: Schema | None = None  # its plugin_metadata item
    extra: ExtraCheck | None = None  # the plugin's ``check_schema`` beyond the schema


PLUGIN_SCHEMAS: Mapping[str, PluginSchema] = {
    "limit-count": PluginSchema(LIMIT_COUNT, extra=_limit_count_rules),
    "limit-req": PluginSchema(LIMIT_REQ),
    "limit-conn": PluginSchema(LIMIT_CONN),
    "key-auth": PluginSchema(KEY_AUTH, consumer=KEY_AUTH_CONSUMER),
    "basic-auth": PluginSchema(BASIC_AUTH, consumer=BASIC_AUTH_CONSUMER),
    "jwt-auth": PluginSchema(JWT_AUTH, consumer=JWT_AUTH_CONSUMER),
    "proxy-rewrite": PluginSchema(PROXY_REWRITE, extra=_proxy_rewrite_regex),
    "cors": PluginSchema(CORS, extra=_cors_credential),
    "traffic-split": PluginSchema(TRAFFIC_SPLIT, extra=_traffic_split_vars),
    "mocking": PluginSchema(MOCKING),
    "http-logger": PluginSchema({"type": "object"}, metadata=HTTP_LOGGER_METADATA),
}
