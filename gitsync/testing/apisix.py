"""A test double of APISIX's Admin API in API-driven standalone mode (3.13 … 3.21), plus a data plane.

Every integration test of gitsync (and a user's CI) talks to this instead of a
real gateway, so it answers as a real APISIX 3.18 does, byte for byte where the
recorded answers in tests/data/golden show it (tests/testing/test_golden.py replays them):
routing before auth, the 401/400/404 bodies and nginx pages, ``X-Digest`` and
204, validation (the shared `gitsync.schema`) before the per-kind version
algorithm, storage as sent plus metadata keys, GET's empty-array quirk, YAML,
restart → empty. Other versions differ as docs/apisix-versions.md lists (3.19's
``?wait`` and shape checks, 3.21's key rules). A minimal data plane on a second
port serves the last applied routes (the ``modifiedIndex`` rule, the ``mocking``
plugin); its workers apply a config `set_worker_delay` seconds after the PUT.
Fault knobs (latency, 5xx, dropped connections, a body limit, another writer)
serve the reliability tests.

Run it standalone::

    python -m gitsync.testing.apisix --listen 127.0.0.1:9180 --admin-key KEY \\
        [--viewer-key KEY] [--proxy-listen 127.0.0.1:9080] [--version 3.18] [--worker-delay 0.1]

or from Python::

    with ApisixDouble("key") as gw:
        httpx.get(gw.url + "/apisix/admin/configs", headers={"X-API-KEY": "key"})
"""

from __future__ import annotations

import argparse
import http.client
import http.cookies
import ipaddress
import re
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from copy import deepcopy
from io import StringIO
from typing import Any
from urllib.parse import parse_qs

from ruamel.yaml import YAML, YAMLError
from ruamel.yaml.constructor import SafeConstructor

from gitsync.kinds import KINDS, METADATA_KEYS, VERSIONED_KEYS, version_key
from gitsync.schema import check_payload
from gitsync.schema.checks import CONFIG_VALIDATE, PayloadIssue
from gitsync.schema.jsonschema import cjson_encode, is_number, lua_number, lua_tostring, lua_type
from gitsync.testing.cjson import CJsonError, as_double, decode, empty_arrays_as_objects, round_numbers
from gitsync.testing.dataplane import DataPlane, Live, Workers, forward
from gitsync.testing.http import (
    PREFLIGHT,
    TEXT,
    DoubleServer,
    Handler,
    ProxyHandler,
    Reply,
    json_body,
    nginx_reply,
)

LAST_MODIFIED, DIGEST = METADATA_KEYS
ADMIN = "/apisix/admin"
CONFIGS = ADMIN + "/configs"
VALIDATE = CONFIGS + "/validate"
VALIDATE_MAX_BODY = 1572864  # 1.5 MiB, 3.17+
SHARED_DICT_BYTES = 10 * 1024 * 1024  # lua_shared_dict standalone-config 10m
ALLOW_ADMIN = ipaddress.ip_network("127.0.0.0/24")
KEYS_313 = tuple(k for k in VERSIONED_KEYS if k not in ("stream_routes", "plugins"))

def _error(status: int, message: str) -> Reply:
    return Reply(status, json_body({"error_msg": message}))


#: APISIX 3.19 refuses a body of the wrong shape (apache/apisix#13886) and takes ``?wait=`` (#13904);
#: 3.21 stops echoing an invalid plugin configuration. The status codes are from those sources; the
#: texts below, the 400 for a bad ``wait`` and the empty 200 body are the double's own: they could
#: not be confirmed (docs/apisix-versions.md).
SHAPE_BODY = "invalid request body: the configuration must be an object"
WAIT_MAX_MS = 60000
_INVALID_PLUGIN_CONF = re.compile(r"invalid plugin conf .* for plugin \[", re.S)


def _shape_problems(data: Mapping[str, Any]) -> list[tuple[str, int | None, str]]:
    """3.19+: every kind a list (an empty object passes) and every item an object."""
    problems: list[tuple[str, int | None, str]] = []
    for kind in VERSIONED_KEYS:
        items = data.get(kind)
        if items is None or items == {}:
            continue
        if not isinstance(items, list):
            problems.append((kind, None, f"invalid configuration: {kind} must be an array"))
            continue
        problems += [(kind, index, f"invalid configuration: {kind}[{index}] must be an object")
                     for index, item in enumerate(items) if not isinstance(item, dict)]
    return problems


def _entry(kind: str, index: int | None, message: str, data: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"resource_type": kind, "error": message}
    if index is not None:
        entry.update(index=index, resource_id=ApisixDouble._raw_resource_id(data, kind, index))
    return entry


def _wait_ms(query: str) -> int | Reply | None:
    """3.19's ``?wait=<ms>``: None when absent, the 400 reply when it is not a whole number up to 60000."""
    values = parse_qs(query, keep_blank_values=True).get("wait")
    if not values:
        return None
    try:
        wait = int(values[0])
    except ValueError:
        wait = -1
    if not 0 <= wait <= WAIT_MAX_MS:
        return _error(400, f"invalid wait: must be an integer from 0 to {WAIT_MAX_MS} (milliseconds)")
    return wait


def _validation_failed(errors: list[dict[str, Any]]) -> Reply:
    return Reply(400, json_body({"error_msg": "Configuration validation failed", "errors": errors}))


def _object_id(item: Mapping[str, Any], index: int) -> str:
    value = item.get("id")
    return f"arr_{index + 1}" if value is None else lua_tostring(value)


class _LyamlConstructor(SafeConstructor):
    """lyaml keeps timestamps as strings; a subclass, so no other YAML loader is affected."""


_LyamlConstructor.add_constructor(
    "tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


def _yaml_load_first(text: str) -> Any:
    """lyaml's ``load(body, {all = false})``: the first document; timestamps stay strings."""
    yaml = YAML(typ="safe")
    yaml.Constructor = _LyamlConstructor
    yaml.allow_duplicate_keys = True
    return next(iter(yaml.load_all(text)), None)


def _yaml_text(value: Any) -> str:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    out = StringIO()
    yaml.dump(value, out)
    text = out.getvalue()
    if text.startswith("---"):
        text = text[3:]
    if text.rstrip().endswith("..."):
        text = text.rstrip()[:-3]
    return text.strip() + "\n"


class ApisixDouble:
    """The Admin API double. Start it, point a client at `url`, inspect `config()`, `requests`."""

    def __init__(self, admin_key: str = "test-admin-key", *, viewer_key: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, proxy: bool = True, version: str = "3.18.0",
                 proxy_port: int = 0, forward: bool = False) -> None:
        self.admin_key = admin_key
        self.forward = forward  # the data plane proxies to the upstream's first node (else it echoes)
        self.viewer_key = viewer_key
        self.host = host
        self.version = version if version.count(".") >= 2 else version + ".0"
        self._features = tuple(int(part) for part in version.split(".")[:2])
        self._ports = [port, proxy_port if proxy else None]
        self._servers: list[DoubleServer] = []
        self._threads: list[threading.Thread] = []
        if self._features >= (3, 21) and (admin_key == "" or viewer_key == ""):
            raise ValueError("APISIX 3.21 refuses to start with an empty admin_key entry")
        self._lock = threading.RLock()
        self._stored: dict[str, Any] | None = None
        self._running: dict[str, dict[str, Live]] = {kind: {} for kind in KINDS}
        self.plane = DataPlane(Workers(self._lock), self.version)
        self._workers = self.plane.workers
        self._oob_count = 0
        self.put_bodies: list[bytes] = []
        self.put_queries: list[str] = []  # each PUT's query string, as sent (?wait on 3.19+)
        self.requests: list[tuple[str, str, int]] = []
        self.proxy_requests: list[tuple[str, str, int]] = []
        self._latency = 0.0
        self._fail: list[int] = [0, 503]
        self._drop = 0
        self._body_limit: int | None = None
        self.url = ""
        self.proxy_url = ""

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> ApisixDouble:
        """Listen (admin, then data plane) in background threads; ports are kept across restarts."""
        handlers: list[type[Handler]] = [Handler, ProxyHandler]
        for slot, handler in enumerate(handlers):
            port = self._ports[slot]
            if port is None:
                continue
            server = DoubleServer((self.host, port), handler, self)
            self._ports[slot] = server.server_address[1]
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                      name=f"apisix-double-{handler.plane}", daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self._ports[0]}"
        self.proxy_url = f"http://{host}:{self._ports[1]}" if self._ports[1] is not None else ""
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.close_clients()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()

    def restart(self) -> None:
        """A full gateway restart: connections cut, memory gone (all versions 0, no metadata)."""
        self.stop()
        with self._lock:
            self._stored = None
            self._running = {kind: {} for kind in KINDS}
            self._workers.reset()
        self.start()

    def __enter__(self) -> ApisixDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- inspection

    @property
    def _keys(self) -> tuple[str, ...]:
        return VERSIONED_KEYS if self._features >= (3, 14) else KEYS_313

    def _fresh(self) -> dict[str, Any]:
        return {version_key(key): 0 for key in self._keys}

    def config(self) -> dict[str, Any]:
        """A deep copy of the stored object (fresh: every version key at 0)."""
        with self._lock:
            return deepcopy(self._stored) if self._stored is not None else self._fresh()

    def running(self, kind: str) -> dict[str, dict[str, Any]]:
        """What the data plane runs for `kind` (id → content), after the modifiedIndex rule."""
        with self._lock:
            return {oid: deepcopy(obj.item) for oid, obj in self._workers.served[kind].items()}

    # ---------------------------------------------------------------- fault knobs

    def set_latency(self, seconds: float) -> None:
        self._latency = seconds

    def set_worker_delay(self, seconds: float) -> None:
        """Seconds the workers take to apply an accepted config (the data plane serves the old meanwhile)."""
        self._workers.delay = seconds

    def fail_next(self, n: int, status: int = 503) -> None:
        with self._lock:
            self._fail = [n, status]

    def drop_next(self, n: int) -> None:
        """Close the next `n` admin connections without answering (nothing is applied)."""
        with self._lock:
            self._drop = n

    def set_body_limit(self, limit: int | None) -> None:
        """nginx ``client_max_body_size``: larger request bodies get 413."""
        self._body_limit = limit

    def out_of_band(self, kind: str, items: list[dict[str, Any]] | None = None,
                    version: int | None = None) -> None:
        """Another writer: set `kind` to `items` (None keeps them), its version to `version` or live+1."""
        if kind not in VERSIONED_KEYS:
            raise ValueError(f"unknown kind {kind!r}")
        with self._lock:
            old = self._stored
            new = deepcopy(old) if old is not None else self._fresh()
            vkey = version_key(kind)
            new[vkey] = version if version is not None else new.get(vkey, 0) + 1
            if items is not None:
                if items:
                    new[kind] = round_numbers(deepcopy(items))
                else:
                    new.pop(kind, None)
            self._oob_count += 1
            if self._features >= (3, 14):
                new[LAST_MODIFIED] = int(time.time())
                new[DIGEST] = f"out-of-band-{self._oob_count}"
            self._commit(old, new)

    def _take_fault(self) -> str | int | None:
        with self._lock:
            if self._drop > 0:
                self._drop -= 1
                return "drop"
            if self._fail[0] > 0:
                self._fail[0] -= 1
                return self._fail[1]
        return None

    # ---------------------------------------------------------------- admin plane

    def serve_admin(self, h: Handler) -> None:
        path, _, query = h.path.partition("?")
        method = h.command
        if self._latency:
            time.sleep(self._latency)
        limit = self._body_limit
        length = int(h.headers.get("Content-Length") or 0)
        if limit is not None and length > limit:
            h.close_connection = True
            self._answer(h, method, path, nginx_reply(413))
            return
        body = h.read_body()
        if method == "PUT":
            self.put_bodies.append(body)
            self.put_queries.append(query)
        fault = self._take_fault()
        if fault == "drop":
            h.close_connection = True
            self.requests.append((method, path, 0))
            return
        if isinstance(fault, int):
            self._answer(h, method, path, nginx_reply(fault))
            return
        try:
            reply = self._admin_reply(h, method, path, query, body)
        except Exception:  # a crash in the double answers like a Lua error: nginx's 500 page
            reply = nginx_reply(500)
        self._answer(h, method, path, reply)

    def _answer(self, h: Handler, method: str, path: str, reply: Reply) -> None:
        self.requests.append((method, path, reply.status))
        h.reply(reply, cors=reply.cors)

    def _admin_reply(self, h: Handler, method: str, path: str, query: str, body: bytes) -> Reply:
        client = ipaddress.ip_address(h.client_address[0])
        if client.version != 4 or client not in ALLOW_ADMIN:
            return nginx_reply(403)
        if method == "OPTIONS" and path.startswith(ADMIN):
            return Reply(200, headers=PREFLIGHT, content_type=TEXT, cors=False)
        route = self._route(method, path)
        if route is None:
            return nginx_reply(404)
        if route == "ping":
            return Reply(200)
        problem = self._check_token(h, query, method)
        if problem:
            return Reply(401, json_body({"error_msg": "failed to check token", "description": problem}))
        if route == "get":
            return self._get(h.headers.get("Accept") or "application/json")
        if route == "head":
            return Reply(200, headers=self._metadata_headers())
        if route == "validate":
            return self._validate(h, body)
        return self._put(h, body)

    def _route(self, method: str, path: str) -> str | None:
        if path == ADMIN and method == "HEAD":
            return "ping"
        if path == CONFIGS:
            if method == "GET":
                return "get"
            if method == "PUT":
                return "put"
            if method == "HEAD" and self._features >= (3, 14):
                return "head"
        if path == VALIDATE and method == "POST" and self._features >= (3, 15):
            return "validate"
        return None

    def _check_token(self, h: Handler, query: str, method: str) -> str | None:
        token = parse_qs(query, keep_blank_values=True).get("api_key", [None])[0]
        if token is None:
            token = h.headers.get("X-API-KEY")
        if token is None:
            cookie = http.cookies.SimpleCookie(h.headers.get("Cookie") or "")
            token = cookie["x_api_key"].value if "x_api_key" in cookie else None
        if token is None or (token == "" and self._features >= (3, 21)):
            return "missing apikey"
        if token == self.admin_key:
            return None
        if self.viewer_key is not None and token == self.viewer_key:
            return None if method == "GET" else "invalid method for role viewer"
        return "wrong apikey"

    def _metadata_headers(self) -> tuple[tuple[str, str], ...]:
        stored = self._stored
        if stored is None or self._features < (3, 14):
            return ()
        return tuple((key, lua_tostring(stored[key])) for key in METADATA_KEYS if key in stored)

    def _get(self, accept: str) -> Reply:
        with self._lock:
            config = self.config()
            headers = self._metadata_headers()
        if accept.startswith("application/yaml"):
            text = _yaml_text(config)  # lyaml keeps empty arrays as [] (recorded on 3.18)
            return Reply(200, text.encode(), headers, "application/yaml")
        return Reply(200, cjson_encode(empty_arrays_as_objects(config)).encode(), headers)

    def _parse(self, h: Handler, body: bytes, *, for_validate: bool) -> Any | Reply:
        """Decode a JSON or YAML body as APISIX does, or the reply refusing it."""
        content_type = h.headers.get("Content-Type") or "application/json"
        if content_type.startswith("application/yaml"):
            try:
                data = _yaml_load_first(body.decode("utf-8", "replace"))
            except YAMLError:
                if for_validate:
                    return _error(400, "invalid request body: invalid yaml request body")
                return nginx_reply(500)  # PUT's yaml.load is not wrapped in pcall
            if not isinstance(data, dict | list):
                return _error(400, "invalid request body: invalid yaml request body")
        else:
            try:
                data = decode(body)
            except CJsonError as exc:
                return _error(400, f"invalid request body: {exc}")
        if self._features >= (3, 19) and not isinstance(data, dict):
            return _error(400, SHAPE_BODY)
        if isinstance(data, list | str):
            return {}  # Lua indexes an array or a string to nothing
        if not isinstance(data, dict):
            if for_validate and self._features >= (3, 17):
                return _validation_failed([{"error": f"{CONFIG_VALIDATE}:129: attempt to index local "
                                                     f"'req_body' (a {lua_type(data)} value)"}])
            return nginx_reply(500)
        return data

    def _legacy_message(self, kind: str | None, index: int | None, message: str) -> str:
        """A 3.18 message in this version's words.

        Before 3.17 item errors carry ``invalid <key> at index N, err: `` (3.13: runtime
        wording); 3.21 no longer echoes the value of an invalid plugin configuration.
        """
        if self._features >= (3, 21):
            message = _INVALID_PLUGIN_CONF.sub("invalid plugin conf for plugin [", message)
        if self._features >= (3, 17) or index is None or message.startswith("found duplicate "):
            return message
        if self._features < (3, 14):
            message = message.removeprefix("invalid configuration: ")
        return f"invalid {kind} at index {index}, err: {message}"

    def _idless_crash(self, data: Mapping[str, Any]) -> bool:
        """3.13–3.16 crash (500) on an item without an identifier."""
        if self._features >= (3, 17):
            return False
        for key in self._keys:
            items = data.get(key)
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and item.get("id") is None and (
                        key != "consumers" or item.get("username") is None):
                    return True
        return False

    def _validate(self, h: Handler, body: bytes) -> Reply:
        if self._features >= (3, 17) and len(body) > VALIDATE_MAX_BODY:
            return _error(400, f"invalid request body: request size {len(body)} is greater than the "
                               f"maximum size {VALIDATE_MAX_BODY} allowed")
        if not body:
            return _error(400, "invalid request body: empty request body")
        data = self._parse(h, body, for_validate=True)
        if isinstance(data, Reply):
            return data
        if self._idless_crash(data):
            return nginx_reply(500)
        if self._features >= (3, 19) and (shape := _shape_problems(data)):
            return _validation_failed([_entry(kind, index, message, data) for kind, index, message in shape])
        with self._lock:
            issues = check_payload(data, live=self._stored)
        if not issues:
            return Reply(200, b"{}\n" if self._features >= (3, 17) else b"")
        if issues[0].lua_line is not None:
            return _validation_failed([{"error": issues[0].lua_error}]) if self._features >= (3, 17) \
                else nginx_reply(500)  # ≤3.16 has no pcall around the checks
        errors = []
        for issue in issues:
            entry: dict[str, Any] = {"resource_type": issue.kind}
            if issue.index is not None:
                entry["index"] = issue.index
            entry["error"] = self._legacy_message(issue.kind, issue.index, issue.message)
            if issue.index is not None and self._features >= (3, 17):
                entry["resource_id"] = self._raw_resource_id(data, issue.kind, issue.index)
            errors.append(entry)
        return _validation_failed(errors)

    @staticmethod
    def _raw_resource_id(data: Mapping[str, Any], kind: str | None, index: int) -> Any:
        items = data.get(kind or "")
        item = items[index] if isinstance(items, list) and index < len(items) else None
        if isinstance(item, dict):
            for key in ("id", "username"):
                if item.get(key) is not None:
                    return item[key]
        return ""

    def _put(self, h: Handler, body: bytes) -> Reply:
        with_digest = self._features >= (3, 14)
        digests = h.headers.get_all("X-Digest") or []
        if with_digest and not digests:
            return _error(400, "missing digest header")
        wait = None
        if self._features >= (3, 19):
            wait = _wait_ms(h.path.partition("?")[2])
            if isinstance(wait, Reply):
                return wait
        if not body:
            return _error(400, "invalid request body: empty request body")
        data = self._parse(h, body, for_validate=False)
        if isinstance(data, Reply):
            return data
        with self._lock:
            old = self._stored
            if with_digest and old is not None and old.get(DIGEST) == digests[0]:
                return Reply(204)
            if self._idless_crash(data):
                return nginx_reply(500)
            problem = _shape_problems(data)[:1] if self._features >= (3, 19) else None
            if problem:
                return _error(400, problem[0][2])
            problem = self._refusal(data, old)
            if isinstance(problem, PayloadIssue):
                return nginx_reply(500)  # a Lua error outside the per-item guard: PUT has no pcall around it
            if problem:
                return _error(400, problem)
            new = self._next_config(data, old)
            if with_digest:
                new[LAST_MODIFIED] = int(time.time())
                new[DIGEST] = digests[0]
            if len(cjson_encode(new)) > SHARED_DICT_BYTES:
                # ngx.shared.DICT:set evicts what it holds (LRU) to make room, then fails: the Admin API
                # has lost the config it held (versions 0, no digest) while the workers keep serving it.
                self._stored = None
                # core.response.exit(500, err) with a string: plain text under the admin JSON type
                return Reply(500, b"failed to save config to shared dict: no memory")
            applied = self._commit(old, new)
            headers = self._metadata_headers()
        if wait is not None and self._workers.wait_applied(applied, wait / 1000):
            return Reply(200, headers=headers)  # 3.19: every worker applied it within the wait
        return Reply(202, headers=headers)

    def _refusal(self, data: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | PayloadIssue | None:
        """The 400 message for this body, in the order the gateway's version checks it (an issue: a crash)."""
        if self._features >= (3, 15):
            issues = check_payload(data, collect_all=False, live=old if self._features >= (3, 17) else None)
            if issues and issues[0].lua_line is not None:
                return issues[0]
            if issues:
                return self._legacy_message(issues[0].kind, issues[0].index, issues[0].message)
            return self._stale_version(data, old, self._keys)
        for key in self._keys:  # 3.13/3.14: per key, version type → lower → items when higher
            vkey = version_key(key)
            sent = data.get(vkey, False)
            if sent is not False and not is_number(sent):
                return f"{vkey} must be a number"
            stale = self._stale_version(data, old, (key,))
            if stale:
                return stale
            if sent is False or sent != self._live_version(old, key):
                issues = check_payload({key: data.get(key, False)}, collect_all=False)
                if issues and issues[0].lua_line is not None:
                    return issues[0]
                if issues and issues[0].index is not None:
                    return self._legacy_message(key, issues[0].index, issues[0].message)
        return None

    @staticmethod
    def _live_version(old: Mapping[str, Any] | None, key: str) -> Any:
        return old.get(version_key(key), 0) if old is not None else 0

    def _stale_version(self, data: Mapping[str, Any], old: Mapping[str, Any] | None,
                       keys: Iterable[str]) -> str | None:
        for key in keys:
            sent = data.get(version_key(key), False)
            live = self._live_version(old, key)
            if is_number(sent) and as_double(sent) < live:
                return f"{version_key(key)} must be greater than or equal to ({lua_number(live)})"
        return None

    def _next_config(self, data: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        """Absent → live+1 and emptied; equal → live content kept; higher → the sent list.

        Versions compare as the doubles cjson reads (``100000000000000001`` equals a stored
        ``1e+17``) and are stored with 14 significant digits, as every number is.
        """
        new: dict[str, Any] = {}
        for key in self._keys:
            vkey = version_key(key)
            live = self._live_version(old, key)
            sent = data.get(vkey, False)
            version = live + 1 if sent is False else as_double(sent)
            new[vkey] = version
            items = data.get(key)
            if version == live:
                if old is not None and key in old:
                    new[key] = old[key]
            elif isinstance(items, list) and items:
                new[key] = items
        return round_numbers(new)

    def _commit(self, old: Mapping[str, Any] | None, new: dict[str, Any]) -> int:
        """Store `new` and hand the workers every kind whose stored version changed (the modifiedIndex
        rule applied); the commit's sequence number, for `Workers.wait_applied`.

        Stored means rounded to 14 significant digits: a higher version that rounds to the
        stored one changes what GET shows, but not what the data plane serves.
        """
        for key in self._keys:
            if is_number(new.get(version_key(key))):
                new[version_key(key)] = round_numbers(new[version_key(key)])
        self._stored = new
        for kind in KINDS:
            vkey = version_key(kind)
            version = new.get(vkey, 0)
            if version == self._live_version(old, kind):
                continue
            previous = self._running[kind]
            rebuilt: dict[str, Live] = {}
            items = new.get(kind)
            for index, item in enumerate(items if isinstance(items, list) else []):
                if not isinstance(item, dict):
                    continue
                oid = _object_id(item, index)
                index_sent = item.get("modifiedIndex")
                kept = previous.get(oid)
                if kept is not None and index_sent is not None and kept.modified_index == index_sent:
                    rebuilt[oid] = kept
                else:
                    rebuilt[oid] = Live(deepcopy(item), index_sent if index_sent is not None else version)
            self._running[kind] = rebuilt
        return self._workers.publish(self._running)

    # ---------------------------------------------------------------- data plane

    def serve_proxy(self, h: Handler) -> None:
        body = h.read_body()
        path = h.path.partition("?")[0]
        host = (h.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        with self._lock:
            reply = self.plane.reply(h.command, path, host, h.client_address[0])
        if self.forward and reply.status == 200 and reply.upstream is not None:
            reply = forward(h, body, reply.upstream)
        self.proxy_requests.append((h.command, path, reply.status))
        h.reply(reply, cors=False)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    """``python -m gitsync.testing.apisix``: run the double until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m gitsync.testing.apisix",
                                     description="APISIX Admin API test double (API-driven standalone)")
    parser.add_argument("--listen", default="127.0.0.1:9180", help="admin address (default %(default)s)")
    parser.add_argument("--admin-key", required=True, help="the admin role's key")
    parser.add_argument("--viewer-key", help="a viewer role's key (GET only)")
    parser.add_argument("--proxy-listen", help="data plane address, e.g. 127.0.0.1:9080")
    parser.add_argument("--forward-upstreams", action="store_true", help="the data plane proxies to each "
                        "upstream's first node (else it answers with an echo of the matched route)")
    parser.add_argument("--worker-delay", type=float, default=0.0, metavar="SECONDS",
                        help="how long the workers take to apply an accepted config (default 0)")
    parser.add_argument("--version", default="3.18.0", dest="apisix_version",
                        help="APISIX version to emulate (3.13 … 3.21, default %(default)s)")
    args = parser.parse_args(argv)
    host, port = _address(args.listen)
    proxy_host, proxy_port = _address(args.proxy_listen) if args.proxy_listen else (host, 0)
    if args.proxy_listen and proxy_host != host:
        parser.error("--proxy-listen must use the same host as --listen")
    try:
        double = ApisixDouble(args.admin_key, viewer_key=args.viewer_key, host=host, port=port,
                              proxy=bool(args.proxy_listen), proxy_port=proxy_port,
                              version=args.apisix_version, forward=args.forward_upstreams).start()
    except ValueError as exc:
        parser.error(str(exc))
    double.set_worker_delay(args.worker_delay)
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    print(f"APISIX double {args.apisix_version}: admin {double.url}"
          + (f", data plane {double.proxy_url}" if double.proxy_url else ""), flush=True)
    stopped.wait()
    double.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
