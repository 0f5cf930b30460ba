"""One config repo of an agent: what the agent needs of it to render a commit, and to tell the repo
what became of its commits.

A `Repo` holds its mirror (`gitsync.source.mirror.Source`), its render options and speed layer, its
write-back (notes and its status, in its own repo), the backoff of its remote, its saved state (its
last good commit, the commits refused: a `gitsync.agent.state.RepoState`) and what the agent remembers
of it between syncs (its tip, its commits as rendered: `gitsync.agent.memory.RepoMemory`).
`gitsync.agent.repos.Repos` composes the commits of an agent's repos into the one payload.

The repo of ``[source]`` is a composition of one (`gitsync.settings.repos_of`): it has no name, so its
places carry no ``name:`` prefix (`gitsync.render.compose.in_source`), a composition of it is named by
its commit (`gitsync.agent.choice.composition_id_of`), and its saved state is the agent's own
(``state.json``'s ``last_good`` and ``bad``), as it was before an agent could have several. Each
``[[sources]]`` table is a named repo: its state under ``sources.<name>``, its mirror, parse cache and
write-back under ``<state_dir>/sources/<name>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from gitsync.agent.choice import SourceTip
from gitsync.agent.memory import RepoMemory
from gitsync.agent.outcomes import Stage, Trigger
from gitsync.agent.record import WriteBackQueue
from gitsync.agent.run import SyncRun
from gitsync.agent.state import RepoState
from gitsync.agent.statedir import StateDir
from gitsync.agent.view import SourceCommit
from gitsync.backoff import Backoff
from gitsync.display import short
from gitsync.log import logger, redact
from gitsync.ownership import Ownership
from gitsync.problems import Problem
from gitsync.push.guard import allowed_kinds
from gitsync.push.results import CheckResult
from gitsync.render import LastGood, Rendered, options_from_settings, render, unmanaged_warnings
from gitsync.render.compose import Part, PartFacts, facts_of, label, of_source, shared_kinds
from gitsync.render.memo import render_memo
from gitsync.settings import RepoSettings, Settings, status_settings
from gitsync.source.mirror import Source, contacted
from gitsync.source.transport import SourceError
from gitsync.timing import Clock, Phases
from gitsync.writeback.publisher import WriteBack
from gitsync.writeback.wire import FailureNote, StatusReport

#: Why a repo's tip is not asked this sync (a webhook asks anyway: the remote has just been written to).
IN_BACKOFF = "git remote in backoff after earlier failures"


def given_up(exc: SourceError, attempts: int) -> str:
    """What a sync with retries says when a git contact failed for good."""
    return f"gave up after {attempts} attempts" if exc.transient else "not retried (the remote answered)"


class Repo:
    """One config repo of an agent (see the module)."""

    REMOTE = "git remote"  # what its source is called in the log

    def __init__(self, spec: RepoSettings, *, env: Mapping[str, str], state: RepoState, memory: RepoMemory,
                 queue: WriteBackQueue, others: tuple[tuple[str | None, Ownership], ...], attempts: int,
                 clock: Clock) -> None:
        self.name = spec.name
        self.settings = spec.settings  # its own: a repo of its own (`gitsync.settings.source_settings`)
        self.owns = spec.owns
        self.state = state
        self.memory = memory
        self._open(spec.settings)
        options = options_from_settings(spec.settings, env)
        # a reference into a kind other repos declare items of too is checked on the composed payload
        self.options = replace(options, unmanaged=options.unmanaged | shared_kinds(spec.owns))
        self.writeback = WriteBack.from_settings(status_settings(spec.settings))
        self.backoff = Backoff(min(spec.settings.interval, 5.0), spec.settings.max_backoff)
        self._queue = queue
        self._others = others  # every repo's name and ownership, for what it may declare
        self._attempts = attempts  # tries of each git contact within one sync (`sync --once`: several)
        self._clock = clock

    def _open(self, settings: Settings) -> None:
        """Its source and speed layer: a git mirror and a parse cache (an artifact source has its own:
        `gitsync.agent.artifact_repo`)."""
        self.source = Source.from_settings(settings)
        self.memo = render_memo(settings, StateDir(settings.state_dir).parse_cache)

    @property
    def url(self) -> str:
        """Where its commits come from, as shown."""
        return self.source.url

    @property
    def label(self) -> str:
        """``source a: `` before what the agent says of a named repo; nothing for the repo of ``[source]``."""
        return label(self.name)

    # -- observe -------------------------------------------------------------------------------------

    def look(self, run: SyncRun, phases: Phases) -> SourceTip:
        """The repo's tip. A poll asks for the refs alone (most find nothing new); any other sync (a
        webhook, the command line, a drifted gateway, the start) fetches at once, which asks for the refs
        as the check does (one connection to the remote, not two) and lets the agent render a new commit
        while the gateways answer. A remote that does not answer fails the look; a fetch that fails
        otherwise leaves the check to tell (and the render's fetch to report it, as it would have).
        A failure starts the remote's backoff, during which only a webhook asks. `phases`: where its
        time goes (the sync's, on the sync's thread)."""
        if not self.backoff.ready(self._clock.monotonic()) and Trigger.WEBHOOK not in run.triggers:
            return SourceTip(self.name, error=IN_BACKOFF)
        try:
            tip = self._look(run, phases)
        except SourceError as exc:
            delay = self.backoff.failed(self._clock.monotonic())
            when = given_up(exc, self._attempts) if self._attempts > 1 else \
                f"retrying at the first poll after {delay:.1f}s"
            logger.warning("{}{} {}: {}; {}; gateways stay on {}", self.label, self.REMOTE, self.url, exc,
                           when, short(self.state.last_good))
            return SourceTip(self.name, error=redact(str(exc)))
        self.backoff.succeeded()
        self.memory.known_tip = tip
        return SourceTip(self.name, tip)

    def _look(self, run: SyncRun, phases: Phases) -> str:
        if run.triggers != {Trigger.POLL}:
            try:
                with phases.timed("fetch"):
                    fetched = self._contact(self.source.fetch)
            except SourceError as exc:
                if exc.unreachable:
                    raise
                logger.debug("{}fetching at once failed ({}): checking the remote", self.label, exc)
                if exc.stage == "verify":  # the tip can never be fetched: its render refuses it as is
                    with phases.timed("check"):
                        tip = self._contact(self.source.check)
                    run.unfetchable[self.name] = tip, exc
                    return tip
            else:
                run.fetched[self.name] = fetched
                return fetched
        with phases.timed("check"):
            return self._contact(self.source.check)

    def _contact(self, action: Callable[[], str]) -> str:
        return contacted(action, self.url, self._attempts, self.settings.max_backoff, remote=self.REMOTE)

    @property
    def tip_refused(self) -> str | None:
        """Why the tip at the last check that answered was refused, when it was."""
        tip = self.memory.known_tip
        return self.state.bad.get(tip) if tip is not None else None

    def commit_time(self, sha: str) -> datetime:
        """When `sha` was committed (fetched first if the mirror lacks it)."""
        return self.source.commit_time(sha)

    # -- act -----------------------------------------------------------------------------------------

    def commit(self, sha: str, *, fetch: bool, run: SyncRun, fallback: LastGood | None = None,
               ) -> SourceCommit:
        """`sha` rendered alone, with what composing needs (from memory when it was rendered lately).

        `fetch`: the sync moves to a new commit; it is fetched unless this sync fetched it at once (a
        mirror that has no commit yet is fetched anyway). `fallback`: partial apply's last good items."""
        known = self.memory.rendered.get(sha)
        if known is not None:
            return known
        unfetchable = run.unfetchable.get(self.name)
        if unfetchable is not None and unfetchable[0] == sha:
            raise unfetchable[1]
        rendered, subject, message, files = self._rendered(sha, fetch=fetch, run=run, fallback=fallback)
        for warning in unmanaged_warnings(rendered.payload, self.settings.unmanaged):
            logger.warning("{}commit {}: {}", self.label, short(sha), warning)
        commit = SourceCommit(rendered, subject, allowed_kinds(message), files, self.facts(sha, rendered))
        self.memory.keep(sha, commit, self.state.last_good)
        return commit

    def _rendered(self, sha: str, *, fetch: bool, run: SyncRun, fallback: LastGood | None,
                  ) -> tuple[Rendered, str, str, Mapping[str, bytes]]:
        """`sha` fetched (see `commit`), verified, read and rendered: the render, the commit's subject and
        message, its files."""
        if (fetch and run.fetched.get(self.name) != sha) or self.source.local_sha() is None:
            with run.phases.timed("fetch"):
                self._contact(self.source.fetch)
        with run.phases.timed("read"):
            self.source.verify(sha)
            files = self.source.read(sha, have=self.memo.has)
        parses = self.memo.parses
        with run.phases.timed("render"):
            rendered = render(files.files, self.options, memo=self.memo, fallback=fallback)
        logger.debug("{}commit {}: {} config file(s), {} parsed, the others from the parse cache", self.label,
                     short(sha), len(files.blob_ids), self.memo.parses - parses)
        return rendered, files.subject, files.message, files.files

    def facts(self, sha: str, rendered: Rendered) -> PartFacts:
        """What the agent's other repos need to know of this render (`gitsync.render.compose.facts_of`)."""
        before = next(reversed(self.memory.rendered.values()), None)
        return facts_of(Part(self.name, sha, rendered, self.owns), self._others,
                        before.facts if before is not None else None)

    def render_again(self, sha: str, *, apart: bool = False) -> tuple[Rendered, Mapping[str, bytes]]:
        """`sha` rendered again from the mirror, as it was: no fetch, no signature check (it went live
        before), nothing remembered. `apart`: with a speed layer of its own (a reader on another thread,
        the web view), else with the repo's."""
        files = self.source.read(sha).files
        return render(files, self.options, memo=render_memo() if apart else self.memo), files

    # -- tell the repo -------------------------------------------------------------------------------

    def refuse(self, sha: str, stage: Stage, lines: list[str], *, composition: str,
               held_with: dict[str, str] | None = None) -> None:
        """`sha` cannot go live: remember it as refused, with a note on it in its repo. `held_with`: it
        was refused only for the composition, whose other commits these are; it is tried again when they
        change (`gitsync.agent.choice.retried`). Logged here when it is not the refused composition
        itself (the agent logs that one)."""
        self.state.mark_bad(sha, f"{stage}: {lines[0] if lines else 'refused'}", held_with=held_with)
        if sha != composition:
            again = "; tried again once another source's commit changes" if held_with is not None else ""
            logger.error("{}commit {} refused at {} ({} problem(s)); it stays on {}{}", self.label,
                         short(sha), stage, len(lines), short(self.state.last_good), again)
            for line in lines[:50]:
                logger.error("  {}", line)
        self.note(sha, stage, lines)

    def note(self, sha: str, stage: Stage, lines: list[str]) -> None:
        """A git note on `sha` in this repo, saying why it failed (in the background)."""
        if self.writeback is None:
            return
        writeback = self.writeback
        note = FailureNote(agent=self.settings.agent_name, commit=sha, time=self._clock.now(),
                           stage=str(stage), errors=lines)
        self._queue.submit(writeback, lambda: writeback.publish_failure(note))

    def publish(self, report: StatusReport) -> None:
        """This repo's status (`report`, made for it), on its own repo (in the background)."""
        if self.writeback is not None:
            writeback = self.writeback
            self._queue.submit(writeback, lambda: writeback.publish_status(report))

    def advanced(self, sha: str) -> None:
        """`sha` is live and good: the repo's last good commit."""
        self.state.forgive(sha)  # held before, and tried again
        if self.state.last_good != sha:
            known = self.memory.rendered.get(sha)
            self.state.last_good = sha
            self.state.last_good_subject = known.subject if known is not None else ""

    def remote_subject(self, sha: str) -> str:
        """`sha`'s subject as its source tells it (the mirror's commit)."""
        return self.source.subject(sha)

    def subject(self, sha: str) -> str:
        """`sha`'s subject, when the agent knows it."""
        known = self.memory.rendered.get(sha)
        if known is not None:
            return known.subject
        return self.state.last_good_subject if sha == self.state.last_good else ""

    def describe(self, sha: str, subject: str) -> str:
        """Its commit `sha` in a composition's subject: ``a 1234567 subject`` (the repo of ``[source]``'s:
        the subject alone, the composition being the commit)."""
        return subject if self.name is None else f"{self.name} {short(sha)} {subject}".rstrip()

    def claims(self, place: str | None) -> bool:
        """Whether a place of the composed payload (a file, a check's name) is in this repo (a place of
        none: the repo of ``[source]``'s, alone)."""
        return of_source(self.name, place) is not None if place is not None else self.name is None

    def own_problem(self, problem: Problem) -> Problem:
        """A problem of the composed payload placed as this repo's own files place it."""
        location = problem.location
        own = of_source(self.name, location.file) if location is not None else None
        return problem if location is None or own is None else replace(problem, location=replace(location,
                                                                                                 file=own))

    def own_text(self, problem: Problem) -> str:
        return str(self.own_problem(problem))

    def own_check(self, check: CheckResult) -> CheckResult:
        """A health check's result on the composed payload, the check named as this repo names it."""
        return replace(check, name=of_source(self.name, check.name) or check.name,
                       location=of_source(self.name, check.location) or check.location)

    def tidy(self) -> None:
        """Merge the packs the sync's fetches left (`Source.tidy`): after the sync, never in its way."""
        self.source.tidy()

    @property
    def pending(self) -> int:
        """Statuses and notes not written back yet."""
        return self.writeback.pending if self.writeback is not None else 0

    @property
    def last_error(self) -> str | None:
        return self.writeback.last_error if self.writeback is not None else None


__all__ = ["IN_BACKOFF", "Repo", "given_up"]
