"""`gitsync run`: the worker, the scheduler, the HTTP listener, signals and systemd.

One worker thread runs syncs one at a time. Triggers (poll, webhook, drift watch, SIGHUP, a push
that ended late) only set a "run again" flag and wake it, so a trigger that arrives during a sync
is never lost (APScheduler alone drops a job that fires while the last one runs). APScheduler runs
the poll and drift-watch jobs; they never sync themselves.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler

from gitsync import __version__
from gitsync.agent.outcomes import Trigger, describe
from gitsync.agent.statedir import StateDir
from gitsync.agent.sync import Agent
from gitsync.daemon.listener import Metrics, Readiness, StatusServer
from gitsync.daemon.sdnotify import Notifier
from gitsync.display import short
from gitsync.feedback.outbox import Feedback
from gitsync.log import logger, redact
from gitsync.settings import Settings, SettingsError
from gitsync.web import WebView
from gitsync.web.auth import MAX_FORM_BYTES

STOP_GRACE = 60.0  # seconds a SIGTERM waits for the sync in flight


class Triggers:
    """A coalescing "run again" flag with the triggers that set it: set from any thread, taken by the
    worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reasons: set[Trigger] = set()
        self._stopping = False

    def request(self, trigger: Trigger) -> None:
        with self._cond:
            self._reasons.add(trigger)
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def pending(self) -> bool:
        """A trigger is waiting: a sync in progress should stop waiting for slow gateways. (Stopping
        is not one: SIGTERM lets the pushes in flight finish.)"""
        return bool(self._reasons)

    def take(self, timeout: float) -> frozenset[Trigger] | None:
        """Wait up to `timeout` for triggers; return them all (coalesced), none on timeout, None on stop."""
        with self._cond:
            if not self._reasons and not self._stopping:
                self._cond.wait(timeout)
            if self._stopping:
                return None
            reasons, self._reasons = frozenset(self._reasons), set()
            return reasons


class Daemon:
    """`gitsync run`: the worker, the scheduler, the HTTP listener, signals and systemd."""

    def __init__(self, settings: Settings, reload: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self._reload_settings = reload
        self.metrics = Metrics()
        self.state_dir = StateDir(settings.state_dir)
        self.triggers = Triggers()
        self.notifier = Notifier()
        self.agent: Agent | None = None
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1})
        self.server: StatusServer | None = None
        self.web: WebView | None = None
        self._beat = time.monotonic()
        self._worker = threading.Thread(target=self._work, name="sync-worker", daemon=True)

    def start(self) -> None:
        self.state_dir.acquire()
        try:
            self.agent = self._agent(self.settings)
            if self.settings.ui:  # the read-only web view (gitsync.web); a token is checked here
                self.web = WebView(lambda: self.settings, lambda: self.agent, self.state_dir.path / "web")
            self.server = StatusServer(self.settings.listen, self.metrics, self._readiness,
                                       self._hooked, self.settings.webhook_secret,
                                       web=self.web.answer if self.web else None,
                                       web_max_body=MAX_FORM_BYTES).start()
        except OSError as exc:
            self.state_dir.release()
            raise SettingsError(f"listen = {self.settings.listen}: cannot listen there: "
                                f"{exc.strerror or exc}") from None
        except BaseException:
            self.state_dir.release()
            raise
        self._schedule()
        self.scheduler.start()
        self._worker.start()
        self.triggers.request(Trigger.START)
        logger.info("gitsync {} running: repo {} ref {} → {} gateway(s); listening on {}:{}", __version__,
                    self.agent.repos.title(),
                    self.settings.ref, len(self.settings.gateways),
                    self.server.host, self.server.port)
        if self.web is not None:
            logger.info("web view on http://{}:{}/", self.server.host, self.server.port)
        self.notifier.ready(f"started; last good {short(self.agent.state.last_good)}")

    def _agent(self, settings: Settings) -> Agent:
        """The agent for `settings`, its outcomes told to the forge and `notify_urls` (`gitsync.feedback`)."""
        feedback = Feedback.from_settings(settings, self.metrics, self.state_dir.path)
        try:
            return Agent(settings, metrics=self.metrics, state_dir=self.state_dir,
                         interrupted=self.triggers.pending, wake=self.triggers.request, observer=feedback)
        except BaseException:
            feedback.close()
            raise

    def _hooked(self, reason: Trigger) -> None:
        """A webhook's trigger: at once, or after a random part of `webhook_jitter`, so that the agents
        of a fleet woken by one push do not all fetch from the git server at the same instant."""
        jitter = self.settings.webhook_jitter
        if jitter <= 0 or reason is not Trigger.WEBHOOK:
            self.triggers.request(reason)
            return
        when = datetime.now(UTC) + timedelta(seconds=random.uniform(0, jitter))
        self.scheduler.add_job(self.triggers.request, "date", args=[reason], run_date=when)

    def _schedule(self) -> None:
        s = self.settings
        self.scheduler.add_job(self.triggers.request, "interval", args=[Trigger.POLL], id="poll",
                               seconds=max(s.interval, 0.1), jitter=s.jitter or None, replace_existing=True)
        self.scheduler.add_job(self._drift_watch, "interval", id="drift", seconds=max(s.drift_interval, 0.1),
                               replace_existing=True)
        interval = self.notifier.watchdog_interval()
        if interval:
            self.scheduler.add_job(self._watchdog, "interval", id="watchdog", seconds=interval,
                                   replace_existing=True)

    def _work(self) -> None:
        while True:
            self._beat = time.monotonic()
            reasons = self.triggers.take(timeout=1.0)
            if reasons is None:
                return
            if not reasons:
                continue
            if Trigger.RELOAD in reasons:
                self._apply_reload()
            agent = self.agent
            assert agent is not None
            try:
                outcome = agent.sync_once(reasons)
            except Exception as exc:  # a bug must not end the worker: the next trigger tries again
                logger.opt(exception=exc).error("sync ({}) crashed: {}", describe(reasons), redact(str(exc)))
                self.metrics.syncs.labels("error").inc()
                continue
            finally:
                self._beat = time.monotonic()
            if outcome.wake_at is not None:  # the canary's soak ends then: look again
                self.scheduler.add_job(self.triggers.request, "date", args=[Trigger.SOAK], id="wake",
                                       run_date=datetime.fromtimestamp(outcome.wake_at + 0.05, UTC),
                                       replace_existing=True)
            self.notifier.status(f"{outcome.result} {short(outcome.commit)}; last good "
                                 f"{short(agent.state.last_good)}")

    def _drift_watch(self) -> None:
        """Cheap check of each gateway (HEAD): one that lost the last good commit triggers a sync."""
        agent = self.agent
        if agent is None or not agent.state.last_good:
            return
        suspects = agent.drift_suspects()
        if suspects:
            logger.warning("drift: {} may no longer hold {}", ", ".join(suspects),
                           short(agent.state.last_good))
            self.triggers.request(Trigger.DRIFT)

    def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval() or 30.0
        worker_alive = self._worker.is_alive()
        busy_for = time.monotonic() - self._beat
        s = self.settings
        limit = s.push_attempts * s.gateway_timeout * 2 + s.git_timeout * 2
        if worker_alive and busy_for < max(limit, 4 * interval):
            self.notifier.watchdog()

    def _readiness(self) -> Readiness:
        return self.agent.readiness() if self.agent else Readiness(False, "starting")

    def reload(self) -> None:
        """SIGHUP: the worker re-reads the settings before its next sync (never during one)."""
        self.triggers.request(Trigger.RELOAD)

    def _apply_reload(self) -> None:
        """In the worker, between syncs: new settings, a new agent on the same state; bad ones are refused."""
        if self._reload_settings is None:
            return
        try:
            settings = self._reload_settings()
            agent = self._agent(settings)
        except Exception as exc:  # whatever is wrong with them, the running settings stay
            logger.error("reload refused, keeping the running settings: {}", redact(str(exc)))
            return
        old, self.agent, self.settings = self.agent, agent, settings
        if old is not None:
            old.close()
            if settings.listen != old.settings.listen:
                logger.warning("listen = {} takes effect at the next restart", settings.listen)
        if self.server is not None:
            self.server.webhook_secret = settings.webhook_secret
        self._schedule()
        logger.info("settings reloaded: {} gateway(s)", len(settings.gateways))

    def stop(self) -> None:
        """Let the sync in flight finish (bounded), then stop everything."""
        self.notifier.stopping()
        self.triggers.stop()
        self.scheduler.shutdown(wait=False)
        if self._worker.is_alive():
            self._worker.join(STOP_GRACE)
            if self._worker.is_alive():
                logger.warning("the sync in flight did not end within {:.0f}s; exiting anyway", STOP_GRACE)
        if self.server is not None:
            self.server.stop()
        if self.web is not None:
            self.web.close()
        if self.agent is not None:
            self.agent.finish(STOP_GRACE)
            self.agent.close()
        self.state_dir.release()

    def run_forever(self) -> int:
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if signum == signal.SIGHUP:
                self.reload()
                return
            logger.info("signal {}: finishing the sync in flight, then exiting", signal.Signals(signum).name)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_signal)
        self.start()
        while not stop.wait(1.0):
            pass
        self.stop()
        return 0


__all__ = ["Daemon", "Triggers"]
