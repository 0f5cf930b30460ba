"""Several sources, one payload: the sources of a ``[[sources]]`` agent, each its own transaction.

`SourceSet` holds what each source needs (its mirror, parse cache, render options and write-back,
under ``<state_dir>/sources/<name>``) and does the I/O the agent asks of them:

* `check`: every source's tip (their ref advertisements asked at once), and the composition the
  sources make (`gitsync.agent.choice.choose`): the agent decides on it as on a commit;
* `render`: a composition's payload: each source's commit rendered alone and checked against what
  it owns (kept per source commit: an unchanged source costs nothing), composed, its references
  across sources checked; a source whose commit fails any of it is blamed (`SourcesRefused`);
* `refuse`: a refused composition marks the new commits it blames bad in their own source, with a
  note on each in its own repo; `advanced`: a composition that became the last good one makes each
  of its commits its source's last good commit;
* `publish`: each source's status, on its own repo: the commit of that source the gateways hold.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gitsync.agent.choice import SourceTip, blamed, choose
from gitsync.agent.decision import RemoteView
from gitsync.agent.memory import AgentMemory, SourceMemory
from gitsync.agent.outcomes import Stage, SyncOutcome, Trigger
from gitsync.agent.state import AgentState, SourceState
from gitsync.agent.statedir import StateDir
from gitsync.agent.view import RenderedCommit, SourceCommit
from gitsync.backoff import Backoff
from gitsync.log import logger, redact
from gitsync.problems import Problem, ProblemsError
from gitsync.push.guard import GuardPolicy, allowed_kinds, deletion_verdict
from gitsync.push.plan import Desired, Policy
from gitsync.push.results import GatewayResult
from gitsync.render import RenderOptions, options_from_settings, render
from gitsync.render.compose import (
    ComposedFiles,
    Part,
    compose,
    dangling,
    facts_of,
    relabel,
    shared_kinds,
    split_file,
)
from gitsync.render.memo import ParseCache
from gitsync.render.memo.store import ParseStore
from gitsync.render.memo_api import NoMemo, RenderMemo
from gitsync.settings import Settings, SourceSpec, source_settings
from gitsync.source.mirror import Source, contacted
from gitsync.source.transport import SourceError
from gitsync.timing import Phases
from gitsync.writeback.publisher import WriteBack
from gitsync.writeback.wire import FailureNote, StatusReport

#: Remotes asked for their tip at once. A burst of connections beyond a server's listen backlog (git
#: daemon's is 5) loses SYNs, each then costing a second's retransmit: a few at a time is as quick.
CHECKS_AT_ONCE = 4

IN_BACKOFF = "git remote in backoff after earlier failures"

#: A source's refusal: the stage, and its problems as its own repo's note states them (its own paths).
Blame = dict[str, tuple[Stage, list[str]]]


class SourcesRefused(ProblemsError):
    """A composition some of whose sources' commits cannot go live: each blamed source, why."""

    def __init__(self, stage: Stage, problems: list[Problem], blame: Blame) -> None:
        super().__init__(str(stage), problems)
        self.blame = blame


@dataclass
class _Entry:
    """One source's dependencies."""

    spec: SourceSpec
    settings: Settings  # its own, as a repo of its own (`gitsync.settings.source_settings`)
    source: Source
    options: RenderOptions
    cache: RenderMemo
    writeback: WriteBack | None
    backoff: Backoff


class SourceSet:
    """The sources of one agent (see the module); `submit` runs a write-back in the background."""

    def __init__(self, settings: Settings, env: Mapping[str, str], memory: AgentMemory,
                 submit: Callable[..., None], submit_once: Callable[[Callable[[], Any]], None],
                 attempts: int = 1) -> None:
        self.memory = memory
        self.attempts = attempts  # tries of each git contact within one sync (`remote_attempts`)
        self.max_backoff = settings.max_backoff
        self.submit = submit
        self.submit_once = submit_once
        self.unmanaged = frozenset(settings.unmanaged)
        self.guard = GuardPolicy.from_settings(settings)
        self.others = tuple((spec.name, spec.owns) for spec in settings.sources)
        self.entries: dict[str, _Entry] = {}
        for spec in settings.sources:
            own = source_settings(settings, spec)
            options = options_from_settings(own, env)
            # a reference into a kind other sources declare items of too is checked on the composed payload
            options = replace(options, unmanaged=options.unmanaged | shared_kinds(spec.owns))
            cache: RenderMemo = NoMemo()
            if settings.parse_cache:
                cache = ParseCache(store=ParseStore(StateDir(own.state_dir).parse_cache))
            self.entries[spec.name] = _Entry(spec, own, Source.from_settings(own), options, cache,
                                             WriteBack.from_settings(own),
                                             Backoff(min(settings.interval, 5.0), settings.max_backoff))
            memory.sources.setdefault(spec.name, SourceMemory(SourceTip(spec.name)))
        self.refused_now: dict[str, str] = {}  # this sync's refusals: source → its refused commit
        self._before: dict[str, str | None] = {}  # each source's last good commit when this sync began
        self.unreachable = 0  # sources whose remote the last check could not ask
        self._pool = ThreadPoolExecutor(max_workers=min(CHECKS_AT_ONCE, max(1, len(self.entries))),
                                        thread_name_prefix="sources")

    @property
    def state(self) -> AgentState:
        return self.memory.state

    def _own(self, name: str) -> SourceState:
        return self.state.sources.setdefault(name, SourceState())

    # -- observe ---------------------------------------------------------------------------------------

    def check(self, reason: frozenset[Trigger]) -> RemoteView:
        """Every source's tip, then the composition they make (see `view`)."""
        self.refused_now = {}
        self._before = {name: self._own(name).last_good for name in self.entries}
        tips = list(self._pool.map(lambda entry: self._tip(entry, reason), self.entries.values()))
        for tip in tips:
            self.memory.sources[tip.name].tip = tip
        self.unreachable = sum(1 for tip in tips if tip.error not in (None, IN_BACKOFF))
        return self.view()

    def _tip(self, entry: _Entry, reason: frozenset[Trigger]) -> SourceTip:
        name = entry.spec.name
        if not entry.backoff.ready() and Trigger.WEBHOOK not in reason:
            return SourceTip(name, error=IN_BACKOFF)
        try:
            tip = contacted(entry.source.check, entry.source.url, self.attempts, self.max_backoff)
        except SourceError as exc:
            delay = entry.backoff.failed()
            logger.warning("source {}: git remote {}: {}; retrying in {:.1f}s; it stays on {}", name,
                           entry.source.url, exc, delay, (self._own(name).last_good or "(none)")[:7])
            return SourceTip(name, error=redact(str(exc)))
        entry.backoff.succeeded()
        return SourceTip(name, tip)

    def view(self) -> RemoteView:
        """The composition of the sources' tips as last checked, each refused one at its last good
        commit (`gitsync.agent.choice.choose`)."""
        choice = choose([self.memory.sources[name].tip for name in self.entries], self.state.sources)
        for candidate in choice.candidates:
            if candidate.why:
                logger.debug("source {}: {}", candidate.name, candidate.why)
        if choice.composition is None:
            return RemoteView(error=choice.error)
        self.state.remember_composition(choice.composition, choice.commits)
        return RemoteView(sha=choice.composition)

    @property
    def tip_refused(self) -> bool:
        """Some source's tip, at the last check, is a commit this agent refused."""
        return bool(self.refused_tips())

    def refused_tips(self) -> list[str]:
        """``source a: the tip abc1234 is refused (why)``, for each source whose tip is."""
        return [f"source {name}: the tip {m.tip.tip[:7]} is refused ({self._own(name).bad[m.tip.tip]})"
                for name, m in self.memory.sources.items()
                if m.tip.tip is not None and m.tip.tip in self._own(name).bad]

    def summary(self) -> dict[str, dict[str, str]]:
        """Each source's last good commit, and its tip when refused (for `gitsync status`)."""
        found = {}
        for name, memory in self.memory.sources.items():
            own, tip = self._own(name), memory.tip.tip
            found[name] = {"last_good": own.last_good or ""}
            if tip is not None and tip in own.bad:
                found[name] |= {"refused": tip, "why": own.bad[tip]}
        return found

    def commits(self, composition: str | None) -> dict[str, str]:
        """Source → commit of a composition this agent made (empty when it does not know it)."""
        return dict(self.state.compositions.get(composition or "", {}))

    def subject(self, composition: str) -> str:
        """What a composition brings, as its render names it: each new source commit and its subject."""
        return "; ".join(f"{name} {sha[:7]} {self.entries[name].source.subject(sha)}".rstrip()
                         for name, sha in self._new(composition).items() if name in self.entries)

    def _new(self, composition: str) -> dict[str, str]:
        """The commits of `composition` that are not their source's last good one."""
        return {name: sha for name, sha in self.commits(composition).items()
                if sha != self._own(name).last_good}

    # -- act -------------------------------------------------------------------------------------------

    def render(self, composition: str, policy: Policy, *, fetch: bool, phases: Phases) -> RenderedCommit:
        """The composition's payload (see the module); `SourcesRefused` blames the sources that fail."""
        commits = self.commits(composition)
        if not commits:
            raise SourceError("read", f"composition {composition[:7]} is not known to this agent")
        parts: list[Part] = []
        commit_of: dict[str, SourceCommit] = {}
        blame: Blame = {}
        problems: list[Problem] = []
        for name, entry in self.entries.items():
            sha = commits.get(name)
            if sha is None:
                continue
            try:
                commit = self._commit(entry, sha, fetch=fetch, phases=phases)
            except ProblemsError as exc:
                blame[name] = (Stage(exc.stage), [str(p) for p in exc.problems])
                problems += [relabel(name, p) for p in exc.problems]
                continue
            except SourceError as exc:
                if exc.stage != "verify":
                    raise
                blame[name] = (Stage.VERIFY, [exc.reason])
                problems.append(Problem(f"source {name!r}: {exc.reason}"))
                continue
            if commit.facts.problems:
                blame[name] = (Stage.OWNERSHIP, [str(p) for p in commit.facts.problems])
                problems += [relabel(name, p) for p in commit.facts.problems]
            elif held := self._guard(entry, sha, commit, policy, phases):
                blame[name] = (Stage.GUARD, held)
                problems += [Problem(f"source {name!r}: deletion guard: {line}") for line in held]
            parts.append(Part(name, sha, commit.rendered, entry.spec.owns))
            commit_of[name] = commit
        if blame:
            raise SourcesRefused(next(iter(blame.values()))[0], problems, blame)
        self._check_references(composition, parts, [commit_of[p.name] for p in parts])
        composed = compose(parts)
        new = self._new(composition)
        subject = "; ".join(f"{name} {commits[name][:7]} {commit_of[name].subject}".rstrip()
                            for name in commits if name in new and name in commit_of) or "sources unchanged"
        allowed = frozenset().union(*(commit_of[name].allowed_delete for name in new if name in commit_of))
        return RenderedCommit(composed, subject, allowed,
                              ComposedFiles([(p.name, commit_of[p.name].files) for p in parts]),
                              Desired.of(composed.payload, policy, composed.contents, composed.ids,
                                         composed.splits))

    def _guard(self, entry: _Entry, sha: str, commit: SourceCommit, policy: Policy, phases: Phases,
               ) -> list[str]:
        """The deletion guard on a source's new commit, against its own last good commit: what it may
        delete of its own items of a kind (its own message's allowances counting)."""
        name, good = entry.spec.name, self._own(entry.spec.name).last_good
        if not self.guard.enabled or good is None or good == sha:
            return []
        try:
            before = self._commit(entry, good, fetch=False, phases=phases)
        except (ProblemsError, SourceError) as exc:
            logger.warning("source {}: its last good commit {} cannot be read again for the deletion "
                           "guard: {}", name, good[:7], exc)
            return []
        guard = replace(self.guard, allowed=self.guard.allowed | commit.allowed_delete)
        kinds = [kind for kind in entry.spec.owns.kinds() if policy.manages(kind)]
        verdict = deletion_verdict(commit.rendered.ids, before.rendered.ids, kinds, guard)
        return [f"against its last good commit {good[:7]}: {line}" for line in verdict.problems]

    def _check_references(self, composition: str, parts: Sequence[Part], commits: Sequence[SourceCommit],
                          ) -> None:
        """The references across sources: each that names nothing blames its own source's new commit,
        else the new commits that could have declared what it names (they dropped it)."""
        found = dangling(parts, [c.facts for c in commits], self.unmanaged)
        if not found:
            return
        new = self._new(composition)
        blame: Blame = {}
        for miss in found:
            named = {miss.source} if miss.source in new else {
                name for name, owns in self.others if owns.may_own(*miss.target)}
            for name in blamed(named, new):
                lines = blame.setdefault(name, (Stage.VALIDATE, []))[1]
                lines.append(_own_text(name, miss.problem) if name == miss.source else str(miss.problem))
        raise SourcesRefused(Stage.VALIDATE, [miss.problem for miss in found], blame)

    def _commit(self, entry: _Entry, sha: str, *, fetch: bool, phases: Phases) -> SourceCommit:
        """One source's commit, rendered alone, with what composing needs; kept while it may be used."""
        name = entry.spec.name
        memory = self.memory.sources[name]
        known = memory.rendered.get(sha)
        if known is not None:
            return known
        source = entry.source
        local = source.local_sha()
        if local is None or (fetch and sha == memory.tip.tip and local != sha):
            with phases.timed("fetch"):
                # the source's new tip (an older commit is in the mirror already)
                contacted(source.fetch, source.url, self.attempts, self.max_backoff)
        with phases.timed("read"):
            source.verify(sha)
            files = source.read(sha, have=entry.cache.has)
        with phases.timed("render"):
            rendered = render(files.files, entry.options, memo=entry.cache)
        before = next(reversed(memory.rendered.values()), None)
        facts = facts_of(Part(name, sha, rendered, entry.spec.owns), self.others,
                         before.facts if before is not None else None)
        commit = SourceCommit(rendered, files.subject, allowed_kinds(files.message), files.files, facts)
        memory.keep(sha, commit, self._own(name).last_good)
        return commit

    # -- refusals and the last good commits -------------------------------------------------------------

    def refuse(self, composition: str, stage: Stage, results: Iterable[GatewayResult] = (),
               blame: Blame | None = None) -> None:
        """Mark the new commits a refused composition blames bad in their sources, each with a note."""
        new = self._new(composition)
        if blame is None:
            blame = self._blame(stage, list(results), new)
        for name, (own_stage, lines) in blame.items():
            sha = new.get(name)
            if sha is None:
                continue
            lines = [redact(line) for line in lines]
            self._own(name).mark_bad(sha, f"{own_stage}: {lines[0] if lines else 'refused'}")
            self.refused_now[name] = sha
            logger.error("source {}: commit {} refused at {} ({} problem(s)); it stays on {}", name, sha[:7],
                         own_stage, len(lines), (self._own(name).last_good or "(none)")[:7])
            for line in lines[:50]:
                logger.error("  {}", line)
            self.note(name, sha, own_stage, lines)

    def _blame(self, stage: Stage, results: list[GatewayResult], new: Mapping[str, str]) -> Blame:
        """Who a refusal by the gateways blames: the sources it names (`_named`), else every new one."""
        named = self._named(stage, results, new)
        every = [line for lines in named.values() for line in lines]
        return {name: (stage, named.get(name) or every) for name in blamed(named, new)}

    def _named(self, stage: Stage, results: list[GatewayResult], new: Mapping[str, str],
               ) -> dict[str, list[str]]:
        """The sources the gateways' answers name, each with its lines as its own repo states them: of
        the items a push refused (push), of the checks that failed (health), that delete items of a kind
        the guard holds (guard: of `new`). Lines that name no source are under ``""``."""
        named: dict[str, list[str]] = {}
        if stage is Stage.PUSH:
            for problem in (p for r in results if r.refused for p in r.problems):
                name = split_file(problem.location.file)[0] if problem.location else None
                named.setdefault(name or "", []).append(_own_text(name, problem))
        elif stage is Stage.HEALTH:
            for result in results:
                for check in result.checks.failed if result.checks is not None else ():
                    name, own = split_file(check.name)
                    if name:  # as its own repo names it
                        check = replace(check, name=own, location=split_file(check.location)[1])
                    named.setdefault(name or "", []).append(f"{result.url}: {check.describe()}")
        elif stage is Stage.GUARD:
            kinds = {change.kind for r in results if r.guard is not None for change in r.guard.refused}
            lines = [f"{r.url}: {line}" for r in results if r.guard is not None for line in r.guard.problems]
            for name in new:
                if self._deletes(name, new[name], kinds):
                    named[name] = lines
        return named

    def _deletes(self, name: str, sha: str, kinds: set[str]) -> bool:
        """Whether the source's commit `sha` drops items of `kinds` its last good commit had."""
        memory = self.memory.sources[name]
        now, good = memory.rendered.get(sha), memory.rendered.get(self._own(name).last_good or "")
        if now is None or good is None:
            return True  # cannot tell: it may
        return any(set(good.rendered.ids.get(kind, ())) - set(now.rendered.ids.get(kind, ()))
                   for kind in kinds)

    def advanced(self, composition: str) -> None:
        """`composition` is the last good one: each of its commits is its source's last good commit."""
        for name, sha in self.commits(composition).items():
            own = self._own(name)
            if own.last_good != sha:
                known = self.memory.sources[name].rendered.get(sha)
                own.last_good, own.last_good_subject = sha, known.subject if known is not None else ""

    # -- write-back ------------------------------------------------------------------------------------

    def note(self, name: str, sha: str, stage: Stage, lines: list[str]) -> None:
        """A git note on a source's commit, in that source's repo (in the background)."""
        entry = self.entries.get(name)
        if entry is None or entry.writeback is None:
            return
        note = FailureNote(agent=entry.settings.agent_name, commit=sha, time=datetime.now(UTC),
                           stage=str(stage), errors=lines)
        self.submit(entry.writeback.publish_failure, note)

    def report(self, composition: str, stage: Stage, results: list[GatewayResult]) -> None:
        """Notes on the commits of `composition` that the gateways' answers name, each in its own repo,
        without refusing them: health checks that failed with ``on_check_failure = "report"``."""
        commits = self.commits(composition)
        for name, lines in self._named(stage, results, commits).items():
            if name in commits:
                self.note(name, commits[name], stage, [redact(line) for line in lines])

    def publish(self, outcome: SyncOutcome, report: StatusReport, *, changed: bool) -> None:
        """Each source's status, on its own repo: its commit the gateways hold (or that was refused)."""
        if not changed:  # every poll: the heartbeats, and what failed to be written before
            self.submit_once(self._refresh)
            return
        commits = self.commits(report.commit)
        for name, entry in self.entries.items():
            if entry.writeback is None:
                continue
            refused = self.refused_now.get(name)
            sha = refused or commits.get(name) or self._own(name).last_good or ""
            known = self.memory.sources[name].rendered.get(sha)
            own = replace(report, commit=sha, subject=known.subject if known is not None else "",
                          result=self._result(name, report.result),
                          gateways=[replace(g, pruned=self._drift(name, g.pruned)) for g in report.gateways])
            self.submit(entry.writeback.publish_status, own)

    def _drift(self, name: str, pruned: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The items written out of band that a push took off the gateways, those in this source's slice
        (each source's status shows the drift in what it owns)."""
        owns = self.entries[name].spec.owns
        return {kind: own for kind, ids in pruned.items()
                if (own := [ident for ident in ids if owns.may_own(kind, ident)])}

    def _result(self, name: str, result: str) -> str:
        """A source's own result of this sync: refused, applied (its commit moved), or the agent's, but
        for another source's refusal, which is none of its own."""
        if name in self.refused_now:
            return "failed"
        if name in self._before and self._own(name).last_good != self._before[name]:
            return "applied"
        return "noop" if self.refused_now and result == "failed" else result

    def _refresh(self) -> bool:
        writers = [entry.writeback for entry in self.entries.values() if entry.writeback is not None]
        return all([writer.refresh() for writer in writers])

    @property
    def pending(self) -> int:
        """Statuses and notes not written back yet, over every source."""
        return sum(e.writeback.pending for e in self.entries.values() if e.writeback is not None)

    def tidy(self) -> None:
        """Each source's mirror tidied (`Source.tidy`), as the agent tidies one repo's after a sync."""
        for entry in self.entries.values():
            entry.source.tidy()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _own_text(name: str | None, problem: Problem) -> str:
    """A problem of the composed payload as source `name`'s own repo states it."""
    if problem.location is None or name is None:
        return str(problem)
    _, file = split_file(problem.location.file)
    return str(replace(problem, location=replace(problem.location, file=file)))


def sources_from_settings(settings: Settings, env: Mapping[str, str] | None, memory: AgentMemory,
                          submit: Callable[..., None], submit_once: Callable[[Callable[[], Any]], None],
                          attempts: int = 1) -> SourceSet | None:
    """The agent's sources when the settings list some (``[[sources]]``), else None."""
    if not settings.sources:
        return None
    env = dict(os.environ if env is None else env)
    return SourceSet(settings, env, memory, submit, submit_once, attempts)


__all__ = ["SourceSet", "SourcesRefused", "sources_from_settings"]
