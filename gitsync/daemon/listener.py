"""The agent's one HTTP listener: health, readiness, Prometheus metrics and git-host webhooks.

Webhooks only ever *trigger* a sync: the body is not trusted for anything but its signature
(the agent fetches the commit itself). A request without a valid signature or token gets 401
and triggers nothing. Signatures are compared in constant time, as bytes.

The listener may face the open network (the image binds 0.0.0.0), so no client can hold it:
a request's line and headers must arrive within `HEADER_TIMEOUT` of the connection, its body
within `BODY_TIMEOUT` after them (deadlines, not silences: a byte now and then does not
extend them), and at most `MAX_CONNECTIONS` are served at once, each on a thread of its own;
one more is answered 503 at once and closed, by the accepting thread, so the thread count
never grows past the cap. Every request error is a 4xx answer (or, for a client gone, a closed
socket) and one log record, through the redacting sink: never a traceback on stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gitsync.agent.metrics import Metrics, Readiness
from gitsync.agent.outcomes import Trigger
from gitsync.log import logger
from gitsync.problems import one_line
from gitsync.settings import Secret

MAX_WEBHOOK_BODY = 1024 * 1024
PROVIDERS = ("github", "gitlab", "gitea", "generic")
HEADER_TIMEOUT = 10.0  # seconds from the connection to the end of the headers
BODY_TIMEOUT = 10.0  # seconds from the headers to the end of the body (1 MiB at most)
MAX_CONNECTIONS = 32  # served at once; probes, scrapes and webhooks need a handful
REFUSAL_LOG_INTERVAL = 10.0  # seconds between two records about refused connections
_DIGITS = re.compile(r"[0-9]+")

#: The web view's hook (gitsync.web): given the method, the request target, the headers, the body
#: stream and the client's address, its answer as (status, body, content type, extra headers), or None
#: for a path it does not serve.
WebAnswer = Callable[[str, str, Mapping[str, str], BinaryIO, str],
                     "tuple[int, bytes, str, Sequence[tuple[str, str]]] | None"]


def _same(given: str, expected: bytes) -> bool:
    """Constant-time equality of a header value and the expected bytes. As bytes: comparing ``str``
    raises TypeError on a non-ASCII character, which any client may send."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected)


def verify_webhook(provider: str, secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Check a webhook's signature or token as its provider sends it (headers lower-cased)."""
    key = secret.encode()
    expected_hex = hmac.new(key, body, hashlib.sha256).hexdigest().encode()

    def signature_ok(value: str | None, prefix: str = "") -> bool:
        if not value or not value.startswith(prefix):
            return False
        return _same(value[len(prefix):].strip().lower(), expected_hex)

    def token_ok(value: str | None) -> bool:
        return bool(value) and _same(value, key)  # type: ignore[arg-type]

    if provider == "github":
        return signature_ok(headers.get("x-hub-signature-256"), "sha256=")
    if provider == "gitea":
        return signature_ok(headers.get("x-gitea-signature")) or signature_ok(
            headers.get("x-hub-signature-256"), "sha256=")
    if provider == "gitlab":
        return token_ok(headers.get("x-gitlab-token"))
    if provider == "generic":
        auth = headers.get("authorization", "")
        return signature_ok(headers.get("x-gitsync-signature-256"), "sha256=") or (
            auth.startswith("Bearer ") and token_ok(auth[len("Bearer "):]))
    return False


class StatusServer:
    """ThreadingHTTPServer serving /healthz, /readyz, /metrics and /hooks/<provider>."""

    def __init__(
        self,
        listen: str,
        metrics: Metrics,
        readiness: Callable[[], Readiness],
        trigger: Callable[[str], None],
        webhook_secret: Secret | None,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        web: WebAnswer | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.web = web
        self.metrics = metrics
        self.readiness = readiness
        self.trigger = trigger
        self.webhook_secret = webhook_secret
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = _Server((host.strip("[]") or "127.0.0.1", int(port)), handler, max_connections, metrics)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> StatusServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), name="status-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Server(ThreadingHTTPServer):
    """At most `max_connections` requests at once, each on its thread; the next is refused with 503
    by the accepting thread itself. Errors are log records, not tracebacks on stderr."""

    daemon_threads = True
    request_queue_size = 64  # a burst waits in the kernel for the accept loop, which never blocks

    def __init__(self, address: tuple[str, int], handler: type[_Handler], max_connections: int,
                 metrics: Metrics) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max = max_connections
        self._metrics = metrics
        self._refused = 0
        self._refusal_logged = -REFUSAL_LOG_INTERVAL
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._turn_away(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _turn_away(self, request: socket.socket, client_address: Any) -> None:
        """503 and close, never waiting: no thread, and nothing a slow client can hold."""
        self._metrics.refused_connections.inc()
        body = json.dumps({"error": "too many connections; retry later"}).encode() + b"\n"
        answer = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                  b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        request.setblocking(False)
        with contextlib.suppress(OSError):  # the answer fits a new socket's send buffer, or is dropped
            request.send(answer)
        with contextlib.suppress(OSError):  # what already came: closing on unread data would reset
            request.recv(65536)
        self.shutdown_request(request)
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= REFUSAL_LOG_INTERVAL:
            logger.warning("listener: {} connection(s) refused with 503 (the last from {}): {} are served at "
                           "once at most", self._refused, client_address[0], self._max)
            self._refused, self._refusal_logged = 0, now

    def handle_error(self, request: Any, client_address: Any) -> None:
        """What escaped a handler: one record (a client gone is not an error of the agent)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            logger.info("listener: {} went away: {}", client_address[0], type(error).__name__)
        else:
            logger.opt(exception=True).error("listener: request from {} failed: {!r}", client_address[0],
                                             error)


class _DeadlineReader(io.RawIOBase):
    """The reading end of a client's socket that gives up at a deadline, not after a silence: a
    client sending a byte now and then holds its thread no longer than the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the client did not send its request in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _LineReader(io.BufferedReader):
    """Remembers the last line read: a header section must end with an empty line, not the end of
    the stream (a client gone mid-request, whose request is not to be acted on)."""

    last_line = b""

    def readline(self, size: int | None = -1) -> bytes:
        self.last_line = super().readline(-1 if size is None else size)
        return self.last_line


class _Handler(BaseHTTPRequestHandler):
    owner: StatusServer
    server_version = "gitsync"
    sys_version = ""
    default_request_version = "HTTP/1.0"  # a malformed request line still gets a status line (not 0.9's)

    def setup(self) -> None:
        super().setup()
        self.reader = _DeadlineReader(self.connection, time.monotonic() + self.owner.header_timeout)
        self.rfile = self.lines = _LineReader(self.reader)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.request_version != "HTTP/0.9" and self.lines.last_line not in (b"\r\n", b"\n"):
            logger.info("listener: {} went away before the end of its request headers",
                        self.client_address[0])
            self.close_connection = True
            return False
        return True

    def log_message(self, format: str, *args: object) -> None:
        logger.trace("http {} {}", self.address_string(), one_line(format % args))

    def log_error(self, format: str, *args: object) -> None:
        """A request error (bad request line, headers too long, a timeout): one warning."""
        logger.warning("listener: {} {}", self.address_string(), one_line(format % args))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        if code == HTTPStatus.NOT_IMPLEMENTED:  # a method no endpoint has: the client's error
            code = HTTPStatus.METHOD_NOT_ALLOWED
        super().send_error(code, message, explain)

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: Sequence[tuple[str, str]] = ()) -> None:
        self.connection.settimeout(self.owner.body_timeout)  # a client that never reads its answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: dict) -> None:
        self._send(status, json.dumps(data).encode() + b"\n")

    def _refuse(self, status: int, provider: str, result: str, reason: str) -> None:
        """A webhook request refused: counted, logged once, answered, and the connection closed."""
        self.owner.metrics.webhooks.labels(provider, result).inc()
        logger.warning("webhook {} from {}: {}; ignored", provider, self.client_address[0], reason)
        self.close_connection = True
        self._json(status, {"error": reason})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/readyz":
            state = self.owner.readiness()
            self._json(200 if state.ready else 503, {"ready": state.ready, "reason": state.reason})
        elif path == "/metrics":
            self._send(200, self.owner.metrics.render(), CONTENT_TYPE_LATEST)
        elif not self._web():
            self._json(404, {"error": "not found"})

    def _web(self) -> bool:
        """Let the web view answer, if it is on and serves this path."""
        answer = self.owner.web(self.command, self.path, self.headers, self.rfile,
                                self.client_address[0]) if self.owner.web else None
        if answer is not None:
            self._send(*answer)
        return answer is not None

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        provider = path[len("/hooks/"):] if path.startswith("/hooks/") else ""
        if provider not in PROVIDERS:
            if not self._web():
                self._json(404, {"error": "not found"})
            return
        secret = self.owner.webhook_secret
        if secret is None:
            self.owner.metrics.webhooks.labels(provider, "disabled").inc()
            self._json(403, {"error": "webhooks are off: no webhook secret is configured"})
            return
        lengths = self.headers.get_all("Content-Length") or ["0"]
        if len(lengths) > 1 or not _DIGITS.fullmatch(lengths[0].strip()) \
                or "Transfer-Encoding" in self.headers:
            self._refuse(400, provider, "bad_request", "Content-Length must be one whole number of bytes")
            return
        length = int(lengths[0])
        if length > MAX_WEBHOOK_BODY:
            self._refuse(413, provider, "too_large", f"body must be at most {MAX_WEBHOOK_BODY} bytes")
            return
        self.reader.deadline = time.monotonic() + self.owner.body_timeout
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self._refuse(408, provider, "timeout",
                         f"the body did not arrive within {self.owner.body_timeout:g}s")
            return
        if len(body) < length:
            self.owner.metrics.webhooks.labels(provider, "bad_request").inc()
            logger.warning("webhook {} from {}: the body stopped after {} of {} bytes; ignored", provider,
                           self.client_address[0], len(body), length)
            self.close_connection = True
            return  # the client closed its end: nobody to answer
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not verify_webhook(provider, secret.reveal(), headers, body):
            self._refuse(401, provider, "unauthorized", "bad or missing signature")
            return
        self.owner.metrics.webhooks.labels(provider, "accepted").inc()
        self.owner.trigger(Trigger.WEBHOOK)
        self._json(202, {"status": "sync triggered"})
