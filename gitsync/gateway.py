"""A thin httpx client for one gateway's ``/apisix/admin/configs`` (apisix-standalone.md §2, §3, §8).

It speaks HTTP and turns answers into typed results; what to send is reconcile's job and
when to retry is push's. Every failure is a `GatewayError` subclass whose text never holds
the admin key. Older gateways are handled here: 3.13 has no HEAD and no digest headers,
3.13–3.14 have no validate endpoint (404), 3.13–3.16 prefix item errors with
``invalid <kind> at index N, err: ``.
"""

from __future__ import annotations

import functools
import json
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from gitsync.log import logger, redact, register_secret
from gitsync.settings import Secret, Settings

CONFIGS_PATH = "/apisix/admin/configs"
VALIDATE_PATH = CONFIGS_PATH + "/validate"
READY_PATH = "/status/ready"
#: The validate endpoint refuses larger bodies (3.17+), so gitsync does not send them there.
VALIDATE_LIMIT = 1536 * 1024

_STALE = re.compile(
    r"(?P<key>[A-Za-z0-9_]+)_conf_version must be greater than or equal to \((?P<live>[^)]*)\)")
_ITEM_PREFIX = re.compile(r"^invalid (?P<kind>[a-z_]+) at index (?P<index>\d+), err: ")
_DUPLICATE = re.compile(r"^found duplicate (?:id|username|credential id) (?P<id>.+) in (?P<kind>[a-z_]+)$")


# ---------------------------------------------------------------------------------------------------------
# Errors


class GatewayError(Exception):
    """Something went wrong talking to a gateway; the text is safe to show (no key, no secret)."""

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class GatewayUnavailable(GatewayError):
    """Connection refused or reset, a timeout, or a 5xx: worth another try later."""

    retryable = True


class GatewayAuthError(GatewayError):
    """401 or 403: the admin key is wrong or missing, or this host is not allowed."""


class GatewayProtocolError(GatewayError):
    """An answer this client does not understand (an unexpected status or body)."""


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
    """A PUT the gateway took: 202 (applied) or 204 (that digest was already live)."""

    status: int
    digest: str | None

    @property
    def already_live(self) -> bool:
        return self.status == 204


@dataclass(frozen=True)
class ValidateResult:
    """``POST /configs/validate``: `supported` is False when the gateway has no such endpoint."""

    supported: bool
    items: tuple[ItemError, ...] = ()
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message and not self.items


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
    timeout: float = 10.0
    ca_file: Path | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    tls_verify: bool = True

    @property
    def display_url(self) -> str:
        return display_url(self.url)


def display_url(url: str) -> str:
    """The URL without user name or password, for logs, results and status files (never raises)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url.rstrip("/")
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])).rstrip("/")


def endpoints_from_settings(settings: Settings) -> list[Endpoint]:
    """One `Endpoint` per configured gateway; `status_urls` pair with gateways by position."""
    out = []
    for i, url in enumerate(settings.gateways):
        password = urlsplit(url).password
        if password:
            register_secret(password)
        out.append(Endpoint(
            url=url,
            admin_key=settings.admin_key,
            status_url=settings.status_urls[i] if i < len(settings.status_urls) else None,
            timeout=settings.gateway_timeout,
            ca_file=settings.ca_file,
            client_cert_file=settings.client_cert_file,
            client_key_file=settings.client_key_file,
            tls_verify=settings.tls_verify,
        ))
    return out


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """httpx's default context (certifi, or SSL_CERT_FILE), built once: building it loads the CA
    bundle (~18 ms), which every sync would otherwise pay again for each gateway client."""
    return httpx.create_ssl_context()


def _tls(endpoint: Endpoint) -> ssl.SSLContext:
    if endpoint.tls_verify and not (endpoint.ca_file or endpoint.client_cert_file):
        return _default_tls()
    context = ssl.create_default_context(cafile=str(endpoint.ca_file) if endpoint.ca_file else None)
    if not endpoint.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if endpoint.client_cert_file:
        context.load_cert_chain(str(endpoint.client_cert_file),
                                str(endpoint.client_key_file) if endpoint.client_key_file else None)
    return context


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------
# The client


class Gateway:
    """One gateway's Admin API over one keep-alive connection pool."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.url = endpoint.display_url
        headers = {"Accept": "application/json", "User-Agent": "gitsync"}
        if endpoint.admin_key is not None:
            headers["X-API-KEY"] = endpoint.admin_key.reveal()
        self._client = httpx.Client(base_url=endpoint.url.rstrip("/"), headers=headers,
                                    timeout=endpoint.timeout, verify=_tls(endpoint), follow_redirects=False)
        self._status_client: httpx.Client | None = None
        self.has_head: bool | None = None  # learnt on first use: False on 3.13
        self.has_validate: bool | None = None  # False before 3.15
        self.server: str | None = None  # the Server header, e.g. APISIX/3.18.0

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        if self._status_client is not None:
            self._status_client.close()

    # -- transport ------------------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, client: httpx.Client | None = None, **kwargs: Any,
              ) -> httpx.Response:
        client = client or self._client
        try:
            response = client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise GatewayUnavailable(f"{self.url}: {method} {path} timed out after "
                                     f"{self.endpoint.timeout:g}s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise GatewayUnavailable(f"{self.url}: {method} {path} failed: {exc or type(exc).__name__}") \
                from None
        self.server = response.headers.get("server", self.server)
        logger.debug("gateway {} {} {} → {}", self.url, method, path, response.status_code)
        if response.status_code >= 500:
            raise GatewayUnavailable(f"{self.url}: {method} {path} answered {response.status_code}: "
                                     f"{_snippet(response)}")
        if response.status_code in (401, 403):
            raise GatewayAuthError(f"{self.url}: {method} {path} refused ({response.status_code}): "
                                   f"{_snippet(response)}; check the admin key (admin_key_file) and the "
                                   "gateway's allow_admin list")
        return response

    def _unexpected(self, method: str, path: str, response: httpx.Response) -> GatewayProtocolError:
        return GatewayProtocolError(f"{self.url}: {method} {path} answered {response.status_code}: "
                                    f"{_snippet(response)}")

    # -- endpoints ------------------------------------------------------------------------------------

    def get_config(self) -> LiveConfig:
        """``GET /apisix/admin/configs``: every version key, the lists, and the digest."""
        response = self._send("GET", CONFIGS_PATH)
        if response.status_code != 200:
            raise self._unexpected("GET", CONFIGS_PATH, response)
        try:
            body = response.json()
        except ValueError:
            raise GatewayProtocolError(f"{self.url}: GET {CONFIGS_PATH} did not answer JSON") from None
        if not isinstance(body, dict):
            raise GatewayProtocolError(f"{self.url}: GET {CONFIGS_PATH} answered a {type(body).__name__}, "
                                       "not an object")
        digest = response.headers.get("x-digest") or body.get("X-Digest")
        last_modified = _int_or_none(response.headers.get("x-last-modified") or body.get("X-Last-Modified"))
        body = {k: v for k, v in body.items() if k not in ("X-Digest", "X-Last-Modified")}
        return LiveConfig(body, digest, last_modified, len(response.content))

    def head_config(self) -> ConfigHead | None:
        """``HEAD /apisix/admin/configs`` (3.14+): digest and last-modified; None where not routed."""
        if self.has_head is False:
            return None
        response = self._send("HEAD", CONFIGS_PATH)
        if response.status_code == 404:
            self.has_head = False
            return None
        if response.status_code != 200:
            raise self._unexpected("HEAD", CONFIGS_PATH, response)
        self.has_head = True
        return ConfigHead(response.headers.get("x-digest"),
                          _int_or_none(response.headers.get("x-last-modified")))

    def put_config(self, body: bytes, digest: str) -> PutResult:
        """``PUT /apisix/admin/configs`` with the body as bytes; 400 raises `GatewayRejected`."""
        response = self._send("PUT", CONFIGS_PATH, content=body,
                              headers={"Content-Type": "application/json", "X-Digest": digest})
        if response.status_code in (200, 201, 202, 204):
            return PutResult(response.status_code, response.headers.get("x-digest"))
        if response.status_code == 400:
            raise self._rejected(response)
        raise self._unexpected("PUT", CONFIGS_PATH, response)

    def validate(self, body: bytes) -> ValidateResult:
        """``POST /apisix/admin/configs/validate`` (3.15+): per-item errors without storing anything."""
        if self.has_validate is False:
            return ValidateResult(supported=False)
        response = self._send("POST", VALIDATE_PATH, content=body,
                              headers={"Content-Type": "application/json"})
        if response.status_code == 404:
            self.has_validate = False
            return ValidateResult(supported=False)
        self.has_validate = True
        if response.status_code == 200:
            return ValidateResult(supported=True)
        if response.status_code == 400:
            rejected = self._rejected(response)
            return ValidateResult(True, rejected.items, "" if rejected.items else str(rejected))
        raise self._unexpected("POST", VALIDATE_PATH, response)

    def ready(self) -> ReadyResult | None:
        """``GET /status/ready`` on the status API, when one is configured for this gateway."""
        if not self.endpoint.status_url:
            return None
        if self._status_client is None:
            self._status_client = httpx.Client(timeout=self.endpoint.timeout, verify=_tls(self.endpoint))
        url = self.endpoint.status_url.rstrip("/")
        if not url.endswith(READY_PATH):
            url += READY_PATH
        try:
            response = self._status_client.get(url)
        except httpx.HTTPError as exc:
            return ReadyResult(False, redact(f"{display_url(url)}: {exc or type(exc).__name__}"))
        # 503 "worker id: N has not received configuration" until every worker serves the config
        return ReadyResult(response.status_code == 200, _snippet(response))

    # -- errors ---------------------------------------------------------------------------------------

    def _rejected(self, response: httpx.Response) -> GatewayRejected:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            return GatewayRejected(f"{self.url}: the gateway refused the config: {_snippet(response)}")
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


def _snippet(response: httpx.Response, limit: int = 300) -> str:
    """A short, safe rendering of a response body for error text."""
    text = response.text.strip()
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "error_msg" in data:
            text = str(data["error_msg"]) + (f" ({data['description']})" if data.get("description") else "")
    except ValueError:
        if text.lstrip().startswith("<"):
            text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)).strip()
    text = redact(text)  # before cutting: a secret across the limit would leave its start behind
    return text[:limit] + ("…" if len(text) > limit else "") or "(empty body)"
