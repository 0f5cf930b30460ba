"""The record of a sync, apart from the sync itself: its metrics, its log line, and the write-backs
that run in the background (one at a time, in order, never raising to the agent)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from gitsync.agent.metrics import Metrics
from gitsync.agent.outcomes import SyncOutcome, SyncResult
from gitsync.agent.state import AgentState
from gitsync.log import logger, redact
from gitsync.writeback.publisher import WriteBack


class WriteBackQueue:
    """Write-backs in the background, one at a time, in order, whichever repo each is for; a failure is
    counted, never raised."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writeback")
        self._queued = 0  # submitted and not ended
        self._count = threading.Lock()

    def submit(self, writeback: WriteBack, publish: Callable[[], bool]) -> None:
        """Run `publish` (a write-back of `writeback`'s) in the background."""
        with self._count:
            self._queued += 1
        self._thread.submit(self._publish, writeback, publish)

    def submit_once(self, jobs: Sequence[tuple[WriteBack, Callable[[], bool]]]) -> None:
        """Submit `jobs` unless write-backs are still queued (a slow remote must not pile up refreshes)."""
        if self._queued == 0:
            for writeback, publish in jobs:
                self.submit(writeback, publish)

    def _publish(self, writeback: WriteBack, publish: Callable[[], bool]) -> None:
        before = writeback.failures
        try:
            publish()
        except Exception as exc:  # write-back never takes the agent down
            logger.error("write-back failed: {}", redact(str(exc)))
            self.metrics.writeback_failures.inc()
            return
        finally:
            with self._count:
                self._queued -= 1
        failures = writeback.failures - before
        if failures > 0:
            self.metrics.writeback_failures.inc(failures)

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=False)


def record_metrics(metrics: Metrics, outcome: SyncOutcome, state: AgentState, urls: list[str], *,
                   tip_refused: bool, now: float) -> None:
    """The outcome and what each gateway holds, as Prometheus metrics."""
    metrics.syncs.labels(str(outcome.result)).inc()
    if outcome.gateways:
        metrics.sync_duration.observe(outcome.duration)
        for phase, seconds in outcome.phases.snapshot().items():
            metrics.sync_phase.labels(phase).observe(seconds)
        metrics.sync_phase.labels("gitsync").observe(outcome.phases.agent_time(outcome.duration))
    if outcome.ok:
        metrics.last_success.set(now)
    if state.last_good:
        metrics.set_applied_commit(state.last_good)
    metrics.tip_refused.set(1 if tip_refused else 0)
    for url in outcome.drifted:
        metrics.drift_detected.labels(url).inc()
    for result in outcome.gateways:
        for check in result.checks.failed if result.checks is not None else ():
            metrics.check_failures.labels(check.name).inc()
    for url in urls:
        gw = state.gateways.get(url)
        metrics.set_gateway(url, gw.versions if gw else {}, gw is not None and gw.commit == state.last_good)


def log_outcome(outcome: SyncOutcome) -> None:
    """One line per sync. A failed fetch and a refused commit were logged where they happened: a poll
    that finds the same again is not worth a second warning."""
    quiet = outcome.ok or outcome.result in (SyncResult.FETCH_FAILED, SyncResult.SKIPPED, SyncResult.DEFERRED)
    level = "INFO" if outcome.result in (SyncResult.APPLIED, SyncResult.HEALED) else (
        "DEBUG" if quiet else "WARNING")
    logger.log(level, "sync ({}): {} in {:.2f}s{}", outcome.reason, outcome.verdict(), outcome.duration,
               f" — {outcome.problems[0]}" if outcome.problems else "")
    if outcome.gateways:
        logger.debug("sync ({}) phases: {}", outcome.reason, outcome.phases.describe(outcome.duration))


__all__ = ["WriteBackQueue", "log_outcome", "record_metrics"]
