"""ADC's services of a spec → the APISIX items ``adc sync`` (0.28.0) writes for them, with gitsync's
exact matching of the paths, optional request validation, and where each field came from.

The ids, the fields and the defaults ADC's lint fills in are `gitsync.render.openapi.adc_items`'s
(shared with ``gitsync import adc``). Beyond what ADC writes:

- a route of a templated path matches exactly that path (`gitsync.render.openapi.uris`): ``uris``,
  plus ``vars`` and ``priority``, unless the route defaults set ``uris`` themselves;
- a ``name`` or ``desc`` longer than APISIX's 256 characters is cut to 256 (ending in ``…``), where
  ``adc sync`` would stop on it; the id is still derived from the whole name;
- ``request-validation`` from the operation, where asked (`gitsync.render.openapi.validation`),
  unless the operation's plugins already hold one.

A field ADC's schema does not have, in any defaults, is a problem at its line (``adc sync``'s lint
refuses it too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.problems import Location, Problem
from gitsync.render.openapi import validation
from gitsync.render.openapi.adc import Route, Service
from gitsync.render.openapi.adc_items import (
    DISCOVERY,
    ROUTE_FIELDS,
    SERVICE_FIELDS,
    UPSTREAM_FIELDS,
    route_item,
    service_item,
    sha1,
    upstream_fields,
)
from gitsync.render.openapi.declaration import Declaration
from gitsync.render.openapi.spec import Spec
from gitsync.render.openapi.uris import matcher
from gitsync.render.sourcemap import FieldPath, Generated

MAX_TEXT = 256  # APISIX's maxLength of a name and a desc (apisix/schema_def.lua)
#: ADC's field → the APISIX field it becomes, where they differ.
_RENAMED = {"description": "desc"}


@dataclass(frozen=True)
class Item:
    """One generated item: its kind, content, place (the operation, or the spec's part it stands for)
    and provenance."""

    kind: str
    item: dict[str, Any]
    at: Location
    origin: Generated


@dataclass
class Items:
    """The items of one spec and the problems found making them."""

    items: list[Item] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > MAX_TEXT:
        return text[:MAX_TEXT - 1] + "…"
    return text


def _apisix_origins(origins: Mapping[FieldPath, Location], under: str | None = None,
                    ) -> dict[FieldPath, Location]:
    """An ADC object's field origins as the APISIX item's (``description`` → ``desc``); `under`: only
    those of that field, without it (an upstream's inside its service)."""
    out = {}
    for path, where in origins.items():
        if under is not None:
            if not path or path[0] != under or len(path) == 1:
                continue
            path = path[1:]
        elif path and path[0] == "upstream":
            continue
        out[(_RENAMED.get(str(path[0]), path[0]), *path[1:])] = where
    return out


class Mapper:
    """ADC's services of one spec as APISIX items (see the module)."""

    def __init__(self, spec: Spec, declaration: Declaration) -> None:
        self.spec = spec
        self.declaration = declaration
        self.out = Items()

    def problem(self, message: str, where: Location, kind: str | None = None, ident: str | None = None,
                ) -> None:
        self.out.problems.append(Problem(message, where, kind, ident))

    def generated(self, at: Location, origins: dict[FieldPath, Location], route: Route | None = None,
                  ) -> Generated:
        operation = None if route is None else f"{route.operation.method.upper()} {route.operation.path}"
        operation_id = None if route is None else route.operation.data.get("operationId")
        return Generated(self.spec.file, self.declaration.name, self.declaration.at, operation,
                         operation_id if isinstance(operation_id, str) else None, origins)

    def unknown(self, fields: Iterable[str], allowed: frozenset[str], origins: Mapping[FieldPath, Location],
                what: str, at: Location) -> None:
        for key in fields:
            if key not in allowed:
                self.problem(f"{what}: ADC has no field {key!r} (adc sync's lint refuses it)",
                             origins.get((key,), at))

    def service(self, service: Service, seen: dict[str, Location]) -> None:
        fields, origins = service.shape.fields, service.shape.origins
        name = str(fields.get("name"))
        ident = self.declaration.id_prefix + str(fields.get("id") or sha1(name))
        what = f"service {name!r}"
        self.unknown((k for k in fields if k != "upstream"), SERVICE_FIELDS, origins, what, service.at)
        if ident in seen:
            self.problem(f"{what} has the id {ident} of another service of this spec, at {seen[ident]} (two "
                         "services of one name: give one another x-adc-name or x-adc-service-defaults.name)",
                         service.at, "services", ident)
            return
        seen[ident] = service.at
        up = fields.get("upstream") if isinstance(fields.get("upstream"), Mapping) else {}
        up_origins = _apisix_origins(origins, "upstream")
        self.unknown(up, UPSTREAM_FIELDS, up_origins, f"{what} upstream", service.at)
        upstream = {"id": ident, "name": _cut(name), **upstream_fields(up)}
        for key in ("id", "name"):  # both are the service's
            up_origins.setdefault((key,), origins.get(("id",)) or origins.get(("name",), service.at))
        servers_at = origins.get(("upstream", "nodes"), service.at)
        told = self.spec.bad_servers  # a server that could not be read is the cause, told already
        if "nodes" not in upstream and not any(key in upstream for key in DISCOVERY) and not told:
            self.problem(f"{what}: no server of the spec names a host, so its upstream has no nodes: give "
                         "the declaration's upstream_defaults.nodes (or x-adc-upstream-defaults.nodes)",
                         servers_at, "upstreams", ident)
        item = service_item({**fields, "name": _cut(name), "description": _cut(fields.get("description"))},
                            ident)
        operation = service.routes[0] if service.operation is not None else None
        self.out.items.append(Item("services", item, service.at,
                                   self.generated(service.at, _apisix_origins(origins), operation)))
        self.out.items.append(Item("upstreams", upstream, servers_at,
                                   self.generated(servers_at, up_origins, operation)))
        for route in service.routes:
            self.route(route, name, ident)

    def route(self, route: Route, service: str, service_id: str) -> None:
        fields, origins = dict(route.shape.fields), _apisix_origins(route.shape.origins)
        name = str(fields.get("name"))
        origins.setdefault(("id",), origins.get(("name",), route.at))  # derived from the name
        self.unknown(fields, ROUTE_FIELDS, origins, f"route {name!r}", route.at)
        if not route.user_uris:
            self._match(route, fields, origins)
        switch = validation.switch(self.spec, route.operation, self.declaration.request_validation)
        plugins = fields.get("plugins") if isinstance(fields.get("plugins"), Mapping) else {}
        if switch and validation.PLUGIN not in plugins:
            conf = validation.plugin_conf(self.spec, route.operation, switch)
            if conf is not None:
                fields["plugins"] = {**plugins, validation.PLUGIN: conf}
                origins[("plugins", validation.PLUGIN)] = route.at
        item = route_item({**fields, "name": name, "description": _cut(fields.get("description"))},
                          service, service_id)
        item["id"] = self.declaration.id_prefix + item["id"]
        item["name"] = _cut(name)
        self.out.items.append(Item("routes", item, route.at, self.generated(route.at, origins, route)))

    def _match(self, route: Route, fields: dict[str, Any], origins: dict[FieldPath, Location]) -> None:
        """The route matches exactly its path: uris, and for a templated one vars and priority."""
        own = matcher(route.operation.path)  # the spec's own path, as it is written, first
        found = own if isinstance(own, str) else matcher(route.path)
        where = origins.get(("uris",), route.at)
        if isinstance(found, str):
            self.problem(f"{found}: it cannot become an APISIX route", where)
            return
        fields["uris"] = [found.uri]
        condition = found.vars_condition()
        if condition is None:
            return
        written = fields.get("vars")
        if isinstance(written, list) and written:
            compound = isinstance(written[0], str)  # ["OR", …] or ["AND", …]: one expression
            fields["vars"] = [condition, written] if compound else [condition, *written]
        else:
            fields["vars"] = [condition]
            origins[("vars",)] = where
        fields.setdefault("priority", found.priority)
        origins.setdefault(("priority",), where)


def same_route_key(item: Mapping[str, Any], hosts: Any) -> str:
    """What makes two routes the same route for the router: uris, vars, methods and hosts."""
    return json.dumps([item.get("uris"), item.get("vars"), sorted(map(str, item.get("methods") or [])),
                       hosts if hosts is not None else item.get("hosts")], sort_keys=True, default=str)


def items(spec: Spec, declaration: Declaration, services: list[Service]) -> Items:
    """The APISIX items of a spec's ADC services (see the module)."""
    mapper = Mapper(spec, declaration)
    seen: dict[str, Location] = {}
    for service in services:
        mapper.service(service, seen)
    mapper.out.items, problems = one_route_each(mapper.out.items, Routes())
    mapper.out.problems += problems
    return mapper.out


@dataclass
class Routes:
    """The routes seen so far (of one spec, or of every spec of a render): by id, and by what the router
    matches."""

    ids: dict[str, Item] = field(default_factory=dict)
    matches: dict[str, Item] = field(default_factory=dict)


def one_route_each(made: list[Item], seen: Routes) -> tuple[list[Item], list[Problem]]:
    """`made` without the routes that would be one route with a route `seen` or made before them (the
    same id, or what the router matches), and a problem for each, at it, naming the other."""
    hosts = {item.item["id"]: item.item.get("hosts") for item in made if item.kind == "services"}
    kept, problems = [], []
    for item in made:
        if item.kind != "routes":
            kept.append(item)
            continue
        ident = item.item["id"]
        key = same_route_key(item.item, item.item.get("hosts") or hosts.get(item.item.get("service_id")))
        first = seen.ids.get(ident) or seen.matches.get(key)
        if first is None:
            seen.ids[ident] = seen.matches[key] = item
            kept.append(item)
            continue
        why = f"the same route id {ident} (the same name, {item.item.get('name')!r}, in one service)" \
            if ident in seen.ids else "the same route (the same path template, method and hosts)"
        other = first.origin.operation + ("" if first.origin.spec == item.origin.spec
                                          else f" of {first.origin.spec}")
        message = (f"{item.origin.operation} and {other} (at {first.at}) would make {why}: give one another "
                   "operationId or x-adc-name, or remove one")
        problems.append(Problem(message, item.at, "routes", ident))
    return kept, problems


__all__ = ["MAX_TEXT", "Item", "Items", "Routes", "items", "one_route_each", "same_route_key"]
