"""Deliveries in the background: one queue, one thread, so that no forge or receiver delays a sync.

The agent's sync worker only puts jobs on the queue (never blocking: a full queue drops its oldest
job, counted). One thread takes them in order and sends them, each request with its own deadline.
A job replaces a queued one of the same key (the newest status of a commit wins; an event is sent
once). Each destination (the forge, each notification URL, the status refs) has its own rate limit
(a token bucket) and its own backoff (`gitsync.backoff`): a failure that is worth another try puts
the job back for after the backoff's delay, up to `MAX_ATTEMPTS`; any other is logged and dropped.
Every failure is logged (its text is redacted where it is made) and counted in ``/metrics``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from gitsync.agent.metrics import Metrics
from gitsync.backoff import Backoff
from gitsync.log import logger, redact

MAX_QUEUE = 1000  # jobs waiting; more drop the oldest
MAX_ATTEMPTS = 8  # tries of one job; with the backoff, an hour of a destination down at the default cap
RATE = 1.0  # requests per second to one destination, on average
BURST = 5  # requests to one destination at once, after a quiet while
BACKOFF_BASE = 1.0


class DeliveryError(Exception):
    """A delivery failed; its text is redacted. `retry`: worth another try later."""

    retry = False

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class RetryableDelivery(DeliveryError):
    retry = True


@dataclass
class Job:
    """One delivery: `send` raises a `DeliveryError` when it fails. `channel` names the destination
    (its rate limit and backoff); `kind` the metric's label (forge, notify)."""

    key: Hashable
    channel: str
    kind: str
    what: str  # for the log
    send: Callable[[], None]
    attempts: int = 0
    ready_at: float = 0.0  # time.monotonic() before which it is not tried (its backoff)


@dataclass
class _Bucket:
    """A token bucket: `rate` tokens a second, at most `burst` saved."""

    rate: float
    burst: float
    tokens: float = field(init=False)
    at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: now)."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1


class Dispatcher:
    """The queue and its thread; `submit` from any thread, `close` once."""

    def __init__(self, metrics: Metrics, *, max_backoff: float = 300.0, rate: float = RATE,
                 burst: int = BURST, max_queue: int = MAX_QUEUE, max_attempts: int = MAX_ATTEMPTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.max_backoff = max_backoff
        self.rate, self.burst = rate, burst
        self.max_queue, self.max_attempts = max_queue, max_attempts
        self.clock = clock
        self._queue: OrderedDict[Hashable, Job] = OrderedDict()
        self._buckets: dict[str, _Bucket] = {}
        self._backoffs: dict[str, Backoff] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._closing_at: float | None = None  # set by close(): the thread stops by then
        self._thread = threading.Thread(target=self._run, name="feedback", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue `job` (replacing a queued one of the same key); never blocks."""
        with self._cond:
            if self._closing_at is not None:
                return
            self._queue.pop(job.key, None)
            self._queue[job.key] = job
            while len(self._queue) > self.max_queue:
                _, dropped = self._queue.popitem(last=False)
                self.metrics.feedback_dropped.labels(dropped.kind).inc()
                logger.error("feedback: queue full, dropped {}", dropped.what)
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def flush(self, timeout: float) -> bool:
        """Wait until every job queued now or later is done (or `timeout` passed): True when idle."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, grace: float) -> None:
        """Send what is queued for at most `grace` seconds, then stop the thread."""
        with self._cond:
            self._closing_at = time.monotonic() + grace
            self._cond.notify_all()
        self._thread.join(grace + 1.0)
        left = self.pending()
        if left:
            logger.warning("feedback: {} status(es) or notification(s) not sent before exit", left)

    # -- the thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                job, wait = self._next()
                if job is None:
                    closing = self._closing_at
                    if closing is not None and (not self._queue or time.monotonic() >= closing):
                        return
                    self._cond.wait(wait if wait is not None else 1.0)
                    continue
                self._busy = True
            try:
                self._deliver(job)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _next(self) -> tuple[Job | None, float | None]:
        """The first queued job whose destination may be asked now (taken off the queue), else how long
        until one may."""
        now = self.clock()
        wait: float | None = None
        for key, job in self._queue.items():
            backoff = self._backoffs.get(job.channel)
            bucket = self._buckets.setdefault(job.channel, _Bucket(self.rate, self.burst))
            delay = max(job.ready_at - now, (backoff.not_before - now) if backoff else 0.0, bucket.wait(now))
            if delay <= 0:
                bucket.take()
                del self._queue[key]
                return job, None
            wait = delay if wait is None else min(wait, delay)
        return None, wait

    def _deliver(self, job: Job) -> None:
        job.attempts += 1
        backoff = self._backoffs.setdefault(job.channel, Backoff(BACKOFF_BASE, self.max_backoff))
        try:
            job.send()
        except DeliveryError as exc:
            self.metrics.feedback_failures.labels(job.kind).inc()
            self._failed(job, backoff, str(exc), retry=exc.retry)
            return
        except Exception as exc:  # a bug must not end the thread: the job is dropped, and said so
            self.metrics.feedback_failures.labels(job.kind).inc()
            logger.opt(exception=exc).error("feedback: {} failed: {}", job.what, redact(str(exc)))
            self._failed(job, backoff, redact(str(exc)), retry=False)
            return
        backoff.succeeded()
        self.metrics.feedback_sent.labels(job.kind).inc()

    def _failed(self, job: Job, backoff: Backoff, why: str, *, retry: bool) -> None:
        if not retry or job.attempts >= self.max_attempts:
            self.metrics.feedback_dropped.labels(job.kind).inc()
            logger.error("feedback: {} given up after {} attempt(s): {}", job.what, job.attempts, why)
            return
        delay = backoff.failed(self.clock())
        logger.warning("feedback: {} failed (attempt {}): {}; retrying in {:.1f}s", job.what, job.attempts,
                       why, delay)
        job.ready_at = self.clock() + delay
        with self._cond:
            if self._closing_at is not None:
                self.metrics.feedback_dropped.labels(job.kind).inc()
            elif job.key not in self._queue:  # else a newer one replaces it
                self._queue[job.key] = job
                self._queue.move_to_end(job.key, last=False)


__all__ = ["DeliveryError", "Dispatcher", "Job", "RetryableDelivery"]
