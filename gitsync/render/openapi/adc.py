"""ADC's converter (``adc convert openapi``, api7/adc ``libs/converter-openapi``, 0.28.0): one OpenAPI
document → ADC's services, each with its upstream and routes, and where each field came from.

What it does, as ADC's own tests state it (``libs/converter-openapi/test/*.spec.ts``):

- the document is one service, named ``x-adc-name`` or ``info.title``, described by
  ``info.description``, with the root's ``x-adc-labels`` and plugins, and an upstream made of the
  servers: a node per server (host, port, ``weight: 100``, the server's
  ``x-adc-upstream-node-defaults``), the first server's scheme and path (a prefix of every uri),
  60 s timeouts, ``pass_host: pass``, then ``x-adc-upstream-defaults``; then
  ``x-adc-service-defaults`` over the service;
- each operation is a route: named ``x-adc-name``, ``operationId`` or ``<title>_<path>_<method>``
  slugified; described by its ``summary`` or ``description``; its ``x-adc-labels``; one method; the
  path as its uri; the path's and its own plugins (its own win); then ``x-adc-route-defaults`` of the
  root, the path and the operation, each over the last;
- plugins at a level are ``x-adc-plugins`` with each ``x-adc-plugin-<name>`` over it;
- a path item with ``servers``, ``x-adc-service-defaults`` or ``x-adc-upstream-defaults`` becomes a
  service of its own (``<service>_<path>``, placed first), and so does an operation with them
  (``<title>_<path>_<method>``, placed last), each a copy of the document's service with its own
  upstream and defaults; a service left without routes is dropped.

Where ADC's converter contradicts OpenAPI or its own documentation, gitsync does what the document
says, and docs/openapi.md lists it: the server's path joins the operation's path with one ``/``
(ADC writes ``/v1//users`` for a server ``…/v1/``); an operation takes its path item's servers when
it has none of its own (ADC falls back to the document's as soon as the operation has defaults of
its own); the document's ``x-adc-upstream-defaults`` apply to a path item's own servers too; and the
prefix of a service is that of the servers it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.problems import Location
from gitsync.render.openapi.declaration import Declaration
from gitsync.render.openapi.refs import Expansion, Place
from gitsync.render.openapi.slug import slugify
from gitsync.render.openapi.spec import Operation, Server, Spec
from gitsync.render.sourcemap import FieldPath, describe

NAME, LABELS, PLUGINS, PLUGIN_PREFIX = "x-adc-name", "x-adc-labels", "x-adc-plugins", "x-adc-plugin-"
SERVICE_DEFAULTS, UPSTREAM_DEFAULTS, ROUTE_DEFAULTS = \
    "x-adc-service-defaults", "x-adc-upstream-defaults", "x-adc-route-defaults"
DEFAULT_TIMEOUT = {"connect": 60, "send": 60, "read": 60}
_TEMPLATE_CHARS = "{}"

#: Where a field came from: a place in a spec file, or a field of the declaration.
Origin = Place | tuple[str, FieldPath]
#: One level's defaults of one kind (the spec's, or the declaration's), with a way to place its fields.
Layer = tuple[Mapping[str, Any], Callable[[FieldPath], Location]]
#: What ADC's service schema has that defaults cannot set here (each has its own extension or none).
_NOT_SERVICE_DEFAULTS = {"upstream": "x-adc-upstream-defaults", "routes": None, "upstreams": None,
                         "stream_routes": None,
                         "strip_path_prefix": "a proxy-rewrite plugin (ADC's standalone backend does not "
                                              "write it either)"}


@dataclass
class Shaped:
    """An ADC-shaped object (service, upstream or route) and where each of its fields was written."""

    fields: dict[str, Any] = field(default_factory=dict)
    origins: dict[FieldPath, Location] = field(default_factory=dict)

    def put(self, key: str, value: Any, where: Location) -> None:
        if value is None:
            return
        self.fields[key] = value
        self._forget(key)
        self.origins[(key,)] = where

    def spread(self, values: Mapping[str, Any], where: Callable[[FieldPath], Location]) -> None:
        """`values` over the fields, key by key (JavaScript's ``{...a, ...b}``)."""
        for key, value in values.items():
            self.fields[key] = value
            self._forget(key)
            self.origins[(key,)] = where((key,))

    def _forget(self, key: str) -> None:
        for path in [p for p in self.origins if p[0] == key]:
            del self.origins[path]

    def copy(self) -> Shaped:
        return Shaped(_clone(self.fields), dict(self.origins))


@dataclass
class Route:
    """One operation as ADC's route, and what gitsync needs beyond it."""

    shape: Shaped
    operation: Operation
    path: str  # the OpenAPI path with its service's prefix: what the route must match
    at: Location
    user_uris: bool = False  # route defaults set the uris


@dataclass
class Service:
    """One ADC service: its fields (its ``upstream`` among them, an ADC upstream), its routes."""

    shape: Shaped
    at: Location
    prefix: str = ""
    routes: list[Route] = field(default_factory=list)
    operation: Operation | None = None  # the operation it was split for

    def document(self) -> dict[str, Any]:
        """The service as ``adc convert openapi`` writes it (routes inside, uris with ``:name``)."""
        out = {k: v for k, v in self.shape.fields.items()}
        out["routes"] = [dict(route.shape.fields) for route in self.routes]
        return out


def _clone(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def adc_uri(path: str) -> str:
    """The uri ADC writes for a path: each ``{name}`` as ``:name``."""
    out, rest = [], path
    while "{" in rest and "}" in rest[rest.index("{"):]:
        start = rest.index("{")
        end = rest.index("}", start)
        out += [rest[:start], ":" + rest[start + 1:end]]
        rest = rest[end + 1:]
    return "".join(out) + rest


class Converter:
    """ADC's conversion of one spec (see the module)."""

    def __init__(self, spec: Spec, declaration: Declaration) -> None:
        self.spec = spec
        self.declaration = declaration
        self.title = ""
        self.root_servers: list[Server] | None = None
        self.root_up: list[Layer] = []
        self.root_service: list[Layer] = []
        self.root_routes: list[Layer] = []
        self.refused: list[tuple[Location, str]] = []  # problems placed by the declaration or the spec

    def where(self, origin: Origin) -> Location:
        if isinstance(origin, Place):
            return self.spec.locate(origin)
        return self.declaration.locate((origin[0], *origin[1]))

    # -- the document's parts, with their types checked as ADC's schema checks them ---------------------

    def extension(self, place: Place, container: Mapping[str, Any], key: str) -> tuple[Any, Place]:
        """An extension's value (its references written out), or None; a mapping where ADC needs one."""
        at = place.child(key)
        value = container.get(key)
        if value is None:
            return None, at
        try:
            value = self.spec.resolver.expand(at, value)
        except Expansion:
            return None, at
        if key == NAME:
            if not isinstance(value, str) or not value:
                self.spec.problem(at, f"{NAME} must be non-empty text")
                return None, at
        elif not isinstance(value, Mapping):
            self.spec.problem(at, f"{key} must be a mapping, not {describe(value)}")
            return None, at
        elif key == LABELS:
            for name, label in value.items():
                if not isinstance(label, str) and not (isinstance(label, list)
                                                       and all(isinstance(v, str) for v in label)):
                    self.spec.problem(at.child(name), f"{LABELS}: label {name!r} must be text or a list of "
                                                      f"text, not {describe(label)}")
                    return None, at
        return value, at

    def defaults(self, place: Place, container: Mapping[str, Any], key: str,
                 declared: str | None = None) -> list[Layer]:
        """The layers of one kind of defaults at a level: the spec's, then (at the root) the
        declaration's, each with a way to place its fields. Present, even empty, they split a service
        off (ADC tests the extension's presence)."""
        value, at = self.extension(place, container, key)
        layers: list[Layer] = []
        if value is not None:
            layers.append((value, lambda path, at=at: self.where(at.child(*path))))
        own = getattr(self.declaration, declared) if declared else None
        if own:
            layers.append((own, lambda path, name=declared: self.where((name, path))))
        if key == SERVICE_DEFAULTS:
            layers = [(self._service_fields(values, locate), locate) for values, locate in layers]
        return layers

    def _service_fields(self, values: Mapping[str, Any], locate: Callable[[FieldPath], Location]
                        ) -> Mapping[str, Any]:
        """Service defaults without what cannot be set that way (each told at its line)."""
        for key, instead in _NOT_SERVICE_DEFAULTS.items():
            if key in values:
                where = locate((key,))
                self.refused.append((where, f"service defaults cannot set {key!r}"
                                     + (f": use {instead}" if instead else "")))
        return {k: v for k, v in values.items() if k not in _NOT_SERVICE_DEFAULTS}

    def plugins(self, place: Place, container: Mapping[str, Any]) -> Shaped:
        """``x-adc-plugins`` with each ``x-adc-plugin-<name>`` over it, as ``{"plugins": {...}}``."""
        out = Shaped()
        listed, at = self.extension(place, container, PLUGINS)
        plugins: dict[str, Any] = {}
        for name, conf in (listed or {}).items():
            plugins[name] = conf
            out.origins[("plugins", name)] = self.where(at.child(name))
        for key in container:
            if isinstance(key, str) and key.startswith(PLUGIN_PREFIX) and key != PLUGINS:
                name = key[len(PLUGIN_PREFIX):]
                try:
                    plugins[name] = self.spec.resolver.expand(place.child(key), container[key])
                except Expansion:
                    continue
                out.origins[("plugins", name)] = self.where(place.child(key))
        if plugins:
            out.fields["plugins"] = plugins
        return out

    # -- upstreams ----------------------------------------------------------------------------------------

    def upstream(self, servers: list[Server] | None, where: Location, layers: list[Layer],
                 ) -> tuple[Shaped, str]:
        """An ADC upstream of `servers` with the defaults' `layers` over it, and the servers' path prefix."""
        up = Shaped()
        prefix = ""
        if servers:
            scheme, _, _, path = servers[0].parts
            if scheme:
                up.put("scheme", scheme, self.where(servers[0].place.child("url")))
            prefix = path.rstrip("/")
            nodes = []
            for index, server in enumerate(s for s in servers if s.parts[1]):
                kind, host, port, _ = server.parts
                node = {"host": host, "port": port or (80 if kind == "http" else 443), "weight": 100,
                        **(server.node_defaults or {})}
                nodes.append(node)
                up.origins[("nodes", index)] = self.where(server.place)
            if nodes:
                up.fields["nodes"] = nodes
                up.origins[("nodes",)] = self.where(servers[0].place)
        up.put("timeout", dict(DEFAULT_TIMEOUT), where)
        up.put("pass_host", "pass", where)
        for values, locate in layers:
            up.spread(_clone(values), locate)
        return up, prefix

    # -- the conversion -----------------------------------------------------------------------------------

    def services(self) -> list[Service]:
        """The services of the spec, in ADC's order (see the module)."""
        spec, root = self.spec, self.spec.root
        data = spec.data
        info = data.get("info")
        title = info.get("title") if isinstance(info, Mapping) else None
        if not isinstance(title, str):
            spec.problem(root.child("info") if isinstance(info, Mapping) else root,
                         "info.title is needed (text): ADC names the service and its routes from it")
            title = "Untitled service"
        self.title = title
        name, name_at = self.extension(root, data, NAME)
        labels, labels_at = self.extension(root, data, LABELS)
        root_servers = spec.servers(root, data)
        root_up = self.defaults(root, data, UPSTREAM_DEFAULTS, "upstream_defaults")
        root_service = self.defaults(root, data, SERVICE_DEFAULTS, "service_defaults")
        self.root_service = root_service
        self.root_routes = self.defaults(root, data, ROUTE_DEFAULTS, "route_defaults")
        title_at = self.where(root.child("info", "title") if isinstance(info, Mapping) else root)
        main = Shaped()
        main.put("name", name or title, self.where(name_at) if name else title_at)
        description = info.get("description") if isinstance(info, Mapping) else None
        main.put("description", description, self.where(root.child("info", "description")))
        main.put("labels", labels, self.where(labels_at))
        plugins = self.plugins(root, data)
        main.fields.update(plugins.fields)
        main.origins.update(plugins.origins)
        servers_at = self.where(root.child("servers") if "servers" in data else root)
        upstream, prefix = self.upstream(root_servers, servers_at, root_up)
        self._nest(main, upstream)
        for values, locate in root_service:
            main.spread(_clone(values), locate)
        first = Service(main, title_at, self._prefix(prefix, main))
        self.root_servers, self.root_up = root_servers, root_up
        services = [first]
        for path, place, item in spec.paths():
            self._path(services, first, path, place, item)
        return [s for s in services if s.routes]

    def _nest(self, service: Shaped, upstream: Shaped) -> None:
        service.fields["upstream"] = upstream.fields
        service.origins.update({("upstream", *path): where for path, where in upstream.origins.items()})

    def _prefix(self, servers_prefix: str, service: Shaped) -> str:
        """The service's prefix: its servers' path, unless its defaults set ``path_prefix``."""
        written = service.fields.pop("path_prefix", None)
        service.origins.pop(("path_prefix",), None)
        return str(written).rstrip("/") if isinstance(written, str) else servers_prefix

    def _split(self, main: Service, name: str, servers: list[Server] | None, at: Location,
               up_layers: list[Layer], service_layers: list[Layer]) -> Service:
        """A service of its own for a path item or an operation: a copy of the document's service (its
        defaults in it) with the servers', and the levels', upstream and defaults."""
        shape = main.shape.copy()
        shape.put("name", name, at)
        upstream, prefix = self.upstream(servers or self.root_servers, at, [*self.root_up, *up_layers])
        self._nest(shape, upstream)
        for values, locate in service_layers:
            shape.spread(_clone(values), locate)
        written = next((values["path_prefix"] for values, _ in reversed(self.root_service)
                        if "path_prefix" in values), None)
        if written is not None and "path_prefix" not in shape.fields:
            shape.fields["path_prefix"] = written
        return Service(shape, at, self._prefix(prefix, shape))

    def _path(self, services: list[Service], main: Service, path: str, place: Place,
              item: Mapping[str, Any]) -> None:
        spec = self.spec
        path_servers = spec.servers(place, item)
        path_up = self.defaults(place, item, UPSTREAM_DEFAULTS)
        path_service = self.defaults(place, item, SERVICE_DEFAULTS)
        path_routes = self.defaults(place, item, ROUTE_DEFAULTS)
        path_plugins = self.plugins(place, item)
        own = None
        path_at = self.where(place)
        if path_servers is not None or path_up or path_service:
            name = f"{slugify(str(main.shape.fields.get('name', '')))}_{slugify(path)}"
            own = self._split(main, name, path_servers, path_at, path_up, path_service)
        routes = []
        for operation in spec.operations(path, place, item):
            op_servers = spec.servers(operation.place, operation.data)
            op_up = self.defaults(operation.place, operation.data, UPSTREAM_DEFAULTS)
            op_service = self.defaults(operation.place, operation.data, SERVICE_DEFAULTS)
            generated = "_".join(slugify(part) for part in (self.title, path, operation.method))
            route_layers = [*self.root_routes, *path_routes,
                            *self.defaults(operation.place, operation.data, ROUTE_DEFAULTS)]
            if op_servers is not None or op_up or op_service:
                servers = op_servers if op_servers is not None else path_servers
                alone = self._split(main, generated, servers, self.where(operation.place), [*path_up, *op_up],
                                    [*path_service, *op_service])
                alone.routes.append(self._route(operation, generated, path_plugins, route_layers, alone))
                alone.operation = operation
                services.append(alone)
            else:
                routes.append((operation, generated, route_layers))
        target = own or main
        for operation, generated, route_layers in routes:
            target.routes.append(self._route(operation, generated, path_plugins, route_layers, target))
        if own is not None and own.routes:
            services.insert(0, own)

    def _route(self, operation: Operation, generated: str, path_plugins: Shaped, layers: list[Layer],
               service: Service) -> Route:
        data, place = operation.data, operation.place
        route = Shaped()
        name, name_at = self.extension(place, data, NAME)
        if name:
            route.put("name", name, self.where(name_at))
        elif isinstance(data.get("operationId"), str):
            route.put("name", data["operationId"], self.where(place.child("operationId")))
        else:
            route.put("name", generated, self.where(place))
        for key in ("summary", "description"):
            if isinstance(data.get(key), str):
                route.put("description", data[key], self.where(place.child(key)))
                break
        labels, labels_at = self.extension(place, data, LABELS)
        route.put("labels", labels, self.where(labels_at))
        route.put("methods", [operation.method.upper()], self.where(place))
        path_at = self.where(operation.item_place)
        route.put("uris", [adc_uri(operation.path)], path_at)
        own = self.plugins(place, data)
        plugins = {**path_plugins.fields.get("plugins", {}), **own.fields.get("plugins", {})}
        if plugins:
            route.fields["plugins"] = plugins
            route.origins.update(path_plugins.origins)
            route.origins.update(own.origins)
        for values, locate in layers:
            route.spread(_clone(values), locate)
        user_uris = any("uris" in values for values, _ in layers)
        uris = route.fields.get("uris")
        if service.prefix and isinstance(uris, list):
            route.fields["uris"] = [service.prefix + u if isinstance(u, str) else u for u in uris]
        return Route(route, operation, service.prefix + operation.path, self.where(place), user_uris)


__all__ = ["LABELS", "NAME", "PLUGINS", "PLUGIN_PREFIX", "ROUTE_DEFAULTS", "SERVICE_DEFAULTS",
           "UPSTREAM_DEFAULTS", "Converter", "Route", "Service", "Shaped", "adc_uri"]
