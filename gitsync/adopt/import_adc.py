"""ADC's declarative files → a gitsync payload that equals what ``adc sync`` writes to a standalone gateway.

ADC (api7/adc) nests routes under services and keys resources by name; its
standalone backend (``libs/backend-apisix-standalone``, since ADC 0.20.0) turns them
into APISIX items with ids derived from names. gitsync keeps exactly those ids and
fields, so the first sync after ``adc sync`` of the same files finds every item
equal and changes nothing. The rules, as every ADC release applies them:

- a service's id is its ``id`` or sha1(name); from ADC 0.21.0 it gets ``upstream_id``
  = its own id and its ``upstream`` becomes an upstreams item with the service's id
  and name (ADC 0.20 keeps the upstream inside the service);
- a service's named ``upstreams`` become upstreams items, id = ``id`` or
  sha1("<service>.<upstream>"), labelled ``__ADC_UPSTREAM_SERVICE_ID: <service id>``;
- a route's id is its ``id`` or sha1("<service>.<route>"), with ``service_id`` and
  ``status: 1``; stream routes likewise (no status);
- an SSL's id is its ``id`` or sha1(the SNIs joined by ","); it gets ``status: 1``;
  its ``certificates`` become ``cert``/``key`` and ``certs``/``keys``;
- a consumer keeps its username; a credential's id is ``<username>/credentials/``
  plus its ``id`` or sha1("<username>.<credential>"), its ``type``/``config`` one plugin;
- a global rule and a plugin metadata item are keyed by the plugin's name;
- labels whose value is a list become that list's JSON text; ``--label-selector``
  labels are stamped on services, routes, stream routes, consumers and SSLs; ``labels: {}``
  stays, as ADC writes it (its standalone backend's ``fromADCLabels`` maps ``{}`` to ``{}``);
- ``${NAME}`` (ADC's environment substitution) becomes ``${{ secrets.NAME }}``
  (text, like ADC's; masked in output), ``\\${NAME}`` a literal ``${NAME}``. A ``$``
  right before ``${NAME}`` (ADC: that ``$``, then the value) has no spelling in gitsync's
  syntax (``$${{`` is its escape of a literal ``${{``): it is reported.

Each file is checked against the types of ADC's schema (`adc_shapes`) before it is
converted: a wrong type is a problem at its line, never an exception. Text in a number
field is read first as ADC's lint reads it (`adc_shapes.numbers_read`): a number, or
``${{ number(vars.NAME) }}`` for a field that is one ``${NAME}``, each with a note (a
problem for a release synced with ``--no-lint``, which writes the text APISIX refuses).

What differs between releases (the defaults its lint fills in, health checks and
service discovery, ``nodes: []``, the ``managed-by: adc`` label of ADC after 0.28.0)
is a `Behaviour` (`gitsync.adopt.adc_releases`).

What ADC's standalone backend does not write (consumer groups, routes outside a
service) or cannot write (a service without an upstream: ``adc sync`` stops with a
TypeError and writes nothing) is reported with the file and line, never dropped
silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitsync.adopt.adc_releases import (
    DEFAULT,
    MANAGED_BY,
    UPSTREAM_SERVICE_LABEL,
    VERIFY_CERT,
    VERIFY_CERT_OLD,
    Behaviour,
)
from gitsync.adopt.adc_shapes import (
    ADC_ENV,
    NumberRead,
    item_count,
    numbers_read,
    too_many_items,
    wrong_types,
)
from gitsync.adopt.repo_writer import dollar_before, rewrite_matches
from gitsync.problems import Location, Problem
from gitsync.render.load import parse
from gitsync.render.openapi.adc_items import (
    DISCOVERY,
    ROUTE_FIELDS,
    SERVICE_FIELDS,
    UPSTREAM_FIELDS,
    child_id,
    labels,
    route_item,
    service_item,
    set_fields,
    sha1,
    upstream_fields,
    with_defaults,
)
from gitsync.render.sourcemap import FilePositions, string_leaves

ADC_KEYS = ("services", "ssls", "consumers", "consumer_groups", "global_rules", "plugin_metadata",
            "routes", "stream_routes")

STREAM_ROUTE_FIELDS = {"id", "name", "description", "labels", "plugins", "remote_addr", "server_addr",
                       "server_port", "sni"}
SSL_FIELDS = {"id", "labels", "type", "snis", "certificates", "client", "ssl_protocols"}
CONSUMER_FIELDS = {"username", "description", "labels", "plugins", "credentials"}
CREDENTIAL_FIELDS = {"id", "name", "description", "labels", "type", "config"}

#: What APISIX calls ADC's health-check fields (ADC writes its own names, which APISIX does not read).
_APISIX_CHECK_NAMES = {VERIFY_CERT_OLD: VERIFY_CERT, "http_request_headers": "req_headers"}


@dataclass
class Converted:
    payload: dict[str, list[Any]]
    problems: list[Problem] = field(default_factory=list)  # the import refuses: nothing written
    notes: list[Problem] = field(default_factory=list)  # told, and the import goes on
    secrets: set[str] = field(default_factory=set)  # ${NAME} turned into ${{ secrets.NAME }}
    variables: set[str] = field(default_factory=set)  # ${NAME} in a number field: ${{ number(vars.NAME) }}
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

    return rewrite_matches(value, ADC_ENV, replace)


def input_problems(src: _Source) -> list[Problem]:
    """What keeps a file from being converted: a field of the wrong type for ADC's schema, or an
    ``${NAME}`` right after a ``$`` (gitsync reads ``$${{`` as a literal ``${{``)."""
    problems = [Problem(message, src.at(*path)) for path, message in wrong_types(src.data)]
    for path, text in string_leaves(src.data):
        for match in ADC_ENV.finditer(text):
            if match.group(2) and text[:match.start()].endswith("$"):
                problems.append(Problem(dollar_before("$" + match.group(0), match.group(2), "ADC"),
                                        src.at(*path)))
    return problems


def _js_key_order(names: list[str]) -> list[int]:
    """The positions of `names` in the order a JavaScript object keyed by them lists its keys: names
    that are array indices ("0", "10") first, ascending, then the others as inserted. ADC keys a
    file's services, SSLs and consumers by name that way before it writes them."""
    def index_key(name: str) -> int | None:
        return int(name) if name.isdigit() and str(int(name)) == name and int(name) < 2**32 - 1 else None

    indices = sorted((k, i) for i, n in enumerate(names) if (k := index_key(n)) is not None)
    return [i for _, i in indices] + [i for i, n in enumerate(names) if index_key(n) is None]


class _Converter:
    def __init__(self, stamp: Mapping[str, str], behaviour: Behaviour) -> None:
        self.stamp = dict(stamp)
        self.behaviour = behaviour
        #: Every schema default filled in: ADC's lint ran (no --no-lint), with zod 4 (ADC 0.21.0 on).
        self.full_defaults = behaviour.lint and behaviour.release.full_defaults
        self.out = Converted({})
        self.seen: dict[tuple[str, str], Location] = {}
        #: ADC creates every consumer before any credential: credentials follow all consumers; and
        #: every service (with its own upstream) before any named upstream.
        self.credentials: list[tuple[dict[str, Any], Location]] = []
        self.named_upstreams: list[tuple[dict[str, Any], Location]] = []
        #: Services, SSLs and consumers of every file, converted in the order ADC keys them.
        self.pending: dict[str, list[tuple[_Source, int, Mapping[str, Any]]]] = {}

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

    def upstream(self, src: _Source, path: tuple[str | int, ...], up: Mapping[str, Any], what: str,
                 ) -> dict[str, Any]:
        """An ADC upstream as its standalone backend writes it, without id and name (the caller's)."""
        release = self.behaviour.release
        out = upstream_fields(up, lint=self.behaviour.lint, full_defaults=self.full_defaults,
                              checks=release.checks, verify_cert=release.verify_cert)
        dropped = [key for key in ("checks", *DISCOVERY) if key in up]
        if release.checks:
            self.check_names(src, path, up.get("checks"), what)
        elif dropped:
            self.note(f"{what}: {self.behaviour.name} does not write {', '.join(dropped)} (ADC writes them "
                      "from 0.21.1): not imported", src.at(*path, dropped[0]))
        if "nodes" not in out:
            self.missing_nodes(src, path, out, what, discovery="service_name" in up)
        return out

    def missing_nodes(self, src: _Source, path: tuple[str | int, ...], out: dict[str, Any], what: str,
                      discovery: bool) -> None:
        """An upstream without nodes: ADC up to 0.21.1 writes ``nodes: []``, later ones nothing; only
        what ADC's lint lets through and APISIX accepts can be on a gateway."""
        release = self.behaviour.release
        if not discovery and self.behaviour.lint:
            self.problem(f"{what} has neither nodes nor service discovery: ADC's lint refuses it (\"Upstream "
                         "must either explicitly specify nodes or use service discovery\"), so no gateway "
                         "holds it", src.at(*path))
        elif not discovery and not release.empty_nodes:
            self.problem(f"{what} has neither nodes nor service_name: APISIX refuses such an upstream",
                         src.at(*path))
        elif release.empty_nodes:
            if "service_name" in out:
                self.problem(f"{what}: {self.behaviour.name} writes 'nodes: []' next to 'service_name', "
                             "which APISIX refuses, so no gateway holds this upstream as that ADC writes it "
                             "(ADC 0.21.2 fixed it: give the --adc-version that synced the gateway)",
                             src.at(*path, "service_name"))
            out["nodes"] = []

    def check_names(self, src: _Source, path: tuple[str | int, ...], checks: Any, what: str) -> None:
        """Tell about health-check fields ADC writes as they are but APISIX reads under another name,
        and about the one the release's lint would have refused."""
        active = checks.get("active") if isinstance(checks, Mapping) else None
        if not isinstance(active, Mapping):
            return
        at = (*path, "checks", "active")
        for adc_name, apisix_name in _APISIX_CHECK_NAMES.items():
            if adc_name in active:
                self.note(f"{what}: checks.active.{adc_name} is written as it is, as ADC writes it; APISIX "
                          f"reads {apisix_name} and ignores it (rename it in the repo to have APISIX use it: "
                          "the first sync then changes this upstream)", src.at(*at, adc_name))
        refused = VERIFY_CERT if self.behaviour.release.verify_cert == VERIFY_CERT_OLD else VERIFY_CERT_OLD
        if refused in active:
            self.note(f"{what}: {self.behaviour.name}'s lint refuses checks.active.{refused} (it knows "
                      f"{self.behaviour.release.verify_cert}): if another ADC synced these files, give its "
                      "--adc-version", src.at(*at, refused))

    def service(self, src: _Source, index: int, svc: Mapping[str, Any]) -> None:
        where = src.at("services", index)
        name = svc.get("name")
        if not isinstance(name, str) or not name:
            self.problem("a service needs a name (ADC derives its id from it)", where, "services")
            return
        self.unknown_fields(src, svc, SERVICE_FIELDS, f"service {name!r}", "services", index)
        ident = str(svc.get("id") or sha1(name))
        for key in ("path_prefix", "strip_path_prefix"):
            if key in svc:
                self.note(f"service {name!r}: {key} is not written by ADC's standalone backend (APISIX has "
                          "no such field); not imported", src.at("services", index, key))
        nested = self.own_upstream(src, index, svc, name, ident)
        self.add("services", service_item(svc, ident, self.stamp, nested), where)
        for r_index, route in enumerate(svc.get("routes") or ()):
            self.route(src, (index, r_index), route, name, ident)
        for r_index, route in enumerate(svc.get("stream_routes") or ()):
            self.stream_route(src, (index, r_index), route, name, ident)
        for u_index, upstream in enumerate(svc.get("upstreams") or ()):
            self.named_upstream(src, (index, u_index), upstream, name, ident)

    def own_upstream(self, src: _Source, index: int, svc: Mapping[str, Any], name: str, ident: str,
                     ) -> dict[str, Any] | None:
        """The service's ``upstream``: an upstreams item with the service's id and name (ADC 0.21.0 on),
        or returned to go inside the service item (ADC 0.20)."""
        upstream = svc.get("upstream")
        if not isinstance(upstream, Mapping):
            self.problem(f"service {name!r} has no upstream: adc sync stops on it (TypeError: Cannot read "
                         "properties of undefined) and writes nothing, so no gateway holds it; give the "
                         "service an upstream", src.at("services", index), "services", ident)
            return None
        path = ("services", index, "upstream")
        what = f"service {name!r} upstream"
        self.unknown_fields(src, upstream, UPSTREAM_FIELDS, what, *path)
        mapped = self.upstream(src, path, upstream, what)
        if self.behaviour.release.nested_upstream:
            return set_fields(mapped, name=upstream.get("name"))
        self.add("upstreams", {"id": ident, "name": name, **mapped}, src.at(*path))
        return None

    def named_upstream(self, src: _Source, at: tuple[int, int], up: Any, service: str, service_id: str,
                       ) -> None:
        path = ("services", at[0], "upstreams", at[1])
        if not isinstance(up, Mapping) or not isinstance(up.get("name"), str) or not up["name"]:
            self.problem("a named upstream needs a name (ADC derives its id from it)", src.at(*path),
                         "upstreams")
            return
        what = f"upstream {up['name']!r} of service {service!r}"
        self.unknown_fields(src, up, UPSTREAM_FIELDS | {"id"}, what, *path)
        mapped = self.upstream(src, path, up, what)
        mapped["labels"] = {**(mapped.get("labels") or {}), UPSTREAM_SERVICE_LABEL: service_id}
        item = {"id": child_id(up.get("id"), service, up["name"]), "name": up["name"], **mapped}
        self.named_upstreams.append((item, src.at(*path)))

    def route(self, src: _Source, at: tuple[int, int], route: Any, service: str, service_id: str) -> None:
        path = ("services", at[0], "routes", at[1])
        if not isinstance(route, Mapping) or not isinstance(route.get("name"), str):
            self.problem("a route needs a name (ADC derives its id from it)", src.at(*path), "routes")
            return
        self.unknown_fields(src, route, ROUTE_FIELDS, f"route {route['name']!r}", *path)
        self.add("routes", route_item(route, service, service_id, self.stamp), src.at(*path))

    def stream_route(self, src: _Source, at: tuple[int, int], route: Any, service: str, service_id: str,
                     ) -> None:
        path = ("services", at[0], "stream_routes", at[1])
        if not isinstance(route, Mapping) or not isinstance(route.get("name"), str):
            self.problem("a stream route needs a name (ADC derives its id from it)", src.at(*path),
                         "stream_routes")
            return
        self.unknown_fields(src, route, STREAM_ROUTE_FIELDS, f"stream route {route['name']!r}", *path)
        ident = child_id(route.get("id"), service, route["name"])
        self.add("stream_routes", set_fields({"id": ident}, name=route["name"], desc=route.get("description"),
                                       labels=labels(route.get("labels"), self.stamp),
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
        if self.full_defaults:
            client = with_defaults(client, {"depth": 1})
        item = set_fields({"id": ident}, labels=labels(ssl.get("labels"), self.stamp),
                    type=ssl.get("type", "server" if self.full_defaults else None), snis=ssl["snis"],
                    cert=certs[0].get("certificate"), key=certs[0].get("key"))
        if len(certs) > 1:
            item["certs"] = [c.get("certificate") for c in certs[1:]]
            item["keys"] = [c.get("key") for c in certs[1:]]
        self.add("ssls", set_fields(item, client=client, ssl_protocols=ssl.get("ssl_protocols"), status=1),
                 where)

    def consumer(self, src: _Source, index: int, consumer: Any) -> None:
        where = src.at("consumers", index)
        if not isinstance(consumer, Mapping) or not isinstance(consumer.get("username"), str):
            self.problem("a consumer needs a username", where, "consumers")
            return
        username = consumer["username"]
        self.unknown_fields(src, consumer, CONSUMER_FIELDS, f"consumer {username!r}", "consumers", index)
        self.add("consumers", set_fields({"username": username}, desc=consumer.get("description"),
                                   labels=labels(consumer.get("labels"), self.stamp),
                                   plugins=consumer.get("plugins")), where)
        for c_index, cred in enumerate(consumer.get("credentials") or ()):
            path = ("consumers", index, "credentials", c_index)
            if not isinstance(cred, Mapping) or not isinstance(cred.get("name"), str) or "type" not in cred:
                self.problem("a credential needs a name and a type", src.at(*path), "consumers")
                continue
            self.unknown_fields(src, cred, CREDENTIAL_FIELDS, f"credential {cred['name']!r}", *path)
            ident = f"{username}/credentials/{child_id(cred.get('id'), username, cred['name'])}"
            credential = set_fields({"id": ident}, name=cred["name"], desc=cred.get("description"),
                                    labels=labels(cred.get("labels"), None),
                                    plugins={str(cred["type"]): cred.get("config") or {}})
            self.credentials.append((credential,
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
            for index, item in enumerate(value):
                if not isinstance(item, Mapping):
                    self.problem(f"an item of {key} must be a mapping", src.at(key, index))
                    continue
                self.pending.setdefault(key, []).append((src, index, item))

    def convert_pending(self) -> None:
        """Services, SSLs and consumers of all files, in the order ADC keys them by name."""
        names = {"services": lambda item: item.get("name"), "consumers": lambda item: item.get("username"),
                 "ssls": lambda item: ",".join(map(str, item["snis"])) if isinstance(item.get("snis"), list)
                 else None}
        handlers = {"services": self.service, "ssls": self.ssl, "consumers": self.consumer}
        for key, entries in self.pending.items():
            order = _js_key_order([str(names[key](item)) for _, _, item in entries])
            for src, index, item in (entries[i] for i in order):
                handlers[key](src, index, item)
        for credential, where in self.credentials:
            self.add("consumers", credential, where)
        for upstream, where in self.named_upstreams:
            self.add("upstreams", upstream, where)


@dataclass
class AdcFiles:
    """ADC's files read once (parsed, number fields read as ADC's lint reads them, type-checked,
    ``${NAME}`` substituted), for one conversion or several."""

    sources: list[_Source]
    problems: list[Problem]
    secrets: set[str]
    numbers: list[tuple[NumberRead, Location]] = field(default_factory=list)


def _document(name: str, data: bytes) -> tuple[Any, list[Problem]]:
    """A file's one YAML document (None when empty), or the problems that keep it from being read."""
    parsed = parse(data)
    if parsed.issues:
        return None, [Problem(i.message, Location(name, i.line, i.col)) for i in parsed.issues]
    if len(parsed.documents) > 1:
        return None, [Problem("an ADC file holds one YAML document", Location(name, 1, 1))]
    return (parsed.documents[0].data if parsed.documents else None), []


def read_files(files: Mapping[str, bytes], max_items: int | None = None) -> AdcFiles:
    """Parse ADC files (name → bytes, in the order given) and check their types; the problems with their
    file and line. Files that would make more than `max_items` items are refused before they are
    converted."""
    out = AdcFiles([], [], set())
    positions = FilePositions(files)
    counted = 0
    for name, data in files.items():
        document, problems = _document(name, data)
        if not problems:
            src = _Source(name, document, positions)
            numbers, mixed = numbers_read(document)
            out.numbers += sorted(((number, src.at(*number.path)) for number in numbers),
                                  key=lambda found: found[1])
            problems = [Problem(message, src.at(*path)) for path, message in mixed] + input_problems(src)
        if problems:
            out.problems += problems
            continue
        counted += item_count(document)
        if max_items is not None and counted > max_items:
            out.problems.append(Problem(too_many_items(counted, max_items)))
            return out
        out.sources.append(_Source(name, _substitute(document, out.secrets), positions))
    return out


_KIND_ORDER = ("services", "routes", "stream_routes", "upstreams", "ssls", "consumers", "global_rules",
               "plugin_metadata")


def convert_files(adc: AdcFiles, label_selector: Mapping[str, str] | None = None,
                  behaviour: Behaviour = DEFAULT) -> Converted:
    """The payload `behaviour`'s ``adc sync`` writes for `adc` (files merged in order), and the problems."""
    stamp = dict([MANAGED_BY]) if behaviour.managed_by else {}
    stamp.update(label_selector or {})
    converter = _Converter(stamp, behaviour)
    converter.out.problems += adc.problems
    converter.out.secrets |= adc.secrets
    for number, where in adc.numbers:
        if behaviour.lint:
            converter.note(number.note(), where)
            if number.variable is not None:
                converter.out.variables.add(number.variable)
        else:
            converter.problem(number.unlinted(), where)
    for src in adc.sources:
        converter.file(src)
    converter.convert_pending()
    converter.out.payload = dict(sorted(converter.out.payload.items(),
                                        key=lambda kv: _KIND_ORDER.index(kv[0])))
    converter.out.origins = dict(converter.seen)
    return converter.out


def convert(files: Mapping[str, bytes], label_selector: Mapping[str, str] | None = None,
            managed_by: bool | None = None, behaviour: Behaviour = DEFAULT) -> Converted:
    """ADC files (name → bytes, merged in the order given) → the payload `behaviour`'s ADC writes (by
    default the latest release's; `managed_by` overrides its label), and the problems."""
    if managed_by is not None:
        behaviour = behaviour.with_(managed_by=managed_by)
    return convert_files(read_files(files), label_selector, behaviour)
