"""HTTP with one deadline per request and a size limit per answer: for gateways and health checks.

httpx bounds each socket read, not a request: a server that drips its answer (a byte every two
seconds) holds the caller for as long as it likes. This client runs httpcore (httpx's own
transport) over a network backend whose every connect, read and write ends by the request's
deadline, and reads an answer only up to its limit, so a misbehaving server costs a bounded time
and bounded memory.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore

_deadline = threading.local()


class HttpError(Exception):
    """No complete answer: refused, reset, past the deadline, or larger than the limit."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


@dataclass(frozen=True)
class Answer:
    """An answer read whole (within its size limit)."""

    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


def _remaining(timeout: float | None) -> float:
    """The time a socket operation may take: what is left of this thread's request, at most `timeout`."""
    until: float | None = getattr(_deadline, "until", None)
    if until is None:
        return timeout if timeout is not None else 30.0
    left = until - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _remaining(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _remaining(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _remaining(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend, where every connect, read and write ends by the request's deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _remaining(timeout), local_address,
                                                         socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, _remaining(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def request_url(url: str) -> httpcore.URL:
    """`url` as httpcore sends it, the path kept exactly as written: httpcore's own parsing
    (``urllib.parse.urlparse``) drops ``;parameters`` from the last segment. Raises `HttpError` for
    a URL that cannot be sent as written (characters outside ASCII: they must be percent-encoded)."""
    try:
        url.encode("ascii")
        parts = urlsplit(url)
        port = parts.port
    except (UnicodeEncodeError, ValueError) as exc:
        raise HttpError(f"cannot be sent: {url!r} is not a URL that can be sent as written ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError(f"cannot be sent: {url!r} is not an http:// or https:// URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return httpcore.URL(scheme=parts.scheme.encode(), host=parts.hostname.encode(), port=port,
                        target=target.encode())


class HttpClient:
    """One keep-alive connection pool; thread-safe (the pool is, and the deadline is per thread)."""

    def __init__(self, tls: ssl.SSLContext | None, timeout: float, max_connections: int = 4) -> None:
        self.timeout = timeout
        self._pool = httpcore.ConnectionPool(ssl_context=tls, max_connections=max_connections,
                                             keepalive_expiry=60.0, network_backend=_DeadlineBackend())

    @property
    def connections(self) -> int:
        """Connections open in the pool (kept alive between requests)."""
        return len(self._pool.connections)

    def request(self, method: str, url: str, *, headers: Iterable[tuple[bytes, bytes]] = (),
                body: bytes | None = None, limit: int = 1 << 20, timeout: float | None = None) -> Answer:
        """One request, ended by `timeout` (the client's by default) from connect to the answer's last
        byte; the whole answer, at most `limit` bytes; `HttpError` when there is none."""
        timeout = self.timeout if timeout is None else timeout
        target = request_url(url)  # before the deadline: a URL that cannot be sent is no network failure
        _deadline.until = time.monotonic() + timeout
        try:
            with self._pool.stream(method, target, headers=list(headers), content=body) as response:
                chunks, size = [], 0
                for chunk in response.iter_stream():
                    size += len(chunk)
                    if size > limit:
                        raise HttpError(f"the answer is larger than {limit} bytes", too_large=True)
                    chunks.append(chunk)
                return Answer(response.status, {k.decode("latin-1").lower(): v.decode("latin-1")
                                                for k, v in response.headers}, b"".join(chunks))
        except httpcore.TimeoutException:
            raise HttpError(f"timed out: no complete answer within {timeout:g}s") from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            raise HttpError(f"failed: {exc or type(exc).__name__}") from None
        except ssl.SSLError as exc:
            raise HttpError(f"failed: TLS: {exc.reason or exc}") from None
        finally:
            _deadline.until = None

    def close(self) -> None:
        self._pool.close()


__all__ = ["Answer", "HttpClient", "HttpError"]
