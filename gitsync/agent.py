"""The agent: one sync of the whole pipeline, and the daemon that keeps running it.

A sync, as data flows (DESIGN.md §1)::

    remote SHA (ref advertisement) ── same as what every gateway holds? → nothing to do
        │ new commit, not known bad
    fetch → verify → read → render/validate ─ any problem → commit recorded bad, git note
        │
    per gateway: GET live → plan → PUT → read back   (push.py)
        │
    state (atomic) → status commit / note (background, never blocks a sync)

The *target* of a sync is the remote's commit when it is new and not known bad, else the last
good commit. A gateway that does not hold the target — a new commit, an APISIX restart that
emptied it, an out-of-band write — gets it, from the local mirror, so a git remote that is down
never stops the gateways from being healed.

The daemon: one worker thread runs syncs one at a time; triggers (poll, webhook, drift, SIGHUP)
only set a "run again" flag and wake it, so a trigger that arrives during a sync is never lost
(APScheduler alone would drop it: STACK.md). APScheduler runs the poll and drift-watch jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from gitsync import __version__
from gitsync.gateway import ConfigHead, Endpoint, Gateway, GatewayError, LiveConfig, endpoints_from_settings
from gitsync.log import logger, redact
from gitsync.problems import ProblemsError
from gitsync.push import GatewayResult, RetryPolicy, SyncStatus, policy_from_settings, read_live, sync_gateway
from gitsync.reconcile import Policy, plan
from gitsync.render import ParseCache, Rendered, options_from_settings, render
from gitsync.sdnotify import Notifier
from gitsync.server import Metrics, Readiness, StatusServer
from gitsync.settings import Settings, load
from gitsync.source import Source, SourceError
from gitsync.state import AgentState, GatewayState, StateDir, StateError
from gitsync.writeback import FailureNote, GatewayStatus, StatusReport, WriteBack

STOP_GRACE = 60.0  # seconds a SIGTERM waits for the push in flight


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection for the duration (of a sync).

    A sync at 10,000 routes allocates about a million containers (two GET bodies, the plans)
    that live until it ends; each full collection walks all of them, and they set off several:
    0.46 s of a 3.8 s sync. Reference counting frees nearly all of it when the sync ends; the
    collector, back on, takes what is left.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Backoff:
    """Exponential backoff with full jitter, bounded; reset by a success."""

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        self.base = max(base, 0.1)
        self.cap = max(cap, self.base)
        self.failures = 0
        self.not_before = 0.0
        self._rng = rng or random.Random()

    def failed(self, now: float | None = None) -> float:
        self.failures += 1
        delay = min(self.cap, self.base * 2 ** (self.failures - 1))
        delay = delay / 2 + self._rng.uniform(0, delay / 2)
        self.not_before = (time.monotonic() if now is None else now) + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = 0.0

    def ready(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.not_before


@dataclass
class SyncOutcome:
    """What one sync did: the data behind logs, state, metrics, status commits and notes."""

    reason: str
    result: str  # noop | applied | healed | failed | skipped | fetch_failed
    commit: str | None = None
    subject: str = ""
    stage: str | None = None  # where a failure happened: fetch verify render validate push
    problems: list[str] = field(default_factory=list)
    gateways: list[Any] = field(default_factory=list)  # push results
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        """Every gateway holds the remote's commit (a known-bad tip is not ok)."""
        return self.result in ("noop", "applied", "healed")


class Triggers:
    """A coalescing "run again" flag with reasons: set from any thread, taken by the worker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._reasons: list[str] = []
        self._stopping = False

    def request(self, reason: str) -> None:
        with self._cond:
            self._reasons.append(reason)
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def take(self, timeout: float) -> list[str] | None:
        """Wait up to `timeout` for triggers; return them all (coalesced), [] on timeout, None on stop."""
        with self._cond:
            if not self._reasons and not self._stopping:
                self._cond.wait(timeout)
            if self._stopping:
                return None
            reasons, self._reasons = self._reasons, []
            return reasons


class Agent:
    """Source, render, push and write-back for one set of settings, plus what it remembers."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 metrics: Metrics | None = None, state_dir: StateDir | None = None) -> None:
        self.settings = settings
        self.env = dict(os.environ if env is None else env)
        self.metrics = metrics or Metrics()
        self.state_dir = state_dir or StateDir(settings.state_dir)
        self.state: AgentState = self.state_dir.load()
        self.source = Source.from_settings(settings)
        self.render_options = options_from_settings(settings, self.env)
        self.cache = ParseCache()
        self.pool = Fleet(endpoints_from_settings(settings), policy_from_settings(settings),
                          RetryPolicy.from_settings(settings), settings.max_backoff)
        self.writeback = WriteBack.from_settings(settings)
        self._writeback_queue = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writeback")
        self.fetch_backoff = Backoff(min(settings.interval, 5.0) or 1.0, settings.max_backoff)
        self._rendered: dict[str, Any] = {}  # commit SHA → Rendered (the target and the last good)
        self.last_attempt_ok: bool | None = None
        self.last_attempt_at = 0.0
        self.last_outcome: SyncOutcome | None = None

    # ------------------------------------------------------------------------------------------------
    # one sync

    def sync_once(self, reason: str = "cli") -> SyncOutcome:
        """Bring every gateway to the target commit; never raises for an ordinary failure."""
        started = time.monotonic()
        with gc_paused():
            outcome = self._sync(reason)
        outcome.duration = time.monotonic() - started
        self._record(outcome)
        return outcome

    def _sync(self, reason: str) -> SyncOutcome:
        remote: str | None = None
        fetch_error: str | None = None
        heads = self.pool.probe(self.state.gateways)  # HEADs that overlap the git check below
        # A webhook means the remote has just been written to: worth trying even during a backoff.
        attempt = self.fetch_backoff.ready() or any(r.startswith("webhook") for r in reason.split(","))
        if attempt:
            try:
                remote = self.source.check()
            except SourceError as exc:
                fetch_error = redact(str(exc))
        else:
            fetch_error = "git remote in backoff after earlier failures"

        if fetch_error is not None:
            if attempt:
                delay = self.fetch_backoff.failed()
                self.metrics.fetch_failures.inc()
                logger.warning("git remote {}: {}; retrying in {:.1f}s; gateways stay on {}",
                               self.settings.repo, fetch_error, delay, _short(self.state.last_good))
            healed = self._converge(self.state.last_good, reason, new=False, heads=heads)
            if healed.result in ("healed", "failed"):
                healed.problems.insert(0, f"fetch: {fetch_error}")
                return healed
            return SyncOutcome(reason, "fetch_failed", self.state.last_good, stage="fetch",
                               problems=[fetch_error])
        self.fetch_backoff.succeeded()

        assert remote is not None
        if remote in self.state.bad:
            logger.debug("remote {} is a known bad commit ({}); keeping {}", _short(remote),
                         self.state.bad[remote], _short(self.state.last_good))
            outcome = self._converge(self.state.last_good, reason, new=False, heads=heads)
            if outcome.result == "noop":  # say which commit was skipped and why, not the live one's subject
                outcome = SyncOutcome(reason, "skipped", remote, stage="known bad",
                                      problems=[self.state.bad[remote]])
            return outcome
        return self._converge(remote, reason, new=remote != self.state.last_good, heads=heads)

    def _converge(self, target: str | None, reason: str, *, new: bool,
                  heads: Mapping[str, Future[ConfigHead | None]] | None = None) -> SyncOutcome:
        """Make every gateway hold `target`; render it first if it is not rendered yet.

        `heads`: HEADs of the gateways started at the beginning of this sync (`Fleet.probe`)."""
        if target is None:
            return SyncOutcome(reason, "noop")
        try:
            stale, drifted = self.pool.not_holding(target, self.state.gateways,
                                                   lambda: self._rendered_commit(target, fetch=new)[0], heads)
        except (ProblemsError, SourceError):
            stale, drifted = list(self.pool.urls), []  # rendering decides below, with its error
        if not stale:
            return SyncOutcome(reason, "noop", target, self.state.last_good_subject)
        for url in drifted:
            self.metrics.drift_detected.labels(url).inc()
        if self.settings.drift == "report" and drifted:
            logger.warning("drift on {}: no longer holding {}; drift = report, leaving it",
                           ", ".join(drifted), _short(target))
            stale = [url for url in stale if url not in drifted]
            if not stale:
                return SyncOutcome(reason, "drift_reported", target, stage="drift",
                                   problems=[f"{url}: drifted from {_short(target)}" for url in drifted])

        lives = self.pool.read_live(stale)  # the GETs overlap the fetch and render below
        try:
            rendered, subject = self._rendered_commit(target, fetch=new)
        except ProblemsError as exc:
            return self._refuse(target, reason, exc.stage, [str(p) for p in exc.problems])
        except SourceError as exc:
            message = redact(str(exc))
            if exc.stage == "verify":
                return self._refuse(target, reason, "verify", [message])
            logger.error("commit {}: {} failed: {}", _short(target), exc.stage, message)
            return SyncOutcome(reason, "failed", target, stage="fetch", problems=[message])

        results = self.pool.push(rendered, stale, lives)
        for r in results:
            if r.ok:
                self.state.gateways[r.url] = GatewayState(target, r.digest or "", dict(r.versions),
                                                          time.time(), sorted(self.pool.policy.unmanaged))
                if r.url in drifted:
                    self.metrics.drift_heals.labels(r.url).inc()
                    logger.info("drift healed on {}: {} re-applied", r.url, _short(target))
        failed = [r for r in results if not r.ok]
        refused = [r for r in failed if r.problems]
        if refused and target != self.state.last_good:
            problems = [str(p) for r in refused for p in r.problems]
            return self._refuse(target, reason, "push", problems, gateways=results)
        # Accepted by a gateway and refused by none: the commit to heal with from now on. A gateway
        # that was down gets it when it is back (it is behind); it never takes the others back.
        if any(url in self.state.gateways and self.state.gateways[url].commit == target
               for url in self.pool.urls):
            self.state.last_good, self.state.last_good_subject = target, subject
        result = "failed" if failed else ("applied" if new else "healed")
        return SyncOutcome(reason, result, target, subject, stage="push" if failed else None,
                           problems=[f"{r.url}: {r.error}" for r in failed], gateways=results)

    def _rendered_commit(self, sha: str, *, fetch: bool) -> tuple[Rendered, str]:
        """The rendered payload of `sha`, from memory, or read from the mirror (fetching if asked)."""
        if sha in self._rendered:
            return self._rendered[sha]
        if fetch or self.source.local_sha() is None:
            self.source.fetch()
        self.source.verify(sha)
        commit = self.source.read(sha)
        rendered = render(commit.files, self.render_options, cache=self.cache)
        keep = {self.state.last_good}
        self._rendered = {k: v for k, v in self._rendered.items() if k in keep}
        self._rendered[sha] = (rendered, commit.subject)
        return self._rendered[sha]

    def _refuse(self, sha: str, reason: str, stage: str, problems: list[str],
                gateways: list[Any] | None = None) -> SyncOutcome:
        """A commit that can never apply: remember it as bad, say why, keep the last good live."""
        problems = [redact(p) for p in problems]
        self.state.mark_bad(sha, f"{stage}: {problems[0] if problems else 'refused'}")
        logger.error("commit {} refused at {} ({} problem(s)); gateways stay on {}", _short(sha), stage,
                     len(problems), _short(self.state.last_good))
        for problem in problems[:50]:
            logger.error("  {}", problem)
        self._publish_failure(sha, stage, problems)
        healed = self._converge(self.state.last_good, reason, new=False) if self.state.last_good else None
        return SyncOutcome(reason, "failed", sha, stage=stage, problems=problems,
                           gateways=(gateways or []) + (healed.gateways if healed else []))

    # ------------------------------------------------------------------------------------------------
    # bookkeeping: state, metrics, write-back

    def _record(self, outcome: SyncOutcome) -> None:
        ok = outcome.ok
        self.last_attempt_ok, self.last_attempt_at = ok, time.time()
        self.last_outcome = outcome
        self.metrics.syncs.labels(outcome.result).inc()
        if outcome.gateways:
            self.metrics.sync_duration.observe(outcome.duration)
        if ok:
            self.metrics.last_success.set(time.time())
        if self.state.last_good:
            self.metrics.set_applied_commit(self.state.last_good)
        for url in self.pool.urls:
            gw = self.state.gateways.get(url)
            for key, version in (gw.versions if gw else {}).items():
                self.metrics.gateway_version.labels(url, key.removesuffix("_conf_version")).set(version)
            self.metrics.gateway_up.labels(url).set(1 if gw and gw.commit == self.state.last_good else 0)
        report = self._report(outcome)
        self.state.last_result = {**report.to_dict(), "reason": outcome.reason, "stage": outcome.stage,
                                  "problems": outcome.problems[:20], "last_good": self.state.last_good}
        try:
            self.state_dir.save(self.state)
        except OSError as exc:
            logger.error("cannot save state in {}: {}", self.state_dir.path, exc)
        # A failed fetch and a refused commit were logged where they happened: no second warning per poll.
        quiet = ok or outcome.result in ("fetch_failed", "skipped")
        level = "INFO" if outcome.result in ("applied", "healed") else ("DEBUG" if quiet else "WARNING")
        logger.log(level, "sync ({}): {} {} in {:.2f}s{}", outcome.reason, outcome.result,
                   _short(outcome.commit), outcome.duration,
                   f" — {outcome.problems[0]}" if outcome.problems else "")
        if self.writeback is not None and outcome.result in ("applied", "healed", "failed", "drift_reported"):
            self._writeback_queue.submit(self._guarded, self.writeback.publish_status, report)

    def _report(self, outcome: SyncOutcome) -> StatusReport:
        """The status file's content: what is live on each gateway after this sync."""
        by_url = {r.url: r for r in outcome.gateways}
        gateways = []
        for url in self.pool.urls:
            r, gw = by_url.get(url), self.state.gateways.get(url)
            if r is not None:
                gateways.append(GatewayStatus(url=url, status=str(r.status), versions=dict(r.versions),
                                              digest=r.digest, counts=dict(r.counts),
                                              pruned={k: list(v) for k, v in r.pruned.items()},
                                              error=r.error))
            else:
                gateways.append(GatewayStatus(url=url, status="holding" if gw else "unknown",
                                              versions=dict(gw.versions) if gw else {},
                                              digest=gw.digest if gw else None, counts={}, pruned={}))
        commit = outcome.commit or self.state.last_good or ""
        subject = outcome.subject or (self.state.last_good_subject if commit == self.state.last_good else "")
        return StatusReport(agent=self.settings.agent_name, commit=commit, subject=subject,
                            result=outcome.result, gateways=gateways, time=datetime.now(UTC),
                            duration=outcome.duration, version=__version__)

    def _publish_failure(self, sha: str, stage: str, problems: list[str]) -> None:
        if self.writeback is None:
            return
        note = FailureNote(agent=self.settings.agent_name, commit=sha, time=datetime.now(UTC), stage=stage,
                           errors=problems)
        self._writeback_queue.submit(self._guarded, self.writeback.publish_failure, note)

    def _guarded(self, publish: Callable[[Any], bool], item: Any) -> None:
        before = getattr(self.writeback, "failures", 0)
        try:
            publish(item)
        except Exception as exc:  # write-back never takes the agent down
            logger.error("write-back failed: {}", redact(str(exc)))
            self.metrics.writeback_failures.inc()
            return
        if getattr(self.writeback, "failures", 0) > before:
            self.metrics.writeback_failures.inc(getattr(self.writeback, "failures", 0) - before)

    def drift_suspects(self) -> list[str]:
        """Gateways that, by a HEAD, may not hold the last good commit any more (the sync decides).

        A gateway in backoff is left alone unless it answers again and lacks the last good commit
        (restarted, or back after an outage): then its backoff ends and it is refilled now.
        """
        good = self.state.last_good
        rendered = self._rendered.get(good) if good else None  # read-only: the worker owns the cache
        desired = (lambda: rendered[0]) if rendered else None
        suspects = []
        for url in self.pool.urls:
            state = self.state.gateways.get(url)
            backoff = self.pool.backoff[url]
            try:
                if state is None or state.commit != good:  # behind: a probe only while it waits
                    answered = not backoff.ready() and self.pool.answers(url)
                elif self.pool.holds(url, state, desired) is False:
                    answered = True
                else:
                    continue
            except GatewayError as exc:
                logger.debug("drift watch: {}: {}", url, exc)
                answered = False
            if answered:
                backoff.succeeded()
            if backoff.ready():
                suspects.append(url)
        return suspects

    def readiness(self) -> Readiness:
        if self.last_attempt_ok is None:
            return Readiness(False, "no sync yet")
        if not self.state.last_good:
            return Readiness(False, "no commit applied yet")
        good = self.state.last_good
        behind = [url for url in self.pool.urls
                  if url not in self.state.gateways or self.state.gateways[url].commit != good]
        if behind:
            return Readiness(False, f"not holding {_short(self.state.last_good)}: {', '.join(behind)}")
        window = 3 * max(self.settings.interval + self.settings.jitter, self.settings.drift_interval) + 30
        if not self.last_attempt_ok and time.time() - self.last_attempt_at < window:
            outcome = self.last_outcome
            return Readiness(False, f"last sync {outcome.result if outcome else 'failed'}")
        return Readiness(True, f"{_short(self.state.last_good)} live on {len(self.pool.urls)} gateway(s)")

    def close(self) -> None:
        self._writeback_queue.shutdown(wait=True, cancel_futures=False)
        self.pool.close()


class Fleet:
    """The agent's gateways: a cheap "still holding?" check, and pushes with per-gateway backoff."""

    def __init__(self, endpoints: list[Endpoint], policy: Policy, retry: RetryPolicy,
                 max_backoff: float) -> None:
        self.endpoints = {e.display_url: e for e in endpoints}
        self.policy = policy
        self.retry = retry
        self.backoff = {url: Backoff(1.0, max_backoff) for url in self.endpoints}
        self._probes: ThreadPoolExecutor | None = None

    @property
    def urls(self) -> list[str]:
        return list(self.endpoints)

    def probe(self, states: Mapping[str, GatewayState]) -> dict[str, Future[ConfigHead | None]]:
        """Start a HEAD of each gateway that holds a push of ours, in the background.

        A poll asks the git remote and then each gateway; most polls find nothing new, and then
        the HEAD decides. Started first, the HEADs overlap the git round trips instead of
        following them (a no-op poll at 100 routes: 7.1 → 5.2 ms). Only `holds`, within the same
        sync, may use them: a HEAD answer is only as fresh as the sync that asked.
        """
        urls = [url for url in self.endpoints
                if self.backoff[url].ready() and (state := states.get(url)) is not None and state.digest]
        if not urls:
            return {}
        return {url: self._executor().submit(self._head, url) for url in urls}

    def _executor(self) -> ThreadPoolExecutor:
        """The threads of the background HEADs and GETs (one per gateway, at most 8)."""
        if self._probes is None:
            self._probes = ThreadPoolExecutor(max_workers=min(8, len(self.endpoints)),
                                              thread_name_prefix="gitsync-probe")
        return self._probes

    def _head(self, url: str) -> ConfigHead | None:
        with Gateway(self.endpoints[url]) as gateway:
            return gateway.head_config()

    def holds(self, url: str, state: GatewayState, desired: Callable[[], Rendered] | None = None,
              head: Future[ConfigHead | None] | None = None) -> bool | None:
        """Does the gateway still hold what was pushed? HEAD's digest (3.14+), else GET and plan.

        Without `desired`, only HEAD is looked at: a HEAD without any digest where we recorded one
        is a restarted, emptied gateway (False); None means "cannot tell that way" (3.13: no HEAD).
        `head`: this sync's HEAD of the gateway, already under way (`probe`).
        """
        answer = head.result() if head is not None else self._head(url)
        if answer is not None and answer.digest is not None and state.digest:
            return answer.digest == state.digest
        if desired is None:
            return False if answer is not None and state.digest else None
        with Gateway(self.endpoints[url]) as gateway:
            live = gateway.get_config()
        return not plan(desired().payload, live.body, self.policy).changes

    def close(self) -> None:
        if self._probes is not None:
            self._probes.shutdown(wait=False, cancel_futures=True)

    def answers(self, url: str) -> bool:
        """Does the gateway's Admin API answer at all? (HEAD; raises `GatewayError` when it does not)."""
        with Gateway(self.endpoints[url]) as gateway:
            gateway.head_config()
        return True

    def not_holding(self, target: str, states: Mapping[str, GatewayState], desired: Callable[[], Rendered],
                    heads: Mapping[str, Future[ConfigHead | None]] | None = None,
                    ) -> tuple[list[str], list[str]]:
        """Gateways that must be pushed `target`, and which of those drifted away from it.

        A gateway in backoff after failures is left alone until its backoff ends. `heads`: this
        sync's HEADs already under way (`probe`), by URL.
        """
        stale: list[str] = []
        drifted: list[str] = []
        for url in self.endpoints:
            if not self.backoff[url].ready():
                continue
            state = states.get(url)
            if state is None or state.commit != target or state.unmanaged != sorted(self.policy.unmanaged):
                stale.append(url)  # not pushed yet, or pushed under another `unmanaged` policy
                continue
            try:
                if self.holds(url, state, desired, (heads or {}).get(url)):
                    continue
            except GatewayError as exc:
                logger.warning("gateway {}: cannot check it: {}", url, exc)
            stale.append(url)
            drifted.append(url)
        return stale, drifted

    def read_live(self, urls: list[str]) -> dict[str, Future[LiveConfig]]:
        """Start a GET of each gateway's live config in the background, for `push`.

        A sync that must push reads each gateway's config first; started before the commit is
        fetched and rendered, that read overlaps them (a one-route change at 10,000 routes:
        3.14 → 2.87 s). The push plans on it once; a retry reads afresh.
        """
        return {url: self._executor().submit(read_live, self.endpoints[url]) for url in urls}

    def push(self, rendered: Rendered, urls: list[str],
             lives: Mapping[str, Future[LiveConfig]] | None = None) -> list[GatewayResult]:
        """Sync the given gateways concurrently; a failure starts that gateway's backoff.

        `lives`: the GETs `read_live` started for them."""
        if not urls:
            return []
        with ThreadPoolExecutor(max_workers=len(urls), thread_name_prefix="gitsync-gateway") as pool:
            results = list(pool.map(lambda url: sync_gateway(
                self.endpoints[url], rendered.payload, self.policy, source_map=rendered.source_map,
                retry=self.retry, live=(lives or {}).get(url)), urls))
        for r in results:
            if r.status is SyncStatus.FAILED and not r.problems:
                delay = self.backoff[r.url].failed()
                logger.warning("gateway {}: next attempt in {:.1f}s at the earliest", r.url, delay)
            else:
                self.backoff[r.url].succeeded()
        return results


def _short(sha: str | None) -> str:
    return sha[:7] if sha else "(none)"


# ----------------------------------------------------------------------------------------------------
# the daemon


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
        self._beat = time.monotonic()
        self._worker = threading.Thread(target=self._work, name="sync-worker", daemon=True)

    def start(self) -> None:
        self.state_dir.acquire()
        self.agent = Agent(self.settings, metrics=self.metrics, state_dir=self.state_dir)
        self.server = StatusServer(self.settings.listen, self.metrics, self._readiness, self.triggers.request,
                                   self.settings.webhook_secret).start()
        self._schedule()
        self.scheduler.start()
        self._worker.start()
        self.triggers.request("start")
        logger.info("gitsync {} running: repo {} ref {} → {} gateway(s); listening on {}:{}", __version__,
                    self.settings.repo, self.settings.ref, len(self.settings.gateways),
                    self.server.httpd.server_address[0], self.server.port)
        self.notifier.ready(f"started; last good {_short(self.agent.state.last_good)}")

    def _schedule(self) -> None:
        s = self.settings
        self.scheduler.add_job(self.triggers.request, "interval", args=["poll"], id="poll",
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
            if "reload" in reasons:
                self._apply_reload()
            agent = self.agent
            assert agent is not None
            try:
                outcome = agent.sync_once(",".join(dict.fromkeys(reasons)))
            except Exception as exc:  # a bug must not end the worker: the next trigger tries again
                logger.opt(exception=exc).error("sync ({}) crashed: {}", ",".join(reasons), redact(str(exc)))
                self.metrics.syncs.labels("error").inc()
                continue
            finally:
                self._beat = time.monotonic()
            self.notifier.status(f"{outcome.result} {_short(outcome.commit)}; last good "
                                 f"{_short(agent.state.last_good)}")

    def _drift_watch(self) -> None:
        """Cheap check of each gateway (HEAD): one that lost the last good commit triggers a sync."""
        agent = self.agent
        if agent is None or not agent.state.last_good:
            return
        suspects = agent.drift_suspects()
        if suspects:
            logger.warning("drift: {} may no longer hold {}", ", ".join(suspects),
                           _short(agent.state.last_good))
            self.triggers.request("drift")

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
        self.triggers.request("reload")

    def _apply_reload(self) -> None:
        """In the worker, between syncs: new settings, a new agent on the same state; bad ones are refused."""
        if self._reload_settings is None:
            return
        try:
            settings = self._reload_settings()
            agent = Agent(settings, metrics=self.metrics, state_dir=self.state_dir)
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
        if self.agent is not None:
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


def run_command(settings: Settings, args: argparse.Namespace) -> int:
    """`gitsync run`: the daemon until SIGTERM/SIGINT (exit 0)."""
    if not settings.repo and not settings.dir:
        print("gitsync run: error: repo is required: set --repo, GITSYNC_REPO or source.repo in the "
              "settings file", file=__import__("sys").stderr)
        return 2

    def reload() -> Settings:
        from gitsync.cli import _flags

        return load(_flags(args), config=args.config, require=("gateways", "admin_key"))

    try:
        daemon = Daemon(settings, reload)
        return daemon.run_forever()
    except StateError as exc:
        logger.error("{}", exc)
        return 1


__all__ = ["Agent", "Backoff", "Daemon", "SyncOutcome", "Triggers", "run_command"]
