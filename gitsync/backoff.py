"""One backoff for every retry gitsync makes: the git remote, a gateway, a push, a write-back.

Exponential with "equal jitter": attempt n waits between half and all of ``min(cap, base · 2^(n-1))``.
Half is fixed so a retry never turns into a busy loop; half is random so agents and gateways that
failed together do not retry together.

A `Backoff` is state (failures so far, the earliest next attempt) and has one owner thread: the
sync worker for the git remote, each gateway's worker for its gateway. Other threads only read
`ready()`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

#: The shortest base delay: a zero base would make every retry immediate.
MIN_BASE = 0.01


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1 for the first retry)."""
    base = max(base, MIN_BASE)
    ceiling = min(max(cap, base), base * 2 ** max(attempt - 1, 0))
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


@dataclass
class Backoff:
    """Consecutive failures of one thing, and when it may be tried again; a success resets it."""

    base: float
    cap: float
    rng: random.Random | None = None
    failures: int = 0
    not_before: float = field(default=0.0)  # time.monotonic() of the earliest next attempt

    def __post_init__(self) -> None:
        # A remote or a gateway that failed is not worth asking again within 100 ms.
        self.base = max(self.base, 0.1)
        self.cap = max(self.cap, self.base)

    def failed(self, now: float | None = None) -> float:
        """Count a failure; the delay before the next attempt."""
        self.failures += 1
        delay = backoff_delay(self.failures, self.base, self.cap, self.rng)
        self.not_before = (time.monotonic() if now is None else now) + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = 0.0

    def ready(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.not_before


def retried(action: Callable[[], T], attempts: int, backoff: Backoff, *,
            retry_if: Callable[[Exception], bool], on_retry: Callable[[Exception, int, float], None],
            sleep: Callable[[float], None] = time.sleep) -> T:
    """`action`, tried up to `attempts` times while what it raises passes `retry_if`, sleeping `backoff`'s
    delay between tries. `on_retry(exc, attempt, delay)` is told before each sleep; the last failure
    (or the first one `retry_if` refuses) is raised as it is."""
    attempt = 1
    while True:
        try:
            result = action()
        except Exception as exc:
            if attempt >= attempts or not retry_if(exc):
                raise
            delay = backoff.failed()
            on_retry(exc, attempt, delay)
            sleep(delay)
            attempt += 1
            continue
        backoff.succeeded()
        return result


__all__ = ["Backoff", "backoff_delay", "retried"]
