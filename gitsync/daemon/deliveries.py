"""Webhook deliveries seen before, or too old: a captured delivery replayed is refused.

A webhook's signature covers its body only, so a delivery captured on the way (a proxy's log, a
forge's delivery history shown to too many people) stays valid forever. The listener checks each
authenticated delivery from a sender that marks its deliveries against what it has accepted lately
(`Deliveries.replayed`, after the signature):

* **the delivery id** (GitHub ``X-GitHub-Delivery``, GitLab ``X-Gitlab-Event-UUID``, Gitea
  ``X-Gitea-Delivery``, gitsync's own notifications ``X-Gitsync-Delivery``), and **the body's digest**
  where the body is signed and the sender makes every body unique (GitHub and Gitea always; gitsync's
  own notifications: a generic delivery with an id): an id is not signed, a replay may change it, but
  not the body. Each is remembered for `WINDOW` seconds (at most `MAX_REMEMBERED` deliveries): seen
  before, the delivery is refused;
* **the time the body says it was sent**, where it says one under the signature: gitsync's own
  notifications (``time``, ISO 8601) and GitHub's pushes (``repository.pushed_at``, seconds): older
  than `WINDOW`, or ahead of this clock by more than `CLOCK_SKEW`, the delivery is refused. So a
  replay after the memory forgot it (a restart, `WINDOW` later) is refused as well where the forge
  dates its deliveries; where it does not (GitLab, Gitea), a replay after a restart triggers one sync
  more, which is all a webhook can do: the agent fetches the commit itself.

Only deliveries accepted are remembered: a delivery refused for its signature is never a reason to
refuse another. A generic delivery without an id (a CI job's ``curl`` with a fixed body) is not
checked: nothing tells one call from the next.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

WINDOW = 3600.0  # seconds a delivery is remembered, and the oldest a dated one may be
CLOCK_SKEW = 300.0  # seconds a sender's clock may be ahead of this one's
MAX_REMEMBERED = 10_000
DELIVERY_HEADERS = {"github": "x-github-delivery", "gitlab": "x-gitlab-event-uuid",
                    "gitea": "x-gitea-delivery", "generic": "x-gitsync-delivery"}


def sent_at(provider: str, body: bytes) -> float | None:
    """When the signed body says it was sent (Unix time), where it says it (see the module); else None."""
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if provider == "generic":
        return _iso(doc.get("time"))
    if provider == "github":
        repository = doc.get("repository")
        pushed = repository.get("pushed_at") if isinstance(repository, dict) else None
        if isinstance(pushed, int) and not isinstance(pushed, bool):
            return float(pushed)
    return None


def _iso(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value)  # Python 3.11's reads a final Z as UTC
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


class Deliveries:
    """The deliveries accepted lately (see the module). Used on the listener's event loop only."""

    def __init__(self, window: float = WINDOW, limit: int = MAX_REMEMBERED,
                 clock: Callable[[], float] = time.time) -> None:
        self.window, self.limit, self._clock = window, limit, clock
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()  # (kind, key) → when accepted

    def replayed(self, provider: str, headers: Mapping[str, str], body: bytes) -> str | None:
        """Why this signed delivery is refused as a replay, or None: then it is remembered as accepted."""
        now = self._clock()
        self._forget(now)
        delivery = headers.get(DELIVERY_HEADERS.get(provider, ""), "")[:200]
        keys = [(f"{provider} delivery", delivery)] if delivery else []
        if provider in ("github", "gitea") or (provider == "generic" and delivery):
            keys.append(("body", hashlib.sha256(provider.encode() + b"\0" + body).hexdigest()))
        for kind, key in keys:
            if (kind, key) in self._seen:
                what = f"delivery {delivery!r}" if kind != "body" else "this body"
                return f"{what} was accepted {now - self._seen[(kind, key)]:.0f}s ago: a replay; ignored"
        moment = sent_at(provider, body) if provider == "github" or delivery else None
        if moment is not None and now - moment > self.window:
            return f"sent {now - moment:.0f}s ago, more than {self.window:g}s: a replay; ignored"
        if moment is not None and moment - now > CLOCK_SKEW:
            return f"dated {moment - now:.0f}s ahead of this agent's clock; ignored"
        for key in keys:
            self._seen[key] = now
        while len(self._seen) > self.limit:
            self._seen.popitem(last=False)
        return None

    def _forget(self, now: float) -> None:
        while self._seen and now - next(iter(self._seen.values())) > self.window:
            self._seen.popitem(last=False)


__all__ = ["CLOCK_SKEW", "DELIVERY_HEADERS", "WINDOW", "Deliveries", "sent_at"]
