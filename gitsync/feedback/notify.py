"""Notifications: a signed JSON POST per event to each of `notify_urls`.

The body is one JSON object (`gitsync.feedback.events.Event.to_json`) whose ``text`` field is a line
for people, so that a chat's incoming-webhook URL (Slack, Mattermost, Rocket.Chat, Discord's
``/slack`` endpoint) takes it as it is. It is signed as gitsync's own webhook receiver checks a
generic webhook (`gitsync.daemon.listener.verify_webhook`): ``X-Gitsync-Signature-256: sha256=`` and
the hex HMAC-SHA256 of the body under `notify_secret`; ``X-Gitsync-Event`` names the event and
``X-Gitsync-Delivery`` is its id, the same for a retry of the same event.

A notification URL may carry a credential in its path (a Slack webhook's is one), so it is
registered with the log redactor and logs name only its scheme, host and port.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ssl
from urllib.parse import urlsplit

from gitsync import __version__
from gitsync.feedback.dispatch import DeliveryError, RetryableDelivery
from gitsync.httpclient import HttpClient, HttpError
from gitsync.log import clip, register_secret
from gitsync.settings import Secret

SIGNATURE_HEADER = "X-Gitsync-Signature-256"
EVENT_HEADER = "X-Gitsync-Event"
DELIVERY_HEADER = "X-Gitsync-Delivery"
MAX_ANSWER = 64 * 1024  # what a receiver says back is read only to say why it refused


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: ``sha256=<hex HMAC-SHA256 of the body>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def origin(url: str) -> str:
    """Scheme, host and port of a URL: how logs and metrics name a receiver (its path may be a key)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


@functools.cache
def _default_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


class Notifier:
    """One notification URL: `send` posts a body, signed when a secret is set."""

    def __init__(self, url: str, secret: Secret | None, timeout: float) -> None:
        self.url = url
        self.origin = origin(url)
        self.secret = secret
        register_secret(url)
        tls = _default_tls() if urlsplit(url).scheme == "https" else None
        self._http = HttpClient(tls, timeout, max_connections=1)

    def send(self, body: bytes, event: str, delivery: str) -> None:
        """POST `body`; a 2xx is delivered. A refusal (4xx but 408 and 429) is a `DeliveryError`; no
        answer, a 408, a 429 or a 5xx a `RetryableDelivery`."""
        headers = [(b"Content-Type", b"application/json"), (b"User-Agent", f"gitsync/{__version__}".encode()),
                   (EVENT_HEADER.encode(), event.encode()), (DELIVERY_HEADER.encode(), delivery.encode())]
        if self.secret is not None:
            headers.append((SIGNATURE_HEADER.encode(), signature(self.secret.reveal(), body).encode()))
        what = f"notification to {self.origin}"
        try:
            answer = self._http.request("POST", self.url, headers=headers, body=body, limit=MAX_ANSWER)
        except HttpError as exc:
            if exc.too_large:  # the receiver took it and then said too much
                return
            raise RetryableDelivery(f"{what}: {exc}") from None
        if 200 <= answer.status < 300:
            return
        why = f"{what}: {answer.status} {clip(answer.text.strip(), 200)}"
        if answer.status in (408, 429) or answer.status >= 500:
            raise RetryableDelivery(why)
        raise DeliveryError(why)

    def close(self) -> None:
        self._http.close()


__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "Notifier", "origin", "signature"]
