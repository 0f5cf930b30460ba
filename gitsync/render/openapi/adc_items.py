"""What ``adc sync`` writes to a standalone gateway for ADC's services, their upstreams and routes.

ADC (api7/adc) keys resources by name; its standalone backend (``libs/backend-apisix-standalone``)
derives each APISIX item's id from names: a service's is its ``id`` or sha1(name), a route's its
``id`` or sha1("<service>.<route>"), and (ADC 0.21.0 on) a service's ``upstream`` becomes an upstreams
item with the service's id and name. Its lint (zod, before every sync) fills in schema defaults:
a node's ``priority: 0``, an upstream's ``type``, ``scheme`` and ``pass_host``, a ``keepalive_pool``'s
and a health check's fields. These rules are shared by the two ways ADC's model reaches a repo:
`gitsync import adc` (its files, any release: `gitsync.adopt.import_adc`) and OpenAPI specs rendered
as ADC's converter makes them (`gitsync.render.openapi`), which write what ADC 0.28.0 writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: The fields of ADC's schema (``libs/sdk/src/core/schema.ts``, ADC 0.28) per resource.
SERVICE_FIELDS = frozenset({"id", "name", "description", "labels", "upstream", "upstreams", "plugins",
                            "path_prefix", "strip_path_prefix", "hosts", "routes", "stream_routes"})
ROUTE_FIELDS = frozenset({"id", "name", "description", "labels", "hosts", "uris", "priority", "timeout",
                          "vars", "methods", "enable_websocket", "remote_addrs", "plugins", "filter_func"})
UPSTREAM_FIELDS = frozenset({"name", "description", "labels", "type", "hash_on", "key", "checks", "nodes",
                             "scheme", "retries", "retry_timeout", "timeout", "tls", "keepalive_pool",
                             "pass_host", "upstream_host", "service_name", "discovery_type",
                             "discovery_args"})
#: The service discovery fields of an upstream.
DISCOVERY = ("service_name", "discovery_type", "discovery_args")
#: The active health check's certificate-verification flag, as ADC 0.26 on spells it (before: ``_cert``).
VERIFY_CERT = "https_verify_certificate"

_HEALTHY = {"http_statuses": [200, 302], "successes": 2}
_UNHEALTHY = {"http_statuses": [429, 404, 500, 501, 502, 503, 504, 505], "http_failures": 5,
              "tcp_failures": 2, "timeouts": 3}
_ACTIVE = {"type": "http", "timeout": 1, "concurrency": 10, "http_path": "/"}
KEEPALIVE = {"size": 320, "idle_timeout": 60, "requests": 1000}


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def child_id(explicit: Any, parent: str, name: str) -> str:
    """The id ADC gives a route, stream route, named upstream or credential: its own ``id``, or
    sha1("<parent>.<name>"). ADC's differ derives the latter also for an explicit id that equals
    sha1(<name>), taking it for one it derived without the parent."""
    if not explicit or str(explicit) == sha1(name):
        return sha1(f"{parent}.{name}")
    return str(explicit)


def labels(value: Any, stamp: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """ADC's labels as APISIX's: a list value becomes its JSON text; `stamp` added. ``labels: {}`` stays
    ``{}`` (``fromADCLabels`` in ADC's standalone backend); absent labels stay absent unless stamped."""
    out = {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
           for k, v in value.items()} if isinstance(value, Mapping) else None
    if stamp:
        out = {**(out or {}), **stamp}
    return out


def set_fields(target: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """`target` with each of `fields` that is not None."""
    target.update({k: v for k, v in fields.items() if v is not None})
    return target


def with_defaults(value: Any, defaults: Mapping[str, Any]) -> Any:
    """A mapping with `defaults` under it (anything else as it is)."""
    if not isinstance(value, Mapping):
        return value
    return {**defaults, **value}


def checks_with_defaults(checks: Any, verify_cert: str = VERIFY_CERT) -> Any:
    """Health checks with the defaults ADC's lint (zod 4) fills in, under ADC's own field names."""
    if not isinstance(checks, Mapping):
        return checks
    out = dict(checks)
    active = out.get("active")
    if isinstance(active, Mapping):
        active = with_defaults(active, {**_ACTIVE, verify_cert: True})
        for name, base in (("healthy", _HEALTHY), ("unhealthy", _UNHEALTHY)):
            if isinstance(active.get(name), Mapping):
                active[name] = with_defaults(active[name], {**base, "interval": 1})
        out["active"] = active
    passive = out.get("passive")
    if isinstance(passive, Mapping):
        passive = with_defaults(passive, {"type": "http"})
        for name, base in (("healthy", _HEALTHY), ("unhealthy", _UNHEALTHY)):
            if isinstance(passive.get(name), Mapping):
                passive[name] = with_defaults(passive[name], base)
        out["passive"] = passive
    return out


def upstream_fields(up: Mapping[str, Any], *, lint: bool = True, full_defaults: bool = True,
                    checks: bool = True, verify_cert: str = VERIFY_CERT) -> dict[str, Any]:
    """An ADC upstream as the standalone backend writes it, without id and name: `lint` (``adc sync``
    without ``--no-lint``), `full_defaults` (its lint is zod 4, ADC 0.21.0 on) and `checks` (health
    checks and discovery written, ADC 0.21.1 on) as the release that writes it does."""
    nodes = up.get("nodes")
    if full_defaults and isinstance(nodes, list):
        nodes = [with_defaults(n, {"priority": 0}) for n in nodes]
    keepalive = up.get("keepalive_pool")
    if lint:  # zod 3 and zod 4 alike
        keepalive = with_defaults(keepalive, KEEPALIVE)
    out = set_fields({}, desc=up.get("description"), labels=labels(up.get("labels")), type=up.get("type"),
                     hash_on=up.get("hash_on"), key=up.get("key"), nodes=nodes, scheme=up.get("scheme"),
                     retries=up.get("retries"), retry_timeout=up.get("retry_timeout"),
                     timeout=up.get("timeout"), tls=up.get("tls"), keepalive_pool=keepalive,
                     pass_host=up.get("pass_host"), upstream_host=up.get("upstream_host"))
    if full_defaults:
        for key, default in (("type", "roundrobin"), ("scheme", "http"), ("pass_host", "pass")):
            out.setdefault(key, default)
    if checks:
        health = up.get("checks")
        set_fields(out, checks=checks_with_defaults(health, verify_cert) if full_defaults else health,
                   **{key: up.get(key) for key in DISCOVERY})
    return out


def service_item(svc: Mapping[str, Any], ident: str, stamp: Mapping[str, str] | None = None,
                 nested: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ADC service as an APISIX service: its upstream `nested` inside it (ADC 0.20), else an
    upstreams item of the same id (ADC 0.21.0 on) that it names."""
    return set_fields({"id": ident}, name=svc.get("name"), desc=svc.get("description"),
                      labels=labels(svc.get("labels"), stamp), hosts=svc.get("hosts"), upstream=nested,
                      upstream_id=None if nested is not None else ident, plugins=svc.get("plugins"))


def route_item(route: Mapping[str, Any], service: str, service_id: str,
               stamp: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An ADC route of the service named `service` as an APISIX route."""
    return set_fields({"id": child_id(route.get("id"), service, route["name"])}, name=route["name"],
                      desc=route.get("description"), labels=labels(route.get("labels"), stamp),
                      uris=route.get("uris"), hosts=route.get("hosts"), methods=route.get("methods"),
                      remote_addrs=route.get("remote_addrs"), vars=route.get("vars"),
                      filter_func=route.get("filter_func"), service_id=service_id,
                      enable_websocket=route.get("enable_websocket"), plugins=route.get("plugins"),
                      priority=route.get("priority"), timeout=route.get("timeout"), status=1)


__all__ = ["DISCOVERY", "KEEPALIVE", "ROUTE_FIELDS", "SERVICE_FIELDS", "UPSTREAM_FIELDS", "VERIFY_CERT",
           "checks_with_defaults", "child_id", "labels", "route_item", "service_item", "set_fields", "sha1",
           "upstream_fields", "with_defaults"]
