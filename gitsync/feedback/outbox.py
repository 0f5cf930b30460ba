"""What the agent hands its outcomes to: commit statuses on the forge and notifications, sent in the
background (`gitsync.feedback.dispatch`), so that no forge and no receiver ever delays a sync.

`Feedback` is the agent's observer (`gitsync.agent.observer.SyncObserver`): the agent calls
`Feedback.started` when it starts on a new commit and `Feedback.ended` with every sync's outcome, and
knows nothing more of it. Both only read the outcome and queue jobs; the feedback thread does the
rest: reads the fleet's status refs (``forge_status = "group"``), decides what the commit's status
says, posts it unless the forge shows it already (`PostedStatuses`, kept in the state dir across
restarts), and sends the events to `notify_urls`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gitsync.agent.fleet_gate import own_heartbeat
from gitsync.agent.metrics import Metrics
from gitsync.agent.outcomes import SyncOutcome, SyncResult
from gitsync.agent.state import AgentState
from gitsync.display import short_sha
from gitsync.feedback import statuses
from gitsync.feedback.dispatch import Dispatcher, Job, RetryableDelivery
from gitsync.feedback.events import Event, Reachability, outcome_events
from gitsync.feedback.forge import CommitStatus, Forge, forge_from_settings
from gitsync.feedback.notify import Notifier
from gitsync.files import atomic_write
from gitsync.log import logger
from gitsync.settings import Settings, SettingsError, status_settings
from gitsync.source.transport import SourceError
from gitsync.writeback.fleet import FleetReader, signers_from_settings
from gitsync.writeback.remote import status_remote
from gitsync.writeback.statusfile import FleetEntry
from gitsync.writeback.wire import agent_file_name, iso_time

POSTED_FILE = "forge-statuses.json"
MAX_POSTED = 200  # (commit, context) pairs remembered
DEDUP_WINDOW = 3600.0  # seconds an event is not told again
FLUSH_GRACE = 5.0  # seconds what is still queued gets when the agent stops
#: Results after which this agent's own status document says something new of a commit.
_OWN_RESULTS = {SyncResult.APPLIED: "applied", SyncResult.HEALED: "healed", SyncResult.FAILED: "failed",
                SyncResult.CANARY: "canary", SyncResult.SOAKING: "soaking", SyncResult.WAITING: "waiting",
                SyncResult.DRIFT_REPORTED: "drift_reported"}


class PostedStatuses:
    """The last status posted per (commit, context), in a file of the state dir: what the forge shows,
    so that the same status is not posted again (GitHub keeps at most 1000 per commit and context;
    GitLab refuses a repeated state)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._posted: OrderedDict[tuple[str, str], CommitStatus] = OrderedDict()
        self._lock = threading.Lock()
        if path is not None and path.is_file():
            try:
                for entry in json.loads(path.read_text()):
                    status = CommitStatus(**entry)
                    self._posted[status.sha, status.context] = status
            except (OSError, ValueError, TypeError) as exc:
                logger.warning("{}: unreadable, statuses may be posted again: {}", path, exc)

    def get(self, sha: str, context: str) -> CommitStatus | None:
        with self._lock:
            return self._posted.get((sha, context))

    def remember(self, status: CommitStatus) -> None:
        with self._lock:
            self._posted.pop((status.sha, status.context), None)
            self._posted[status.sha, status.context] = status
            while len(self._posted) > MAX_POSTED:
                self._posted.popitem(last=False)
            entries = [vars(s) for s in self._posted.values()]
        if self.path is not None:
            try:
                atomic_write(self.path, json.dumps(entries).encode())
            except OSError as exc:
                logger.warning("cannot save {}: {}", self.path, exc)


def post(forge: Forge, posted: PostedStatuses, status: CommitStatus) -> None:
    """Post `status` unless the forge already shows it (as far as `posted` knows)."""
    if not forge.worth_posting(posted.get(status.sha, status.context), status):
        return
    forge.post_status(status)
    posted.remember(status)
    logger.info("forge: {} {} on {}: {}", status.context, status.state, short_sha(status.sha),
                forge.description(status))


class Feedback:
    """Commit statuses and notifications for one agent; a Feedback with neither does nothing."""

    def __init__(self, settings: Settings, metrics: Metrics, state_path: Path | None, *,
                 forge: Forge | None = None, notifiers: list[Notifier] | None = None,
                 fleet: FleetReader | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.forge = forge if settings.forge_status != "off" else None
        self.notifiers = notifiers or []
        self.fleet = fleet
        self.clock = clock
        self.posted = PostedStatuses(state_path / POSTED_FILE if state_path else None)
        self.reachability = Reachability(settings.notify_unreachable_after)
        self.dispatcher = Dispatcher(metrics, max_backoff=settings.max_backoff) if self.enabled else None
        self._told: dict[str, float] = {}  # event id → when it was queued
        self.heartbeat = own_heartbeat(settings)  # the others' liveness is judged by it, as the gate does
        self._lock = threading.Lock()  # _own, _watched, _verdicts: the sync worker and the feedback thread
        self._own: FleetEntry | None = None  # this agent's latest status, as the fleet would say it
        #: The commit this agent last worked on, and when its group status was last computed: the fleet is
        #: read again every heartbeat, so that its status follows the agents that finish or join. An older
        #: commit is not (agents that moved on from it would count as not having applied it).
        self._watched: tuple[str, float] | None = None
        self._reread = self.heartbeat
        self._verdicts: OrderedDict[str, statuses.Verdict] = OrderedDict()  # what this agent says of a commit
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics, state_path: Path | None) -> Feedback:
        """The agent's: a forge client when a forge token is set, a notifier per URL. `SettingsError`
        when the forge cannot be told, or `status_signers` names no usable key."""
        forge = forge_from_settings(settings) if settings.forge_status != "off" else None
        statuses = status_settings(settings)  # the statuses are read where they are written
        fleet = None
        if forge is not None and settings.forge_status == "group" and settings.writeback != "off" \
                and (statuses.repo or settings.status_remote) and state_path is not None:
            try:
                signers = signers_from_settings(settings)
            except SettingsError:
                forge.close()
                raise
            # Its own work repo: the agent's reader (after_group) runs on the sync worker. Statuses are
            # checked as the gate checks them: signed by a key allowed for their agent and group.
            # Its own group's statuses alone (what it posts), where they are written (`status_remote`).
            fleet = FleetReader(status_remote(statuses, settings.group), state_path / "feedback-fleet",
                                settings.status_refs, signers, settings.max_status_refs, group=settings.group)
        notifiers = [Notifier(url, settings.notify_secret, settings.feedback_timeout)
                     for url in settings.notify_urls]
        return cls(settings, metrics, state_path, forge=forge, notifiers=notifiers, fleet=fleet)

    @property
    def enabled(self) -> bool:
        return self.forge is not None or bool(self.notifiers)

    # -- from the sync worker: quick, never blocking -------------------------------------------------

    def started(self, commit: str) -> None:
        """The agent starts on the new commit `commit`: its status turns pending."""
        if self.forge is None:
            return
        state, description = statuses.started(len(self.settings.gateways))
        if self.settings.forge_status == "agent":
            self._queue_status(commit, state, description)
            return
        self._set_own(commit, "applying")
        self._queue_group(commit, (state, description))

    def ended(self, outcome: SyncOutcome, state: AgentState) -> None:
        """One sync's outcome: the status it gives its commit, and the events it tells."""
        if not self.enabled:
            return
        if self.forge is not None and outcome.commit:
            self._status_of(outcome, state)
        if self.notifiers:
            s = self.settings
            events = outcome_events(outcome, state.bad, s.agent_name, s.group, now=time.time())
            events += self.reachability.observe(outcome.gateways, self.clock(), s.agent_name, s.group)
            for event in events:
                self._notify(event)

    def _status_of(self, outcome: SyncOutcome, state: AgentState) -> None:
        assert outcome.commit is not None
        verdict = statuses.outcome_verdict(outcome, state.bad, self.settings.after_group)
        if self.settings.forge_status == "agent":
            if verdict is not None:
                self._queue_status(outcome.commit, *verdict)
            return
        result = _OWN_RESULTS.get(outcome.result)
        if result is not None and verdict is not None:
            self._set_own(outcome.commit, result, len(outcome.gateways))
            self._queue_group(outcome.commit, verdict)
        now = self.clock()
        with self._lock:
            due = self._watched[0] if self._watched and now - self._watched[1] >= self._reread else None
            if due is not None:
                self._watched = (due, now)
        if due is not None and (due != outcome.commit or result is None):  # how far the others are
            self._queue_group(due, None)

    def _set_own(self, sha: str, result: str, gateways: int | None = None) -> None:
        s = self.settings
        entry = statuses.own_entry(s.agent_name, s.group, sha, result,
                                   len(s.gateways) if gateways is None else gateways, datetime.now(UTC))
        with self._lock:
            self._own = entry

    # -- jobs ----------------------------------------------------------------------------------------

    def _queue_status(self, sha: str, state: str, description: str) -> None:
        assert self.forge is not None and self.dispatcher is not None
        s = self.settings
        context = statuses.context_of(s.forge_context, s.forge_status, s.agent_name, s.group)
        status = CommitStatus(sha, context, state, description, self._target_url(sha), _branch(s.ref))
        forge, posted = self.forge, self.posted
        self.dispatcher.submit(Job(("status", sha, context), "forge", "forge",
                                   f"status {context} {state} on {short_sha(sha)}",
                                   lambda: post(forge, posted, status)))

    def _queue_group(self, sha: str, own: statuses.Verdict | None) -> None:
        """Read the fleet and post the group's status on `sha` if this agent is its reporter (on the
        feedback thread: reading the status refs is a round trip to the git remote)."""
        assert self.dispatcher is not None
        if own is not None:
            with self._lock:
                self._verdicts.pop(sha, None)
                self._verdicts[sha] = own
                while len(self._verdicts) > MAX_POSTED:
                    self._verdicts.popitem(last=False)
        self.dispatcher.submit(Job(("group", sha), "fleet", "forge", f"group status on {short_sha(sha)}",
                                   lambda: self._group_status(sha)))

    def _group_status(self, sha: str) -> None:
        s = self.settings
        with self._lock:
            own = self._own
            said = self._verdicts.get(sha)
        if own is None:
            return
        try:
            fleet = list(self.fleet.read().entries) if self.fleet is not None else []
        except SourceError as exc:
            raise RetryableDelivery(f"reading the status refs: {exc.reason}") from None
        group = statuses.members(fleet, s.group, own, datetime.now(UTC), self.heartbeat)
        alone = len(statuses.members(fleet, s.group, own, None, self.heartbeat)) == 1  # ever
        verdict = statuses.group_verdict(group, sha, said, s.agent_name, alone=alone)
        logger.debug("group status on {}: {}: {} (members: {})", short_sha(sha), *verdict,
                     ", ".join(f"{e.agent} {e.status.result if e.status else '?'}" for e in group))
        with self._lock:
            if own.status is not None and own.status.commit == sha \
                    and (self._watched is None or self._watched[0] != sha):
                self._watched = (sha, self.clock())
        if statuses.reporter(group, s.agent_name, datetime.now(UTC), self.heartbeat) != s.agent_name:
            return
        self._queue_status(sha, *verdict)

    def _notify(self, event: Event) -> None:
        assert self.dispatcher is not None
        now = self.clock()
        for ident, at in list(self._told.items()):
            if now - at > DEDUP_WINDOW:
                del self._told[ident]
        if event.id in self._told:
            return
        self._told[event.id] = now
        body = json.dumps(event.to_json(iso_time(datetime.now(UTC))), ensure_ascii=False).encode()
        for i, notifier in enumerate(self.notifiers):
            self.dispatcher.submit(Job(("notify", i, event.id), f"notify:{i}", "notify",
                                       f"{event.kind} notification to {notifier.origin}",
                                       lambda n=notifier: n.send(body, str(event.kind), event.id)))

    # -- links ---------------------------------------------------------------------------------------

    def _target_url(self, sha: str) -> str | None:
        """Where the status links: the web view (its fleet page for a group's status), else the agent's
        file (the group's folder) on the status branch, else the commit's page on the forge."""
        s, forge = self.settings, self.forge
        assert forge is not None
        per_agent = s.forge_status == "agent"
        if s.ui_url:
            return s.ui_url.rstrip("/") + ("/" if per_agent else "/fleet")
        if s.status_branch and s.writeback != "off":
            if per_agent:
                return forge.branch_url(s.status_branch, f"agents/{agent_file_name(s.agent_name)}")
            return forge.branch_url(s.status_branch, "agents", directory=True)
        return forge.commit_url(sha)

    def close(self) -> None:
        """Send what is queued (for at most `FLUSH_GRACE`), then stop; once (the agent closes its
        observer, and whoever made it may close it again)."""
        if self._closed:
            return
        self._closed = True
        if self.dispatcher is not None:
            self.dispatcher.close(FLUSH_GRACE)
        if self.forge is not None:
            self.forge.close()
        for notifier in self.notifiers:
            notifier.close()


def publish_fleet(settings: Settings, fleet: Sequence[FleetEntry], commit: str, forge: Forge,
                  state_path: Path | None) -> list[CommitStatus]:
    """``gitsync status --fleet --publish``: each group's status on `commit`, from every agent's status
    that counts (`gitsync.feedback.statuses`), posted where the forge does not show it yet (what was
    posted is kept in the state dir); the statuses, as posted or as already shown."""
    s, now, heartbeat = settings, datetime.now(UTC), own_heartbeat(settings)
    posted = PostedStatuses(state_path / POSTED_FILE if state_path else None)
    out = []
    for group in statuses.groups(fleet, now, heartbeat):
        state, description = statuses.group_verdict(statuses.members(fleet, group, None, now, heartbeat),
                                                    commit)
        context = statuses.context_of(s.forge_context, "group", "", group)
        target = (s.ui_url.rstrip("/") + "/fleet" if s.ui_url else
                  forge.branch_url(s.status_branch, "agents", directory=True) if s.status_branch
                  else forge.commit_url(commit))
        status = CommitStatus(commit, context, state, description, target, _branch(s.ref))
        post(forge, posted, status)
        out.append(status)
    return out


def _branch(ref: str) -> str | None:
    """The branch a status is filed under (GitLab's ref, Bitbucket's refname): the followed ref when it
    names a branch, not a pinned commit."""
    name = ref.removeprefix("refs/heads/")
    if len(name) == 40 and all(c in "0123456789abcdef" for c in name):
        return None
    return None if name.startswith("refs/") else name


__all__ = ["Feedback", "PostedStatuses", "post", "publish_fleet"]
