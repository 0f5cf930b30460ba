"""The client of one gateway's ``/apisix/admin/configs``: typed answers, one exception map, a deadline.

It speaks HTTP and turns answers into typed results; what to send is reconcile's job and
when to retry is push's. Every failure is a `GatewayError` subclass whose text names neither the
gateway (callers say which one) nor the admin key. Older gateways are handled here: 3.13 has no HEAD
and no digest headers, 3.13–3.14 have no validate endpoint (404), 3.13–3.16 prefix item errors with
``invalid <kind> at index N, err: `` (docs/architecture.md, "The gateway's contract").

One `Gateway` lives as long as the agent: one keep-alive connection pool, and what it learnt about
the gateway (no HEAD, no validate) kept. Each request has one deadline, `Endpoint.timeout`, from
connect to the last byte of the answer, and each answer a size limit: a gateway that drips its
answer or sends an endless one costs a bounded time and bounded memory. That needs a deadline on
every socket read, which is httpcore's network-backend seam (httpx only bounds each read).
"""

from __future__ import annotations

import functools
import json
import re
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gitsync.httpclient import Answer, HttpClient, HttpError
from gitsync.log import clip, logger, redact, register_secret
from gitsync.settings import Secret, Settings, SettingsError
from gitsync.urls import display_url

CONFIGS_PATH = "/apisix/admin/configs"
VALIDATE_PATH = CONFIGS_PATH + "/validate"
READY_PATH = "/status/ready"
#: APISIX 3.19 answers a PUT with ?wait=<ms> once every worker applied it (200), or after the wait (202).
WAIT_SINCE = (3, 19)
MAX_WAIT_MS = 60_000
_SERVER = re.compile(r"^APISIX/(?P<major>\d+)\.(?P<minor>\d+)")
#: The validate endpoint refuses larger bodies (3.17+), so gitsync does not send them there.
VALIDATE_LIMIT = 1536 * 1024
#: The largest answer read from a gateway when the settings say nothing: a config is at most APISIX's
#: 10 MiB shared dict, and GET adds little to it.
DEFAULT_MAX_ANSWER = 32 * 1024 * 1024
#: Answers other than GET's config (errors, HEAD, PUT, validate, status) are small.
SMALL_ANSWER = 1024 * 1024

_STALE = re.compile(
    r"(?P<key>[A-Za-z0-9_]+)_conf_version must be greater than or equal to \((?P<live>[^)]*)\)")
_ITEM_PREFIX = re.compile(r"^invalid (?P<kind>[a-z_]+) at index (?P<index>\d+), err: ")
_DUPLICATE = re.compile(r"^found duplicate (?:id|username|credential id) (?P<id>.+) in (?P<kind>[a-z_]+)$")


# ---------------------------------------------------------------------------------------------------------
# Errors


class GatewayError(Exception):
    """Something went wrong talking to a gateway; the text is safe to show (no key, no secret)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class GatewayUnavailable(GatewayError):
    """Connection refused or reset, the deadline passed, or a 5xx: worth another try later."""


class GatewayAuthError(GatewayError):
    """401 or 403: the admin key is wrong or missing, or this host is not allowed."""


class GatewayProtocolError(GatewayError):
    """An answer this client does not understand (an unexpected status or body, or a huge one)."""


@dataclass(frozen=True)
class ItemError:
    """One rejected item: the kind, its 0-based index in the sent list, its id when known, and why."""

    message: str
    kind: str | None = None
    index: int | None = None
    id: str | None = None


@dataclass(frozen=True)
class StaleVersion:
    """A 400 ``<key>_conf_version must be greater than or equal to (N)``: another writer raced us."""

    key: str
    live: str


class GatewayRejected(GatewayError):
    """A 400: the gateway refused the body. `stale` set means a version race; else `items` say why."""

    def __init__(self, message: str, items: tuple[ItemError, ...] = (), stale: StaleVersion | None = None,
                 ) -> None:
        super().__init__(message)
        self.items = items
        self.stale = stale


#: APISIX's answer to a PUT whose config does not fit the shared dict it keeps it in (it then keeps
#: the config it had: nothing changed). The same config will never fit: a refusal, not an outage.
_OUT_OF_SHARED_DICT = b"failed to save config to shared dict: no memory"


def too_big(size: int, answer: str) -> str:
    return (f"the gateway cannot hold this config ({size / 1048576:.1f} MiB as sent; it answered: {answer}): "
            "API-driven standalone APISIX keeps the whole config in its shared dict standalone-config, "
            "10 MiB unless its config.yaml raises nginx_config.meta.lua_shared_dict.standalone-config; "
            "its workers still serve the config they had, which its Admin API no longer shows (the "
            "drift watch puts the last good commit back)")


def parse_item_error(message: str, kind: str | None = None, index: int | None = None,
                     id: str | None = None) -> ItemError:
    """Split an older gateway's ``invalid <kind> at index N, err: `` prefix off a message."""
    match = _ITEM_PREFIX.match(message)
    if match:
        return ItemError(message[match.end():], match["kind"], int(match["index"]), id)
    duplicate = _DUPLICATE.match(message)
    if duplicate and kind is None:
        return ItemError(message, duplicate["kind"], index, duplicate["id"])
    return ItemError(message, kind, index, id)


def parse_stale(message: str) -> StaleVersion | None:
    match = _STALE.search(message)
    return StaleVersion(match["key"], match["live"]) if match else None


# ---------------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class LiveConfig:
    """A GET of the live config: the body (metadata keys removed) and the digest it carries."""

    body: dict[str, Any]
    digest: str | None
    last_modified: int | None
    size: int  # bytes received

    @property
    def versions(self) -> dict[str, Any]:
        return {k: v for k, v in self.body.items() if k.endswith("_conf_version")}


@dataclass(frozen=True)
class ConfigHead:
    digest: str | None
    last_modified: int | None


@dataclass(frozen=True)
class PutResult:
    """A PUT the gateway took: 202 (accepted), 204 (that digest was already live), or, asked to wait
    (3.19+), 200 (every worker applies it) or 202 (not confirmed within the wait)."""

    status: int
    digest: str | None
    waited: bool = False  # sent with ?wait=

    @property
    def already_live(self) -> bool:
        return self.status == 204

    @property
    def on_every_worker(self) -> bool:
        """The gateway confirmed every worker (and the stream subsystem) applies the config."""
        return self.waited and self.status == 200


@dataclass(frozen=True)
class ValidateResult:
    """``POST /configs/validate``: `supported` is False when the gateway has no such endpoint."""

    supported: bool
    items: tuple[ItemError, ...] = ()
    message: str = ""


@dataclass(frozen=True)
class ReadyResult:
    ready: bool
    message: str = ""


# ---------------------------------------------------------------------------------------------------------
# Endpoint settings


@dataclass(frozen=True)
class Endpoint:
    """How to reach one gateway."""

    url: str
    admin_key: Secret | None = None
    status_url: str | None = None
    timeout: float = 10.0  # the deadline of one request, connect to last byte
    ca_file: Path | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    tls_verify: bool = True
    max_answer: int = DEFAULT_MAX_ANSWER  # bytes

    @property
    def display_url(self) -> str:
        return display_url(self.url)


def endpoints_from_settings(settings: Settings) -> list[Endpoint]:
    """One `Endpoint` per configured gateway; `status_urls` pair with gateways by position.

    The TLS files are loaded here, once: a file that is not a certificate or key is a settings
    error naming it, not a traceback at the first request."""
    out = []
    for i, url in enumerate(settings.gateways):
        register_secret(urlsplit(url).password)
        endpoint = Endpoint(
            url=url,
            admin_key=settings.admin_key,
            status_url=settings.status_urls[i] if i < len(settings.status_urls) else None,
            timeout=settings.gateway_timeout,
            ca_file=settings.ca_file,
            client_cert_file=settings.client_cert_file,
            client_key_file=settings.client_key_file,
            tls_verify=settings.tls_verify,
            max_answer=max(2 * settings.max_payload_size, SMALL_ANSWER),
        )
        if uses_tls(endpoint):
            tls_context(endpoint)
        out.append(endpoint)
    return out


def uses_tls(endpoint: Endpoint) -> bool:
    """An https gateway (or status URL), or TLS files to load: a plain-HTTP gateway on the same host
    or network (the usual one) needs no TLS context, whose trust store is slow to load."""
    urls = (endpoint.url, endpoint.status_url)
    return bool(endpoint.ca_file or endpoint.client_cert_file) or any(
        url is not None and urlsplit(url).scheme.lower() == "https" for url in urls)


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """The system's trust store, built once (loading it costs milliseconds per client otherwise)."""
    return ssl.create_default_context()


def tls_context(endpoint: Endpoint) -> ssl.SSLContext:
    """The TLS context of an endpoint; `SettingsError` naming the file that cannot be used."""
    if endpoint.tls_verify and not (endpoint.ca_file or endpoint.client_cert_file):
        return _default_tls()
    try:
        return _tls_files(endpoint.ca_file, endpoint.client_cert_file, endpoint.client_key_file,
                          endpoint.tls_verify)
    except (OSError, ssl.SSLError, ValueError) as exc:
        files = ", ".join(f"{name} {path}" for name, path in (
            ("ca_file", endpoint.ca_file), ("client_cert_file", endpoint.client_cert_file),
            ("client_key_file", endpoint.client_key_file)) if path)
        raise SettingsError(f"TLS files for {endpoint.display_url}: {_tls_problem(exc)} ({files})") from None


@functools.cache
def _tls_files(ca_file: Path | None, cert_file: Path | None, key_file: Path | None,
               verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    return context


def _tls_problem(exc: BaseException) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError):
        return f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
    return f"not a usable PEM certificate or key ({getattr(exc, 'reason', None) or exc})"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# The client


class Gateway:
    """One gateway's Admin API over one keep-alive connection pool, for as long as the agent runs.

    Thread-safe: the pool is, and the deadline is per thread."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.url = endpoint.display_url
        self._base = endpoint.url.rstrip("/")
        self._headers = [(b"Accept", b"application/json"), (b"User-Agent", b"gitsync")]
        if endpoint.admin_key is not None:
            self._headers.append((b"X-API-KEY", endpoint.admin_key.reveal().encode()))
        self._http = HttpClient(tls_context(endpoint) if uses_tls(endpoint) else None, endpoint.timeout)
        self.has_head: bool | None = None  # learnt on first use: False on 3.13
        self.has_validate: bool | None = None  # False before 3.15
        self.server: str | None = None  # the Server header, e.g. APISIX/3.18.0
        self._last_head: tuple[float, ConfigHead] | None = None  # (monotonic time, answer): `recent_head`
        self._puts = 0  # PUTs started: a HEAD answered across one is not remembered

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- transport ------------------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, body: bytes | None = None,
                 headers: Iterable[tuple[str, str]] = (), limit: int = SMALL_ANSWER,
                 admin: bool = True) -> Answer:
        """One request, ended by the endpoint's deadline; the whole answer, at most `limit` bytes."""
        what = f"{method} {url.removeprefix(self._base)}"
        sent = [*(self._headers if admin else self._headers[:2]),
                *((k.encode(), v.encode()) for k, v in headers)]
        try:
            answer = self._http.request(method, url, headers=sent, body=body, limit=limit)
        except HttpError as exc:
            raise (GatewayProtocolError if exc.too_large else GatewayUnavailable)(f"{what}: {exc}") from None
        if admin:
            self.server = answer.headers.get("server", self.server)
        logger.debug("gateway {} {} → {}", self.url, what, answer.status)
        return answer

    def _send(self, method: str, path: str, *, body: bytes | None = None,
              headers: Iterable[tuple[str, str]] = (), limit: int = SMALL_ANSWER) -> Answer:
        """An Admin API request; 5xx and 401/403 raise, every other answer is the caller's."""
        answer = self._request(method, self._base + path, body=body, headers=headers, limit=limit)
        return self._checked(method, path, answer)

    @staticmethod
    def _checked(method: str, path: str, answer: Answer) -> Answer:
        if answer.status >= 500:
            raise GatewayUnavailable(f"{method} {path} answered {answer.status}: {_snippet(answer)}")
        if answer.status in (401, 403):
            raise GatewayAuthError(f"{method} {path} refused ({answer.status}): {_snippet(answer)}; check "
                                   "the admin key (admin_key_file) and the gateway's allow_admin list")
        return answer

    @staticmethod
    def _unexpected(method: str, path: str, answer: Answer) -> GatewayProtocolError:
        return GatewayProtocolError(f"{method} {path} answered {answer.status}: {_snippet(answer)}")

    # -- endpoints ------------------------------------------------------------------------------------

    def get_config(self) -> LiveConfig:
        """``GET /apisix/admin/configs``: every version key, the lists, and the digest."""
        answer = self._send("GET", CONFIGS_PATH, limit=self.endpoint.max_answer)
        if answer.status != 200:
            raise self._unexpected("GET", CONFIGS_PATH, answer)
        try:
            body = answer.json()
        except ValueError:
            raise GatewayProtocolError(f"GET {CONFIGS_PATH} did not answer JSON") from None
        if not isinstance(body, dict):
            raise GatewayProtocolError(f"GET {CONFIGS_PATH} answered a {type(body).__name__}, not an object")
        digest = answer.headers.get("x-digest") or body.get("X-Digest")
        last_modified = _int_or_none(answer.headers.get("x-last-modified") or body.get("X-Last-Modified"))
        body = {k: v for k, v in body.items() if k not in ("X-Digest", "X-Last-Modified")}
        return LiveConfig(body, digest, last_modified, len(answer.body))

    def head_config(self) -> ConfigHead | None:
        """``HEAD /apisix/admin/configs`` (3.14+): digest and last-modified; None where not routed."""
        if self.has_head is False:
            return None
        puts, asked, self._last_head = self._puts, time.monotonic(), None
        answer = self._send("HEAD", CONFIGS_PATH)
        if answer.status == 404:
            self.has_head = False
            return None
        if answer.status != 200:
            raise self._unexpected("HEAD", CONFIGS_PATH, answer)
        self.has_head = True
        head = ConfigHead(answer.headers.get("x-digest"), _int_or_none(answer.headers.get("x-last-modified")))
        if puts == self._puts:
            self._last_head = (asked, head)
        return head

    def recent_head(self, max_age: float) -> ConfigHead | None:
        """The last HEAD's answer if it was asked for within `max_age` seconds, and no PUT started and
        no HEAD failed since (the drift watch's HEADs keep it fresh); None otherwise."""
        last = self._last_head
        if last is None or time.monotonic() - last[0] > max_age:
            return None
        return last[1]

    @property
    def version(self) -> tuple[int, int] | None:
        """The gateway's APISIX version, from the Server header of its last answer (``APISIX/3.19.0``)."""
        match = _SERVER.match(self.server or "")
        return (int(match["major"]), int(match["minor"])) if match else None

    def wait_ms(self) -> int | None:
        """How long a PUT may ask the gateway to wait for its workers (3.19+: ``?wait=<ms>``, at most
        60 s), leaving a second of the request's deadline for the answer; None where not supported."""
        version = self.version
        if version is None or version < WAIT_SINCE:
            return None
        return max(0, min(MAX_WAIT_MS, int((self.endpoint.timeout - 1.0) * 1000)))

    def put_config(self, body: bytes, digest: str) -> PutResult:
        """``PUT /apisix/admin/configs`` with the body as bytes (and ``?wait`` on 3.19+); 400 raises
        `GatewayRejected`."""
        self._puts += 1
        self._last_head = None
        wait = self.wait_ms()
        path = CONFIGS_PATH if not wait else f"{CONFIGS_PATH}?wait={wait}"
        answer = self._request("PUT", self._base + path, body=body,
                               headers=[("Content-Type", "application/json"), ("X-Digest", digest)])
        if answer.status == 500 and _OUT_OF_SHARED_DICT in answer.body:
            message = too_big(len(body), _snippet(answer))
            raise GatewayRejected(message, (ItemError(message, None, None, None),))
        answer = self._checked("PUT", path, answer)
        if answer.status in (200, 201, 202, 204):
            return PutResult(answer.status, answer.headers.get("x-digest"), waited=bool(wait))
        if answer.status == 400:
            raise self._rejected(answer)
        raise self._unexpected("PUT", CONFIGS_PATH, answer)

    def validate(self, body: bytes) -> ValidateResult:
        """``POST /apisix/admin/configs/validate`` (3.15+): per-item errors without storing anything."""
        if self.has_validate is False:
            return ValidateResult(supported=False)
        answer = self._send("POST", VALIDATE_PATH, body=body, headers=[("Content-Type", "application/json")])
        if answer.status == 404:
            self.has_validate = False
            return ValidateResult(supported=False)
        self.has_validate = True
        if answer.status == 200:
            return ValidateResult(supported=True)
        if answer.status == 400:
            rejected = self._rejected(answer)
            return ValidateResult(True, rejected.items, "" if rejected.items else str(rejected))
        raise self._unexpected("POST", VALIDATE_PATH, answer)

    def ready(self) -> ReadyResult | None:
        """``GET /status/ready`` on the status API, when one is configured for this gateway."""
        if not self.endpoint.status_url:
            return None
        url = self.endpoint.status_url.rstrip("/")
        if not url.endswith(READY_PATH):
            url += READY_PATH
        try:
            answer = self._request("GET", url, admin=False)
        except GatewayError as exc:  # the status API is not the Admin API: it answers or it does not
            return ReadyResult(False, f"{display_url(url)}: {exc}")
        # 503 "worker id: N has not received configuration" until every worker serves the config
        return ReadyResult(answer.status == 200, _snippet(answer))

    # -- errors ---------------------------------------------------------------------------------------

    @staticmethod
    def _rejected(answer: Answer) -> GatewayRejected:
        try:
            data = answer.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return GatewayRejected(f"the gateway refused the config: {_snippet(answer)}")
        message = str(data.get("error_msg") or data)
        items = []
        for entry in data.get("errors") or ():
            if not isinstance(entry, dict):
                continue
            index = entry.get("index")
            resource_id = entry.get("resource_id")
            items.append(parse_item_error(str(entry.get("error", "")), entry.get("resource_type") or None,
                                          index if isinstance(index, int) else None,
                                          str(resource_id) if resource_id not in (None, "") else None))
        stale = parse_stale(message)
        if not items and stale is None:
            item = parse_item_error(message)
            if item.kind is not None:
                items.append(item)
        return GatewayRejected(message, tuple(items), stale)


def _snippet(answer: Answer, limit: int = 300) -> str:
    """A short, safe rendering of an answer's body for error text."""
    text = answer.text.strip()
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "error_msg" in data:
            text = str(data["error_msg"]) + (f" ({data['description']})" if data.get("description") else "")
    except ValueError:
        if text.lstrip().startswith("<"):
            text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).strip()
    return clip(text, limit) or "(empty body)"
