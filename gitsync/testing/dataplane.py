"""The data plane of the APISIX double: workers that take each accepted config a little after its
PUT (the ``modifiedIndex`` rule: an equal index keeps the old object), and a router that answers
requests from what they serve — the route radixtree would pick (its ``vars`` evaluated as
lua-resty-expr does, over the variables the double knows), its upstream (or the ``mocking`` plugin's
canned answer), forwarded to the upstream's first node when asked."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gitsync.kinds import KINDS
from gitsync.schema.jsonschema import is_number, lua_tostring
from gitsync.testing.http import CHARSET_TYPES, TEXT, Handler, Reply, json_body, nginx_reply


@dataclass
class Live:
    """A data-plane object: the content it was built from and its effective modifiedIndex."""

    item: dict[str, Any]
    modified_index: Any


class Workers:
    """The gateway's workers: each accepted config reaches the data plane `delay` seconds after its PUT.

    `publish` hands them the objects a commit built; `served` is what they run now.
    APISIX 3.19's ``PUT ?wait=`` asks whether every worker applied a config in time.
    """

    def __init__(self, lock: threading.RLock) -> None:
        self.delay = 0.0
        self.served: dict[str, dict[str, Live]] = {kind: {} for kind in KINDS}
        self._applied = threading.Condition(lock)
        self._published = 0
        self._applied_seq = 0
        self._generation = 0  # a restart: timers of the old generation apply nothing

    def reset(self) -> None:
        self.served = {kind: {} for kind in KINDS}
        self._generation += 1
        self._published = self._applied_seq = 0

    def publish(self, running: Mapping[str, dict[str, Live]]) -> int:
        """Hand the workers this commit's objects; its sequence number, for `wait_applied`."""
        self._published += 1
        snapshot = {kind: dict(objects) for kind, objects in running.items()}
        if self.delay <= 0:
            self._apply(self._generation, self._published, snapshot)
        else:
            timer = threading.Timer(self.delay, self._apply, (self._generation, self._published, snapshot))
            timer.daemon = True
            timer.start()
        return self._published

    def _apply(self, generation: int, seq: int, snapshot: dict[str, dict[str, Live]]) -> None:
        with self._applied:
            if generation == self._generation and seq > self._applied_seq:
                self.served, self._applied_seq = snapshot, seq
                self._applied.notify_all()

    def wait_applied(self, seq: int, timeout: float) -> bool:
        """True once every worker runs commit `seq` (or a later one), False when `timeout` passes first."""
        with self._applied:
            generation = self._generation
            return self._applied.wait_for(
                lambda: self._applied_seq >= seq or self._generation != generation, timeout) \
                and generation == self._generation


class DataPlane:
    """What the double's data plane serves and how it answers a request."""

    def __init__(self, workers: Workers, version: str) -> None:
        self.workers = workers
        self.version = version

    def reply(self, method: str, path: str, host: str, client: str) -> Reply:
        """What the data plane answers a request: the route its workers serve, its upstream or plugins."""
        matched = self._match_route(method, path, host, client)
        if matched is None:
            return Reply(404, json_body({"error_msg": "404 Route Not Found"}), content_type=TEXT)
        route_id, route = matched
        service = None
        if route.get("service_id") is not None:
            service_obj = self.workers.served["services"].get(lua_tostring(route["service_id"]))
            if service_obj is None:
                return nginx_reply(404)
            service = service_obj.item
        if route.get("plugin_config_id") is not None and \
                lua_tostring(route["plugin_config_id"]) not in self.workers.served["plugin_configs"]:
            return nginx_reply(503)
        mock = self._mocking(route, service)
        if mock is not None:
            return mock  # the access phase answers before any upstream is looked up
        upstream_id: Any = None
        upstream: dict[str, Any] | None = None
        for source in (route, service or {}):
            if source.get("upstream_id") is not None:
                upstream_id = lua_tostring(source["upstream_id"])
                live = self.workers.served["upstreams"].get(upstream_id)
                if live is None:
                    return nginx_reply(502)
                upstream = live.item
                break
            if isinstance(source.get("upstream"), dict):
                upstream = source["upstream"]
                upstream_id = lua_tostring(upstream["id"]) if upstream.get("id") is not None else ""
                break
        if upstream is None:
            return nginx_reply(503)
        headers = [("X-Route-Id", route_id), ("X-Upstream-Id", upstream_id or "")]
        if service is not None:
            headers.append(("X-Service-Id", lua_tostring(service.get("id", ""))))
        answer = {"route_id": route_id, "upstream_id": upstream_id, "uri": path, "host": host,
                  "route": route, "upstream": upstream}
        return Reply(200, (json.dumps(answer) + "\n").encode(), tuple(headers), upstream=upstream)

    def _mocking(self, route: Mapping[str, Any], service: Mapping[str, Any] | None) -> Reply | None:
        """The ``mocking`` plugin of the route (or its service or plugin config): its canned answer.

        ``response_example`` is answered as is; a ``response_schema`` alone gets ``{}``
        (APISIX would generate an example) and ``delay`` is not slept.
        """
        sources: list[Mapping[str, Any]] = [route]
        config_id = route.get("plugin_config_id")
        if config_id is not None:
            sources.append(self.workers.served["plugin_configs"][lua_tostring(config_id)].item)
        sources.append(service or {})
        for source in sources:
            plugins = source.get("plugins")
            conf = plugins.get("mocking") if isinstance(plugins, dict) else None
            meta = conf.get("_meta") if isinstance(conf, dict) else None
            if not isinstance(conf, dict) or (isinstance(meta, dict) and meta.get("disable")):
                continue
            content_type = str(conf.get("content_type", "application/json;charset=utf8"))
            if content_type.split(";")[0].strip() in CHARSET_TYPES and "charset" not in content_type:
                content_type += "; charset=utf-8"
            headers = [(str(k), str(v)) for k, v in (conf.get("response_headers") or {}).items()]
            if conf.get("with_mock_header", True):
                headers.append(("x-mock-by", f"APISIX/{self.version}"))
            body = conf.get("response_example", "{}")
            status = int(conf.get("response_status", 200))
            return Reply(status, str(body).encode(), tuple(headers), content_type)
        return None

    def _match_route(self, method: str, path: str, host: str,
                     client: str) -> tuple[str, dict[str, Any]] | None:
        """The live route radixtree would pick: exact paths first, then the longest prefix, then priority."""
        candidates: list[tuple[tuple[int, int, float], tuple[str, dict[str, Any]]]] = []
        for route_id, live in self.workers.served["routes"].items():
            route = live.item
            if route.get("status", 1) == 0:
                continue
            methods = route.get("methods")
            if isinstance(methods, list) and methods and method not in methods:
                continue
            if not self._host_matches(route, host):
                continue
            if not _remote_matches(route, client):
                continue
            if route.get("vars") and not _expression(route["vars"], _variables(method, path, host, client)):
                continue
            uris = route.get("uris") if isinstance(route.get("uris"), list) else [route.get("uri")]
            best: tuple[int, int] | None = None
            for uri in uris:
                if not isinstance(uri, str):
                    continue
                if uri.endswith("*") and path.startswith(uri[:-1]):
                    rank = (0, len(uri) - 1)
                elif uri == path:
                    rank = (1, len(uri))
                else:
                    continue
                best = rank if best is None or rank > best else best
            if best is not None:
                priority = route.get("priority", 0)
                candidates.append(((*best, priority if is_number(priority) else 0), (route_id, route)))
        if not candidates:
            return None
        return max(candidates, key=lambda pair: pair[0])[1]

    def _host_matches(self, route: Mapping[str, Any], host: str) -> bool:
        hosts = route.get("hosts") if isinstance(route.get("hosts"), list) else (
            [route["host"]] if isinstance(route.get("host"), str) else None)
        if hosts is None and route.get("service_id") is not None:
            service = self.workers.served["services"].get(lua_tostring(route["service_id"]))
            if service is not None and isinstance(service.item.get("hosts"), list):
                hosts = service.item["hosts"]
        if not hosts:
            return True
        for pattern in hosts:
            pattern = str(pattern).lower()
            if pattern == "*" or pattern == host or (pattern.startswith("*") and host.endswith(pattern[1:])):
                return True
        return False


def _variables(method: str, path: str, host: str, client: str) -> dict[str, str]:
    """The nginx variables a route's ``vars`` may test that the double knows (others are nil)."""
    return {"uri": unquote(path), "request_uri": path, "request_method": method, "host": host,
            "remote_addr": client}


def _expression(rule: Any, variables: Mapping[str, str]) -> bool:
    """lua-resty-expr (v1) as a route's ``vars`` uses it: a list of conditions ``[var, op, value]`` (all
    must hold), or ``["AND" | "OR" | "!AND" | "!OR", …]``; ``[var, "!", op, value]`` negates one."""
    if not isinstance(rule, list) or not rule:
        return True
    if isinstance(rule[0], str) and rule[0] in ("AND", "OR", "!AND", "!OR"):
        results = [_expression(part, variables) for part in rule[1:]]
        held = all(results) if rule[0].endswith("AND") else any(results)
        return not held if rule[0].startswith("!") else held
    if isinstance(rule[0], str):
        return _condition(rule, variables)
    return all(_expression(part, variables) for part in rule)


def _condition(rule: list[Any], variables: Mapping[str, str]) -> bool:
    negate = len(rule) == 4 and rule[1] == "!"  # [var, "!", op, value]
    name, op, expected = (rule[0], rule[2], rule[3]) if negate else [*rule, None, None][:3]
    if len(rule) == 2:  # [var, value]: equality
        op, expected = "==", rule[1]
    op = op.lower() if isinstance(op, str) else op
    value = variables.get(str(name))
    if op == "==":
        held = value is not None and value == lua_tostring(expected)
    elif op == "~=":
        held = value != lua_tostring(expected)
    elif op in ("~~", "~*"):
        held = value is not None and re.search(str(expected), value, re.I if op == "~*" else 0) is not None
    elif op == "in":
        held = isinstance(expected, list) and value in [lua_tostring(v) for v in expected]
    elif op == "has":
        held = value is not None and str(expected) in value
    else:
        held = False
    return not held if negate else held


def _first_node(upstream: Mapping[str, Any]) -> tuple[str, int] | None:
    nodes = upstream.get("nodes")
    if isinstance(nodes, dict) and nodes:
        address = next(iter(nodes))
    elif isinstance(nodes, list) and nodes and isinstance(nodes[0], dict):
        address = f"{nodes[0].get('host')}:{nodes[0].get('port', 80)}"
    else:
        return None
    host, _, port = str(address).rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else (str(address), 80)


def forward(h: Handler, body: bytes, upstream: Mapping[str, Any]) -> Reply:
    """Proxy the request to the upstream's first node as nginx would: its answer, or 502 when the node
    does not answer (504 when it answers too slowly)."""
    node = _first_node(upstream)
    if node is None:
        return nginx_reply(503)
    skip = {"host", "connection", "content-length", "transfer-encoding"}
    headers = {k: v for k, v in h.headers.items() if k.lower() not in skip}
    timeouts = upstream.get("timeout") if isinstance(upstream.get("timeout"), dict) else {}
    connection = http.client.HTTPConnection(*node, timeout=timeouts.get("read", 6))
    try:
        connection.request(h.command, h.path, body=body or None,
                           headers={**headers, "Host": h.headers.get("Host", "")})
        answer = connection.getresponse()
        data = answer.read()
    except TimeoutError:
        return nginx_reply(504)
    except OSError:
        return nginx_reply(502)
    finally:
        connection.close()
    hop = ("content-length", "transfer-encoding", "connection", "content-type", "server")
    kept = tuple((k, v) for k, v in answer.getheaders() if k.lower() not in hop)
    return Reply(answer.status, data, kept, content_type=answer.getheader("Content-Type"), cors=False)


def _remote_matches(route: Mapping[str, Any], client: str) -> bool:
    addrs = route.get("remote_addrs") if isinstance(route.get("remote_addrs"), list) else (
        [route["remote_addr"]] if isinstance(route.get("remote_addr"), str) else None)
    if not addrs:
        return True
    address = ipaddress.ip_address(client)
    for addr in addrs:
        try:
            if address in ipaddress.ip_network(addr, strict=False):
                return True
        except ValueError:
            continue
    return False
