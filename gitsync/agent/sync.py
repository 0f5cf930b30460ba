"""The agent: one sync of the whole pipeline, and the daemon that keeps running it.

A sync observes, decides, then acts, as a flat list of stages::

    observe   the repos' tips (ref advertisements), a HEAD of each gateway, who is busy/backing off
    decide    `gitsync.agent.decide.decide`: the target commit, the gateways to push, why (pure)
    act       render (fetch → verify → read → render/validate, each repo's commit; composed)
              → push (each gateway on its own worker; see gitsync.push.workers)
    record    state (atomic) · metrics · log · write-back (background, never blocks a sync)

The commit a sync decides on is a *composition*: every repo of the agent at one commit
(`gitsync.agent.repos`); the one repo of ``[source]`` is a composition of one, whose composition is
its commit. A commit refused at any stage is marked bad (and the repos' commits it blames, in their
repos), gets a git note, and the sync decides once more, now for the last good commit (with several
repos: for the repos that move on, each refused one at its last good commit): a gateway that took
the refused commit while another refused it is given the last good one back in the same sync.

`Agent` holds its dependencies (the repos, the gateways, the state dir, the clock, …) and, in
`gitsync.agent.memory.AgentMemory`, what one sync leaves to the next; one sync's own values are a
`gitsync.agent.run.SyncRun`.

The daemon (gitsync.daemon.service) runs syncs one at a time and tells a sync, through `interrupted`, to
stop waiting for slow pushes when a new trigger arrives: a slow gateway finishes on its own worker
while the others move on.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, wait
from dataclasses import replace
from typing import Any

from gitsync import __version__
from gitsync.agent.canary import Canary
from gitsync.agent.decide import decide
from gitsync.agent.decision import Decision, GatewayView, Holding, Probe, RemoteView, holding
from gitsync.agent.fleet_gate import FleetGate, own_heartbeat
from gitsync.agent.gate import GateVerdict
from gitsync.agent.gateways import Gateways
from gitsync.agent.memory import AgentMemory, RunningPush
from gitsync.agent.metrics import Metrics, Readiness
from gitsync.agent.observer import NoObserver, SyncObserver
from gitsync.agent.outcomes import (
    PhaseTimes,
    Stage,
    SyncOutcome,
    SyncResult,
    Trigger,
    healed_after,
    with_late,
)
from gitsync.agent.record import WriteBackQueue, log_outcome, record_metrics
from gitsync.agent.repo import given_up
from gitsync.agent.repos import Blame, CompositionRefused, Repos
from gitsync.agent.run import SyncRun
from gitsync.agent.state import AgentState, GatewayState
from gitsync.agent.statedir import StateDir
from gitsync.agent.view import AgentView, GatewayPush, GatewayRow, RenderedCommit, SyncRecord, remember
from gitsync.display import short
from gitsync.log import context as log_context
from gitsync.log import logger, redact, set_agent
from gitsync.problems import ProblemsError
from gitsync.push.admin_api import ConfigHead, Gateway, GatewayError, LiveConfig
from gitsync.push.apply import guard_policy_from_settings
from gitsync.push.plan import LiveView, plan
from gitsync.push.release import Release, release
from gitsync.push.results import GatewayResult, Known, SyncStatus
from gitsync.push.workers import wait_for
from gitsync.render import LastGood, Rendered
from gitsync.settings import Settings, status_settings
from gitsync.source.transport import SourceError
from gitsync.timing import SYSTEM_CLOCK, Clock
from gitsync.writeback.wire import GatewayStatus, StatusReport


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


class Agent:
    """Repos, render, push and write-back for one set of settings, plus what it remembers.

    `interrupted`: tells a sync to stop waiting for slow pushes (the daemon: a new trigger).
    `wake`: called with a reason when a push left running by an earlier sync ends.
    `observer`: told when the agent starts on a new commit and how each sync ends
    (`gitsync.agent.observer`); the agent closes it when it closes.
    `remote_attempts`: tries of each git contact within one sync (`sync --once` has no next poll).
    `clock`: where the agent reads the time (`gitsync.timing.Clock`).
    `one_shot`: one sync and exit (`sync --once`): no "next attempt" is promised. `status`: each repo's
    status ref is written (a one-shot writes it only when asked, `gitsync.cli.commands.sync`)."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 metrics: Metrics | None = None, state_dir: StateDir | None = None,
                 interrupted: Callable[[], bool] = lambda: False,
                 wake: Callable[[Trigger], None] = lambda trigger: None,
                 observer: SyncObserver | None = None, remote_attempts: int = 1,
                 clock: Clock = SYSTEM_CLOCK, one_shot: bool = False, status: bool = True) -> None:
        set_agent(settings.agent_name)  # the `agent` of every JSON log line from now on
        self.settings = settings
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.state_dir = state_dir or StateDir(settings.state_dir)
        self.memory = AgentMemory(self.state_dir.load(), self.state_dir.load_pushed(),
                                  self.state_dir.load_indexes())
        self.observer: SyncObserver = observer or NoObserver()
        self._closing = contextlib.ExitStack()  # what `close` ends, the last made first
        try:
            self.gateways = self._closing.enter_context(contextlib.closing(
                Gateways.from_settings(settings, interrupted, wake, one_shot=one_shot)))
            self._closing.callback(self.observer.close)
            queue = self._closing.enter_context(contextlib.closing(WriteBackQueue(self.metrics)))
            self.repos = self._closing.enter_context(contextlib.closing(Repos.from_settings(
                settings, env=dict(os.environ if env is None else env), memory=self.memory, queue=queue,
                attempts=remote_attempts, clock=clock, status=status)))
            self.gate = FleetGate.from_settings(status_settings(settings), self.metrics) \
                if settings.after_group else None
        except BaseException:
            self._closing.close()
            raise
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
        run = SyncRun(frozenset(triggers), self.clock.monotonic())
        with gc_paused():
            late = self._collect_late(run)
            held = self._held()
            trusted = self._recently_held(held) if run.triggers == {Trigger.POLL} else {}
            heads = self.gateways.pool.heads(url for url in held if url not in trusted)  # overlaps the check
            remote = self._check_remote(run)
            if trusted and remote.sha not in (None, self.state.last_good, *self.state.bad):
                heads |= self.gateways.pool.heads(trusted)  # a new commit: its push needs today's answers
                trusted = {}
            views = self._views(heads, trusted, run)
            acted = outcome = self._act(self._decide(remote, views), run)
            for _ in range(len(self.repos)):
                if not (acted.stage and acted.stage.refuses_commit and acted.commit in self.state.bad):
                    break
                # the refused commit is bad now: decide again, for the last good commit (with several repos:
                # for the repos that move on, every refused one at its last good commit)
                acted = self._act(self._decide(self.repos.view(), views), run)
                outcome = healed_after(outcome, acted)
            outcome = self._named_verdict(outcome, acted, run)
            outcome = with_late(outcome, late)
            # Before the collector is back: its first collection (of all the sync left alive) comes
            # with the next allocation, and belongs to no phase of the sync; it runs as it is recorded.
            outcome = replace(outcome, duration=self.clock.monotonic() - run.started,
                              phases=PhaseTimes(run.phases.snapshot(), run.phases.waits()))
        self._record(outcome, run)
        self.repos.tidy()  # after the sync: a merge of packs never holds up a push
        return outcome

    def _named_verdict(self, outcome: SyncOutcome, acted: SyncOutcome, run: SyncRun) -> SyncOutcome:
        """With ``[[sources]]``: the sources whose commits this sync refused, and the composition that went
        live beside them (`SyncOutcome.verdict`: not just "failed" when another source's commit went live)."""
        refused = self.repos.refused_in(run)
        if not refused:
            return outcome
        live = f"nothing new went live (the gateways stay on {short(self.state.last_good)})"
        if acted is not outcome and acted.commit and acted.result in (SyncResult.APPLIED, SyncResult.CANARY):
            what = f"{self.repos.noun(acted.commit)} {short(acted.commit)}: {acted.subject}".rstrip(": ")
            live = f"{acted.result} {what}"
        return replace(outcome, refused_repos=refused, went_live=live)

    # -- observe -------------------------------------------------------------------------------------

    def _check_remote(self, run: SyncRun) -> RemoteView:
        """The composition of the repos' tips (`Repos.check`). A repo that fetched its tip at once (any
        sync but a poll) lets a new composition render now, while the gateways answer their HEADs; a
        gateway we never pushed to needs a GET before its push, which starts meanwhile."""
        remote, unreachable = self.repos.check(run)
        if unreachable:
            self.metrics.fetch_failures.inc(unreachable)
        if remote.sha is not None:
            self.memory.tip = remote.sha
        if run.fetched and remote.sha not in (None, self.state.last_good, *self.state.bad):
            assert remote.sha is not None
            run.lives = self.gateways.pool.read_live(url for url in self.gateways.urls
                                                     if url not in self.state.gateways
                                                     and url not in self.memory.known)
            self._render_early(remote.sha, run)
        return remote

    def _render_early(self, sha: str, run: SyncRun) -> None:
        """Render `sha` now, after the commits our gateways hold by the state file (their plans are
        rebuilt from those, `_restored`; in that order the parse cache holds both trees' files). A
        render that fails is left to the sync's own render to report."""
        held = {gw.commit for url, gw in self.state.gateways.items()
                if gw.digest and gw.commit and url not in self.memory.known}
        for commit in [*sorted(held - {sha}), sha]:
            with contextlib.suppress(ProblemsError, SourceError):
                self._render(commit, fetch=False, run=run)

    def _held(self) -> dict[str, str]:
        """url → the digest of our last push, for each gateway holding one that a HEAD may check now
        (its HEAD starts before the git check, to overlap it)."""
        return {url: pushed.digest for url, worker in self.gateways.pool.workers.items()
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
                if (head := self.gateways.pool.client(url).recent_head(max_age)) is not None
                and head.digest == digest}

    def _views(self, heads: Mapping[str, Future[ConfigHead | None]], trusted: Mapping[str, str],
               run: SyncRun) -> list[GatewayView]:
        """Each gateway as this sync sees it: its HEAD's answer, or the recent one it is `trusted` on."""
        views = []
        self.memory.digests = dict(trusted)
        for url, worker in self.gateways.pool.workers.items():
            probe, digest = Probe.NOT_ASKED, None
            if url in trusted:
                probe, digest = Probe.ANSWERED, trusted[url]
            elif url in heads:
                try:
                    with run.phases.timed("probe", url):  # what the check did not overlap
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
            canary = Canary(self.gateways.urls[0], self.settings.soak, self.clock.wall())
        return decide(remote, self.state.last_good, self.state.bad, views,
                      unmanaged=self.gateways.policy.unmanaged, report_drift=self.settings.drift == "report",
                      canary=canary, gate=self._gate(remote))

    def _gate(self, remote: RemoteView) -> GateVerdict | None:
        """With `after_group`: whether the fleet lets the remote's new commit through (gitsync.agent.gate).
        The status refs are read only while a new commit waits."""
        sha = remote.sha
        if self.gate is None or sha is None or sha == self.state.last_good or sha in self.state.bad:
            return None
        try:
            committed = self.repos.commit_time(sha)
        except SourceError as exc:
            if exc.stage == "verify":  # a commit that can never be fetched: left to the act to refuse
                return None
            return GateVerdict(False, f"cannot fetch {short(sha)}: {exc.reason}")
        verdict = self.gate.verdict(sha, committed, self.clock.now())
        if not verdict.allowed:
            logger.info("commit {} waits: {}", short(sha), verdict.why)
        return verdict

    # -- act -----------------------------------------------------------------------------------------

    def _act(self, decision: Decision, run: SyncRun) -> SyncOutcome:
        with log_context(commit=decision.target):  # the `commit` of its JSON log lines
            return self._act_on(decision, run)

    def _act_on(self, decision: Decision, run: SyncRun) -> SyncOutcome:
        target = decision.target
        if decision.result is not None or target is None:
            subject = self.state.last_good_subject if target == self.state.last_good else ""
            return SyncOutcome(run.triggers, decision.result or SyncResult.NOOP, target, subject,
                               decision.stage, decision.problems, drifted=decision.drifted,
                               wake_at=decision.wake_at)
        known = {url: ours for url in (*decision.push, *decision.keep)
                 if (ours := self.memory.known.get(url) or self._restored(url, run)) is not None
                 and ours.digest is not None and self.memory.digests.get(url) == ours.digest}
        # Each other gateway's GET starts now (unless the check started it), to overlap the render below.
        early = run.take_lives()
        wanted = [url for url in (*decision.push, *decision.keep) if url not in known]
        lives = {url: early[url] for url in wanted if url in early}
        lives |= self.gateways.pool.read_live(url for url in wanted if url not in lives)
        if decision.new:
            self.observer.started(target)
        try:
            commit = self._render(target, fetch=decision.new, run=run)
        except ProblemsError as exc:
            refusal = exc if isinstance(exc, CompositionRefused) else None
            return self._refuse(target, run, Stage(exc.stage), [str(p) for p in exc.problems],
                                blame=refusal.blame if refusal else None,
                                held=refusal.held if refusal else frozenset())
        except SourceError as exc:
            attempts = self.repos.attempts
            tries = f" ({given_up(exc, attempts)})" if attempts > 1 else ""
            logger.error("commit {}: {} failed: {}{}", short(target), exc.stage, exc.reason, tries)
            return SyncOutcome(run.triggers, SyncResult.FAILED, target, stage=Stage.FETCH,
                               problems=(exc.reason,))
        rendered, subject = commit.rendered, commit.subject
        good = self._last_good_rendered(run) if decision.keep or (rendered.checks and decision.new) else None
        guard = guard_policy_from_settings(self.settings, commit.allowed_delete) if decision.new else None
        release = Release(rendered.payload, rendered.source_map, rendered.checks,
                          fallback=good.rendered.payload if good is not None and decision.new else None,
                          rollback=self.settings.on_check_failure == "rollback" and self._rolls_back(target),
                          guard=guard,
                          managed=self.gateways.policy.managed,
                          desired=commit.desired)
        jobs = {url: (target, release) for url in decision.push}
        if good is not None and self.state.last_good:
            kept = Release(good.rendered.payload, good.rendered.source_map, desired=good.desired)
            jobs |= {url: (self.state.last_good, kept) for url in decision.keep}
        results, running = self._push(jobs, lives, known, decision.drifted, run, advance=decision.advance)
        settled = self._settle(run, target, subject, [r for r in results if r.url in decision.push],
                               [url for url in running if url in decision.push], advance=decision.advance)
        left_out = self._left_out(target, rendered) \
            if rendered.left_out and decision.new and settled.result is not SyncResult.FAILED else ()
        return replace(settled, gateways=(*settled.gateways, *(r for r in results if r.url in decision.keep)),
                       problems=(*decision.problems, *settled.problems, *left_out),
                       stage=settled.stage or (Stage.PARTIAL if left_out else None),
                       drifted=decision.drifted, wake_at=decision.wake_at)

    def _rolls_back(self, target: str) -> bool:
        """Whether a gateway whose checks fail goes back to the last good commit on its own worker: when
        `target` changes one repo, the last good commit is what deciding again would give anyway (with
        several changed, only the blamed ones go back: the agent decides again)."""
        return self.repos.changes(target) <= 1

    def _restored(self, url: str, run: SyncRun) -> Known | None:
        """After a restart (or in `sync --once`): the gateway as our last push left it, rebuilt from the
        state file and the commit it holds, rendered again (the parse cache makes that cheap), so that
        a gateway whose HEAD still shows our digest needs no GET. Only when the rebuild provably is
        what was pushed: same policy, and the commit's desired content has the digest pushed."""
        gw = self.state.gateways.get(url)
        if gw is None or not gw.digest or self.memory.digests.get(url) != gw.digest \
                or gw.unmanaged != sorted(self.gateways.policy.unmanaged):
            return None
        try:
            desired = self._render(gw.commit, fetch=False, run=run).desired
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

    def _left_out(self, sha: str, rendered: Rendered) -> tuple[str, ...]:
        """Partial apply: say which items `sha` goes live without, and why (log, notes); the lines, for
        the outcome."""
        lines = tuple(redact(out.describe()) for out in rendered.left_out)
        logger.warning("commit {} goes live without {} item(s) partial apply left out:", short(sha),
                       len(lines))
        for line in lines[:50]:
            logger.warning("  {}", line)
        self.repos.report_left_out(sha, rendered.left_out)
        return lines

    def _last_good_rendered(self, run: SyncRun) -> RenderedCommit | None:
        """The last good commit's payload (for a rollback, or to keep the others on while a canary soaks)."""
        if not self.state.last_good:
            return None
        try:
            return self._render(self.state.last_good, fetch=False, run=run)
        except (ProblemsError, SourceError) as exc:
            logger.error("the last good commit {} cannot be rendered again: {}", short(self.state.last_good),
                         exc)
            return None

    def _settle(self, run: SyncRun, target: str, subject: str, results: list[GatewayResult],
                running: list[str] | tuple[str, ...] = (), *, advance: bool = True) -> SyncOutcome:
        """What the gateways' answers make of a commit: refused by one, or failing its health checks on
        one, it is bad; accepted by one and refused by none, it is the last good commit, the one to
        heal with from now on (`advance`: not while it runs on a canary alone). A gateway that was
        down gets it when it is back (it is behind); it never takes the others back."""
        new = target != self.state.last_good
        refused = [r for r in results if r.refused]
        if refused and new:
            return self._refuse(target, run, Stage.PUSH, [str(p) for r in refused for p in r.problems],
                                results)
        guarded = [f"{r.url}: {line}" for r in results if r.guard is not None for line in r.guard.problems]
        if guarded and new:
            return self._refuse(target, run, Stage.GUARD, guarded, results)
        unhealthy = [f"{r.url}: {check.describe()}" for r in results if r.unhealthy and r.checks is not None
                     for check in r.checks.failed]
        if unhealthy and new and self.settings.on_check_failure == "rollback":
            return self._refuse(target, run, Stage.HEALTH, unhealthy, results)
        if unhealthy:
            logger.error("commit {}: health checks failed (on_check_failure = report): {}", short(target),
                         "; ".join(unhealthy))
            self.repos.report(target, Stage.HEALTH, results)
        if advance and any(gw.commit == target for url in self.gateways.urls
                           if (gw := self.state.gateways.get(url))):
            self.state.last_good, self.state.last_good_subject = target, subject
            self.repos.advanced(target)
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
        return SyncOutcome(run.triggers, result, target, subject, stage, (*problems, *unhealthy), results)

    def _render(self, sha: str, *, fetch: bool, run: SyncRun) -> RenderedCommit:
        """The rendered payload of `sha` (a composition), from memory, or rendered from the repos' mirrors
        (fetching what is new if asked).

        Kept in memory: the last good commit and the two commits rendered most recently."""
        if sha in self.memory.rendered:
            self.memory.rendered[sha] = self.memory.rendered.pop(sha)  # most recent last
            return self.memory.rendered[sha]
        fallback, origins = self._keepable(sha, run)
        commit = self.repos.render(sha, self.gateways.policy, fetch=fetch, run=run, fallback=fallback)
        kept = {f"{out.kind}/{out.id}": origins[out.kind, out.id]
                for out in commit.rendered.left_out if out.kept}
        if kept:
            self.state.keep_from(sha, kept)
        self.memory.rendered[sha] = commit
        self._forget_renders()
        return commit

    def _forget_renders(self) -> None:
        """Keep the last good commit's render and the two most recent others."""
        others = [k for k in self.memory.rendered if k != self.state.last_good]
        for old in others[:-2]:
            del self.memory.rendered[old]

    def _keepable(self, sha: str, run: SyncRun) -> tuple[LastGood | None, dict[tuple[str, str], str]]:
        """Partial apply: the last good items `sha`'s left-out items may keep, and the commit whose own
        version each one is. A new commit keeps from the last good commit; a commit rendered before
        (the last good one after a restart) from the commits it kept from then, so it renders the same."""
        if not self.settings.partial:
            return None, {}
        recorded = self.state.kept_from.get(sha)
        if recorded is None:
            good = self._last_good_rendered(run) if sha != self.state.last_good else None
            if good is None:
                return None, {}
            assert self.state.last_good is not None
            before, last_good = self.state.kept_from.get(self.state.last_good, {}), LastGood.of(good.rendered)
            return last_good, {key: before.get(f"{key[0]}/{key[1]}", self.state.last_good)
                               for key in last_good.items}
        items: dict[tuple[str, str], Any] = {}
        secrets: set[str] = set()
        origins: dict[tuple[str, str], str] = {}
        for origin in sorted(set(recorded.values())):
            try:
                own, _ = self.repos.render_again(origin)
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
              known: Mapping[str, Known], drifted: tuple[str, ...], run: SyncRun, *,
              advance: bool = True) -> tuple[list[GatewayResult], list[str]]:
        """Release each gateway's commit on its worker; wait until they end or a new trigger comes."""
        phases, gateways = run.phases, self.gateways  # this sync's phases, also when a push outlives it
        recheck = self._expect_checks(jobs)

        def job(url: str, commit: str, what: Release) -> Callable[[Gateway], GatewayResult]:
            what = replace(what, recheck=url in recheck)

            def run_push(client: Gateway) -> GatewayResult:
                with log_context(commit=commit, gateway=url):  # on the gateway's worker thread
                    return release(client, what, gateways.policy, gateways.retry, proxy=gateways.proxy,
                                   proxy_url=gateways.proxy_urls.get(url), live=lives.get(url),
                                   known=known.get(url), phases=phases, owned=self.memory.owned.get(url))
            return run_push

        futures = gateways.pool.push({url: job(url, commit, what) for url, (commit, what) in jobs.items()})
        done, running = wait_for(futures, gateways.interrupted)
        for url in running:
            commit = jobs[url][0]
            logger.warning("gateway {}: its push of {} is still running; the agent moves on", url,
                           short(commit))
            self.memory.running[url] = RunningPush(commit, url in drifted, advance, futures[url])
            futures[url].add_done_callback(lambda _f: gateways.wake(Trigger.GATEWAY_DONE))
        results = [done[url] for url in jobs if url in done]
        for result in results:
            self._applied(jobs[result.url][0], result, drifted=result.url in drifted)
        return results, running

    def _expect_checks(self, jobs: Mapping[str, tuple[str, Release]]) -> set[str]:
        """Record durably, before the push, which commits go to gateways unchecked (`AgentState.unchecked`);
        the gateways whose checks an earlier sync left undone."""
        checked = {url: commit for url, (commit, what) in jobs.items()
                   if what.checks and self.gateways.proxy_urls.get(url)}
        recheck = self.state.expect_checks(checked)
        if checked:
            try:
                with self.memory.lock:
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
            managed = self.gateways.policy.managed
            owned, odd = result.after.ids(managed), result.after.odd_indexes(managed)
            memory = self.memory
            if owned != memory.owned.get(result.url) or odd != memory.odd.get(result.url, {}):
                memory.owned[result.url], memory.odd[result.url], memory.owned_changed = owned, odd, True
        if not result.ok:
            return
        with self.memory.lock:
            before = self.state.gateways.get(result.url)
            since = before.since if before is not None and before.commit == commit else self.clock.wall()
            self.state.gateways[result.url] = GatewayState(commit, result.digest or "", dict(result.versions),
                                                           sorted(self.gateways.policy.unmanaged), since)
        # Drifted too: a gateway our last push gave this commit that needed PUTs to hold it again (its
        # HEAD could not tell: no digest before 3.14, or no answer when the sync asked).
        if drifted or (not rollback and before is not None and before.commit == commit and bool(result.puts)):
            self.metrics.drift_heals.labels(result.url).inc()
            logger.info("drift healed on {}: {} re-applied", result.url, short(commit))

    def _collect_late(self, run: SyncRun) -> list[SyncOutcome]:
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
        return [self._settle(run, commit, self._subject(commit), results, advance=advance)
                for (commit, advance), results in ended.items()]

    def _subject(self, sha: str) -> str:
        known = self.memory.rendered.get(sha)
        return known.subject if known is not None else ""

    def _refuse(self, sha: str, run: SyncRun, stage: Stage, problems: list[str],
                gateways: list[GatewayResult] | None = None, blame: Blame | None = None,
                held: frozenset[str | None] = frozenset()) -> SyncOutcome:
        """A commit that can never apply: remember it as bad, say why; the caller heals with the last good.
        The repos' commits it blames (`blame`, else who the gateways' answers name) are bad in their own
        repos too, each with a note there."""
        problems = [redact(p) for p in problems]
        subject = self._subject(sha) or self.repos.subject(sha)
        self.state.mark_bad(sha, f"{stage}: {problems[0] if problems else 'refused'}")
        logger.error("{} {} refused at {} ({} problem(s)); gateways stay on {}", self.repos.noun(sha),
                     short(sha), stage, len(problems), short(self.state.last_good))
        for problem in problems[:50]:
            logger.error("  {}", problem)
        self.repos.refuse(sha, stage, problems, run, gateways or (), blame, held)
        return SyncOutcome(run.triggers, SyncResult.FAILED, sha, subject, stage=stage, problems=problems,
                           gateways=gateways or ())

    # ------------------------------------------------------------------------------------------------
    # record: state, metrics, log, write-back

    def _record(self, outcome: SyncOutcome, run: SyncRun) -> None:
        # The view first: once `last_outcome` is set, /readyz may answer 200, and the web view must
        # then show what it says is live.
        self._publish_view(outcome)
        first = self.memory.last_outcome is None  # an agent shows in the fleet from its first sync on
        self.memory.last_outcome = outcome
        report = None if self._repeats(outcome) else self._report(outcome)
        if report is None:
            self.state_dir.touch()  # the state is as saved: its file's time says when the agent last looked
        else:
            self._save_state(outcome, report)
        record_metrics(self.metrics, outcome, self.state, self.gateways.urls, tip_refused=self.tip_refused,
                       now=self.clock.wall())
        live = self.memory.rendered.get(self.state.last_good or "")
        self.metrics.left_out.set(len(live.rendered.left_out) if live is not None else 0)
        log_outcome(outcome)
        self.observer.ended(outcome, self.state)
        if first or outcome.result in (SyncResult.APPLIED, SyncResult.HEALED, SyncResult.FAILED,
                                       SyncResult.DRIFT_REPORTED):
            self.repos.publish(report or self._report(outcome), run)  # each repo's status, on its own repo
        else:  # every poll: the heartbeats, and what failed to be written before
            self.repos.refresh()

    def _repeats(self, outcome: SyncOutcome) -> bool:
        """Whether `outcome` is a poll that changed nothing and ended as the last saved sync did: the
        state file need not be written again (a durable write is most of a no-op poll's own cost)."""
        key = (outcome.result, outcome.commit, outcome.stage, outcome.problems, outcome.drifted,
               self.state.last_good)
        quiet = (SyncResult.NOOP, SyncResult.SKIPPED, SyncResult.SOAKING, SyncResult.WAITING)
        repeat = (outcome.result in quiet and not outcome.gateways and not self.memory.owned_changed
                  and key == self.memory.saved)
        self.memory.saved = key
        return repeat

    def _save_state(self, outcome: SyncOutcome, report: StatusReport) -> None:
        summary = self.repos.summary()
        self.state.last_result = {**report.to_dict(), "reason": outcome.reason,
                                  "stage": str(outcome.stage) if outcome.stage else None,
                                  "problems": list(outcome.problems[:20]), "last_good": self.state.last_good,
                                  **({"sources": summary} if summary else {})}
        try:
            with self.memory.lock:
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
                            gateways=gateways, time=self.clock.now(), duration=outcome.duration,
                            version=__version__, group=s.group, heartbeat=own_heartbeat(s))

    # ------------------------------------------------------------------------------------------------
    # what others ask: the drift watch, readiness

    @property
    def tip_refused(self) -> bool:
        """Some repo's tip, at the last check, is a commit this agent refused."""
        return self.repos.tip_refused()

    def drift_suspects(self) -> list[str]:
        """Gateways that, by a HEAD, may not hold the last good commit any more (the sync decides).

        A gateway in backoff is left alone unless it answers again and lacks the last good commit
        (restarted, or back after an outage): then its backoff ends and it is refilled now.
        """
        good = self.state.last_good
        known = self.memory.rendered.get(good) if good else None
        with self.memory.lock:
            pushed = dict(self.state.gateways)
        suspects = []
        for url, worker in self.gateways.pool.workers.items():
            if worker.busy:
                continue
            state = pushed.get(url)
            if state is None or state.commit != good:  # behind: a probe only while it waits
                answered = not worker.backoff.ready() and self.gateways.pool.answers(url)
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
        client = self.gateways.pool.client(url)
        policy = self.gateways.policy
        try:
            head = client.head_config()
            probe, digest = (Probe.NO_HEAD, None) if head is None else (Probe.ANSWERED, head.digest)
            held = holding(GatewayView(url, state, probe, digest), state.commit, policy.unmanaged)
            if held is not Holding.UNKNOWN or head is not None or desired is None:
                return held
            changes = plan(desired.payload, client.get_config().body, policy).changes
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
        with self.memory.lock:
            behind = [url for url in self.gateways.urls
                      if url not in self.state.gateways or self.state.gateways[url].commit != good]
        if behind:
            return Readiness(False, f"not holding {short(good)}: {', '.join(behind)}")
        text = f"{short(good)} live on {len(self.gateways.urls)} gateway(s)"
        text += "".join(f"; {line}" for line in self.repos.refused_tips())
        return Readiness(True, text)

    # ------------------------------------------------------------------------------------------------
    # what the web view reads (gitsync.web): a snapshot published at the end of each sync

    def view(self) -> AgentView:
        """What the agent knows, from any thread: a snapshot the sync worker publishes after each sync
        and never changes after (assigning it is atomic), so a reader needs no lock."""
        return self._view

    def render_apart(self, sha: str) -> tuple[Rendered, Mapping[str, bytes]]:
        """The commit (composition) `sha` rendered again from the mirrors, apart from the agent: with a speed
        layer of its own, nothing of the agent's changed (the web view, after a restart; `AgentReader`)."""
        return self.repos.render_again(sha, apart=True)

    def _publish_view(self, outcome: SyncOutcome) -> None:
        now = self.clock.wall()
        remember(self.memory.history, SyncRecord.of(outcome, now))
        for result in outcome.gateways:
            self.memory.pushes[result.url] = GatewayPush.of(result, now)
        self._view = self._snapshot()

    def _snapshot(self) -> AgentView:
        settings, state = self.settings, self.state
        with self.memory.lock:
            pushed = dict(state.gateways)
        gateways = tuple(GatewayRow(url, gw.commit, gw.digest, dict(gw.versions), gw.since,
                                    tuple(gw.unmanaged), self.memory.pushes.get(url))
                         if (gw := pushed.get(url)) is not None
                         else GatewayRow(url, last_sync=self.memory.pushes.get(url))
                         for url in self.gateways.urls)
        tip = self.memory.tip
        return AgentView(settings.agent_name, self.repos.title(), settings.ref, tuple(settings.paths), tip,
                         state.bad.get(tip) if tip else None, state.last_good, state.last_good_subject,
                         tuple(sorted(self.gateways.policy.unmanaged)), gateways,
                         tuple(reversed(self.memory.history)), self.clock.wall(),
                         self.memory.rendered.get(state.last_good) if state.last_good else None,
                         self.repos.named_commits(state.last_good))

    def finish(self, timeout: float) -> None:
        """Wait (at most `timeout`) for pushes left running by earlier syncs, and record what they did:
        a SIGTERM lets the pushes in flight finish. Call from the thread that runs syncs, or after it."""
        if not self.memory.running:
            return
        wait([future for *_, future in self.memory.running.values()], timeout=timeout)
        run = SyncRun(frozenset({Trigger.STOP}), self.clock.monotonic())
        for ended in self._collect_late(run):
            self._record(ended, run)

    def close(self) -> None:
        """Stop the agent's threads and close its clients (once; a second call does nothing)."""
        self._closing.close()


__all__ = ["Agent", "gc_paused"]
