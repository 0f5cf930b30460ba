"""The agent's one HTTP listener: health, readiness, Prometheus metrics and git-host webhooks.

Webhooks only ever *trigger* a sync: the body is not trusted for anything but its signature
(the agent fetches the commit itself). A request without a valid signature or token gets 401
and triggers nothing. Signatures are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gitsync.log import logger
from gitsync.settings import Secret

MAX_WEBHOOK_BODY = 1024 * 1024
PROVIDERS = ("github", "gitlab", "gitea", "generic")


class Metrics:
    """Every metric the agent exports, in a registry of its own (no process-global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.syncs = Counter("gitsync_syncs", "Syncs by result.", ["result"], registry=r)
        self.sync_duration = Histogram(
            "gitsync_sync_duration_seconds", "Duration of syncs that reached the gateways.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=r)
        self.sync_phase = Histogram(
            "gitsync_sync_phase_seconds", "Time of each phase of syncs that reached the gateways: check, "
            "fetch, read, render, plan, serialize, push-wait, read-back (waiting for the gateway), and "
            "gitsync (the sync's time less its wait for the gateways).", ["phase"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.last_success = Gauge("gitsync_last_success_timestamp_seconds",
                                  "Unix time of the last successful sync.", registry=r)
        self.applied_commit = Gauge("gitsync_applied_commit_info", "The commit live on every gateway "
                                    "(value 1; the commit is a label).", ["commit"], registry=r)
        self.gateway_version = Gauge("gitsync_gateway_conf_version", "conf_version sent per gateway "
                                     "and kind.", ["gateway", "kind"], registry=r)
        self.gateway_up = Gauge("gitsync_gateway_in_sync", "1 when the gateway holds the last good "
                                "commit.", ["gateway"], registry=r)
        self.drift_heals = Counter("gitsync_drift_heals", "Gateways re-applied after drift.", ["gateway"],
                                   registry=r)
        self.drift_detected = Counter("gitsync_drift_detected", "Drift found by the watch.", ["gateway"],
                                      registry=r)
        self.writeback_failures = Counter("gitsync_writeback_failures", "Failed status or note pushes.",
                                          registry=r)
        self.webhooks = Counter("gitsync_webhook_requests", "Webhook requests by provider and result.",
                                ["provider", "result"], registry=r)
        self.check_failures = Counter("gitsync_check_failures", "Health checks that still failed after their "
                                      "retries, by check.", ["check"], registry=r)
        self.tip_refused = Gauge("gitsync_tip_refused", "1 while the remote's tip is a commit this agent "
                                 "refused (the last good commit stays live).", registry=r)
        self.fetch_failures = Counter("gitsync_fetch_failures", "Failed checks or fetches of the git "
                                      "remote.", registry=r)

    def set_applied_commit(self, sha: str) -> None:
        self.applied_commit.clear()
        self.applied_commit.labels(commit=sha).set(1)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def verify_webhook(provider: str, secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Check a webhook's signature or token as its provider sends it (headers lower-cased)."""
    key = secret.encode()
    expected_hex = hmac.new(key, body, hashlib.sha256).hexdigest()

    def signature_ok(value: str | None, prefix: str = "") -> bool:
        if not value or not value.startswith(prefix):
            return False
        return hmac.compare_digest(value[len(prefix):].strip().lower(), expected_hex)

    def token_ok(value: str | None) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), key)  # type: ignore[union-attr]

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


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str


class StatusServer:
    """ThreadingHTTPServer serving /healthz, /readyz, /metrics and /hooks/<provider>."""

    def __init__(
        self,
        listen: str,
        metrics: Metrics,
        readiness: Callable[[], Readiness],
        trigger: Callable[[str], None],
        webhook_secret: Secret | None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.metrics = metrics
        self.readiness = readiness
        self.trigger = trigger
        self.webhook_secret = webhook_secret
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), handler)
        self.httpd.daemon_threads = True
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


class _Handler(BaseHTTPRequestHandler):
    owner: StatusServer
    server_version = "gitsync"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:
        logger.trace("http {} {}", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: dict) -> None:
        self._send(status, json.dumps(data).encode() + b"\n")

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(200, {"status": "ok"})
        elif path == "/readyz":
            state = self.owner.readiness()
            self._json(200 if state.ready else 503, {"ready": state.ready, "reason": state.reason})
        elif path == "/metrics":
            self._send(200, self.owner.metrics.render(), CONTENT_TYPE_LATEST)
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        provider = path[len("/hooks/"):] if path.startswith("/hooks/") else ""
        if provider not in PROVIDERS:
            self._json(404, {"error": "not found"})
            return
        metrics = self.owner.metrics.webhooks
        secret = self.owner.webhook_secret
        if secret is None:
            metrics.labels(provider, "disabled").inc()
            self._json(403, {"error": "webhooks are off: no webhook secret is configured"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_WEBHOOK_BODY:
            metrics.labels(provider, "too_large").inc()
            self._json(413, {"error": f"body must be at most {MAX_WEBHOOK_BODY} bytes"})
            self.close_connection = True
            return
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not verify_webhook(provider, secret.reveal(), headers, body):
            metrics.labels(provider, "unauthorized").inc()
            logger.warning("webhook {} from {}: bad or missing signature; ignored", provider,
                           self.client_address[0])
            self._json(401, {"error": "bad or missing signature"})
            return
        metrics.labels(provider, "accepted").inc()
        self.owner.trigger(f"webhook:{provider}")
        self._json(202, {"status": "sync triggered"})
