"""ADC's declarative files → a gitsync payload that equals what ``adc sync`` writes to a standalone gateway.

ADC (api7/adc) nests routes under services and keys resources by name; its
standalone backend (ADC 0.28, ``libs/backend-apisix-standalone``) turns them into
APISIX items with ids derived from names. gitsync keeps exactly those ids and
fields, so the first sync after ``adc sync`` of the same files finds every item
equal and changes nothing. The rules, as ADC applies them:

- a service's id is its ``id`` or sha1(name); it always gets ``upstream_id`` = its
  own id, and its ``upstream`` becomes an upstreams item with the service's id and
  name;
- a route's id is its ``id`` or sha1("<service>.<route>"), with ``service_id`` and
  ``status: 1``; stream routes likewise (no status);
- an SSL's id is its ``id`` or sha1(the SNIs joined by ","); it gets ``status: 1``;
  its ``certificates`` become ``cert``/``key`` and ``certs``/``keys``;
- a consumer keeps its username; a credential's id is ``<username>/credentials/``
  plus its ``id`` or sha1("<username>.<credential>"), its ``type``/``config`` one plugin;
- a global rule and a plugin metadata item are keyed by the plugin's name;
- labels whose value is a list become that list's JSON text; services, routes,
  stream routes, consumers and SSLs get ``managed-by: adc`` (and ``--label-selector``
  labels), as ``adc sync`` stamps them;
- the defaults ADC's schema fills in are filled in: an upstream's ``type``,
  ``scheme``, ``pass_host``, each node's ``priority``, ``keepalive_pool`` and health
  check fields once present, an SSL's ``type``, a client certificate's ``depth``;
- ``${NAME}`` (ADC's environment substitution) becomes ``${{ secrets.NAME }}``
  (text, like ADC's; masked in output), ``\\${NAME}`` a literal ``${NAME}``. A ``$``
  right before ``${NAME}`` (ADC: that ``$``, then the value) has no spelling in gitsync's
  syntax (``$${{`` is its escape of a literal ``${{``): it is reported.

Each file is checked against the types of ADC's schema (`adc_shapes`) before it is
converted: a wrong type is a problem at its line, never an exception.

What ADC's standalone backend does not write (consumer groups, a service's named
``upstreams``, routes outside a service) or what gitsync cannot keep (a service
without an upstream: ADC points it at an upstream that does not exist, which gitsync
refuses) is reported with the file and line, never dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt.adc_shapes import item_count, too_many_items, wrong_types
from gitsync.adopt.repo_writer import dollar_before, rewrite_matches
from gitsync.problems import Location, Problem
from gitsync.render.load import parse
from gitsync.render.sourcemap import FilePositions, string_leaves

ADC_KEYS = ("services", "ssls", "consumers", "consumer_groups", "global_rules", "plugin_metadata",
            "routes", "stream_routes")
MANAGED_BY = ("managed-by", "adc")
_ENV = re.compile(r"\\\$\{(\w+)\}|\$\{(\w+)\}")

SERVICE_FIELDS = {"id", "name", "description", "labels", "upstream", "upstreams", "plugins", "path_prefix",
                  "strip_path_prefix", "hosts", "routes", "stream_routes"}
ROUTE_FIELDS = {"id", "name", "description", "labels", "hosts", "uris", "priority", "timeout", "vars",
                "methods", "enable_websocket", "remote_addrs", "plugins", "filter_func"}
STREAM_ROUTE_FIELDS = {"id", "name", "description", "labels", "plugins", "remote_addr", "server_addr",
                       "server_port", "sni"}
UPSTREAM_FIELDS = {"name", "description", "labels", "type", "hash_on", "key", "checks", "nodes", "scheme",
                   "retries", "retry_timeout", "timeout", "tls", "keepalive_pool", "pass_host",
                   "upstream_host", "service_name", "discovery_type", "discovery_args"}
SSL_FIELDS = {"id", "labels", "type", "snis", "certificates", "client", "ssl_protocols"}
CONSUMER_FIELDS = {"username", "description", "labels", "plugins", "credentials"}
CREDENTIAL_FIELDS = {"id", "name", "description", "labels", "type", "config"}

_HEALTHY = {"http_statuses": [200, 302], "successes": 2}
_UNHEALTHY = {"http_statuses": [429, 404, 500, 501, 502, 503, 504, 505], "http_failures": 5,
              "tcp_failures": 2, "timeouts": 3}
_ACTIVE = {"type": "http", "timeout": 1, "concurrency": 10, "http_path": "/",
           "https_verify_certificate": True}
#: ADC's health-check field names that APISIX spells differently.
_CHECK_RENAMES = {"https_verify_cert": "https_verify_certificate", "http_request_headers": "req_headers",
                  "http_req_headers": "req_headers"}


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


@dataclass
class Converted:
    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)  # the import refuses: nothing written
    notes: list[Problem] = field(default_factory=list)  # told, and the import goes on
    secrets: set[str] = field(default_factory=set)  # ${NAME} turned into ${{ secrets.NAME }}
    origins: dict[tuple[str, str], Location] = field(default_factory=dict)  # (kind, id) → where in the files


class _Source:
    """One ADC file: its data and a way to name a place in it."""

    def __init__(self, name: str, data: Any, positions: FilePositions) -> None:
        self.name, self.data, self._positions = name, data, positions

    def at(self, *path: str | int) -> Location:
        return self._positions.location(self.name, 0, path)


def _substitute(value: Any, found: set[str]) -> Any:
    """ADC's ``${NAME}`` → ``${{ secrets.NAME }}`` and ``\\${NAME}`` → ``${NAME}``, as repo text."""
    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return "${" + match.group(1) + "}"
        found.add(match.group(2))
        return "${{ secrets." + match.group(2) + " }}"

    return rewrite_matches(value, _ENV, replace)


def input_problems(src: _Source) -> list[Problem]:
    """What keeps a file from being converted: a field of the wrong type for ADC's schema, or an
    ``${NAME}`` right after a ``$`` (gitsync reads ``$${{`` as a literal ``${{``)."""
    problems = [Problem(message, src.at(*path)) for path, message in wrong_types(src.data)]
    for path, text in string_leaves(src.data):
        for match in _ENV.finditer(text):
            if match.group(2) and text[:match.start()].endswith("$"):
                problems.append(Problem(dollar_before("$" + match.group(0), match.group(2), "ADC"),
                                        src.at(*path)))
    return problems


def _labels(labels: Any, stamp: Mapping[str, str] | None) -> dict[str, str] | None:
    out = {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
           for k, v in (labels or {}).items()} if isinstance(labels, Mapping) else {}
    if stamp:
        out.update(stamp)
    return out or None


def _set(target: dict[str, Any], **fields: Any) -> dict[str, Any]:
    target.update({k: v for k, v in fields.items() if v is not None})
    return target


def _with_defaults(value: Any, defaults: Mapping[str, Any]) -> Any:
    if not isinstance(value, Mapping):
        return value
    return {**defaults, **value}


def _checks(checks: Any) -> Any:
    if not isinstance(checks, Mapping):
        return checks

    def renamed(part: Any) -> Any:
        return {_CHECK_RENAMES.get(k, k): v for k, v in part.items()} if isinstance(part, Mapping) else part

    out = dict(checks)
    active = renamed(out.get("active"))
    if isinstance(active, Mapping):
        active = _with_defaults(active, _ACTIVE)
        for name, base in (("healthy", _HEALTHY), ("unhealthy", _UNHEALTHY)):
            if isinstance(active.get(name), Mapping):
                active[name] = _with_defaults(active[name], {**base, "interval": 1})
        out["active"] = active
    passive = renamed(out.get("passive"))
    if isinstance(passive, Mapping):
        passive = _with_defaults(passive, {"type": "http"})
        for name, base in (("healthy", _HEALTHY), ("unhealthy", _UNHEALTHY)):
            if isinstance(passive.get(name), Mapping):
                passive[name] = _with_defaults(passive[name], base)
        out["passive"] = passive
    return out


class _Converter:
    def __init__(self, stamp: Mapping[str, str]) -> None:
        self.stamp = dict(stamp)
        self.out = Converted({})
        self.seen: dict[tuple[str, str], Location] = {}
        #: ADC creates every consumer before any credential: credentials follow all consumers.
        self.credentials: list[tuple[dict[str, Any], Location]] = []

    def problem(self, message: str, where: Location, kind: str | None = None, ident: str | None = None,
                ) -> None:
        self.out.problems.append(Problem(message, where, kind, ident))

    def note(self, message: str, where: Location) -> None:
        self.out.notes.append(Problem(message, where))

    def add(self, kind: str, item: dict[str, Any], where: Location) -> None:
        ident = str(item.get("id", item.get("username")))
        earlier = self.seen.get((kind, ident))
        if earlier is not None:
            self.problem(f"duplicate {kind} {ident!r}: also at {earlier}", where, kind, ident)
            return
        self.seen[(kind, ident)] = where
        self.out.payload.setdefault(kind, []).append(item)

    def unknown_fields(self, src: _Source, item: Mapping[str, Any], allowed: set[str], what: str,
                       *path: str | int) -> None:
        for key in item:
            if key not in allowed:
                self.problem(f"{what}: ADC has no field {key!r}", src.at(*path, key))

    # -- resources ----------------------------------------------------------------------------------------

    def upstream(self, up: Mapping[str, Any], ident: str, name: str) -> dict[str, Any]:
        nodes = up.get("nodes")
        if isinstance(nodes, list):
            nodes = [_with_defaults(n, {"priority": 0}) for n in nodes]
        keepalive = up.get("keepalive_pool")
        if isinstance(keepalive, Mapping):
            keepalive = _with_defaults(keepalive, {"size": 320, "idle_timeout": 60, "requests": 1000})
        out = _set({"id": ident}, name=name, desc=up.get("description"),
                   labels=_labels(up.get("labels"), None), type=up.get("type", "roundrobin"),
                   hash_on=up.get("hash_on"), key=up.get("key"), checks=_checks(up.get("checks")),
                   nodes=nodes, scheme=up.get("scheme", "http"), retries=up.get("retries"),
                   retry_timeout=up.get("retry_timeout"), timeout=up.get("timeout"),
                   tls=up.get("tls"), keepalive_pool=keepalive, pass_host=up.get("pass_host", "pass"),
                   upstream_host=up.get("upstream_host"), service_name=up.get("service_name"),
                   discovery_type=up.get("discovery_type"), discovery_args=up.get("discovery_args"))
        if "nodes" not in out and "service_name" not in out:
            out["nodes"] = []
        return out

    def service(self, src: _Source, index: int, svc: Mapping[str, Any]) -> None:
        where = src.at("services", index)
        name = svc.get("name")
        if not isinstance(name, str) or not name:
            self.problem("a service needs a name (ADC derives its id from it)", where, "services")
            return
        self.unknown_fields(src, svc, SERVICE_FIELDS, f"service {name!r}", "services", index)
        ident = str(svc.get("id") or sha1(name))
        if svc.get("upstreams"):
            self.problem(f"service {name!r}: named 'upstreams' are not mapped (ADC's standalone backend "
                         "keeps no stable id for them); use the service's 'upstream'",
                         src.at("services", index, "upstreams"), "services", ident)
        for key in ("path_prefix", "strip_path_prefix"):
            if key in svc:
                self.note(f"service {name!r}: {key} is not written by ADC's standalone backend (APISIX has "
                          "no such field); not imported", src.at("services", index, key))
        upstream = svc.get("upstream")
        if not isinstance(upstream, Mapping):
            self.problem(f"service {name!r} has no upstream: ADC points its upstream_id at an upstream that "
                         "does not exist, which gitsync refuses; give the service an upstream",
                         where, "services", ident)
        else:
            self.unknown_fields(src, upstream, UPSTREAM_FIELDS, f"service {name!r} upstream",
                                "services", index, "upstream")
            self.add("upstreams", self.upstream(upstream, ident, name), src.at("services", index, "upstream"))
        self.add("services", _set({"id": ident}, name=name, desc=svc.get("description"),
                                  labels=_labels(svc.get("labels"), self.stamp), hosts=svc.get("hosts"),
                                  upstream_id=ident, plugins=svc.get("plugins")), where)
        for r_index, route in enumerate(svc.get("routes") or ()):
            self.route(src, (index, r_index), route, name, ident)
        for r_index, route in enumerate(svc.get("stream_routes") or ()):
            self.stream_route(src, (index, r_index), route, name, ident)

    def route(self, src: _Source, at: tuple[int, int], route: Any, service: str, service_id: str) -> None:
        path = ("services", at[0], "routes", at[1])
        if not isinstance(route, Mapping) or not isinstance(route.get("name"), str):
            self.problem("a route needs a name (ADC derives its id from it)", src.at(*path), "routes")
            return
        self.unknown_fields(src, route, ROUTE_FIELDS, f"route {route['name']!r}", *path)
        ident = str(route.get("id") or sha1(f"{service}.{route['name']}"))
        self.add("routes", _set({"id": ident}, name=route["name"], desc=route.get("description"),
                                labels=_labels(route.get("labels"), self.stamp), uris=route.get("uris"),
                                hosts=route.get("hosts"), methods=route.get("methods"),
                                remote_addrs=route.get("remote_addrs"), vars=route.get("vars"),
                                filter_func=route.get("filter_func"), service_id=service_id,
                                enable_websocket=route.get("enable_websocket"), plugins=route.get("plugins"),
                                priority=route.get("priority"), timeout=route.get("timeout"), status=1),
                 src.at(*path))

    def stream_route(self, src: _Source, at: tuple[int, int], route: Any, service: str, service_id: str,
                     ) -> None:
        path = ("services", at[0], "stream_routes", at[1])
        if not isinstance(route, Mapping) or not isinstance(route.get("name"), str):
            self.problem("a stream route needs a name (ADC derives its id from it)", src.at(*path),
                         "stream_routes")
            return
        self.unknown_fields(src, route, STREAM_ROUTE_FIELDS, f"stream route {route['name']!r}", *path)
        ident = str(route.get("id") or sha1(f"{service}.{route['name']}"))
        self.add("stream_routes", _set({"id": ident}, name=route["name"], desc=route.get("description"),
                                       labels=_labels(route.get("labels"), self.stamp),
                                       remote_addr=route.get("remote_addr"),
                                       server_addr=route.get("server_addr"),
                                       server_port=route.get("server_port"), sni=route.get("sni"),
                                       service_id=service_id, plugins=route.get("plugins")), src.at(*path))

    def ssl(self, src: _Source, index: int, ssl: Any) -> None:
        where = src.at("ssls", index)
        if not isinstance(ssl.get("snis"), list) or not ssl.get("certificates"):
            self.problem("an SSL needs snis and certificates", where, "ssls")
            return
        self.unknown_fields(src, ssl, SSL_FIELDS, "ssl", "ssls", index)
        ident = str(ssl.get("id") or sha1(",".join(map(str, ssl["snis"]))))
        certs = [c for c in ssl["certificates"] if isinstance(c, Mapping)]
        client = ssl.get("client")
        if isinstance(client, Mapping):
            client = _with_defaults(client, {"depth": 1})
        item = _set({"id": ident}, labels=_labels(ssl.get("labels"), self.stamp),
                    type=ssl.get("type", "server"), snis=ssl["snis"], cert=certs[0].get("certificate"),
                    key=certs[0].get("key"))
        if len(certs) > 1:
            item["certs"] = [c.get("certificate") for c in certs[1:]]
            item["keys"] = [c.get("key") for c in certs[1:]]
        self.add("ssls", _set(item, client=client, ssl_protocols=ssl.get("ssl_protocols"), status=1), where)

    def consumer(self, src: _Source, index: int, consumer: Any) -> None:
        where = src.at("consumers", index)
        if not isinstance(consumer, Mapping) or not isinstance(consumer.get("username"), str):
            self.problem("a consumer needs a username", where, "consumers")
            return
        username = consumer["username"]
        self.unknown_fields(src, consumer, CONSUMER_FIELDS, f"consumer {username!r}", "consumers", index)
        self.add("consumers", _set({"username": username}, desc=consumer.get("description"),
                                   labels=_labels(consumer.get("labels"), self.stamp),
                                   plugins=consumer.get("plugins")), where)
        for c_index, cred in enumerate(consumer.get("credentials") or ()):
            path = ("consumers", index, "credentials", c_index)
            if not isinstance(cred, Mapping) or not isinstance(cred.get("name"), str) or "type" not in cred:
                self.problem("a credential needs a name and a type", src.at(*path), "consumers")
                continue
            self.unknown_fields(src, cred, CREDENTIAL_FIELDS, f"credential {cred['name']!r}", *path)
            suffix = cred.get("id") or sha1(username + "." + cred["name"])
            ident = f"{username}/credentials/{suffix}"
            self.credentials.append((_set({"id": ident}, name=cred["name"], desc=cred.get("description"),
                                          labels=_labels(cred.get("labels"), None),
                                          plugins={str(cred["type"]): cred.get("config") or {}}),
                                     src.at(*path)))

    def by_plugin(self, src: _Source, key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            self.problem(f"{key} must map plugin names to configurations", src.at(key))
            return
        for plugin, conf in value.items():
            where = src.at(key, plugin)
            if key == "global_rules":
                self.add("global_rules", {"id": plugin, "plugins": {plugin: conf}}, where)
            elif isinstance(conf, Mapping):
                self.add("plugin_metadata", {"id": plugin, **conf}, where)
            else:
                self.problem(f"plugin_metadata {plugin!r} must be a mapping", where)

    def file(self, src: _Source) -> None:
        if src.data is None:
            return
        if not isinstance(src.data, Mapping):
            self.problem("an ADC file is a mapping of resource types", src.at())
            return
        for key, value in src.data.items():
            if key not in ADC_KEYS:
                self.problem(f"unknown ADC key {key!r} (expected one of: {', '.join(ADC_KEYS)})", src.at(key))
                continue
            if key in ("global_rules", "plugin_metadata"):
                self.by_plugin(src, key, value)
                continue
            if not isinstance(value, list):
                self.problem(f"{key} must be a list", src.at(key))
                continue
            if key == "consumer_groups":
                if value:
                    self.problem("consumer_groups are not written by ADC's standalone backend; not mapped",
                                 src.at(key))
                continue
            if key in ("routes", "stream_routes"):
                if value:
                    self.problem(f"top-level {key} are not mapped: ADC writes a route only under a service",
                                 src.at(key))
                continue
            handler = {"services": self.service, "ssls": self.ssl, "consumers": self.consumer}[key]
            for index, item in enumerate(value):
                if not isinstance(item, Mapping):
                    self.problem(f"an item of {key} must be a mapping", src.at(key, index))
                    continue
                handler(src, index, item)


def convert(files: Mapping[str, bytes], label_selector: Mapping[str, str] | None = None,
            managed_by: bool = True, max_items: int | None = None) -> Converted:
    """ADC files (name → bytes, merged in the order given) → the payload ADC writes, and the problems.
    Files that would make more than `max_items` items are refused before they are converted."""
    stamp = dict([MANAGED_BY]) if managed_by else {}
    stamp.update(label_selector or {})
    converter = _Converter(stamp)
    positions = FilePositions(files)
    counted = 0
    for name, data in files.items():
        parsed = parse(data)
        if parsed.issues:
            converter.out.problems += [Problem(i.message, Location(name, i.line, i.col))
                                       for i in parsed.issues]
            continue
        documents = [d.data for d in parsed.documents]
        if len(documents) > 1:
            converter.problem("an ADC file holds one YAML document", Location(name, 1, 1))
            continue
        refused = input_problems(_Source(name, documents[0] if documents else None, positions))
        if refused:
            converter.out.problems += refused
            continue
        counted += item_count(documents[0] if documents else None)
        if max_items is not None and counted > max_items:
            converter.out.problems.append(Problem(too_many_items(counted, max_items)))
            return converter.out
        found: set[str] = set()
        converter.file(_Source(name, _substitute(documents[0], found) if documents else None, positions))
        converter.out.secrets |= found
    for credential, where in converter.credentials:
        converter.add("consumers", credential, where)
    order = {"services": 0, "routes": 1, "stream_routes": 2, "upstreams": 3, "ssls": 4, "consumers": 5,
             "global_rules": 6, "plugin_metadata": 7}
    converter.out.payload = dict(sorted(converter.out.payload.items(), key=lambda kv: order[kv[0]]))
    converter.out.origins = dict(converter.seen)
    return converter.out
