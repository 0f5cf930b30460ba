"""Events of one kind, told once in a while: a flood of refused, stalled or unauthenticated clients is a
line in the log every `LOG_INTERVAL` seconds and a counter, never a line per request.

Used where a client nobody vouches for can make the agent say something (the listener, the web view):
one `Tally` per kind of event, its count since the last record in the record, the last client named.
Thread-safe: a record is never lost nor doubled when two threads add at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gitsync.log import logger

LOG_INTERVAL = 10.0  # seconds between two records about the same kind of event


class Tally:
    """Events of one kind, logged as one record at most every `interval` seconds: `message` is formatted
    with the count since the last record, the last client's address and `detail`. `counted` (a metric's
    ``inc``) is called for every event."""

    def __init__(self, message: str, level: str = "WARNING", interval: float = LOG_INTERVAL,
                 counted: Callable[[], None] = lambda: None) -> None:
        self.message = message
        self.level = level
        self.interval = interval
        self.counted = counted
        self.count = 0
        self._logged = -interval
        self._lock = threading.Lock()

    def add(self, client: str, detail: str = "") -> None:
        self.counted()
        with self._lock:
            self.count += 1
            now = time.monotonic()
            if now - self._logged < self.interval:
                return
            count, self.count, self._logged = self.count, 0, now
        logger.opt(depth=1).log(self.level, self.message, count, client, detail)  # named for the caller


__all__ = ["LOG_INTERVAL", "Tally"]
