"""The agent's one HTTP listener: health, readiness, Prometheus metrics, git-host webhooks and,
with ``ui = true``, the web view (gitsync.web).

Webhooks only ever *trigger* a sync: the body is not trusted for anything but its signature
(the agent fetches the commit itself). A request without a valid signature or token gets 401
and triggers nothing. Signatures are compared in constant time, as bytes.

The listener may face the open network (the image binds 0.0.0.0), so no client can hold it. It is
an asyncio server (`gitsync.daemon.httpserver`): a connection costs no thread, each address has a
share of the connections and of the event loop's time, each request has deadlines for its headers and
its body, and the work that may block runs in small lanes of threads that answer 503 at once when
full. ``/healthz`` is answered on the event loop itself, and beyond the connection cap from places
kept for it, so neither thousands of stalled connections nor a flood of page views can starve a
container's probe; webhook checks run there too (an HMAC of at most 1 MiB). ``/readyz`` and
``/metrics`` share the probe lane, the web view's pages have a lane of their own: a page that takes
long holds up neither. Every request error is a 4xx answer (or, for a client gone, a closed socket),
counted, and told in the log once in a while per kind (`gitsync.tally`), through the redacting sink:
never a traceback on stderr, never a line per request a stranger sends.

A signed webhook delivery is accepted once: a replay (the same delivery id or body, or one the forge
dated too long ago) is refused with 409 (`gitsync.daemon.deliveries`).
"""

from __future__ import annotations

import hashlib
import hmac
import io
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import BinaryIO

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gitsync.agent.metrics import Metrics, Readiness
from gitsync.agent.outcomes import Trigger
from gitsync.daemon.deliveries import Deliveries
from gitsync.daemon.httpserver import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    MAX_CONNECTIONS,
    BodyProblem,
    HttpServer,
    Lane,
    Request,
    Response,
    Route,
    json_response,
)
from gitsync.settings import Secret
from gitsync.tally import Tally

MAX_WEBHOOK_BODY = 1024 * 1024
PROVIDERS = ("github", "gitlab", "gitea", "generic")
PROBE_WORKERS = 2  # /readyz and /metrics: quick, but they may wait for the agent's lock
PAGE_WORKERS = 2  # the web view's pages at once: what viewers can take of the agent's CPU
MAX_IN_FLIGHT = 16  # requests admitted to a lane at once (running or waiting); beyond: 503
MAX_WEB_BODY = 4096  # the web view's login form

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
    """The listener: /healthz, /readyz, /metrics, /hooks/<provider> and the web view's pages."""

    def __init__(
        self,
        listen: str,
        metrics: Metrics,
        readiness: Callable[[], Readiness],
        trigger: Callable[[Trigger], None],
        webhook_secret: Secret | None,
        *,
        header_timeout: float = HEADER_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_in_flight: int = MAX_IN_FLIGHT,
        web: WebAnswer | None = None,
        web_max_body: int = MAX_WEB_BODY,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.web = web
        self.web_max_body = web_max_body
        self.metrics = metrics
        self.readiness = readiness
        self.trigger = trigger
        self.webhook_secret = webhook_secret
        self.probes = Lane("probe", PROBE_WORKERS, max_in_flight)
        self.pages = Lane("web", PAGE_WORKERS, max_in_flight)
        self.deliveries = Deliveries()
        self.methods = Tally("listener: {} request(s) with a method no endpoint takes answered 405 (the last "
                             "from {}: {})", counted=lambda: metrics.rejected_requests.labels("method").inc())
        self._refusals: dict[tuple[str, str], Tally] = {}  # (provider, result) → its tally
        self.server = HttpServer(host.strip("[]") or "127.0.0.1", int(port), self._route,
                                 header_timeout=header_timeout, body_timeout=body_timeout,
                                 largest_body=MAX_WEBHOOK_BODY, max_connections=max_connections,
                                 probe_paths=frozenset({"/healthz"}),
                                 on_refused=metrics.refused_connections.inc,
                                 on_rejected=lambda reason: metrics.rejected_requests.labels(reason).inc())

    @property
    def host(self) -> str:
        return self.server.address[0]

    @property
    def port(self) -> int:
        return self.server.address[1]

    def start(self) -> StatusServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.probes.close()
        self.pages.close()

    # -- routing (on the event loop: a look at the method and path only) --------------------------------

    def _route(self, request: Request) -> Route:
        path = request.path
        if request.method in ("GET", "HEAD"):
            if path == "/healthz":
                return Route(lambda _: json_response(200, {"status": "ok"}))
            if path == "/readyz":
                return Route(self._readyz, self.probes)
            if path == "/metrics":
                return Route(self._metrics, self.probes)
        elif request.method == "POST":
            provider = path[len("/hooks/"):] if path.startswith("/hooks/") else ""
            if provider in PROVIDERS:
                body = MAX_WEBHOOK_BODY if self.webhook_secret is not None else 0
                return Route(partial(self._webhook, provider), max_body=body)
        else:  # no endpoint has another method
            self.methods.add(request.client, request.method[:20])
            return Route(lambda _: json_response(405, {"error": "method not allowed"},
                                                 [("Allow", "GET, HEAD, POST")]))
        if self.web is not None:
            return Route(self._web, self.pages, max_body=self.web_max_body)
        return Route(_not_found)

    # -- endpoints ----------------------------------------------------------------------------------------

    def _readyz(self, request: Request) -> Response:
        state = self.readiness()
        return json_response(200 if state.ready else 503, {"ready": state.ready, "reason": state.reason})

    def _metrics(self, request: Request) -> Response:
        return Response(200, self.metrics.render(), CONTENT_TYPE_LATEST)

    def _web(self, request: Request) -> Response:
        """The web view's answer, or 404 for a path it does not serve. A body that could not be read
        reaches it as a stream that says why when read: the view answers it as its own error."""
        assert self.web is not None
        answer = self.web(request.method, request.target, request.headers, _body_stream(request),
                          request.client)
        if answer is None:
            return _not_found(request)
        status, body, content_type, headers = answer
        return Response(status, body, content_type, headers, close=request.problem is not None)

    def _refuse(self, status: int, provider: str, result: str, request: Request, reason: str) -> Response:
        """A webhook request refused: counted, told in the log once in a while, answered, and the
        connection closed."""
        self._refused(provider, result, request, reason)
        return json_response(status, {"error": reason}, close=True)

    def _refused(self, provider: str, result: str, request: Request, reason: str) -> None:
        tally = self._refusals.get((provider, result))
        if tally is None:
            tally = self._refusals[(provider, result)] = Tally(
                f"webhook {provider}: {{}} request(s) refused ({result}), the last from {{}}: {{}}",
                counted=self.metrics.webhooks.labels(provider, result).inc)
        tally.add(request.client, reason)

    def _webhook(self, provider: str, request: Request) -> Response | None:
        secret = self.webhook_secret
        if secret is None:
            self.metrics.webhooks.labels(provider, "disabled").inc()
            return json_response(403, {"error": "webhooks are off: no webhook secret is configured"})
        problem = request.problem
        if problem is BodyProblem.NO_LENGTH:
            return self._refuse(400, provider, "bad_request", request,
                                "Content-Length must be one whole number of bytes")
        if problem is BodyProblem.TOO_LARGE:
            return self._refuse(413, provider, "too_large", request,
                                f"body must be at most {MAX_WEBHOOK_BODY} bytes")
        if problem is BodyProblem.TIMEOUT:
            return self._refuse(408, provider, "timeout", request,
                                f"the body did not arrive within {request.body_deadline:g}s")
        if problem is BodyProblem.CUT_SHORT:
            self._refused(provider, "bad_request", request,
                          f"the body stopped after {len(request.body)} of {request.length} bytes")
            return None  # the client closed its end: nobody to answer
        headers = dict(request.headers.items())
        if not verify_webhook(provider, secret.reveal(), headers, request.body):
            return self._refuse(401, provider, "unauthorized", request, "bad or missing signature")
        replay = self.deliveries.replayed(provider, headers, request.body)
        if replay is not None:
            return self._refuse(409, provider, "replayed", request, replay)
        self.metrics.webhooks.labels(provider, "accepted").inc()
        self.trigger(Trigger.WEBHOOK)
        return json_response(202, {"status": "sync triggered"})


def _not_found(request: Request) -> Response:
    return json_response(404, {"error": "not found"})


class _Unread(io.RawIOBase):
    """A body that could not be read: reading it raises what happened."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: object) -> int:
        raise self.error


def _body_stream(request: Request) -> BinaryIO:
    if request.problem is BodyProblem.TIMEOUT:
        return _Unread(TimeoutError("the body did not arrive in time"))  # type: ignore[return-value]
    if request.problem is BodyProblem.CUT_SHORT:
        return _Unread(ConnectionResetError("the client went away"))  # type: ignore[return-value]
    return io.BytesIO(request.body)


__all__ = ["MAX_WEBHOOK_BODY", "PROVIDERS", "Metrics", "Readiness", "StatusServer", "WebAnswer",
           "verify_webhook"]
