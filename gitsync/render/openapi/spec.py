"""Reading one OpenAPI document: its version, its servers and its operations, every problem at its place.

OpenAPI 3.0, 3.1 (and 3.x) and Swagger 2.0 are read; a document that says no version is read as
3.0, as ADC's converter reads it (its own tests' documents say none). Of Swagger 2.0, what OpenAPI
3 would say is taken as ADC's converter takes it (it upgrades the document first, with
``@scalar/openapi-parser``): ``host``, ``basePath`` and ``schemes`` are the servers (``http`` when
no scheme is given), a ``body`` parameter is the request body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gitsync.problems import Location
from gitsync.render.openapi.refs import Place, Resolver

#: The operations of a path item, in the order ADC's converter knows them.
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: A server's extension for its upstream node (ADC).
NODE_DEFAULTS = "x-adc-upstream-node-defaults"


@dataclass(frozen=True)
class Server:
    """One server object, its variables filled in."""

    url: str
    place: Place
    node_defaults: Mapping[str, Any] | None = None

    @property
    def parts(self) -> tuple[str, str, int | None, str]:
        """(scheme, host, port, path) of the URL; scheme and host empty for a relative URL."""
        split = urlsplit(self.url)
        return split.scheme.lower(), split.hostname or "", split.port, split.path


@dataclass(frozen=True)
class Operation:
    """One operation of a path item, with the path item's place and content."""

    path: str
    method: str
    place: Place
    data: Mapping[str, Any]
    item_place: Place
    item: Mapping[str, Any]


class Spec:
    """One OpenAPI document being read: its content, its version, where its parts are, and where its
    problems go (`problem`, at a `Place` of a repo file)."""

    def __init__(self, file: str, data: Any, resolver: Resolver, locate: Callable[[Place], Location],
                 variables: Mapping[str, str]) -> None:
        self.file = file
        self.data: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
        self.resolver = resolver
        self.locate = locate
        self.variables = variables  # the declaration's values for the servers' variables
        self.used_variables: set[str] = set()
        self.bad_servers = False  # a server could not be read (an upstream without nodes says nothing new)
        self.version = self._version(data)

    @property
    def root(self) -> Place:
        return Place(self.file)

    def problem(self, place: Place, message: str) -> None:
        self.resolver.problem(place, message)

    def _version(self, data: Any) -> str | None:
        if not isinstance(data, Mapping):
            self.problem(self.root, "an OpenAPI document is a mapping (openapi: 3.x, info, paths…)")
            return None
        openapi, swagger = data.get("openapi"), data.get("swagger")
        if isinstance(openapi, str) and openapi.startswith("3."):
            return "3.0" if openapi.startswith("3.0") else "3.1"
        if str(swagger) == "2.0":
            return "2.0"
        if openapi is None and swagger is None:
            return "3.0"  # as ADC's converter reads one: what the document says is 3.0's
        key = "openapi" if "openapi" in data else "swagger" if "swagger" in data else None
        self.problem(self.root.child(key) if key else self.root,
                     "not an OpenAPI document gitsync reads: expected `openapi: 3.x` (3.0, 3.1) or "
                     "`swagger: \"2.0\"`")
        return None

    # -- servers ------------------------------------------------------------------------------------------

    def servers(self, place: Place, container: Mapping[str, Any]) -> list[Server] | None:
        """The servers an object (the document, a path item, an operation) declares, or None."""
        if self.version == "2.0":
            return self._swagger_servers() if place == self.root else None
        value = container.get("servers")
        if value is None:
            return None
        at = place.child("servers")
        if not isinstance(value, list) or not value:
            self.problem(at, "servers must be a list of at least one server")
            return None
        out = []
        for index, server in enumerate(value):
            found = self.resolver.follow(at.child(index), server)
            if found is None:
                continue
            where, server = found
            if not isinstance(server, Mapping) or not isinstance(server.get("url"), str):
                self.problem(where, "a server needs a url (text)")
                continue
            url = self._filled(where, server["url"], server.get("variables"))
            self.bad_servers = self.bad_servers or url is None
            defaults = server.get(NODE_DEFAULTS)
            if defaults is not None and not isinstance(defaults, Mapping):
                self.problem(where.child(NODE_DEFAULTS), f"{NODE_DEFAULTS} must be a mapping of node fields")
                defaults = None
            if url is not None and self._url_problem(where.child("url"), url) is None:
                out.append(Server(url, where, defaults))
        return out

    def _swagger_servers(self) -> list[Server] | None:
        host, base = self.data.get("host"), self.data.get("basePath")
        if isinstance(host, str) and host:
            schemes = self.data.get("schemes")
            names = [s for s in schemes if isinstance(s, str)] if isinstance(schemes, list) and schemes \
                else ["http"]
            path = base if isinstance(base, str) else ""
            return [Server(f"{scheme}://{host}{path}", self.root.child("host")) for scheme in names]
        if isinstance(base, str) and base:
            return [Server(base, self.root.child("basePath"))]
        return None

    def _filled(self, where: Place, url: str, variables: Any) -> str | None:
        """`url` with each ``{name}`` replaced by the declaration's value or the variable's default."""
        declared = variables if isinstance(variables, Mapping) else {}
        if variables is not None and not isinstance(variables, Mapping):
            self.problem(where.child("variables"), "variables must map names to {default: …}")
        for name, variable in declared.items():
            at = where.child("variables", name)
            if not isinstance(variable, Mapping) or not isinstance(variable.get("default"), str):
                self.problem(at, f"server variable {name!r} needs a default (text)")
                return None
            value = self.variables.get(name, variable["default"])
            if name in self.variables:
                self.used_variables.add(name)
                enum = variable.get("enum")
                if isinstance(enum, list) and value not in enum:
                    self.problem(at, f"the declaration gives server variable {name!r} the value {value!r}, "
                                     f"which is not one of its enum: {', '.join(map(str, enum))}")
                    return None
            url = url.replace("{" + name + "}", value)
        if "{" in url or "}" in url:
            self.problem(where.child("url"), f"the server url {url!r} has a {{variable}} that its variables "
                                             "do not declare")
            return None
        return url

    def _url_problem(self, where: Place, url: str) -> str | None:
        if url.startswith("/"):
            return None  # relative to where the document is served: a path prefix, no host
        try:
            split = urlsplit(url)
            split.port  # noqa: B018 (raises on a bad port)
        except ValueError as exc:
            return self._refuse(where, f"the server url {url!r} cannot be read: {exc}")
        if split.scheme.lower() not in ("http", "https") or not split.hostname:
            return self._refuse(where, f"the server url {url!r} must start with http:// or https:// and name "
                                       "a host (or be a path starting with '/')")
        return None

    def _refuse(self, where: Place, message: str) -> str:
        self.bad_servers = True
        self.problem(where, message)
        return message

    # -- operations ---------------------------------------------------------------------------------------

    def paths(self) -> Iterator[tuple[str, Place, Mapping[str, Any]]]:
        """(path, place, path item) of each path, its reference followed."""
        paths = self.data.get("paths")
        at = self.root.child("paths")
        if paths is None:
            return
        if not isinstance(paths, Mapping):
            self.problem(at, "paths must map each path to its operations")
            return
        for path, item in paths.items():
            if item is None:
                continue
            found = self.resolver.follow(at.child(path), item)
            if found is None:
                continue
            where, item = found
            if not isinstance(item, Mapping):
                self.problem(where, f"the path item of {path!r} must be a mapping of operations")
                continue
            yield path, where, item

    def operations(self, path: str, place: Place, item: Mapping[str, Any]) -> Iterator[Operation]:
        """The operations of a path item, in its own order."""
        for method, operation in item.items():
            if method not in METHODS:
                continue
            at = place.child(method)
            if not isinstance(operation, Mapping):
                self.problem(at, f"the operation {method.upper()} {path} must be a mapping")
                continue
            yield Operation(path, method, at, operation, place, item)


__all__ = ["METHODS", "NODE_DEFAULTS", "Operation", "Server", "Spec"]
