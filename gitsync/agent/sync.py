"""The agent: one sync of the whole pipeline, and the daemon that keeps running it.

A sync observes, decides, then acts, as a flat list of stages::

    observe   the remote's tip (ref advertisement), a HEAD of each gateway, who is busy/backing off
    decide    `gitsync.agent.decide.decide`: the target commit, the gateways to push, why (pure)
    act       render (fetch → verify → read → render/validate)
              → push (each gateway on its own worker; see gitsync.push.workers)
    record    state (atomic) · metrics · log · write-back (background, never blocks a sync)

A commit refused at any stage is marked bad, gets a git note, and the sync decides once more, now
for the last good commit: a gateway that took the refused commit while another refused it is
given the last good one back in the same sync.

The daemon (gitsync.daemon.service) runs syncs one at a time and tells a sync, through `interrupted`, to
stop waiting for slow pushes when a new trigger arrives: a slow gateway finishes on its own worker
while the others move on.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, wait
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gitsync import __version__
from gitsync.agent.canary import Canary
from gitsync.agent.decide import decide
from gitsync.agent.decision import Decision, GatewayView, Holding, Probe, RemoteView, holding
from gitsync.agent.fleet_gate import FleetGate
from gitsync.agent.gate import GateVerdict
from gitsync.agent.memory import AgentMemory, RunningPush
from gitsync.agent.metrics import Metrics, Readiness
from gitsync.agent.observer import NoObserver, SyncObserver
from gitsync.agent.outcomes import Stage, SyncOutcome, SyncResult, Trigger, healed_after, with_late
from gitsync.agent.record import WriteBackQueue, log_outcome, record_metrics, short
from gitsync.agent.sources import Blame, SourcesRefused, sources_from_settings
from gitsync.agent.state import AgentState, GatewayState
from gitsync.agent.statedir import StateDir
from gitsync.agent.view import AgentView, GatewayPush, GatewayRow, RenderedCommit, SyncRecord, remember
from gitsync.backoff import Backoff
from gitsync.httpclient import HttpClient
from gitsync.log import context as log_context
from gitsync.log import logger, redact, set_agent
from gitsync.problems import ProblemsError
from gitsync.push.admin_api import ConfigHead, Gateway, GatewayError, LiveConfig, endpoints_from_settings
from gitsync.push.apply import RetryPolicy, policy_from_settings
from gitsync.push.guard import GuardPolicy, allowed_kinds
from gitsync.push.plan import Desired, LiveView, plan
from gitsync.push.release import Release, release
from gitsync.push.results import GatewayResult, Known, SyncStatus
from gitsync.push.workers import GatewayPool, wait_for
from gitsync.render import LastGood, Rendered, options_from_settings, render, unmanaged_warnings
from gitsync.render.memo import ParseCache
from gitsync.render.memo.store import ParseStore
from gitsync.render.memo_api import NoMemo, RenderMemo
from gitsync.settings import Settings
from gitsync.source.mirror import Source, contacted
from gitsync.source.transport import SourceError
from gitsync.timing import Phases
from gitsync.urls import display_url
from gitsync.writeback.publisher import WriteBack
from gitsync.writeback.wire import FailureNote, GatewayStatus, StatusReport


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection for the duration (of a sync).

    A sync of a large config allocates many containers (GET bodies, plans) that live until it
    ends; full collections set off by them would walk all of them, several times. Reference
    counting frees nearly all of it when the sync ends; the collector, back on, takes the rest.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _given_up(exc: SourceError, attempts: int) -> str:
    """What a sync with retries says when a git contact failed for good."""
    return f"gave up after {attempts} attempts" if exc.transient else "not retried (the remote answered)"


class Agent:
    """Source, render, push and write-back for one set of settings, plus what it remembers.

    `interrupted`: tells a sync to stop waiting for slow pushes (the daemon: a new trigger).
    `wake`: called with a reason when a push left running by an earlier sync ends.
    `observer`: told when the agent starts on a new commit and how each sync ends
    (`gitsync.agent.observer`); the agent closes it when it closes."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 metrics: Metrics | None = None, state_dir: StateDir | None = None,
                 interrupted: Callable[[], bool] = lambda: False,
                 wake: Callable[[Trigger], None] = lambda trigger: None,
                 observer: SyncObserver | None = None, remote_attempts: int = 1) -> None:
        self.settings = settings
        set_agent(settings.agent_name)  # the `agent` of every JSON log line from now on
        #: Tries of each git contact (ref check, fetch) within one sync: `sync --once` has no next poll.
        self.remote_attempts = remote_attempts
        self.env = dict(os.environ if env is None else env)
        self.metrics = metrics or Metrics()
        self.state_dir = state_dir or StateDir(settings.state_dir)
        self.source = Source.from_settings(settings) if not settings.sources else None  # else `sources`
        self.render_options = options_from_settings(settings, self.env)
        self.cache: RenderMemo = ParseCache(store=ParseStore(self.state_dir.parse_cache)) \
            if settings.parse_cache else NoMemo()
        self.policy = policy_from_settings(settings)
        self.retry = RetryPolicy.from_settings(settings)
        endpoints = endpoints_from_settings(settings)
        self.gateways = GatewayPool(endpoints, settings.max_backoff)
        self.proxy_urls = {e.display_url: url for e, url in zip(endpoints, settings.proxy_urls, strict=False)}
        self.proxy = HttpClient(None, settings.gateway_timeout, max_connections=4 * max(1, len(endpoints)))
        self.writeback = WriteBack.from_settings(settings)
        self._fleet = FleetGate.from_settings(settings, self.metrics) if settings.after_group else None
        self._writeback_queue = WriteBackQueue(self.writeback, self.metrics)
        self.observer: SyncObserver = observer or NoObserver()
        self.fetch_backoff = Backoff(min(settings.interval, 5.0), settings.max_backoff)
        self.interrupted = interrupted
        self.wake = wake
        self.memory = AgentMemory(self.state_dir.load(), self.state_dir.load_pushed(),
                                  self.state_dir.load_indexes())
        # [[sources]]: several repos, one payload (gitsync.agent.sources); each commit is a composition
        self.sources = sources_from_settings(settings, self.env, self.memory, self._writeback_queue.submit,
                                             self._writeback_queue.submit_once, attempts=remote_attempts)
        self._lock = threading.Lock()  # memory.state.gateways, between the sync worker and the drift watch
        self._phases = Phases()  # the running sync's
        self._fetched: str | None = None  # the commit a sync fetched at once (`_look`)
        self._early_lives: dict[str, Future[LiveConfig]] = {}  # GETs started before that commit's render
        self._closed = False
        self._view = self._snapshot()  # what readers on other threads see (`view`)

    @property
    def state(self) -> AgentState:
        """What the agent saves in its state dir (the last good commit, each gateway's, bad commits)."""
        return self.memory.state

    @property
    def tip(self) -> str | None:
        return self.memory.tip

    @property
    def last_outcome(self) -> SyncOutcome | None:
        return self.memory.last_outcome

    # ------------------------------------------------------------------------------------------------
    # one sync

    def sync_once(self, triggers: Iterable[Trigger] = (Trigger.CLI,)) -> SyncOutcome:
        """Bring every gateway to the target commit; never raises for an ordinary failure."""
        started = time.monotonic()
        self._phases = phases = Phases()
        with gc_paused():
            reason = frozenset(triggers)
            late = self._collect_late(reason)
            held = self._held()
            trusted = self._recently_held(held) if reason == {Trigger.POLL} else {}
            heads = self.gateways.heads(url for url in held if url not in trusted)  # overlaps the check
            remote = self._check_remote(reason)
            if trusted and remote.sha not in (None, self.state.last_good, *self.state.bad):
                heads |= self.gateways.heads(trusted)  # a new commit: its push needs today's answers
                trusted = {}
            views = self._views(heads, trusted)
            acted = outcome = self._act(self._decide(remote, views), reason)
            for _ in range(len(self.sources.entries) if self.sources is not None else 1):
                if not (acted.stage and acted.stage.refuses_commit and acted.commit in self.state.bad):
                    break
                # the refused commit is bad now: decide again, for the last good commit (with sources:
                # for the sources that move on, every refused one at its last good commit)
                again = self.sources.view() if self.sources is not None else RemoteView(sha=acted.commit)
                acted = self._act(self._decide(again, views), reason)
                outcome = healed_after(outcome, acted)
            outcome = with_late(outcome, late)
            # Before the collector is back: its first collection (of all the sync left alive) comes
            # with the next allocation, and belongs to no phase of the sync; it runs as it is recorded.
            outcome = replace(outcome, duration=time.monotonic() - started, phases=phases)
        self._early_lives = {}  # a GET no push took: its answer is stale by the next sync
        self._record(outcome)
        # after the sync: a merge of packs never holds up a push
        if self.sources is not None:
            self.sources.tidy()
        elif self.source is not None:
            self.source.tidy()
        return outcome

    # -- observe -------------------------------------------------------------------------------------

    def _check_remote(self, reason: frozenset[Trigger]) -> RemoteView:
        """The remote's tip, from the ref advertisement; a failure starts the remote's backoff."""
        if self.sources is not None:
            with self._phases.timed("check"):
                remote = self.sources.check(reason)
            self.metrics.fetch_failures.inc(self.sources.unreachable)
            self.memory.tip = remote.sha
            return remote
        assert self.source is not None
        # A webhook means the remote has just been written to: worth trying even during a backoff.
        if not self.fetch_backoff.ready() and Trigger.WEBHOOK not in reason:
            return RemoteView(error="git remote in backoff after earlier failures")
        try:
            self.memory.tip = self._look(reason)
        except SourceError as exc:
            delay = self.fetch_backoff.failed()
            self.metrics.fetch_failures.inc()
            if self.remote_attempts > 1:
                logger.warning("git remote {}: {}; {}; gateways stay on {}", self.source.url, exc,
                               _given_up(exc, self.remote_attempts), short(self.state.last_good))
            else:
                logger.warning("git remote {}: {}; retrying at the first poll after {:.1f}s; gateways stay "
                               "on {}", self.source.url, exc, delay, short(self.state.last_good))
            return RemoteView(error=redact(str(exc)))
        self.fetch_backoff.succeeded()
        return RemoteView(sha=self.memory.tip)

    def _look(self, reason: frozenset[Trigger]) -> str:
        """The remote's tip. A poll asks for the refs alone (most find nothing new). Any other sync (a
        webhook, the command line, a drifted gateway, the start) fetches at once, which asks for the
        refs as the check does (one connection to the remote, not two), and renders a new commit, both
        while the gateways answer their HEADs. A remote that does not answer fails the check; a fetch
        that fails otherwise leaves the check to tell (and the sync's fetch to report it, as it
        would have); a render that fails, the sync's render."""
        if reason != {Trigger.POLL}:
            try:
                with self._phases.timed("fetch"):
                    self._fetched = self._contact(self.source.fetch)
            except SourceError as exc:
                if exc.unreachable:
                    raise
                logger.debug("fetching at once failed ({}): checking the remote", exc)
            else:
                if self._fetched != self.state.last_good and self._fetched not in self.state.bad:
                    # a gateway we never pushed to needs a GET before its push: under way meanwhile
                    self._early_lives = self.gateways.read_live(
                        url for url in self.gateways.urls if url not in self.state.gateways
                        and url not in self.memory.known)
                    self._render_early(self._fetched)
                return self._fetched
        with self._phases.timed("check"):
            return self._contact(self.source.check)

    def _render_early(self, sha: str) -> None:
        """Render `sha` now, after the commits our gateways hold by the state file (their plans are
        rebuilt from those, `_restored`; in that order the parse cache holds both trees' files). A
        render that fails is left to the sync's own render to report."""
        held = {gw.commit for url, gw in self.state.gateways.items()
                if gw.digest and gw.commit and url not in self.memory.known}
        for commit in [*sorted(held - {sha}), sha]:
            with contextlib.suppress(ProblemsError, SourceError):
                self._render(commit, fetch=False)

    def _contact(self, action: Callable[[], str]) -> str:
        assert self.source is not None
        return contacted(action, self.source.url, self.remote_attempts, self.settings.max_backoff)

    def _held(self) -> dict[str, str]:
        """url → the digest of our last push, for each gateway holding one that a HEAD may check now
        (its HEAD starts before the git check, to overlap it)."""
        return {url: pushed.digest for url, worker in self.gateways.workers.items()
                if not worker.busy and worker.backoff.ready()
                and (pushed := self.state.gateways.get(url)) is not None and pushed.digest}

    def _recently_held(self, held: Mapping[str, str]) -> dict[str, str]:
        """The gateways of `held` (url → digest) whose HEAD showed that digest within `drift_interval`.

        A poll does not ask them again: the drift watch asks each gateway every `drift_interval`, so
        a poll's own HEAD would only repeat it, and it is most of what a poll costs beyond the git
        check. Any other sync (webhook, drift, the command line), and a poll that finds a new
        commit, asks."""
        max_age = self.settings.drift_interval
        return {url: digest for url, digest in held.items()
                if (head := self.gateways.client(url).recent_head(max_age)) is not None
                and head.digest == digest}

    def _views(self, heads: Mapping[str, Future[ConfigHead | None]], trusted: Mapping[str, str],
               ) -> list[GatewayView]:
        """Each gateway as this sync sees it: its HEAD's answer, or the recent one it is `trusted` on."""
        views = []
        self.memory.digests = dict(trusted)
        for url, worker in self.gateways.workers.items():
            probe, digest = Probe.NOT_ASKED, None
            if url in trusted:
                probe, digest = Probe.ANSWERED, trusted[url]
            elif url in heads:
                try:
                    with self._phases.timed("probe", url):  # what the check did not overlap
                        answer = heads[url].result()
                except GatewayError as exc:
                    logger.warning("gateway {}: cannot check it: {}", url, exc)
                    probe = Probe.UNREACHABLE
                else:
                    probe = Probe.NO_HEAD if answer is None else Probe.ANSWERED
                    digest = answer.digest if answer is not None else None
                    if answer is not None:
                        self.memory.digests[url] = digest
            views.append(GatewayView(url, self.state.gateways.get(url), probe, digest, busy=worker.busy,
                                     backing_off=not worker.backoff.ready()))
        return views

    def _decide(self, remote: RemoteView, views: list[GatewayView]) -> Decision:
        canary = None
        if self.settings.rollout == "canary" and self.gateways.urls:
            canary = Canary(self.gateways.urls[0], self.settings.soak, time.time())
        return decide(remote, self.state.last_good, self.state.bad, views, unmanaged=self.policy.unmanaged,
                      report_drift=self.settings.drift == "report", canary=canary, gate=self._gate(remote))

    def _gate(self, remote: RemoteView) -> GateVerdict | None:
        """With `after_group`: whether the fleet lets the remote's new commit through (gitsync.agent.gate).
        The status refs are read only while a new commit waits."""
        s = self.settings
        sha = remote.sha
        if not s.after_group or sha is None or sha == self.state.last_good or sha in self.state.bad:
            return None
        assert self._fleet is not None and self.source is not None  # after_group is for one repo
        try:
            committed = self.source.commit_time(sha)
        except SourceError as exc:
            if exc.stage == "verify":  # a commit that can never be fetched: left to the act to refuse
                return None
            return GateVerdict(False, f"cannot fetch {short(sha)}: {exc.reason}")
        verdict = self._fleet.verdict(sha, committed, datetime.now(UTC))
        if not verdict.allowed:
            logger.info("commit {} waits: {}", short(sha), verdict.why)
        return verdict

    # -- act -----------------------------------------------------------------------------------------

    def _act(self, decision: Decision, reason: frozenset[Trigger]) -> SyncOutcome:
        with log_context(commit=decision.target):  # the `commit` of its JSON log lines
            return self._act_on(decision, reason)

    def _act_on(self, decision: Decision, reason: frozenset[Trigger]) -> SyncOutcome:
        target = decision.target
        if decision.result is not None or target is None:
            subject = self.state.last_good_subject if target == self.state.last_good else ""
            return SyncOutcome(reason, decision.result or SyncResult.NOOP, target, subject, decision.stage,
                               list(decision.problems), drifted=list(decision.drifted),
                               wake_at=decision.wake_at)
        known = {url: ours for url in (*decision.push, *decision.keep)
                 if (ours := self.memory.known.get(url) or self._restored(url)) is not None
                 and ours.digest is not None and self.memory.digests.get(url) == ours.digest}
        # Each other gateway's GET starts now (unless `_look` started it), to overlap the render below.
        early, self._early_lives = self._early_lives, {}
        wanted = [url for url in (*decision.push, *decision.keep) if url not in known]
        lives = {url: early[url] for url in wanted if url in early}
        lives |= self.gateways.read_live(url for url in wanted if url not in lives)
        if decision.new:
            self.observer.started(target)
        try:
            commit = self._render(target, fetch=decision.new)
        except SourcesRefused as exc:
            return self._refuse(target, reason, Stage(exc.stage), [str(p) for p in exc.problems],
                                blame=exc.blame)
        except ProblemsError as exc:
            return self._refuse(target, reason, Stage(exc.stage), [str(p) for p in exc.problems])
        except SourceError as exc:
            if exc.stage == "verify":
                return self._refuse(target, reason, Stage.VERIFY, [exc.reason])
            tries = f" ({_given_up(exc, self.remote_attempts)})" if self.remote_attempts > 1 else ""
            logger.error("commit {}: {} failed: {}{}", short(target), exc.stage, exc.reason, tries)
            return SyncOutcome(reason, SyncResult.FAILED, target, stage=Stage.FETCH, problems=[exc.reason])
        rendered, subject = commit.rendered, commit.subject
        good = self._last_good_rendered() if decision.keep or (rendered.checks and decision.new) else None
        guard = GuardPolicy.from_settings(self.settings, commit.allowed_delete) if decision.new else None
        release = Release(rendered.payload, rendered.source_map, rendered.checks,
                          fallback=good.rendered.payload if good is not None and decision.new else None,
                          # with sources, the agent rolls back the blamed sources only (it decides again)
                          rollback=self.settings.on_check_failure == "rollback" and self.sources is None,
                          guard=guard,
                          managed=self.policy.managed,
                          desired=commit.desired)
        jobs = {url: (target, release) for url in decision.push}
        if good is not None and self.state.last_good:
            kept = Release(good.rendered.payload, good.rendered.source_map, desired=good.desired)
            jobs |= {url: (self.state.last_good, kept) for url in decision.keep}
        results, running = self._push(jobs, lives, known, decision.drifted, advance=decision.advance)
        outcome = self._settle(reason, target, subject, [r for r in results if r.url in decision.push],
                               [url for url in running if url in decision.push], advance=decision.advance)
        outcome.gateways += [r for r in results if r.url in decision.keep]
        if rendered.left_out and decision.new and outcome.result is not SyncResult.FAILED:
            self._left_out(target, rendered, outcome)
        outcome.problems[:0] = decision.problems
        outcome.drifted, outcome.wake_at = list(decision.drifted), decision.wake_at
        return outcome

    def _restored(self, url: str) -> Known | None:
        """After a restart (or in `sync --once`): the gateway as our last push left it, rebuilt from the
        state file and the commit it holds, rendered again (the parse cache makes that cheap), so that
        a gateway whose HEAD still shows our digest needs no GET. Only when the rebuild provably is
        what was pushed: same policy, and the commit's desired content has the digest pushed."""
        gw = self.state.gateways.get(url)
        if gw is None or not gw.digest or self.memory.digests.get(url) != gw.digest \
                or gw.unmanaged != sorted(self.policy.unmanaged):
            return None
        try:
            desired = self._render(gw.commit, fetch=False).desired
        except (ProblemsError, SourceError) as exc:
            logger.debug("gateway {}: its commit {} cannot be rendered again ({}): reading it", url,
                         short(gw.commit), exc)
            return None
        if gw.digest.split("-", 1)[0] != desired.digest:
            return None
        view = LiveView.restored(desired, gw.versions, self.memory.odd.get(url, {}))
        self.memory.known[url] = Known(view, gw.digest)
        logger.debug("gateway {}: holds our push of {} (digest {}): planning without a GET", url,
                     short(gw.commit), gw.digest[:12])
        return self.memory.known[url]

    def _left_out(self, sha: str, rendered: Rendered, outcome: SyncOutcome) -> None:
        """Partial apply: say which items `sha` goes live without, and why (log, note, outcome)."""
        lines = [redact(out.describe()) for out in rendered.left_out]
        logger.warning("commit {} goes live without {} item(s) partial apply left out:", short(sha),
                       len(lines))
        for line in lines[:50]:
            logger.warning("  {}", line)
        self._note(sha, Stage.PARTIAL, lines)
        outcome.problems += lines
        outcome.stage = outcome.stage or Stage.PARTIAL

    def _last_good_rendered(self) -> RenderedCommit | None:
        """The last good commit's payload (for a rollback, or to keep the others on while a canary soaks)."""
        if not self.state.last_good:
            return None
        try:
            return self._render(self.state.last_good, fetch=False)
        except (ProblemsError, SourceError) as exc:
            logger.error("the last good commit {} cannot be rendered again: {}", short(self.state.last_good),
                         exc)
            return None

    def _settle(self, reason: frozenset[Trigger], target: str, subject: str, results: list[GatewayResult],
                running: list[str] | tuple[str, ...] = (), *, advance: bool = True) -> SyncOutcome:
        """What the gateways' answers make of a commit: refused by one, or failing its health checks on
        one, it is bad; accepted by one and refused by none, it is the last good commit, the one to
        heal with from now on (`advance`: not while it runs on a canary alone). A gateway that was
        down gets it when it is back (it is behind); it never takes the others back."""
        new = target != self.state.last_good
        refused = [r for r in results if r.refused]
        if refused and new:
            return self._refuse(target, reason, Stage.PUSH, [str(p) for r in refused for p in r.problems],
                                results)
        guarded = [f"{r.url}: {line}" for r in results if r.guard is not None for line in r.guard.problems]
        if guarded and new:
            return self._refuse(target, reason, Stage.GUARD, guarded, results)
        unhealthy = [f"{r.url}: {check.describe()}" for r in results if r.unhealthy and r.checks is not None
                     for check in r.checks.failed]
        if unhealthy and new and self.settings.on_check_failure == "rollback":
            return self._refuse(target, reason, Stage.HEALTH, unhealthy, results)
        if unhealthy:
            logger.error("commit {}: health checks failed (on_check_failure = report): {}", short(target),
                         "; ".join(unhealthy))
            self._note(target, Stage.HEALTH, unhealthy, results)
        if advance and any(gw.commit == target for url in self.gateways.urls
                           if (gw := self.state.gateways.get(url))):
            self.state.last_good, self.state.last_good_subject = target, subject
            if self.sources is not None:
                self.sources.advanced(target)
        failed = [r for r in results if not r.ok]
        problems = [f"{r.url}: {r.error}" for r in failed] + [f"{url}: still pushing" for url in running]
        if failed:
            result = SyncResult.FAILED
        elif running and not results:
            result = SyncResult.DEFERRED
        elif new and not advance:
            result = SyncResult.CANARY
        elif new:
            result = SyncResult.APPLIED
        elif any(r.status is SyncStatus.APPLIED for r in results):
            result = SyncResult.HEALED
        else:
            result = SyncResult.NOOP
        stage = Stage.PUSH if failed else Stage.HEALTH if unhealthy else None
        return SyncOutcome(reason, result, target, subject, stage, problems + unhealthy, results)

    def _render(self, sha: str, *, fetch: bool) -> RenderedCommit:
        """The rendered payload of `sha`, from memory, or read from the mirror (fetching if asked).

        Kept in memory: the last good commit and the two commits rendered most recently."""
        if sha in self.memory.rendered:
            self.memory.rendered[sha] = self.memory.rendered.pop(sha)  # most recent last
            return self.memory.rendered[sha]
        if self.sources is not None:
            self.memory.rendered[sha] = self.sources.render(sha, self.policy, fetch=fetch,
                                                            phases=self._phases)
            self._forget_renders()
            return self.memory.rendered[sha]
        assert self.source is not None
        if (fetch and self._fetched != sha) or self.source.local_sha() is None:
            with self._phases.timed("fetch"):
                self._contact(self.source.fetch)
        fallback, origins = self._keepable(sha)
        with self._phases.timed("read"):
            self.source.verify(sha)
            commit = self.source.read(sha, have=self.cache.has)
        parses = self.cache.parses
        with self._phases.timed("render"):
            rendered = render(commit.files, self.render_options, memo=self.cache, fallback=fallback)
        logger.debug("commit {}: {} config file(s), {} parsed, the others from the parse cache", short(sha),
                     len(commit.blob_ids), self.cache.parses - parses)
        for warning in unmanaged_warnings(rendered.payload, self.settings.unmanaged):
            logger.warning("commit {}: {}", short(sha), warning)
        kept = {f"{out.kind}/{out.id}": origins[out.kind, out.id] for out in rendered.left_out if out.kept}
        if kept:
            self.state.keep_from(sha, kept)
        with self._phases.timed("plan"):  # what every gateway's plan starts from
            desired = Desired.of(rendered.payload, self.policy, rendered.contents, rendered.ids,
                                 rendered.splits)
        self.memory.rendered[sha] = RenderedCommit(rendered, commit.subject, allowed_kinds(commit.message),
                                                   commit.files, desired)
        self._forget_renders()
        return self.memory.rendered[sha]

    def _forget_renders(self) -> None:
        """Keep the last good commit's render and the two most recent others."""
        others = [k for k in self.memory.rendered if k != self.state.last_good]
        for old in others[:-2]:
            del self.memory.rendered[old]

    def _keepable(self, sha: str) -> tuple[LastGood | None, dict[tuple[str, str], str]]:
        """Partial apply: the last good items `sha`'s left-out items may keep, and the commit whose own
        version each one is. A new commit keeps from the last good commit; a commit rendered before
        (the last good one after a restart) from the commits it kept from then, so it renders the same."""
        if not self.render_options.partial:
            return None, {}
        recorded = self.state.kept_from.get(sha)
        if recorded is None:
            good = self._last_good_rendered() if sha != self.state.last_good else None
            if good is None:
                return None, {}
            assert self.state.last_good is not None
            before, last_good = self.state.kept_from.get(self.state.last_good, {}), LastGood.of(good.rendered)
            return last_good, {key: before.get(f"{key[0]}/{key[1]}", self.state.last_good)
                               for key in last_good.items}
        items: dict[tuple[str, str], Any] = {}
        secrets: set[str] = set()
        origins: dict[tuple[str, str], str] = {}
        assert self.source is not None  # partial apply is for one repo
        for origin in sorted(set(recorded.values())):
            try:
                own = render(self.source.read(origin).files, self.render_options, memo=self.cache)
            except (ProblemsError, SourceError) as exc:
                logger.error("commit {}: the last good versions it kept from {} cannot be read again: {}",
                             short(sha), short(origin), exc)
                continue
            secrets |= own.secret_values
            for key, item in LastGood.of(own).items.items():
                if recorded.get(f"{key[0]}/{key[1]}") == origin:
                    items[key], origins[key] = item, origin
        return LastGood(items, frozenset(secrets)), origins

    def _push(self, jobs: Mapping[str, tuple[str, Release]], lives: Mapping[str, Future[LiveConfig]],
              known: Mapping[str, Known], drifted: tuple[str, ...], *,
              advance: bool = True) -> tuple[list[GatewayResult], list[str]]:
        """Release each gateway's commit on its worker; wait until they end or a new trigger comes."""
        phases = self._phases  # this sync's, also when a push outlives it
        recheck = self._expect_checks(jobs)

        def job(url: str, commit: str, what: Release) -> Callable[[Gateway], GatewayResult]:
            what = replace(what, recheck=url in recheck)

            def run(client: Gateway) -> GatewayResult:
                with log_context(commit=commit, gateway=url):  # on the gateway's worker thread
                    return release(client, what, self.policy, self.retry, proxy=self.proxy,
                                   proxy_url=self.proxy_urls.get(url), live=lives.get(url),
                                   known=known.get(url), phases=phases, owned=self.memory.owned.get(url))
            return run

        futures = self.gateways.push({url: job(url, commit, what) for url, (commit, what) in jobs.items()})
        done, running = wait_for(futures, self.interrupted)
        for url in running:
            commit = jobs[url][0]
            logger.warning("gateway {}: its push of {} is still running; the agent moves on", url,
                           short(commit))
            self.memory.running[url] = RunningPush(commit, url in drifted, advance, futures[url])
            futures[url].add_done_callback(lambda _f: self.wake(Trigger.GATEWAY_DONE))
        results = [done[url] for url in jobs if url in done]
        for result in results:
            self._applied(jobs[result.url][0], result, drifted=result.url in drifted)
        return results, running

    def _expect_checks(self, jobs: Mapping[str, tuple[str, Release]]) -> set[str]:
        """Record durably, before the push, which commits go to gateways unchecked (`AgentState.unchecked`);
        the gateways whose checks an earlier sync left undone."""
        checked = {url: commit for url, (commit, what) in jobs.items()
                   if what.checks and self.proxy_urls.get(url)}
        recheck = self.state.expect_checks(checked)
        if checked:
            try:
                with self._lock:
                    self.state_dir.save(self.state)
            except OSError as exc:
                logger.error("cannot save state in {}: {}", self.state_dir.path, exc)
        return recheck

    def _applied(self, commit: str, result: GatewayResult, *, drifted: bool = False,
                 rollback: bool = False) -> None:
        """Remember what a gateway holds after a push (after its rollback, when it had one)."""
        self.state.after_push(result.url, commit, ok=result.ok, checked=result.checks is not None,
                              changed=bool(result.puts))
        if result.rollback is not None:
            if result.rollback.ok and self.state.last_good:
                self._applied(self.state.last_good, result.rollback, rollback=True)
            else:
                self.memory.known.pop(result.url, None)
            return
        if not result.ok or result.after is None:
            self.memory.known.pop(result.url, None)
        else:
            self.memory.known[result.url] = Known(result.after, result.digest)
            managed = self.policy.managed
            owned, odd = result.after.ids(managed), result.after.odd_indexes(managed)
            memory = self.memory
            if owned != memory.owned.get(result.url) or odd != memory.odd.get(result.url, {}):
                memory.owned[result.url], memory.odd[result.url], memory.owned_changed = owned, odd, True
        if not result.ok:
            return
        with self._lock:
            before = self.state.gateways.get(result.url)
            since = before.since if before is not None and before.commit == commit else time.time()
            self.state.gateways[result.url] = GatewayState(commit, result.digest or "", dict(result.versions),
                                                           sorted(self.policy.unmanaged), since)
        # Drifted too: a gateway our last push gave this commit that needed PUTs to hold it again (its
        # HEAD could not tell: no digest before 3.14, or no answer when the sync asked).
        if drifted or (not rollback and before is not None and before.commit == commit and bool(result.puts)):
            self.metrics.drift_heals.labels(result.url).inc()
            logger.info("drift healed on {}: {} re-applied", result.url, short(commit))

    def _collect_late(self, reason: frozenset[Trigger]) -> list[SyncOutcome]:
        """What pushes left running by earlier syncs made of their commits, for those that ended."""
        ended: dict[tuple[str, bool], list[GatewayResult]] = {}
        for url, (commit, drifted, advance, future) in list(self.memory.running.items()):
            if future.done():
                del self.memory.running[url]
                result = future.result()
                logger.info("gateway {}: the push of {} left running ended: {}", url, short(commit),
                            result.summary().split(": ", 1)[1])
                self._applied(commit, result, drifted=drifted)
                ended.setdefault((commit, advance), []).append(result)
        return [self._settle(reason, commit, self._subject(commit), results, advance=advance)
                for (commit, advance), results in ended.items()]

    def _subject(self, sha: str) -> str:
        known = self.memory.rendered.get(sha)
        return known.subject if known is not None else ""

    def _note(self, sha: str, stage: Stage, problems: list[str], results: list[GatewayResult] | None = None,
              ) -> None:
        """A git note on `sha` saying why it failed (in the background); with sources, on the commits of
        the sources whose checks `results` name, each in its own repo."""
        if self.sources is not None:
            self.sources.report(sha, stage, results or [])
        elif self.writeback is not None:
            note = FailureNote(agent=self.settings.agent_name, commit=sha, time=datetime.now(UTC),
                               stage=str(stage), errors=problems)
            self._writeback_queue.submit(self.writeback.publish_failure, note)

    def _refuse(self, sha: str, reason: frozenset[Trigger], stage: Stage, problems: list[str],
                gateways: list[GatewayResult] | None = None, blame: Blame | None = None) -> SyncOutcome:
        """A commit that can never apply: remember it as bad, say why; the caller heals with the last good.
        With sources, the new commits of the composition it blames are bad in their own source too."""
        problems = [redact(p) for p in problems]
        subject = self._subject(sha) or (self.sources.subject(sha) if self.sources is not None
                                         else self.source.subject(sha) if self.source is not None else "")
        self.state.mark_bad(sha, f"{stage}: {problems[0] if problems else 'refused'}")
        logger.error("{} {} refused at {} ({} problem(s)); gateways stay on {}",
                     "composition" if self.sources is not None else "commit", short(sha), stage,
                     len(problems), short(self.state.last_good))
        for problem in problems[:50]:
            logger.error("  {}", problem)
        if self.sources is not None:
            self.sources.refuse(sha, stage, gateways or [], blame)
        else:
            self._note(sha, stage, problems)
        return SyncOutcome(reason, SyncResult.FAILED, sha, subject, stage=stage, problems=problems,
                           gateways=list(gateways or []))

    # ------------------------------------------------------------------------------------------------
    # record: state, metrics, log, write-back

    def _record(self, outcome: SyncOutcome) -> None:
        # The view first: once `last_outcome` is set, /readyz may answer 200, and the web view must
        # then show what it says is live.
        self._publish_view(outcome)
        self.memory.last_outcome = outcome
        report = None if self._repeats(outcome) else self._report(outcome)
        if report is None:
            self.state_dir.touch()  # the state is as saved: its file's time says when the agent last looked
        else:
            self._save_state(outcome, report)
        record_metrics(self.metrics, outcome, self.state, self.gateways.urls, tip_refused=self.tip_refused)
        live = self.memory.rendered.get(self.state.last_good or "")
        self.metrics.left_out.set(len(live.rendered.left_out) if live is not None else 0)
        log_outcome(outcome)
        self.observer.ended(outcome, self.state)
        changed = outcome.result in (SyncResult.APPLIED, SyncResult.HEALED, SyncResult.FAILED,
                                     SyncResult.DRIFT_REPORTED)
        if self.sources is not None:  # each source's status on its own repo
            self.sources.publish(outcome, report or self._report(outcome), changed=changed)
        if self.writeback is not None and changed:
            self._writeback_queue.submit(self.writeback.publish_status, report or self._report(outcome))
        elif self.writeback is not None:  # every poll: the heartbeat, and what failed to be written before
            self._writeback_queue.submit_once(self.writeback.refresh)

    def _repeats(self, outcome: SyncOutcome) -> bool:
        """Whether `outcome` is a poll that changed nothing and ended as the last saved sync did: the
        state file need not be written again (a durable write is most of a no-op poll's own cost)."""
        key = (outcome.result, outcome.commit, outcome.stage, tuple(outcome.problems), tuple(outcome.drifted),
               self.state.last_good)
        quiet = (SyncResult.NOOP, SyncResult.SKIPPED, SyncResult.SOAKING, SyncResult.WAITING)
        repeat = (outcome.result in quiet and not outcome.gateways and not self.memory.owned_changed
                  and key == self.memory.saved)
        self.memory.saved = key
        return repeat

    def _save_state(self, outcome: SyncOutcome, report: StatusReport) -> None:
        self.state.last_result = {**report.to_dict(), "reason": outcome.reason,
                                  "stage": str(outcome.stage) if outcome.stage else None,
                                  "problems": outcome.problems[:20], "last_good": self.state.last_good,
                                  **({"sources": self.sources.summary()} if self.sources is not None else {})}
        try:
            with self._lock:
                self.state_dir.save(self.state)
            if self.memory.owned_changed:
                self.state_dir.save_pushed(self.memory.owned)
                self.state_dir.save_indexes(self.memory.odd)
                self.memory.owned_changed = False
        except OSError as exc:
            logger.error("cannot save state in {}: {}", self.state_dir.path, exc)

    def _report(self, outcome: SyncOutcome) -> StatusReport:
        """The status file's content: what is live on each gateway after this sync."""
        by_url = {r.url: r for r in outcome.gateways}
        gateways = []
        for url in self.gateways.urls:
            r, gw = by_url.get(url), self.state.gateways.get(url)
            if r is not None:
                gateways.append(GatewayStatus(url=url, status=str(r.status), versions=dict(r.versions),
                                              digest=r.digest, counts=dict(r.counts),
                                              pruned={k: list(v) for k, v in r.pruned.items()},
                                              error=r.error, checks=r.checks.to_dict() if r.checks else None,
                                              rolled_back=r.rollback is not None and r.rollback.ok,
                                              two_step=r.two_step))
            else:
                gateways.append(GatewayStatus(url=url, status="holding" if gw else "unknown",
                                              versions=dict(gw.versions) if gw else {},
                                              digest=gw.digest if gw else None, counts={}, pruned={}))
        commit = outcome.commit or self.state.last_good or ""
        subject = outcome.subject or (self.state.last_good_subject if commit == self.state.last_good else "")
        s = self.settings
        return StatusReport(agent=s.agent_name, commit=commit, subject=subject, result=str(outcome.result),
                            gateways=gateways, time=datetime.now(UTC), duration=outcome.duration,
                            version=__version__, group=s.group,
                            heartbeat=max(s.status_heartbeat, s.interval + s.jitter))

    # ------------------------------------------------------------------------------------------------
    # what others ask: the drift watch, readiness

    @property
    def tip_refused(self) -> bool:
        """The remote's tip (with sources: a source's), at the last check, is a commit this agent refused."""
        if self.sources is not None:
            return self.sources.tip_refused
        return self.memory.tip is not None and self.memory.tip in self.state.bad

    def drift_suspects(self) -> list[str]:
        """Gateways that, by a HEAD, may not hold the last good commit any more (the sync decides).

        A gateway in backoff is left alone unless it answers again and lacks the last good commit
        (restarted, or back after an outage): then its backoff ends and it is refilled now.
        """
        good = self.state.last_good
        known = self.memory.rendered.get(good) if good else None
        with self._lock:
            pushed = dict(self.state.gateways)
        suspects = []
        for url, worker in self.gateways.workers.items():
            if worker.busy:
                continue
            state = pushed.get(url)
            if state is None or state.commit != good:  # behind: a probe only while it waits
                answered = not worker.backoff.ready() and self.gateways.answers(url)
            else:
                held = self._holds(url, state, known.rendered if known else None)
                if held is Holding.HOLDS or held is Holding.UNKNOWN:
                    continue
                answered = held in (Holding.DRIFTED, Holding.BEHIND)  # it answered, without our push
            if answered:
                worker.answered().result()  # its backoff ends, on its own thread
            if worker.backoff.ready():
                suspects.append(url)
        return suspects

    def _holds(self, url: str, state: GatewayState, desired: Rendered | None) -> Holding | None:
        """Does the gateway still hold our push? Decided as a sync decides (`holding`) from its HEAD's
        digest (3.14+); without a HEAD (3.13), by a GET and a plan. None when it does not answer."""
        client = self.gateways.client(url)
        try:
            head = client.head_config()
            probe, digest = (Probe.NO_HEAD, None) if head is None else (Probe.ANSWERED, head.digest)
            held = holding(GatewayView(url, state, probe, digest), state.commit, self.policy.unmanaged)
            if held is not Holding.UNKNOWN or head is not None or desired is None:
                return held
            changes = plan(desired.payload, client.get_config().body, self.policy).changes
        except GatewayError as exc:
            logger.debug("drift watch: {}: {}", url, exc)
            return None
        return Holding.DRIFTED if changes else Holding.HOLDS

    def readiness(self) -> Readiness:
        """Ready when every gateway holds the last good commit (docs/operations.md, "Readiness")."""
        if self.memory.last_outcome is None:
            return Readiness(False, "no sync yet")
        good = self.state.last_good
        if not good:
            return Readiness(False, "no commit applied yet")
        with self._lock:
            behind = [url for url in self.gateways.urls
                      if url not in self.state.gateways or self.state.gateways[url].commit != good]
        if behind:
            return Readiness(False, f"not holding {short(good)}: {', '.join(behind)}")
        text = f"{short(good)} live on {len(self.gateways.urls)} gateway(s)"
        if self.sources is not None:
            text += "".join(f"; {line}" for line in self.sources.refused_tips())
        elif self.tip_refused:
            tip = self.memory.tip or ""
            text += f"; the tip {short(tip)} is refused ({self.state.bad.get(tip, '')})"
        return Readiness(True, text)

    # ------------------------------------------------------------------------------------------------
    # what the web view reads (gitsync.web): a snapshot published at the end of each sync

    def view(self) -> AgentView:
        """What the agent knows, from any thread: a snapshot the sync worker publishes after each sync
        and never changes after (assigning it is atomic), so a reader needs no lock."""
        return self._view

    def _publish_view(self, outcome: SyncOutcome) -> None:
        now = time.time()
        remember(self.memory.history, SyncRecord.of(outcome, now))
        for result in outcome.gateways:
            self.memory.pushes[result.url] = GatewayPush.of(result, now)
        self._view = self._snapshot()

    def _snapshot(self) -> AgentView:
        settings, state = self.settings, self.state
        with self._lock:
            pushed = dict(state.gateways)
        gateways = tuple(GatewayRow(url, gw.commit, gw.digest, dict(gw.versions), gw.since,
                                    tuple(gw.unmanaged), self.memory.pushes.get(url))
                         if (gw := pushed.get(url)) is not None
                         else GatewayRow(url, last_sync=self.memory.pushes.get(url))
                         for url in self.gateways.urls)
        tip = self.memory.tip
        repo = display_url(settings.repo or str(settings.dir or "")) if not settings.sources else \
            "sources: " + ", ".join(spec.name for spec in settings.sources)
        return AgentView(settings.agent_name, repo, settings.ref, tuple(settings.paths), tip,
                         state.bad.get(tip) if tip else None, state.last_good, state.last_good_subject,
                         tuple(sorted(self.policy.unmanaged)), gateways, tuple(reversed(self.memory.history)),
                         time.time(), self.memory.rendered.get(state.last_good) if state.last_good else None,
                         self.sources.commits(state.last_good) if self.sources is not None else {})

    def finish(self, timeout: float) -> None:
        """Wait (at most `timeout`) for pushes left running by earlier syncs, and record what they did:
        a SIGTERM lets the pushes in flight finish. Call from the thread that runs syncs, or after it."""
        if not self.memory.running:
            return
        wait([future for *_, future in self.memory.running.values()], timeout=timeout)
        for ended in self._collect_late(frozenset({Trigger.STOP})):
            self._record(ended)

    def close(self) -> None:
        """Stop the agent's threads and close its clients (once; a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        if self.sources is not None:
            self.sources.close()
        self._writeback_queue.close()
        self.observer.close()
        self.gateways.close()
        self.proxy.close()


__all__ = ["Agent", "gc_paused", "short"]
